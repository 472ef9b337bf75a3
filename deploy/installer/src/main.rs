//! gvisor-hardened-installer: CLI edge; errors become one line on stderr and exit 1.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Parser;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use gvisor_hardened_installer::command::{split, Containerd};
use gvisor_hardened_installer::diff;
use gvisor_hardened_installer::install::{Labeller, Node};
use gvisor_hardened_installer::kube::KubeClient;
use gvisor_hardened_installer::layout::Layout;
use gvisor_hardened_installer::plan::ConfigAction;
use gvisor_hardened_installer::sources::Sources;

mod cli;
use cli::{Cli, Command, Opts};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gvisor-hardened-installer: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn log(line: &str) {
    eprintln!("gvisor-hardened-installer: {line}");
}

fn node(opts: &Opts, label: bool) -> Result<Node> {
    let labeller = if label && !opts.no_label {
        let Some(node) = opts.node_name.clone() else {
            bail!("NODE_NAME / --node-name is required to label the node (or pass --no-label)");
        };
        let client = KubeClient::new(
            opts.kube_api_url.clone(),
            &opts.service_account_dir.join("token"),
            &opts.service_account_dir.join("ca.crt"),
        )
        .context("Kubernetes API client")?;
        Some(Labeller { client, node })
    } else {
        None
    };
    let restart = split(&opts.restart_command);
    if restart.is_empty() {
        bail!("--restart-command is empty");
    }
    Ok(Node {
        layout: Layout {
            host_root: opts.host_root.clone(),
            containerd_config: opts.containerd_config.clone(),
            shim_path: opts.shim_dest.clone(),
            forwarder_path: opts.forwarder_dest.clone(),
            policy_dir: opts.policy_dest_dir.clone(),
            state_dir: opts.state_dir.clone(),
            cri_socket: opts.cri_socket.clone(),
        },
        sources: Sources {
            shim: opts.shim_source.clone(),
            forwarder: opts.forwarder_source.clone(),
            policy_dir: opts.policy_source.clone(),
            allow_audit_mode: opts.allow_audit_mode,
        },
        containerd: Containerd {
            host_exec: split(&opts.host_exec),
            binary: opts.containerd_bin.clone(),
        },
        restart,
        cri_timeout: Duration::from_secs(opts.cri_timeout_secs),
        labeller,
        log: Box::new(log),
    })
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Plan => plan(&node(&cli.opts, false)?),
        Command::Install => install(&node(&cli.opts, true)?),
        Command::Uninstall => uninstall(&node(&cli.opts, true)?),
        Command::Run => {
            let node = node(&cli.opts, true)?;
            // Register the handlers before installing so a SIGTERM during install is not lost.
            let mut signals = Signals::new([SIGTERM, SIGINT]).context("signal handlers")?;
            install(&node)?;
            log("installed; waiting for SIGTERM/SIGINT to uninstall");
            let sig = signals.forever().next();
            log(&format!("signal {sig:?}: uninstalling"));
            uninstall(&node)
        }
    }
}

fn plan(node: &Node) -> Result<()> {
    let (plan, handlers) = node.plan()?;
    println!(
        "# containerd config {} ({})",
        plan.config_path.display(),
        plan.version.describe()
    );
    for h in &handlers {
        println!(
            "# handler {} -> ConfigPath {}",
            h.name,
            h.config_path.display()
        );
    }
    match &plan.action {
        ConfigAction::Unchanged => println!("# config: unchanged (no restart)"),
        ConfigAction::WriteMain { .. } => println!(
            "# config: edit in place{}",
            if plan.generated {
                " (generated from `containerd config default`)"
            } else {
                ""
            }
        ),
        ConfigAction::WriteDropIn { path, .. } => {
            println!("# config: drop-in {}", path.display())
        }
    }
    if let Some((path, old, new)) = plan.file_change() {
        print!("{}", diff::unified(&path, &old, &new));
    }
    Ok(())
}

fn install(node: &Node) -> Result<()> {
    let r = node.install()?;
    log(&format!(
        "install done: handlers [{}], {} file(s) written, config {}, {}, {}",
        r.handlers.join(", "),
        r.files_written,
        if r.config_changed {
            "changed"
        } else {
            "unchanged"
        },
        if r.restarted {
            "containerd restarted"
        } else {
            "no restart"
        },
        if r.labelled {
            "node labelled"
        } else {
            "node not labelled"
        },
    ));
    Ok(())
}

fn uninstall(node: &Node) -> Result<()> {
    let r = node.uninstall()?;
    log(&format!(
        "uninstall done: config {}, {}, {} file(s) removed, {}",
        r.config,
        if r.restarted {
            "containerd restarted"
        } else {
            "no restart"
        },
        r.files_removed,
        if r.unlabelled {
            "node unlabelled"
        } else {
            "node labels untouched"
        },
    ));
    Ok(())
}
