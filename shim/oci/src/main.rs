//! runsc-hardened: gvisor-hardened as an OCI runtime binary (runc's command line), for Docker
//! and Podman. Registered as runtime `gvisor-hardened`. See `lib.rs`.

fn main() -> std::process::ExitCode {
    // A sandbox's egress proxy process is this binary again (gvisor_hardened_egress::confined).
    if let Some(code) = gvisor_hardened_core::egress::confined::run_if_proxy_process() {
        return code;
    }
    runsc_hardened::main(std::env::args().skip(1).collect())
}
