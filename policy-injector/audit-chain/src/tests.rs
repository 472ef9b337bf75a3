//! The chain's tamper cases, on logs built the way the shim's writer builds them.

use super::sign::VerifyingKey;
use super::verify::verify_all;
use super::*;

pub(super) const ORIGIN: Origin<'static> = Origin {
    time: "2026-01-01T00:00:00.000Z",
    node: "node-a",
    policy_sha256: "ab",
};

/// An in-memory log: the live file and its rotated predecessors, written through `next` and
/// `compose` exactly as the shim's writer does under its lock.
pub(super) struct Log {
    /// Oldest first; the last one is live.
    pub(super) files: Vec<Vec<u8>>,
}

impl Log {
    pub(super) fn new() -> Log {
        Log {
            files: vec![Vec::new()],
        }
    }

    pub(super) fn tail(&self) -> Tail<'_> {
        let live = self.files.last().unwrap();
        if live.is_empty() {
            return Tail::Empty;
        }
        match live.strip_suffix(b"\n") {
            Some(body) => Tail::Line(body.rsplit(|b| *b == b'\n').next().unwrap()),
            None => Tail::Cut(live.rsplit(|b| *b == b'\n').next().unwrap()),
        }
    }

    pub(super) fn rotated_last(&self) -> Option<Vec<u8>> {
        let n = self.files.len();
        (n >= 2).then(|| {
            let f = &self.files[n - 2];
            f.strip_suffix(b"\n")
                .unwrap_or(f)
                .rsplit(|b| *b == b'\n')
                .next()
                .unwrap()
                .to_vec()
        })
    }

    pub(super) fn append_sealed(&mut self, record: &str, seal: Option<&SealInput<'_>>) -> Digest {
        let rotated = self.rotated_last();
        let tail = self.tail();
        let next = next(tail, rotated.as_deref());
        let out = compose(tail, next, &ORIGIN, record.as_bytes(), seal).unwrap();
        self.files.last_mut().unwrap().extend_from_slice(&out.bytes);
        out.record
    }

    pub(super) fn append(&mut self, record: &str) -> Digest {
        self.append_sealed(record, None)
    }

    pub(super) fn rotate(&mut self) {
        self.files.push(Vec::new());
    }

    pub(super) fn verify(&self) -> Result<Summary, Break> {
        self.verify_with(None, false)
    }

    pub(super) fn verify_with(
        &self,
        key: Option<VerifyingKey>,
        allow_open: bool,
    ) -> Result<Summary, Break> {
        let names: Vec<String> = (0..self.files.len()).map(|i| format!("f{i}")).collect();
        let files: Vec<(&str, &[u8])> = names
            .iter()
            .zip(&self.files)
            .map(|(n, f)| (n.as_str(), f.as_slice()))
            .collect();
        verify_all(&files, key, allow_open)
    }

    pub(super) fn lines(&mut self, file: usize) -> Vec<Vec<u8>> {
        self.files[file]
            .split_inclusive(|b| *b == b'\n')
            .map(<[u8]>::to_vec)
            .collect()
    }

    pub(super) fn set_lines(&mut self, file: usize, lines: Vec<Vec<u8>>) {
        self.files[file] = lines.concat();
    }
}

pub(super) fn rec(event: &str, id: &str) -> String {
    format!(r#"{{"time":"t","event":"{event}","namespace":"default","container_id":"{id}"}}"#)
}

/// genesis + 5 records in one file.
fn five() -> Log {
    let mut log = Log::new();
    for i in 0..5 {
        log.append(&rec("start", &format!("c{i}")));
    }
    log
}

pub(super) fn kind(r: Result<Summary, Break>) -> (Location, BreakKind) {
    let b = r.expect_err("verification must fail");
    (b.at, b.kind)
}

pub(super) fn at(file: usize, line: u64) -> Location {
    Location {
        file: format!("f{file}"),
        line,
    }
}

#[test]
fn a_new_log_begins_with_a_genesis_linked_to_the_seed() {
    let log = five();
    let first = log.files[0].split(|b| *b == b'\n').next().unwrap();
    let v: serde_json::Value = serde_json::from_slice(first).unwrap();
    assert_eq!(v["event"], "genesis");
    assert_eq!(v["seq"], 0);
    assert_eq!(v["prev"], Digest::of(GENESIS_SEED).to_string());
    assert_eq!(v["node"], "node-a");
    assert_eq!(v["reason"], "new");
    let s = log.verify().unwrap();
    assert_eq!((s.records, s.first_seq, s.last_seq), (6, Some(0), Some(5)));
    assert!(s.from_origin);
}

#[test]
fn every_record_links_to_the_hash_of_the_line_before_it() {
    let log = five();
    let lines: Vec<&[u8]> = log.files[0]
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    for w in lines.windows(2) {
        let v: serde_json::Value = serde_json::from_slice(w[1]).unwrap();
        assert_eq!(v["prev"], hash_line(w[0]).to_string());
    }
    // The record's own fields follow the chain fields unchanged.
    assert!(lines[1].starts_with(b"{\"seq\":1,\"prev\":\""));
    assert!(lines[1]
        .ends_with(br#","time":"t","event":"start","namespace":"default","container_id":"c0"}"#));
}

#[test]
fn the_hash_of_a_line_excludes_its_newline() {
    assert_eq!(hash_line(b"{\"a\":1}\n"), hash_line(b"{\"a\":1}"));
    assert_eq!(hash_line(b"{\"a\":1}"), Digest::of(b"{\"a\":1}"));
}

#[test]
fn an_edited_record_is_named_by_its_line() {
    let mut log = five();
    let mut lines = log.lines(0);
    lines[2] = String::from_utf8(lines[2].clone())
        .unwrap()
        .replace("\"c1\"", "\"cX\"")
        .into_bytes();
    log.set_lines(0, lines);
    let (loc, k) = kind(log.verify());
    assert_eq!(loc, at(0, 3));
    assert_eq!(
        k,
        BreakKind::Altered {
            detected_at: at(0, 4)
        }
    );
}

#[test]
fn a_deleted_record_is_reported_with_the_missing_seq() {
    let mut log = five();
    let mut lines = log.lines(0);
    lines.remove(3);
    log.set_lines(0, lines);
    let (loc, k) = kind(log.verify());
    assert_eq!(loc, at(0, 4));
    assert_eq!(
        k,
        BreakKind::Missing {
            expected: 3,
            found: 4
        }
    );
}

#[test]
fn an_inserted_record_is_reported() {
    // A copy of an earlier record: valid JSON with chain fields, in the wrong place.
    let mut log = five();
    let mut lines = log.lines(0);
    let copy = lines[1].clone();
    lines.insert(4, copy);
    log.set_lines(0, lines);
    let (loc, k) = kind(log.verify());
    assert_eq!(loc, at(0, 5));
    assert_eq!(
        k,
        BreakKind::Inserted {
            expected: 4,
            found: 1
        }
    );

    // A line written by something else entirely.
    let mut log = five();
    let mut lines = log.lines(0);
    lines.insert(
        2,
        rec("exec", "c9")
            .into_bytes()
            .into_iter()
            .chain(*b"\n")
            .collect(),
    );
    log.set_lines(0, lines);
    assert_eq!(kind(log.verify()), (at(0, 3), BreakKind::NoChainFields));
}

#[test]
fn reordered_records_are_told_apart_from_deleted_ones() {
    let mut log = five();
    let mut lines = log.lines(0);
    lines.swap(2, 3);
    log.set_lines(0, lines);
    let (loc, k) = kind(log.verify());
    assert_eq!(loc, at(0, 3));
    assert_eq!(
        k,
        BreakKind::Reordered {
            expected: 2,
            found: 3,
            expected_at: at(0, 4)
        }
    );
}

#[test]
fn a_file_cut_mid_line_is_reported_at_the_cut_line() {
    let mut log = five();
    let len = log.files[0].len();
    log.files[0].truncate(len - 10);
    assert_eq!(kind(log.verify()), (at(0, 6), BreakKind::Cut));
}

#[test]
fn a_garbled_line_is_not_json() {
    let mut log = five();
    let mut lines = log.lines(0);
    lines[3] = b"{\"seq\":3,\"prev\n".to_vec();
    log.set_lines(0, lines);
    let (loc, k) = kind(log.verify());
    assert_eq!(loc, at(0, 4));
    assert!(matches!(k, BreakKind::NotJson(_)), "{k:?}");
}

fn rotated() -> Log {
    let mut log = Log::new();
    log.append(&rec("create", "a"));
    log.append(&rec("start", "a"));
    log.rotate();
    log.append(&rec("exit", "a"));
    log.append(&rec("delete", "a"));
    log.rotate();
    log.append(&rec("create", "b"));
    log
}

#[test]
fn rotation_links_each_file_to_the_last_record_of_the_one_before() {
    let log = rotated();
    let s = log.verify().unwrap();
    assert_eq!((s.records, s.files, s.last_seq), (8, 3, Some(7)));
    let second_genesis = log.files[1].split(|b| *b == b'\n').next().unwrap();
    let v: serde_json::Value = serde_json::from_slice(second_genesis).unwrap();
    assert_eq!(v["event"], "genesis");
    assert_eq!(v["reason"], "rotated");
    assert_eq!(v["seq"], 3);
    let last_of_first = log.files[0]
        .strip_suffix(b"\n")
        .unwrap()
        .rsplit(|b| *b == b'\n')
        .next()
        .unwrap();
    assert_eq!(v["prev"], hash_line(last_of_first).to_string());
}

#[test]
fn a_missing_or_misordered_file_breaks_the_link_across_rotation() {
    let log = rotated();
    let files = |idx: &[usize]| -> Result<Summary, Break> {
        let names: Vec<String> = idx.iter().map(|i| format!("f{i}")).collect();
        let v: Vec<(&str, &[u8])> = idx
            .iter()
            .zip(&names)
            .map(|(i, n)| (n.as_str(), log.files[*i].as_slice()))
            .collect();
        verify_all(&v, None, false)
    };
    let (loc, k) = kind(files(&[0, 2]));
    assert_eq!(loc, at(2, 1));
    assert_eq!(
        k,
        BreakKind::FileLink {
            previous: at(0, 3),
            expected: 3,
            found: 6
        }
    );
    assert!(matches!(
        kind(files(&[1, 0, 2])).1,
        BreakKind::FileLink { .. }
    ));
    // Starting at a later file is allowed (older files rotated away), and said.
    let s = files(&[1, 2]).unwrap();
    assert!(!s.from_origin);
    assert_eq!(s.first_seq, Some(3));
}

#[test]
fn the_end_of_a_rotated_file_cut_at_a_line_boundary_breaks_the_next_link() {
    let mut log = rotated();
    let mut lines = log.lines(1);
    lines.pop();
    log.set_lines(1, lines);
    let (loc, k) = kind(log.verify());
    assert_eq!(loc, at(2, 1));
    assert!(
        matches!(
            k,
            BreakKind::FileLink {
                expected: 5,
                found: 6,
                ..
            }
        ),
        "{k:?}"
    );
}

#[test]
fn a_file_whose_beginning_was_cut_has_no_genesis() {
    let mut log = rotated();
    let mut lines = log.lines(1);
    lines.remove(0);
    log.set_lines(1, lines);
    assert_eq!(kind(log.verify()), (at(1, 1), BreakKind::NoGenesis));
}

#[test]
fn a_genesis_in_the_middle_of_a_file_is_misplaced() {
    let mut log = rotated();
    let mut lines = log.lines(0);
    let g = lines[0].clone();
    lines.insert(2, g);
    log.set_lines(0, lines);
    assert_eq!(kind(log.verify()), (at(0, 3), BreakKind::MisplacedGenesis));
}

#[test]
fn a_cut_tail_is_never_extended_and_stays_reported() {
    let mut log = five();
    let len = log.files[0].len();
    log.files[0].truncate(len - 10);
    log.append(&rec("start", "after"));
    let text = String::from_utf8(log.files[0].clone()).unwrap();
    let last_two: Vec<&str> = text.lines().rev().take(2).collect();
    assert!(last_two[0].contains("\"after\""), "{text}");
    let g: serde_json::Value = serde_json::from_str(last_two[1]).unwrap();
    assert_eq!(g["event"], "genesis");
    assert_eq!(g["reason"], "after-cut-line");
    let (loc, k) = kind(log.verify());
    assert_eq!(loc, at(0, 6));
    assert!(matches!(k, BreakKind::NotJson(_)), "{k:?}");
}

#[test]
fn a_log_from_before_the_chain_gets_a_genesis_linked_to_its_last_line() {
    let mut log = Log::new();
    log.files[0] = b"{\"time\":\"t\",\"event\":\"create\"}\n".to_vec();
    log.append(&rec("create", "a"));
    let lines = log.lines(0);
    let g: serde_json::Value = serde_json::from_slice(&lines[1]).unwrap();
    assert_eq!(g["reason"], "after-unchained-line");
    assert_eq!(g["prev"], hash_line(&lines[0]).to_string());
    assert_eq!(kind(log.verify()), (at(0, 1), BreakKind::NoChainFields));
}

#[test]
fn an_empty_object_gets_chain_fields_without_a_dangling_comma() {
    let l = with_link(Link::origin(), b"{}").unwrap();
    serde_json::from_slice::<serde_json::Value>(&l).unwrap();
    assert_eq!(
        with_link(Link::origin(), b"[1]"),
        Err(ChainError::NotAnObject)
    );
}

#[test]
fn digests_have_one_spelling() {
    let d = Digest::of(b"x");
    assert_eq!(Digest::from_hex(&d.to_string()), Some(d));
    assert_eq!(Digest::from_hex(&d.to_string().to_uppercase()), None);
    assert_eq!(Digest::from_hex("ab"), None);
}
