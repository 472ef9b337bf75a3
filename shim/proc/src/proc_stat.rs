//! `/proc/PID/stat`, read once and split into its fields: the one parser of it for the
//! shim's crates (a process's state, parent, start time; the guard's own argument area).

/// `/proc/PID/stat` (`PID` a number or `self`), read once.
pub struct ProcStat {
    /// What follows the command's closing parenthesis (the command may hold anything): the
    /// fields from 3 on, as proc(5) numbers them.
    rest: String,
}

impl ProcStat {
    pub fn read(pid: impl std::fmt::Display) -> Option<ProcStat> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (_, rest) = stat.rsplit_once(')')?;
        Some(ProcStat {
            rest: rest.to_string(),
        })
    }

    /// Field `n` (numbered as in proc(5), from 3).
    pub fn field(&self, n: usize) -> Option<&str> {
        self.rest.split_whitespace().nth(n.checked_sub(3)?)
    }

    /// Neither a zombie nor dead (field 3, the state).
    pub fn is_alive(&self) -> bool {
        self.field(3)
            .is_some_and(|state| state != "Z" && state != "X")
    }

    /// Field 4: the parent's pid.
    pub fn parent(&self) -> Option<i32> {
        self.field(4)?.parse().ok()
    }

    /// Field 22: when the process started, in clock ticks after boot.
    pub fn start_time(&self) -> Option<u64> {
        self.field(22)?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_has_a_parent_and_a_start_time() {
        let me = ProcStat::read("self").unwrap();
        assert!(me.is_alive());
        assert_eq!(
            me.parent(),
            Some(std::os::unix::process::parent_id() as i32)
        );
        assert!(me.start_time().is_some());
        assert_eq!(me.field(2), None);
    }
}
