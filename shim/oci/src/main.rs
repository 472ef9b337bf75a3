//! runsc-hardened: gvisor-hardened as an OCI runtime binary (runc's command line), for Docker
//! and Podman. Registered as runtime `gvisor-hardened`. See `lib.rs`.

fn main() -> std::process::ExitCode {
    runsc_hardened::main(std::env::args().skip(1).collect())
}
