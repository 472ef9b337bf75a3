//! runsc-hardened: gvisor-hardened as an OCI runtime binary (runc's command line), for Docker
//! and Podman. Registered as runtime `gvisor-hardened`. See `oci/mod.rs`.

fn main() -> std::process::ExitCode {
    containerd_shim_gvisor_hardened::oci::main(std::env::args().skip(1).collect())
}
