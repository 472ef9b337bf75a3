//! `policy-injector`: the operator CLI of gvisor-hardened's hardening policy.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
