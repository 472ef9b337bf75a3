//! Carrying what a sandbox changed in its private copy of a repository's config back into the
//! host's file: the difference between the copy it started with and the copy it left, key by
//! key, each judged against [`KeyClass::Carry`], applied to the host's file as it is now.

use std::collections::HashMap;

use super::edit::{self, Change};
use super::keys::{allowed_key, allowed_value, KeyClass, Refusal};
use super::parse::{parse, ConfigFile, ParseError};
use super::{KeyRef, Value};

/// The host's config with the allowed changes applied, and what happened to each change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Carried {
    pub bytes: Vec<u8>,
    pub applied: Vec<Change>,
    /// Changes left out, each with the first reason found (nothing of them was written).
    pub refused: Vec<(Change, Refusal)>,
}

/// Which input could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CarryError {
    #[error("the config the sandbox started with: {0}")]
    Seed(#[source] ParseError),
    #[error("the config the sandbox left: {0}")]
    Sandbox(#[source] ParseError),
    #[error("the host's config: {0}")]
    Host(#[source] ParseError),
    /// The edited host config did not read back as planned (or grew over the size limit).
    /// Nothing should be written; this is the check that keeps a layout the edit planner got
    /// wrong from reaching the developer's file.
    #[error("the carried config would not read back as planned: {0}")]
    Unplaceable(String),
}

/// Applies to `host` the changes from `seed` (the config as copied into the sandbox at
/// create) to `sandbox` (what it left) whose key and every new value [`KeyClass::Carry`]
/// allows.
///
/// A changed key is replaced whole: every host line of it goes, and the sandbox's values are
/// written at the end of the last host section with the same header (or a new section at the
/// end), so the key ends with exactly the sandbox's values even if the developer edited it
/// meanwhile. A section left empty by removals loses its header too, unless anything but
/// whitespace (a comment) is still in it. Every other byte of `host` is kept, so the
/// developer's comments, layout and untouched keys survive.
///
/// `host` that does not parse is an error (nothing can be placed safely in it); so is a seed or
/// sandbox copy that does not parse, as there is then no difference to compute.
pub fn carry(seed: &[u8], sandbox: &[u8], host: &[u8]) -> Result<Carried, CarryError> {
    let seed = parse(seed).map_err(CarryError::Seed)?;
    let sandbox = parse(sandbox).map_err(CarryError::Sandbox)?;
    let host_config = parse(host).map_err(CarryError::Host)?;

    let mut applied = Vec::new();
    let mut refused = Vec::new();
    for change in diff(&seed, &sandbox) {
        match judge(&change) {
            Ok(()) => applied.push(change),
            Err(refusal) => refused.push((change, refusal)),
        }
    }
    let bytes = edit::apply(host, &host_config, &applied);
    verify(&host_config, &applied, &bytes)?;
    Ok(Carried {
        bytes,
        applied,
        refused,
    })
}

/// Fails closed: the output must parse, and give every key the host's values except the
/// applied keys, which have exactly the sandbox's.
pub(super) fn verify(host: &ConfigFile, applied: &[Change], out: &[u8]) -> Result<(), CarryError> {
    let written = parse(out).map_err(|e| CarryError::Unplaceable(e.to_string()))?;
    let (_, mut want) = values_by_key(host);
    for change in applied {
        want.remove(&change.key);
        if !change.after.is_empty() {
            want.insert(&change.key, change.after.clone());
        }
    }
    let (_, got) = values_by_key(&written);
    if got == want {
        return Ok(());
    }
    let key = want
        .iter()
        .find(|(k, v)| got.get(*k) != Some(*v))
        .map(|(k, _)| *k)
        .or_else(|| got.keys().find(|k| !want.contains_key(*k)).copied());
    Err(CarryError::Unplaceable(match key {
        Some(k) => format!("{k} would change"),
        None => "a key would change".into(),
    }))
}

/// The key first (a removal has no value to check), then each value the host would get.
fn judge(change: &Change) -> Result<(), Refusal> {
    allowed_key(KeyClass::Carry, &change.key)?;
    change
        .after
        .iter()
        .try_for_each(|v| allowed_value(KeyClass::Carry, &change.key, v.as_deref()))
}

/// Keys whose ordered values differ, in the order the sandbox's file names them, then the keys
/// it removed in the seed's order.
fn diff(seed: &ConfigFile, sandbox: &ConfigFile) -> Vec<Change> {
    let (seed_order, mut seed_values) = values_by_key(seed);
    let (sandbox_order, mut sandbox_values) = values_by_key(sandbox);
    let mut changes = Vec::new();
    for key in sandbox_order {
        let after = sandbox_values.remove(key).unwrap_or_default();
        let before = seed_values.remove(key).unwrap_or_default();
        if before != after {
            changes.push(Change {
                key: key.clone(),
                before,
                after,
            });
        }
    }
    for key in seed_order {
        if let Some(before) = seed_values.remove(key) {
            changes.push(Change {
                key: key.clone(),
                before,
                after: Vec::new(),
            });
        }
    }
    changes
}

type ByKey<'a> = (Vec<&'a KeyRef>, HashMap<&'a KeyRef, Vec<Value>>);

fn values_by_key(config: &ConfigFile) -> ByKey<'_> {
    let mut order = Vec::new();
    let mut values: HashMap<&KeyRef, Vec<Value>> = HashMap::new();
    for entry in &config.entries {
        values
            .entry(&entry.key)
            .or_insert_with(|| {
                order.push(&entry.key);
                Vec::new()
            })
            .push(entry.value.clone());
    }
    (order, values)
}
