//! Runtime options that containerd attaches to CreateTask (and to the `start` action's stdin).
//!
//! For runtimes other than runc, containerd's CRI plugin encodes the runtime's `options` table
//! (`TypeUrl`, `ConfigPath`, as gVisor's own shim reads them) as `runtimeoptions.v1.Options`, and
//! `ctr run --runtime-config-path FILE` sends the same message. Its wire format is two strings
//! (`type_url = 1`, `config_path = 2`), decoded here without generated code.

use containerd_shim_protos::protobuf::{well_known_types::any::Any, CodedInputStream};

const RUNTIME_OPTIONS: &str = "runtimeoptions.v1.Options";
/// The runc shim's options type: ctr sends it only with `--runtime io.containerd.runc.*`, but
/// nerdctl and some CRI configs send it to every runtime. It carries no policy path.
const RUNC_OPTIONS: &[&str] = &["containerd.runc.v1.Options", "containerd.runc.v2.Options"];

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeOptions {
    pub type_url: String,
    pub config_path: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum OptionsError {
    #[error("runtime options of type {0:?} are not understood (expected {RUNTIME_OPTIONS})")]
    UnknownType(String),
    #[error("runtime options {RUNTIME_OPTIONS} are malformed: {0}")]
    Malformed(String),
}

/// Whether `any` is the options type the shim reads (not one it accepts and ignores).
pub fn is_read_by_the_shim(any: &Any) -> bool {
    type_name(any) == RUNTIME_OPTIONS
}

/// The message name of a type url, with or without its `types.containerd.io/` prefix.
fn type_name(any: &Any) -> &str {
    any.type_url.rsplit('/').next().unwrap_or_default()
}

/// Decodes the options; `None` or an empty Any means "no options".
pub fn decode(any: Option<&Any>) -> Result<RuntimeOptions, OptionsError> {
    let Some(any) = any else {
        return Ok(RuntimeOptions::default());
    };
    if any.type_url.is_empty() && any.value.is_empty() {
        return Ok(RuntimeOptions::default());
    }
    let name = type_name(any);
    if RUNC_OPTIONS.contains(&name) {
        return Ok(RuntimeOptions::default());
    }
    if name != RUNTIME_OPTIONS {
        // Fail closed: options we cannot read might have named a stricter policy.
        return Err(OptionsError::UnknownType(any.type_url.clone()));
    }
    decode_runtime_options(&any.value)
}

fn decode_runtime_options(bytes: &[u8]) -> Result<RuntimeOptions, OptionsError> {
    let malformed = |e: &dyn std::fmt::Display| OptionsError::Malformed(e.to_string());
    let mut input = CodedInputStream::from_bytes(bytes);
    let mut out = RuntimeOptions::default();
    while !input.eof().map_err(|e| malformed(&e))? {
        let tag = input.read_raw_varint32().map_err(|e| malformed(&e))?;
        let (field, wire_type) = (tag >> 3, tag & 7);
        match (field, wire_type) {
            (1, 2) => out.type_url = input.read_string().map_err(|e| malformed(&e))?,
            (2, 2) => {
                let path = input.read_string().map_err(|e| malformed(&e))?;
                out.config_path = (!path.is_empty()).then_some(path);
            }
            (_, 0) => {
                input.read_raw_varint64().map_err(|e| malformed(&e))?;
            }
            (_, 2) => {
                input.read_bytes().map_err(|e| malformed(&e))?;
            }
            _ => {
                return Err(malformed(&format!(
                    "unexpected field {field} wire type {wire_type}"
                )))
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(type_url: &str, config_path: &str) -> Vec<u8> {
        let mut out = Vec::new();
        for (field, s) in [(1u8, type_url), (2u8, config_path)] {
            if s.is_empty() {
                continue;
            }
            out.push(field << 3 | 2);
            out.push(s.len() as u8);
            out.extend_from_slice(s.as_bytes());
        }
        out
    }

    fn any(type_url: &str, value: Vec<u8>) -> Any {
        let mut a = Any::new();
        a.type_url = type_url.into();
        a.value = value;
        a
    }

    #[test]
    fn missing_options_mean_no_config_path() {
        assert_eq!(decode(None).unwrap(), RuntimeOptions::default());
        assert_eq!(
            decode(Some(&Any::new())).unwrap(),
            RuntimeOptions::default()
        );
    }

    #[test]
    fn cri_runtime_options_yield_config_path() {
        let a = any(
            "runtimeoptions.v1.Options",
            encode(
                "io.containerd.gvisor-hardened.v1.options",
                "/etc/gvisor-hardened/tool.toml",
            ),
        );
        let o = decode(Some(&a)).unwrap();
        assert_eq!(
            o.config_path.as_deref(),
            Some("/etc/gvisor-hardened/tool.toml")
        );
        assert_eq!(o.type_url, "io.containerd.gvisor-hardened.v1.options");
    }

    #[test]
    fn prefixed_type_url_is_accepted() {
        let a = any(
            "types.containerd.io/runtimeoptions.v1.Options",
            encode("", "/p.toml"),
        );
        assert_eq!(
            decode(Some(&a)).unwrap().config_path.as_deref(),
            Some("/p.toml")
        );
    }

    #[test]
    fn runc_options_carry_no_policy() {
        let a = any("containerd.runc.v1.Options", vec![0x08, 0x01]);
        assert_eq!(decode(Some(&a)).unwrap().config_path, None);
    }

    #[test]
    fn only_runtime_options_are_read_by_the_shim() {
        assert!(is_read_by_the_shim(&any(
            "runtimeoptions.v1.Options",
            vec![]
        )));
        assert!(is_read_by_the_shim(&any(
            "types.containerd.io/runtimeoptions.v1.Options",
            vec![]
        )));
        assert!(!is_read_by_the_shim(&any(
            "containerd.runc.v1.Options",
            vec![]
        )));
    }

    #[test]
    fn unknown_options_type_fails_closed() {
        let a = any("example.com/Other", vec![]);
        assert!(matches!(
            decode(Some(&a)),
            Err(OptionsError::UnknownType(_))
        ));
    }

    #[test]
    fn truncated_options_are_malformed() {
        let mut bytes = encode("", "/p.toml");
        bytes.truncate(4);
        let a = any("runtimeoptions.v1.Options", bytes);
        assert!(matches!(decode(Some(&a)), Err(OptionsError::Malformed(_))));
    }
}
