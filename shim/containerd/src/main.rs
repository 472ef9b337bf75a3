//! containerd-shim-gvisor-hardened-v1: containerd's runtime `io.containerd.gvisor-hardened.v1`.
//!
//! Every task runs under gVisor's runsc, and every spec is hardened by policy-injector before
//! runsc sees it. The binary's mode is chosen by its argv: `start` (launch or
//! reuse the pod's server), `delete` (clean up after a dead shim), `-info` (containerd 2.x asks
//! what the runtime supports), the warm pool's `pool-fill` and `pool-drain`, and the server
//! itself.

use std::process::ExitCode;

use containerd_shim_gvisor_hardened::actions::{delete, info, pool, start};
use containerd_shim_gvisor_hardened::{flags, server};
use gvisor_hardened_core::core_dumps;

use containerd_shim_protos::protobuf::Message;

fn main() -> ExitCode {
    // A sandbox's egress proxy process is this binary again (gvisor_hardened_egress::confined).
    if let Some(code) = gvisor_hardened_core::egress::confined::run_if_proxy_process() {
        return code;
    }
    // First: this process will hold credentials and CA keys (core_dumps.rs).
    if let Err(e) = core_dumps::disable() {
        eprintln!("containerd-shim-gvisor-hardened-v1: cannot turn core dumps off: {e}");
        return ExitCode::FAILURE;
    }
    let flags = match flags::parse(std::env::args_os().skip(1)) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("containerd-shim-gvisor-hardened-v1: {e}");
            return ExitCode::from(2);
        }
    };
    let result = match flags.action {
        flags::Action::Version => {
            println!(
                "containerd-shim-gvisor-hardened-v1 {} (runtime {})",
                env!("CARGO_PKG_VERSION"),
                info::RUNTIME_NAME
            );
            Ok(())
        }
        flags::Action::Info => info::run(std::io::stdin().lock())
            .and_then(|bytes| start::reply(&bytes).map_err(Into::into)),
        flags::Action::Start => start::run(&flags)
            .map_err(anyhow::Error::from)
            .and_then(|reply| start::reply(&reply).map_err(Into::into)),
        flags::Action::Delete => delete::run(&flags).and_then(|resp| {
            let bytes = resp.write_to_bytes()?;
            start::reply(&bytes).map_err(Into::into)
        }),
        flags::Action::PoolFill(dir) => pool::fill(&dir),
        flags::Action::PoolDrain(root) => pool::drain(&root),
        // One thread serves a pod's task calls: the work is waiting on runsc and the kernel, and
        // a second worker thread costs memory in every shim.
        flags::Action::Serve => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(server::serve(flags))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line, the whole cause chain: containerd shows it to the user.
            eprintln!("containerd-shim-gvisor-hardened-v1: {e:#}");
            log::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}
