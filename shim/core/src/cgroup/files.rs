//! Reading and writing cgroup control files, with the path in every error.

use std::collections::HashMap;
use std::path::Path;

use super::CgroupError;

pub fn read(path: &Path) -> Result<String, CgroupError> {
    std::fs::read_to_string(path).map_err(|source| CgroupError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// A file holding one number, or `max` (returned as `None`).
pub fn read_limit(path: &Path) -> Result<Option<u64>, CgroupError> {
    let text = read(path)?;
    let text = text.trim();
    if text == "max" {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|_| CgroupError::Parse {
        path: path.to_path_buf(),
        content: text.to_string(),
    })
}

pub fn read_u64(path: &Path) -> Result<u64, CgroupError> {
    Ok(read_limit(path)?.unwrap_or(u64::MAX))
}

/// `key value` lines (memory.stat, cpu.stat, pids.events, memory.oom_control...).
pub fn read_keyed(path: &Path) -> Result<HashMap<String, u64>, CgroupError> {
    Ok(parse_keyed(&read(path)?))
}

pub(crate) fn parse_keyed(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let key = parts.next()?;
            let value = parts.next()?.parse().ok()?;
            Some((key.to_string(), value))
        })
        .collect()
}

pub(crate) fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    std::fs::write(path, value).map_err(|source| CgroupError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads an optional file: absent (kernel without that file, controller not mounted) is `None`.
pub fn optional<T>(result: Result<T, CgroupError>) -> Result<Option<T>, CgroupError> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(CgroupError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_files_skip_malformed_lines() {
        let m = parse_keyed("max 2\nbroken\noom_kill 1\nx y\n");
        assert_eq!(m.get("max"), Some(&2));
        assert_eq!(m.get("oom_kill"), Some(&1));
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn max_reads_as_no_limit() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pids.max");
        std::fs::write(&p, "max\n").unwrap();
        assert_eq!(read_limit(&p).unwrap(), None);
        std::fs::write(&p, "120\n").unwrap();
        assert_eq!(read_limit(&p).unwrap(), Some(120));
        std::fs::write(&p, "lots\n").unwrap();
        assert!(matches!(read_limit(&p), Err(CgroupError::Parse { .. })));
    }

    #[test]
    fn a_missing_optional_file_is_none_but_other_errors_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        assert!(optional(read(&dir.path().join("nope"))).unwrap().is_none());
        // Reading a directory is an error that is not "absent".
        assert!(optional(read(dir.path())).is_err());
    }
}
