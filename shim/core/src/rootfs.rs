//! Mounting the container's root filesystem that containerd's snapshotter prepared.
//!
//! containerd sends the mounts in CreateTask (an overlay with lowerdir/upperdir/workdir for the
//! overlayfs snapshotter, a bind for the native one); the shim mounts them on `<bundle>/rootfs`
//! before runsc sees the bundle and unmounts them on delete, including the cleanup after a shim
//! died. Mount options are split into flags and filesystem data with our own table.

use std::path::Path;

use nix::mount::{mount, umount2, MntFlags, MsFlags};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootfsMount {
    pub fstype: String,
    pub source: String,
    pub options: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum RootfsError {
    #[error("mounting {fstype} on {target}: {source}")]
    Mount {
        fstype: String,
        target: String,
        source: nix::Error,
    },
    #[error("unmounting {target}: {source}")]
    Unmount { target: String, source: nix::Error },
    #[error("mount options for {target} are {len} bytes, more than the kernel's {max}-byte page")]
    OptionsTooLong {
        target: String,
        len: usize,
        max: usize,
    },
    #[error("only one rootfs mount is supported, got {0}")]
    TooMany(usize),
}

/// Flags a mount option sets (`true`) or clears (`false`); anything else is filesystem data.
fn flag(option: &str) -> Option<(MsFlags, bool)> {
    Some(match option {
        "ro" => (MsFlags::MS_RDONLY, true),
        "rw" => (MsFlags::MS_RDONLY, false),
        "bind" => (MsFlags::MS_BIND, true),
        "rbind" => (MsFlags::MS_BIND | MsFlags::MS_REC, true),
        "nosuid" => (MsFlags::MS_NOSUID, true),
        "suid" => (MsFlags::MS_NOSUID, false),
        "nodev" => (MsFlags::MS_NODEV, true),
        "dev" => (MsFlags::MS_NODEV, false),
        "noexec" => (MsFlags::MS_NOEXEC, true),
        "exec" => (MsFlags::MS_NOEXEC, false),
        "sync" => (MsFlags::MS_SYNCHRONOUS, true),
        "async" => (MsFlags::MS_SYNCHRONOUS, false),
        "noatime" => (MsFlags::MS_NOATIME, true),
        "atime" => (MsFlags::MS_NOATIME, false),
        "nodiratime" => (MsFlags::MS_NODIRATIME, true),
        "relatime" => (MsFlags::MS_RELATIME, true),
        "norelatime" => (MsFlags::MS_RELATIME, false),
        "strictatime" => (MsFlags::MS_STRICTATIME, true),
        "private" => (MsFlags::MS_PRIVATE, true),
        "rprivate" => (MsFlags::MS_PRIVATE | MsFlags::MS_REC, true),
        "slave" => (MsFlags::MS_SLAVE, true),
        "rslave" => (MsFlags::MS_SLAVE | MsFlags::MS_REC, true),
        "defaults" => (MsFlags::empty(), true),
        _ => return None,
    })
}

pub fn split_options(options: &[String]) -> (MsFlags, String) {
    let mut flags = MsFlags::empty();
    let mut data = Vec::new();
    for o in options {
        match flag(o) {
            Some((f, true)) => flags |= f,
            Some((f, false)) => flags &= !f,
            None => data.push(o.as_str()),
        }
    }
    (flags, data.join(","))
}

const PROPAGATION: MsFlags = MsFlags::MS_PRIVATE
    .union(MsFlags::MS_SLAVE)
    .union(MsFlags::MS_SHARED)
    .union(MsFlags::MS_UNBINDABLE);

pub fn mount_all(mounts: &[RootfsMount], target: &Path) -> Result<(), RootfsError> {
    match mounts {
        [] => Ok(()),
        [m] => mount_one(m, target),
        more => Err(RootfsError::TooMany(more.len())),
    }
}

fn mount_one(m: &RootfsMount, target: &Path) -> Result<(), RootfsError> {
    let (flags, data) = split_options(&m.options);
    let page = page_size();
    if data.len() >= page {
        return Err(RootfsError::OptionsTooLong {
            target: target.display().to_string(),
            len: data.len(),
            max: page,
        });
    }
    let err = |source| RootfsError::Mount {
        fstype: m.fstype.clone(),
        target: target.display().to_string(),
        source,
    };
    let base = flags & !PROPAGATION;
    mount(
        Some(m.source.as_str()),
        target,
        Some(m.fstype.as_str()),
        base,
        (!data.is_empty()).then_some(data.as_str()),
    )
    .map_err(err)?;
    // A read-only bind needs a remount: the kernel ignores MS_RDONLY on the initial bind.
    if base.contains(MsFlags::MS_BIND) && base.contains(MsFlags::MS_RDONLY) {
        mount(
            None::<&str>,
            target,
            None::<&str>,
            base | MsFlags::MS_REMOUNT,
            None::<&str>,
        )
        .map_err(err)?;
    }
    if flags.intersects(PROPAGATION) {
        mount(
            None::<&str>,
            target,
            None::<&str>,
            flags & PROPAGATION,
            None::<&str>,
        )
        .map_err(err)?;
    }
    Ok(())
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

/// Unmounts everything stacked on `target` (lazily: runsc's gofer may still be letting go).
/// Not mounted is not an error: cleanup runs again after crashes and must be idempotent.
pub fn unmount_all(target: &Path) -> Result<(), RootfsError> {
    loop {
        match umount2(target, MntFlags::MNT_DETACH) {
            Ok(()) => continue,
            Err(nix::Error::EINVAL) | Err(nix::Error::ENOENT) => return Ok(()),
            Err(source) => {
                return Err(RootfsError::Unmount {
                    target: target.display().to_string(),
                    source,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn overlay_options_become_filesystem_data() {
        let (flags, data) = split_options(&opts(&[
            "index=off",
            "workdir=/w",
            "upperdir=/u",
            "lowerdir=/l1:/l2",
        ]));
        assert_eq!(flags, MsFlags::empty());
        assert_eq!(data, "index=off,workdir=/w,upperdir=/u,lowerdir=/l1:/l2");
    }

    #[test]
    fn bind_options_become_flags() {
        let (flags, data) = split_options(&opts(&["rbind", "ro", "nosuid"]));
        assert_eq!(
            flags,
            MsFlags::MS_BIND | MsFlags::MS_REC | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID
        );
        assert!(data.is_empty());
    }

    #[test]
    fn later_option_overrides_earlier() {
        let (flags, _) = split_options(&opts(&["ro", "rw"]));
        assert!(!flags.contains(MsFlags::MS_RDONLY));
    }

    #[test]
    fn several_rootfs_mounts_are_refused() {
        let m = RootfsMount {
            fstype: "bind".into(),
            source: "/".into(),
            options: vec![],
        };
        assert!(matches!(
            mount_all(&[m.clone(), m], Path::new("/nonexistent")),
            Err(RootfsError::TooMany(2))
        ));
    }

    #[test]
    #[cfg(feature = "host-tests")]
    fn bind_mount_and_unmount_round_trip() {
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("marker"), "x").unwrap();
        let target = tempfile::tempdir().unwrap();
        let m = RootfsMount {
            fstype: "bind".into(),
            source: src.path().to_str().unwrap().into(),
            options: opts(&["rbind", "ro"]),
        };
        mount_all(&[m], target.path()).unwrap();
        assert!(target.path().join("marker").exists());
        assert!(
            std::fs::write(target.path().join("new"), "y").is_err(),
            "ro bind must refuse writes"
        );
        unmount_all(target.path()).unwrap();
        assert!(!target.path().join("marker").exists());
        // Idempotent: unmounting what is not mounted succeeds.
        unmount_all(target.path()).unwrap();
    }
}
