//! The local pause image (no registry here): the pod sandbox container's image, one static
//! binary (`tests/pause/pause.c`) that holds the pod's namespaces until SIGTERM/SIGINT.

use std::path::Path;

use crate::error::{HarnessError, Result};
use crate::image::oci::{self, Entry, ImageConfig};
use crate::image::{cache_dir, store_archive, TestImage};

/// Name under which the pause image is imported (and the CRI plugin's `sandbox_image`).
pub const PAUSE_IMAGE_REF: &str = "localhost/gvh-pause:latest";

/// The pause binary built by build.rs.
pub const PAUSE_PATH: &str = env!("GVH_PAUSE_PATH");

/// Builds the pause image archive (or finds it in the cache): `/pause`, run as the image's
/// command, and the empty directories a runtime mounts over. Deterministic like the test image.
pub fn pause_image() -> Result<TestImage> {
    let binary = std::fs::read(Path::new(PAUSE_PATH))
        .map_err(|e| HarnessError::io("reading", PAUSE_PATH, e))?;
    let entries = vec![
        Entry::file("pause", 0o755, binary),
        Entry::dir("dev", 0o755),
        Entry::dir("proc", 0o755),
        Entry::dir("sys", 0o755),
        Entry::dir("etc", 0o755),
    ];
    let layer = oci::tar_of(&entries)
        .map_err(|e| HarnessError::Image(format!("writing the pause layer: {e}")))?;
    let config = ImageConfig {
        env: vec![],
        cmd: vec!["/pause".into()],
        working_dir: "/".into(),
    };
    let archive = oci::archive(&layer, &config, PAUSE_IMAGE_REF)
        .map_err(|e| HarnessError::Image(format!("writing the pause archive: {e}")))?;
    store_archive(&cache_dir(), "gvh-pause", archive, PAUSE_IMAGE_REF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_image_is_deterministic() {
        let a = pause_image().unwrap();
        let b = pause_image().unwrap();
        assert_eq!(a, b);
        assert_eq!(a.reference(), PAUSE_IMAGE_REF);
        assert!(a.path().is_file());
    }
}
