//! Command-line flags as containerd passes them to a shim binary.
//!
//! containerd speaks Go's `flag` syntax (`-namespace default -id x start`, also `--flag`,
//! `-flag=value`), so clap's conventions do not fit; this parser accepts exactly the flags the
//! shim v2 protocol defines and refuses anything else, so a typo never silently changes the mode.

use std::ffi::OsString;

/// What containerd asked the binary to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `start`: launch (or reuse) a shim server and print its address.
    Start,
    /// `delete`: clean up after a shim that died; print a DeleteResponse.
    Delete,
    /// No action: this process is the long-lived ttrpc server spawned by `start`.
    Serve,
    /// `-v` / `--version`.
    Version,
    /// `-info` (containerd 2.x): read the runtime options on stdin, print a RuntimeInfo.
    Info,
    /// `pool-fill <key dir>`: the warm pool's filler (`gvisor_hardened_core::pool::fill`),
    /// started detached by a shim that created a pooled pod sandbox.
    PoolFill(String),
    /// `pool-drain <policy runsc.root>`: deletes every unclaimed warm sandbox under it.
    PoolDrain(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flags {
    pub namespace: String,
    pub id: String,
    pub address: String,
    pub publish_binary: String,
    pub bundle: String,
    pub socket: String,
    pub debug: bool,
    pub action: Action,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FlagsError {
    #[error("unknown flag {0:?}")]
    Unknown(String),
    #[error("flag -{0} needs a value")]
    MissingValue(String),
    #[error("unknown action {0:?} (expected start, delete, pool-fill, pool-drain or none)")]
    UnknownAction(String),
    #[error("{0} needs a directory argument")]
    MissingDirectory(&'static str),
    #[error("argument is not valid UTF-8: {0:?}")]
    NotUtf8(OsString),
}

pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Flags, FlagsError> {
    let mut flags = Flags {
        namespace: String::new(),
        id: String::new(),
        address: String::new(),
        publish_binary: String::new(),
        bundle: String::new(),
        socket: String::new(),
        debug: false,
        action: Action::Serve,
    };
    let mut version = false;
    let mut info = false;
    let mut positional = Vec::new();
    let mut args = args
        .into_iter()
        .map(|a| a.into_string().map_err(FlagsError::NotUtf8))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter();

    while let Some(arg) = args.next() {
        let Some(body) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            positional.push(arg);
            // Go's flag package stops at the first non-flag argument.
            positional.extend(args.by_ref());
            break;
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (body.to_string(), None),
        };
        let mut value = |name: &str| -> Result<String, FlagsError> {
            match &inline {
                Some(v) => Ok(v.clone()),
                None => args
                    .next()
                    .ok_or_else(|| FlagsError::MissingValue(name.to_string())),
            }
        };
        match name.as_str() {
            "namespace" => flags.namespace = value("namespace")?,
            "id" => flags.id = value("id")?,
            "address" => flags.address = value("address")?,
            "publish-binary" => flags.publish_binary = value("publish-binary")?,
            "bundle" => flags.bundle = value("bundle")?,
            "socket" => flags.socket = value("socket")?,
            "debug" => flags.debug = inline.as_deref().map(|v| v != "false").unwrap_or(true),
            "v" | "version" => version = true,
            // A boolean flag, as in containerd's shim package: `-info`, `-info=true`.
            "info" => info = inline.as_deref().map(|v| v != "false").unwrap_or(true),
            _ => return Err(FlagsError::Unknown(arg)),
        }
    }

    use gvisor_hardened_core::pool::{DRAIN_ARG, FILL_ARG};
    // The pool's modes take a directory after their name.
    let directory = |mode: &'static str| {
        positional
            .get(1)
            .cloned()
            .ok_or(FlagsError::MissingDirectory(mode))
    };
    flags.action = match positional.first().map(String::as_str) {
        // containerd's shim package checks -v, then -info, before looking at the action.
        _ if version => Action::Version,
        _ if info => Action::Info,
        None => Action::Serve,
        Some("start") => Action::Start,
        Some("delete") => Action::Delete,
        Some(FILL_ARG) => Action::PoolFill(directory(FILL_ARG)?),
        Some(DRAIN_ARG) => Action::PoolDrain(directory(DRAIN_ARG)?),
        Some(other) => return Err(FlagsError::UnknownAction(other.to_string())),
    };
    Ok(flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Flags, FlagsError> {
        parse(args.iter().map(OsString::from))
    }

    #[test]
    fn pool_modes_take_their_directory_and_refuse_none() {
        assert_eq!(
            p(&["pool-fill", "/r/.pool/k8s.io/abc"]).unwrap().action,
            Action::PoolFill("/r/.pool/k8s.io/abc".into())
        );
        assert_eq!(
            p(&["pool-drain", "/r"]).unwrap().action,
            Action::PoolDrain("/r".into())
        );
        assert_eq!(
            p(&["pool-fill"]),
            Err(FlagsError::MissingDirectory("pool-fill"))
        );
    }

    #[test]
    fn containerd_1_6_start_invocation_parses() {
        let f = p(&[
            "-namespace",
            "default",
            "-address",
            "/run/containerd/containerd.sock",
            "-publish-binary",
            "/usr/bin/containerd",
            "-id",
            "c1",
            "start",
        ])
        .unwrap();
        assert_eq!(f.action, Action::Start);
        assert_eq!(f.namespace, "default");
        assert_eq!(f.id, "c1");
        assert_eq!(f.address, "/run/containerd/containerd.sock");
        assert_eq!(f.publish_binary, "/usr/bin/containerd");
        assert!(!f.debug);
    }

    #[test]
    fn delete_action_with_bundle_and_debug_parses() {
        let f = p(&["--debug", "-id=c2", "-bundle", "/b", "delete"]).unwrap();
        assert_eq!(f.action, Action::Delete);
        assert!(f.debug);
        assert_eq!(f.id, "c2");
        assert_eq!(f.bundle, "/b");
    }

    #[test]
    fn no_action_means_serve() {
        assert_eq!(p(&["-id", "x"]).unwrap().action, Action::Serve);
    }

    #[test]
    fn version_flag_wins_over_action() {
        assert_eq!(p(&["-v"]).unwrap().action, Action::Version);
    }

    #[test]
    fn containerd_2_info_invocation_parses() {
        // containerd 2.x runs `<shim> -info` with no other argument.
        assert_eq!(p(&["-info"]).unwrap().action, Action::Info);
        assert_eq!(p(&["--info=true"]).unwrap().action, Action::Info);
        assert_eq!(p(&["-info=false"]).unwrap().action, Action::Serve);
        assert_eq!(p(&["-info", "-v"]).unwrap().action, Action::Version);
        assert_eq!(
            p(&["-info", "-id", "x", "start"]).unwrap().action,
            Action::Info
        );
    }

    #[test]
    fn unknown_flag_is_refused() {
        assert_eq!(
            p(&["-bogus", "1"]),
            Err(FlagsError::Unknown("-bogus".into()))
        );
    }

    #[test]
    fn missing_value_is_refused() {
        assert_eq!(p(&["-id"]), Err(FlagsError::MissingValue("id".into())));
    }

    #[test]
    fn unknown_action_is_refused() {
        assert_eq!(
            p(&["-id", "x", "frobnicate"]),
            Err(FlagsError::UnknownAction("frobnicate".into()))
        );
    }
}
