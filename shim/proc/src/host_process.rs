//! A host process the runtime recorded (a sandbox, a guard, a `runsc delete`), signalled
//! through a pidfd: once its pid was written down, the number alone may name another process
//! by the time it is used (the process exited and the pid was recycled), and a SIGKILL sent
//! as root would hit that one.
//!
//! A pidfd taken while the process is known to be the recorded one (our unreaped child, or a
//! pid whose start time still matches the record) names that process for as long as the fd is
//! open; signals through it fail with ESRCH once it exited, never reach a successor.

use std::os::fd::OwnedFd;

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};

#[derive(Debug)]
pub struct HostProcess {
    pid: i32,
    fd: OwnedFd,
}

impl HostProcess {
    /// Opens process `pid`. The caller must know it is the process it means *now*: its own
    /// child not yet reaped, or a pid whose start time it has just checked
    /// ([`HostProcess::open_checked`]).
    pub fn open(pid: i32) -> std::io::Result<HostProcess> {
        let p = Pid::from_raw(pid).ok_or_else(|| std::io::Error::from_raw_os_error(libc::ESRCH))?;
        let fd = pidfd_open(p, PidfdFlags::empty())?;
        Ok(HostProcess { pid, fd })
    }

    /// Opens `pid`, a child of this process that no one has waited for yet: checked after
    /// the pidfd is open (its parent is this process), so the fd names the child, not a
    /// process that took its number.
    pub fn open_child(pid: i32) -> std::io::Result<HostProcess> {
        let process = HostProcess::open(pid)?;
        if parent_of(pid) == Some(std::process::id() as i32) {
            Ok(process)
        } else {
            Err(std::io::Error::from_raw_os_error(libc::ESRCH))
        }
    }

    /// Opens `pid` if it is still the process that started at `start_time` (field 22 of its
    /// `/proc/PID/stat`, as recorded): checked after the pidfd is open, so the fd cannot name
    /// a process that replaced it between the check and the open.
    pub fn open_checked(
        pid: i32,
        start_time: Option<u64>,
        start_time_of: impl Fn(i32) -> Option<u64>,
    ) -> Option<HostProcess> {
        let started = start_time?;
        let process = HostProcess::open(pid).ok()?;
        (start_time_of(pid) == Some(started)).then_some(process)
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Resolves when the process has exited: for a process that is not this one's child (a
    /// claimed warm sandbox), whose exit the reaper never sees. Its status is not known here.
    pub async fn exited(&self) {
        let watched = self.fd.try_clone().ok().and_then(|fd| {
            // SAFETY: the AsyncFd owns `fd` (a duplicate of the pidfd), which stays open and
            // names the same process until the AsyncFd is dropped.
            unsafe {
                tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
            }
            .ok()
        });
        match watched {
            Some(fd) => {
                let _ = fd.readable().await;
            }
            // Not registrable with the runtime's reactor: a blocking thread waits on the fd.
            None => {
                if let Ok(fd) = self.fd.try_clone() {
                    let copy = HostProcess { pid: self.pid, fd };
                    let _ = tokio::task::spawn_blocking(move || {
                        while !copy.wait_exited(std::time::Duration::from_secs(3600)) {}
                    })
                    .await;
                }
            }
        }
    }

    /// Sends `signal`; an error once the process has exited (ESRCH), whatever now holds its
    /// pid.
    pub fn signal(&self, signal: i32) -> std::io::Result<()> {
        let sig = Signal::from_named_raw(signal)
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        Ok(pidfd_send_signal(&self.fd, sig)?)
    }

    /// Waits up to `timeout` for the process to exit; whether it did.
    pub fn wait_exited(&self, timeout: std::time::Duration) -> bool {
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        let t = Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        matches!(poll(&mut fds, Some(&t)), Ok(n) if n > 0)
    }

    /// Whether the process still runs. A pidfd turns readable when its process exits
    /// (zombie or reaped), so a poll that finds nothing to read says it still runs.
    pub fn is_running(&self) -> bool {
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        matches!(poll(&mut fds, Some(&zero)), Ok(0))
    }
}

/// When `pid` started (field 22 of `/proc/PID/stat`), in clock ticks after boot. With the
/// pid, it names one process for good.
pub fn start_time_of(pid: i32) -> Option<u64> {
    crate::proc_stat::ProcStat::read(pid)?.start_time()
}

fn parent_of(pid: i32) -> Option<i32> {
    crate::proc_stat::ProcStat::read(pid)?.parent()
}

#[cfg(test)]
mod tests {
    use super::*;

    // The children below are watched through their pidfds, not std's `wait`: the reaper's
    // tests in this process may reap any child.

    #[test]
    fn a_child_is_running_until_it_exits_and_then_takes_no_signal() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let p = HostProcess::open(child.id() as i32).unwrap();
        assert!(p.is_running());
        p.signal(libc::SIGKILL).unwrap();
        assert!(p.wait_exited(std::time::Duration::from_secs(10)));
        assert!(!p.is_running());
        // Reaped here unless a reaper test did it first.
        let _ = child.wait();
    }

    #[test]
    fn only_a_child_is_opened_as_one() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let p = HostProcess::open_child(child.id() as i32).unwrap();
        // This process is not its own child.
        assert!(HostProcess::open_child(std::process::id() as i32).is_err());
        p.signal(libc::SIGKILL).unwrap();
        let _ = child.wait();
    }

    #[test]
    fn a_recorded_pid_whose_start_time_changed_is_not_opened() {
        let me = std::process::id() as i32;
        assert!(HostProcess::open_checked(me, Some(1), |_| Some(2)).is_none());
        assert!(HostProcess::open_checked(me, None, |_| Some(2)).is_none());
        let p = HostProcess::open_checked(me, Some(7), |_| Some(7)).unwrap();
        assert_eq!(p.pid(), me);
        assert!(p.is_running());
    }
}
