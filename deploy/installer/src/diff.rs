//! Unified diff of a planned file change, for `plan` and the logs.

use std::path::Path;

/// A unified diff with 3 lines of context; empty when the texts are equal.
pub fn unified(path: &Path, old: &str, new: &str) -> String {
    if old == new {
        return String::new();
    }
    let name = path.display().to_string();
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&name, &name)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_texts_give_no_diff() {
        assert_eq!(unified(Path::new("/c"), "a\n", "a\n"), "");
    }

    #[test]
    fn added_lines_are_marked() {
        let d = unified(Path::new("/c"), "a\n", "a\nb\n");
        assert!(d.contains("--- /c\n+++ /c\n"), "{d}");
        assert!(d.contains("+b\n"), "{d}");
    }
}
