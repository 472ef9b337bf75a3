//! What the installed runsc supports, parsed from its own help output.
//!
//! Releases differ (20221219, which Debian ships, has no `systrap`, `--directfs` or `update`;
//! current ones do), so the shim asks the binary instead of assuming a version: `runsc flags`
//! (printed on stderr), `runsc help` and `runsc help platforms`. The parsers here are pure.
//!
//! [`Features::reconcile`] then checks the flags the policy wants against what the binary knows.
//! It fails closed, except where leaving a flag out changes nothing in that release; each such
//! decision is documented on the field it concerns and reported as an [`Adjustment`]. It also
//! picks the platform when the policy leaves it open: systrap where this runsc has it, else
//! ptrace. Every flag it returns is one the binary listed (tested on both releases' listings).

use std::collections::BTreeSet;

use super::flags::{GlobalFlags, HostUds, Overlay, Platform};

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Features {
    /// Top-level flag names, without dashes.
    pub flags: BTreeSet<String>,
    /// Subcommand names listed by `runsc help`.
    pub subcommands: BTreeSet<String>,
    /// Platforms listed by `runsc help platforms`.
    pub platforms: BTreeSet<String>,
}

/// A flag the policy asked for that the shim left out, and why that is safe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adjustment {
    pub flag: &'static str,
    pub reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeatureError {
    #[error("the installed runsc has no --{flag} flag, which the policy requires ({why})")]
    MissingFlag {
        flag: &'static str,
        why: &'static str,
    },
    #[error("runsc flag --{0} requested by the policy is unknown to the installed runsc")]
    UnknownExtraFlag(&'static str),
    #[error("platform {wanted:?} is not available in the installed runsc (it has: {available})")]
    PlatformUnavailable { wanted: String, available: String },
    #[error("`runsc flags` listed no flags: cannot tell what this runsc supports")]
    NoFlagsListed,
}

impl Features {
    /// Builds the feature set from the three outputs. `platforms` may be empty (older releases
    /// had no such help topic); then the platform is checked against the `-platform` help text.
    pub fn parse(flags_output: &str, help_output: &str, platforms_output: &str) -> Features {
        let flags = parse_flag_names(flags_output);
        let mut platforms: BTreeSet<String> = platforms_output
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.contains(' '))
            .map(str::to_string)
            .collect();
        if platforms.is_empty() {
            platforms = platforms_from_flag_help(flags_output);
        }
        Features {
            flags,
            subcommands: parse_subcommands(help_output),
            platforms,
        }
    }

    pub fn has_flag(&self, name: &str) -> bool {
        self.flags.contains(name)
    }

    pub fn has_subcommand(&self, name: &str) -> bool {
        self.subcommands.contains(name)
    }

    /// `runsc update` exists (not in 20221219): otherwise the shim writes cgroup files itself.
    pub fn supports_update(&self) -> bool {
        self.has_subcommand("update")
    }

    /// The platform when the policy leaves it to the runtime: systrap, the faster one, wherever
    /// this runsc has it (current releases; it needs nothing from the host that ptrace does
    /// not), else ptrace. Never kvm: it needs /dev/kvm and hangs under nested virtualisation.
    /// [`reconcile`](Self::reconcile) names it explicitly, so the audit record says which ran.
    pub fn default_platform(&self) -> Option<Platform> {
        [Platform::Systrap, Platform::Ptrace]
            .into_iter()
            .find(|p| self.platforms.contains(p.as_str()))
    }

    /// Checks `wanted` against this runsc and returns the flags to actually pass, plus what was
    /// left out and why. Fails closed on anything that would weaken the sandbox.
    pub fn reconcile(
        &self,
        wanted: &GlobalFlags,
    ) -> Result<(GlobalFlags, Vec<Adjustment>), FeatureError> {
        if self.flags.is_empty() {
            return Err(FeatureError::NoFlagsListed);
        }
        let mut flags = wanted.clone();
        let mut adjustments = Vec::new();

        self.require("root", "runsc state must live under the shim's root")?;
        if flags.oci_seccomp {
            // Without the flag runsc silently ignores the spec's seccomp profile.
            self.require("oci-seccomp", "the spec's seccomp profile must be enforced")?;
        }
        // Always passed: a release without it cannot be told to keep CAP_NET_RAW out.
        self.require("net-raw", "raw sockets must be disabled explicitly")?;

        if let Some(host_uds) = flags.host_uds {
            if !self.has_flag("host-uds") {
                if host_uds == HostUds::None {
                    // Releases before --host-uds only had --fsgofer-host-uds, off by default:
                    // "no host sockets" is what they do without any flag.
                    flags.host_uds = None;
                    adjustments.push(Adjustment {
                        flag: "host-uds",
                        reason: "not known to this runsc; its default is no host socket access",
                    });
                } else {
                    return Err(FeatureError::MissingFlag {
                        flag: "host-uds",
                        why: "the policy grants host Unix socket access",
                    });
                }
            }
        }

        if flags.host_fifo.is_some() && !self.has_flag("host-fifo") {
            // Only "none" is representable, and a release without the flag has no host FIFO
            // access at all.
            flags.host_fifo = None;
            adjustments.push(Adjustment {
                flag: "host-fifo",
                reason: "not known to this runsc; it opens no host FIFO",
            });
        }
        if flags.character_devices.is_some() && !self.has_flag("character-device-policy") {
            // Only "emulated-only" is representable: what releases without the flag do.
            flags.character_devices = None;
            adjustments.push(Adjustment {
                flag: "character-device-policy",
                reason: "not known to this runsc; it serves only the sentry's emulated devices",
            });
        }

        if let Some(overlay) = flags.overlay {
            if !self.has_flag("overlay2") {
                if overlay == Overlay::Off {
                    // Releases without --overlay2 have no rootfs overlay unless --overlay is set.
                    flags.overlay = None;
                    adjustments.push(Adjustment {
                        flag: "overlay2",
                        reason: "not known to this runsc; it has no overlay by default",
                    });
                } else {
                    return Err(FeatureError::MissingFlag {
                        flag: "overlay2",
                        why: "the policy wants root filesystem writes kept in an overlay",
                    });
                }
            }
        }

        if flags.directfs.is_some() && !self.has_flag("directfs") {
            // Releases without --directfs always go through the gofer, which is the more
            // isolated mode: directfs=false is what they do anyway, and directfs=true is only a
            // performance wish, so dropping it weakens nothing.
            flags.directfs = None;
            adjustments.push(Adjustment {
                flag: "directfs",
                reason: "not known to this runsc; the gofer mediates all file access",
            });
        }

        if flags.platform.is_none() {
            flags.platform = self.default_platform();
        }
        if let Some(platform) = flags.platform {
            if !self.platforms.contains(platform.as_str()) {
                return Err(FeatureError::PlatformUnavailable {
                    wanted: platform.as_str().to_string(),
                    available: self
                        .platforms
                        .iter()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
        }
        if flags.platform.is_some() {
            self.require("platform", "the platform is named explicitly")?;
        }
        if flags.network.is_some() {
            // none, sandbox and host exist in every release that has the flag.
            self.require("network", "the policy sets the network mode")?;
        }
        if flags.debug {
            self.require("debug", "debug logging was requested")?;
        }
        if flags.debug_log.is_some() {
            self.require("debug-log", "a debug log was requested")?;
        }
        if flags.log.is_some() {
            self.require("log", "a runsc log file was requested")?;
        }
        if flags.log_format.is_some() {
            self.require("log-format", "a runsc log format was requested")?;
        }
        for extra in &flags.extra {
            if !self.has_flag(extra.name()) {
                return Err(FeatureError::UnknownExtraFlag(extra.name()));
            }
        }
        Ok((flags, adjustments))
    }

    fn require(&self, flag: &'static str, why: &'static str) -> Result<(), FeatureError> {
        if self.has_flag(flag) {
            Ok(())
        } else {
            Err(FeatureError::MissingFlag { flag, why })
        }
    }

    #[cfg(test)]
    /// Does the installed platform list allow `platform`? Used when a policy names one.
    pub fn has_platform(&self, platform: Platform) -> bool {
        self.platforms.contains(platform.as_str())
    }
}

/// Flag names from Go's `flag.PrintDefaults` layout: each flag starts a line with two spaces and
/// one dash (`  -name type`), its usage follows on tab-indented lines.
fn parse_flag_names(output: &str) -> BTreeSet<String> {
    output
        .lines()
        .filter_map(|line| line.strip_prefix("  -"))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Subcommand names from `runsc help`: tab-indented `name  description` lines under the
/// "Subcommands..." headings, up to the "Additional help topics" section (topics are not
/// subcommands).
fn parse_subcommands(output: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut in_section = false;
    for line in output.lines() {
        if line.starts_with("Subcommands") {
            in_section = true;
            continue;
        }
        if line.starts_with("Additional help topics") {
            in_section = false;
            continue;
        }
        if !in_section {
            continue;
        }
        if let Some(rest) = line.strip_prefix('\t') {
            if let Some(name) = rest.split_whitespace().next() {
                names.insert(name.to_string());
            }
        }
    }
    names
}

/// Fallback for releases without `runsc help platforms`: the `-platform` usage line lists them
/// ("specifies which platform to use: ptrace (default), kvm.").
fn platforms_from_flag_help(output: &str) -> BTreeSet<String> {
    let mut lines = output.lines();
    while let Some(line) = lines.next() {
        if line
            .strip_prefix("  -")
            .and_then(|r| r.split_whitespace().next())
            != Some("platform")
        {
            continue;
        }
        let Some(usage) = lines.next() else { break };
        let Some((_, list)) = usage.split_once(':') else {
            break;
        };
        let list = list.split(". (default").next().unwrap_or(list);
        return list
            .split(',')
            .filter_map(|p| p.split_whitespace().next())
            .map(|p| p.trim_end_matches('.').to_string())
            .filter(|p| !p.is_empty())
            .collect();
    }
    BTreeSet::new()
}

#[cfg(test)]
#[path = "features_tests.rs"]
mod tests;
