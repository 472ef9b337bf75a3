//! What a warm sandbox costs in memory: the proportional set size of every process in its
//! memory cgroup (sentry, gofer, the platform's stubs). PSS, not RSS: warm sandboxes share
//! runsc's pages, and the pool's bound is on what they add to the node together.

use std::path::Path;

/// PSS in bytes of the processes in the memory cgroup of `pid` (the sandbox process); 0 when
/// it cannot be read (the sandbox is gone).
pub fn sandbox_pss(pid: i32) -> u64 {
    let Ok(cg) = crate::cgroup::SandboxCgroup::of_pid(pid) else {
        return 0;
    };
    let Ok(dir) = cg.dir("memory") else {
        return 0;
    };
    let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) else {
        return 0;
    };
    procs
        .split_whitespace()
        .filter_map(|p| process_pss(Path::new("/proc").join(p).as_path()))
        .sum()
}

/// `Pss:` of `/proc/PID/smaps_rollup`, in bytes.
fn process_pss(proc_dir: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(proc_dir.join("smaps_rollup")).ok()?;
    parse_pss_kib(&text).map(|kib| kib * 1024)
}

fn parse_pss_kib(smaps_rollup: &str) -> Option<u64> {
    smaps_rollup
        .lines()
        .find_map(|l| l.strip_prefix("Pss:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pss_is_read_from_the_rollup_and_not_from_its_pss_breakdown() {
        let text = "55f0-7ffd ---p 00000000 00:00 0 [rollup]\nRss: 2048 kB\nPss: 1234 kB\nPss_Dirty: 900 kB\nPss_Anon: 800 kB\n";
        assert_eq!(parse_pss_kib(text), Some(1234));
    }

    #[test]
    fn this_process_has_a_pss() {
        assert!(process_pss(Path::new("/proc/self")).is_some_and(|b| b > 0));
    }
}
