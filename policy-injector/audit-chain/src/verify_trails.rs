//! The signature half of verification: each sandbox's records, from its `create` to its signed
//! final record, checked against that record's signature.

use std::collections::HashMap;

use super::report::{sandbox_name, Break, BreakKind, Location, SignatureSummary};
use super::sign::{self, Signature, VerifyingKey};
use super::{hash_line, Digest};

/// Records a container may leave without ever having a sandbox (and so without a trail): the
/// policy rejected it, or its Create failed before the `create` record.
const STANDALONE: [&str; 2] = ["create-rejected", "create-failed"];

/// A record as the trail check sees it.
pub(super) struct Rec<'a> {
    pub line: &'a [u8],
    pub at: &'a Location,
    pub event: &'a str,
    pub namespace: Option<&'a str>,
    pub container_id: Option<&'a str>,
    pub sig: Option<&'a Signature>,
}

struct Open {
    /// Order of creation, to report the oldest unsealed sandbox first.
    order: u64,
    hashes: Vec<Digest>,
    created_at: Location,
    last_event: String,
    last_at: Location,
    /// Began before the first file given: its earlier hashes are unknown.
    partial: bool,
}

pub(super) struct Trails {
    key: VerifyingKey,
    allow_open: bool,
    open: HashMap<(String, String), Open>,
    created: u64,
    summary: SignatureSummary,
}

impl Trails {
    pub(super) fn new(key: VerifyingKey, allow_open: bool) -> Trails {
        Trails {
            key,
            allow_open,
            open: HashMap::new(),
            created: 0,
            summary: SignatureSummary::default(),
        }
    }

    /// One non-genesis record whose chain link already checked out. `from_origin`: the files
    /// start at the log's origin, so every sandbox's `create` must be among them.
    pub(super) fn record(&mut self, rec: Rec<'_>, from_origin: bool) -> Result<(), Break> {
        let Rec {
            line,
            at,
            event,
            namespace,
            container_id,
            sig,
        } = rec;
        let name = sandbox_name(
            &namespace.map(str::to_string),
            &container_id.map(str::to_string),
        );
        let brk = |kind| Break {
            at: at.clone(),
            kind,
        };
        let (Some(ns), Some(id)) = (namespace, container_id) else {
            return Err(brk(BreakKind::Uncovered {
                sandbox: name,
                event: event.to_string(),
            }));
        };
        let key = (ns.to_string(), id.to_string());
        if event == "create" {
            if let Some(prev) = self.open.remove(&key) {
                if !prev.partial && !self.allow_open {
                    return Err(unsealed(name, prev));
                }
                self.note_open(&name, &prev);
            }
            let trail = self.begin(at, event, false);
            self.open.insert(key.clone(), trail);
        } else if !self.open.contains_key(&key) {
            if sig.is_none() && STANDALONE.contains(&event) {
                self.summary.standalone += 1;
                return Ok(());
            }
            if from_origin {
                return Err(brk(BreakKind::Uncovered {
                    sandbox: name,
                    event: event.to_string(),
                }));
            }
            // The create was in a file rotated away before the first one given.
            let trail = self.begin(at, event, true);
            self.open.insert(key.clone(), trail);
        }
        let trail = self.open.get_mut(&key).expect("a trail was opened above");
        trail.last_event = event.to_string();
        trail.last_at = at.clone();
        let Some(sig) = sig else {
            trail.hashes.push(hash_line(line));
            return Ok(());
        };
        let mut trail = self.open.remove(&key).expect("present");
        if trail.partial {
            self.summary.partial += 1;
            return Ok(());
        }
        let failure = match sign::split(line, sig) {
            Ok(unsigned) => {
                trail.hashes.push(hash_line(&unsigned));
                sign::check(&self.key, ns, id, &trail.hashes, sig).err()
            }
            Err(f) => Some(f),
        };
        match failure {
            None => {
                self.summary.sealed += 1;
                Ok(())
            }
            Some(failure) => Err(brk(BreakKind::Signature {
                sandbox: name,
                failure,
            })),
        }
    }

    fn begin(&mut self, at: &Location, event: &str, partial: bool) -> Open {
        self.created += 1;
        Open {
            order: self.created,
            hashes: Vec::new(),
            created_at: at.clone(),
            last_event: event.to_string(),
            last_at: at.clone(),
            partial,
        }
    }

    fn note_open(&mut self, name: &str, trail: &Open) {
        if trail.partial {
            self.summary.partial += 1;
        } else {
            self.summary.open.push(name.to_string());
        }
    }

    pub(super) fn finish(mut self) -> Result<SignatureSummary, Break> {
        let mut open: Vec<((String, String), Open)> = self.open.drain().collect();
        open.sort_by_key(|(_, t)| t.order);
        for ((ns, id), trail) in open {
            let name = format!("{ns}/{id}");
            if !trail.partial && !self.allow_open {
                return Err(unsealed(name, trail));
            }
            self.note_open(&name, &trail);
        }
        Ok(self.summary)
    }
}

fn unsealed(sandbox: String, trail: Open) -> Break {
    Break {
        at: trail.created_at,
        kind: BreakKind::Unsealed {
            sandbox,
            last_event: trail.last_event,
            last_at: trail.last_at,
        },
    }
}
