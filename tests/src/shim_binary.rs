//! Finding the product shim binary. The tests that drive it live in this crate, not the shim's,
//! so cargo does not build it for them: [`shim_binary`] needs it built first
//! (`cargo build -p containerd-shim-gvisor-hardened`).

use std::path::PathBuf;

use crate::containerd::SHIM_BINARY_NAME;
use crate::error::{HarnessError, Result};

/// Overrides where [`shim_binary`] looks.
pub const SHIM_BINARY_ENV: &str = "GVH_SHIM_BINARY";

/// The shim binary: `$GVH_SHIM_BINARY` if set, else the one cargo built next to this test
/// executable (`target/<profile>/containerd-shim-gvisor-hardened-v1`, the parent of the
/// `deps/` directory test executables run from, or of `examples/`). A missing binary is an
/// error naming the fix.
pub fn shim_binary() -> Result<PathBuf> {
    product_binary(SHIM_BINARY_NAME, SHIM_BINARY_ENV)
}

/// A binary of the product: `$<env>` if set, else `name` in cargo's profile directory next to
/// the test executable. A missing binary is an error naming the fix.
pub fn product_binary(name: &str, env: &str) -> Result<PathBuf> {
    let path = match std::env::var_os(env) {
        Some(p) => PathBuf::from(p),
        None => {
            let exe = std::env::current_exe()
                .map_err(|e| HarnessError::io("locating", "the test executable", e))?;
            let profile_dir = exe
                .parent()
                .filter(|d| d.ends_with("deps") || d.ends_with("examples"))
                .and_then(|d| d.parent())
                .or_else(|| exe.parent())
                .map(PathBuf::from)
                .unwrap_or_default();
            profile_dir.join(name)
        }
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(HarnessError::io(
            "binary not built (run `cargo build -p containerd-shim-gvisor-hardened`, or set the override variable)",
            path,
            std::io::Error::from(std::io::ErrorKind::NotFound),
        ))
    }
}
