//! Running a command on a fresh pseudo-terminal, for `ctr run -t` / `ctr task exec -t`
//! (ctr refuses `-t` unless its stdin is a terminal).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use crate::error::{HarnessError, Result};
use crate::process::{describe, CommandOutput};

/// Terminal size the pty starts with.
pub const PTY_ROWS: u16 = 24;
pub const PTY_COLS: u16 = 80;

/// Runs `cmd` as a session leader with a new pty as its controlling terminal and stdio,
/// types `input` into it, and collects everything written to the terminal (stdout and stderr
/// together, as the terminals wrote it: `\r` before line ends, typed input echoed) until the
/// command exits. Killed after `timeout`.
pub fn output_in_pty(cmd: &mut Command, input: &[u8], timeout: Duration) -> Result<CommandOutput> {
    let command = describe(cmd);
    let spawn_err = |source| HarnessError::Spawn {
        program: command.clone(),
        source,
    };
    let mut master: libc::c_int = -1;
    let mut slave: libc::c_int = -1;
    let size = libc::winsize {
        ws_row: PTY_ROWS,
        ws_col: PTY_COLS,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: openpty writes two fds into the provided ints; name and termios may be null.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    };
    if rc != 0 {
        return Err(spawn_err(std::io::Error::last_os_error()));
    }
    // SAFETY: openpty succeeded, so both fds are open and owned by nobody else.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let dup = |fd: &OwnedFd| fd.try_clone().map(Stdio::from).map_err(spawn_err);
    cmd.stdin(dup(&slave)?)
        .stdout(dup(&slave)?)
        .stderr(dup(&slave)?);
    // SAFETY: setsid and ioctl are async-signal-safe; this runs in the child before exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(spawn_err)?;
    // Only the child may hold the slave: the master reads EIO once the child's copies close.
    // `cmd` keeps its Stdio copies until replaced.
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    drop(slave);

    let mut reader = File::from(master);
    let mut writer = reader.try_clone().map_err(spawn_err)?;
    let input = input.to_vec();
    thread::spawn(move || {
        let _ = writer.write_all(&input);
    });
    let (out_tx, out_rx) = mpsc::channel();
    thread::spawn(move || {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        // EIO (all slave copies closed) ends a pty's output, not EOF.
        while let Ok(n) = reader.read(&mut chunk) {
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let _ = out_tx.send(buf);
    });

    let collect = || {
        out_rx
            .recv_timeout(Duration::from_secs(5))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    };
    let Some(status) = crate::process::wait_or_kill(child, timeout) else {
        return Err(HarnessError::Timeout {
            command,
            timeout,
            stdout: collect(),
            stderr: String::new(),
        });
    };
    let status = status.map_err(spawn_err)?;
    Ok(CommandOutput {
        command,
        status,
        stdout: collect(),
        stderr: String::new(),
    })
}
