//! The integration tests' layout: one binary, `tests/tests/integration/main.rs`, whose modules
//! are the files beside it (a module's own folder holds its submodules), and no file under
//! `tests/tests/` that is not a declared test target. With `autotests = false` cargo compiles
//! only what `Cargo.toml` and `main.rs` name, so a file left out would silently never run;
//! these checks make it a failing unit test instead (no root needed).

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

/// The `mod NAME;` declarations (file modules, not inline `mod NAME { .. }`) of a source file.
fn declared_modules(text: &str) -> BTreeSet<String> {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or_default().trim())
        .filter_map(|l| {
            let l = l
                .strip_prefix("pub(crate) ")
                .or_else(|| l.strip_prefix("pub "))
                .unwrap_or(l);
            let name = l.strip_prefix("mod ")?.strip_suffix(';')?.trim();
            Some(name.to_string())
        })
        .collect()
}

/// What is wrong with the modules of `dir` against their parent file `parent` (a binary's
/// `main.rs`, or `NAME.rs` for folder `NAME/`): each `NAME.rs` (or `NAME/mod.rs`) in `dir` must
/// be declared there and each declaration must have its file; a folder `NAME/` beside `NAME.rs`
/// is checked the same way against it, recursively. One line per problem, empty when fine.
fn module_problems(dir: &Path, parent: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let declared = match fs::read_to_string(parent) {
        Ok(text) => declared_modules(&text),
        Err(e) => return vec![format!("{}: {e}", parent.display())],
    };
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => return vec![format!("{}: {e}", dir.display())],
    };
    let mut files = BTreeSet::new();
    let mut folders = BTreeSet::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            folders.insert(name);
        } else if let Some(stem) = name.strip_suffix(".rs") {
            if path != parent && stem != "mod" {
                files.insert(stem.to_string());
            }
        }
    }
    for folder in &folders {
        let own = dir.join(folder).join("mod.rs");
        if own.is_file() {
            files.insert(folder.clone());
            problems.extend(module_problems(&dir.join(folder), &own));
        } else if files.contains(folder) {
            let file = dir.join(format!("{folder}.rs"));
            problems.extend(module_problems(&dir.join(folder), &file));
        } else {
            problems.push(format!(
                "{}: a folder without {folder}.rs or {folder}/mod.rs",
                dir.join(folder).display()
            ));
        }
    }
    for f in files.difference(&declared) {
        problems.push(format!(
            "{}: {f} is not declared (`mod {f};`)",
            parent.display()
        ));
    }
    for d in declared.difference(&files) {
        problems.push(format!(
            "{}: `mod {d};` has no {d}.rs or {d}/mod.rs in {}",
            parent.display(),
            dir.display()
        ));
    }
    problems
}

/// What is wrong with the test targets of the crate at `crate_dir`: `autotests` must be off, every
/// `tests/*.rs` and `tests/*/main.rs` must be the path of a `[[test]]`, and every `[[test]]` path
/// must exist.
fn target_problems(crate_dir: &Path) -> Vec<String> {
    let manifest_path = crate_dir.join("Cargo.toml");
    let text = match fs::read_to_string(&manifest_path) {
        Ok(t) => t,
        Err(e) => return vec![format!("{}: {e}", manifest_path.display())],
    };
    let manifest = match text.parse::<toml_edit::DocumentMut>() {
        Ok(m) => m,
        Err(e) => return vec![format!("{}: {e}", manifest_path.display())],
    };
    let mut problems = Vec::new();
    if manifest["package"]["autotests"].as_bool() != Some(false) {
        problems.push("[package] autotests = false is missing".to_string());
    }
    let declared: BTreeSet<String> = manifest
        .get("test")
        .and_then(|t| t.as_array_of_tables())
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("path").and_then(|p| p.as_str()).map(String::from))
        .collect();
    let mut found = BTreeSet::new();
    if let Ok(entries) = fs::read_dir(crate_dir.join("tests")) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            if path.is_dir() {
                if path.join("main.rs").is_file() {
                    found.insert(format!("tests/{name}/main.rs"));
                }
            } else if name.ends_with(".rs") {
                found.insert(format!("tests/{name}"));
            }
        }
    }
    for f in found.difference(&declared) {
        problems.push(format!("{f} is no [[test]] target: cargo never builds it"));
    }
    for d in declared.difference(&found) {
        problems.push(format!("[[test]] path {d} does not exist"));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crate_dir() -> &'static Path {
        Path::new(env!("CARGO_MANIFEST_DIR"))
    }

    #[test]
    fn every_integration_module_file_is_declared_in_main_and_every_declaration_has_its_file() {
        let dir = crate_dir().join("tests/integration");
        let problems = module_problems(&dir, &dir.join("main.rs"));
        assert!(problems.is_empty(), "{problems:#?}");
        // The check saw the modules (a wrong folder would find none and agree).
        let text = fs::read_to_string(dir.join("main.rs")).unwrap();
        assert!(declared_modules(&text).len() > 30, "{text}");
    }

    #[test]
    fn every_file_under_tests_is_a_declared_test_target() {
        let problems = target_problems(crate_dir());
        assert!(problems.is_empty(), "{problems:#?}");
    }

    #[test]
    fn a_stray_file_a_missing_file_and_an_orphan_folder_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::write(
            d.join("main.rs"),
            "mod a;\nmod b; // b.rs\n// mod c;\npub mod sub;\n",
        )
        .unwrap();
        fs::write(d.join("a.rs"), "").unwrap();
        fs::write(d.join("stray.rs"), "").unwrap();
        fs::write(d.join("sub.rs"), "mod inner;\n").unwrap();
        fs::create_dir_all(d.join("sub")).unwrap();
        fs::write(d.join("sub/inner.rs"), "").unwrap();
        fs::write(d.join("sub/forgotten.rs"), "").unwrap();
        fs::create_dir_all(d.join("orphan")).unwrap();
        let problems = module_problems(d, &d.join("main.rs"));
        let has = |s: &str| problems.iter().any(|p| p.contains(s));
        assert!(has("stray is not declared"), "{problems:#?}");
        assert!(has("`mod b;` has no b.rs"), "{problems:#?}");
        assert!(has("forgotten is not declared"), "{problems:#?}");
        assert!(has("orphan: a folder without"), "{problems:#?}");
        assert_eq!(problems.len(), 4, "{problems:#?}");
    }

    #[test]
    fn a_test_file_outside_the_targets_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::create_dir_all(d.join("tests/integration")).unwrap();
        fs::write(d.join("tests/integration/main.rs"), "").unwrap();
        fs::write(d.join("tests/loose.rs"), "").unwrap();
        fs::write(
            d.join("Cargo.toml"),
            "[package]\nname = \"x\"\nautotests = false\n\n[[test]]\nname = \"integration\"\n\
             path = \"tests/integration/main.rs\"\n\n[[test]]\nname = \"gone\"\n\
             path = \"tests/gone.rs\"\n",
        )
        .unwrap();
        let problems = target_problems(d);
        assert_eq!(
            problems,
            [
                "tests/loose.rs is no [[test]] target: cargo never builds it",
                "[[test]] path tests/gone.rs does not exist",
            ],
        );
    }
}
