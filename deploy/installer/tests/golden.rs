//! Golden files: each `tests/golden/<case>.in.toml` planned with the standard handler set must
//! give `<case>.out.toml` byte for byte (for drop-in cases, `<case>.dropin.toml`).
//! Set GOLDEN_BLESS=1 to (re)write the expected files, then review the diff in git.

use std::fs;
use std::path::{Path, PathBuf};

use gvisor_hardened_installer::handlers::{Handler, TOOL_HANDLER};
use gvisor_hardened_installer::plan::{plan_install, plan_surgical_removal, ConfigAction};

fn handlers() -> Vec<Handler> {
    Handler::standard_set(
        Path::new("/etc/gvisor-hardened"),
        Path::new("/usr/local/bin/containerd-shim-gvisor-hardened-v1"),
        &[TOOL_HANDLER.to_string()],
    )
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn cases() -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(golden_dir())
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".in.toml").map(str::to_string)
        })
        .collect();
    names.sort();
    names
}

fn check_or_bless(path: &Path, actual: &str) {
    if std::env::var_os("GOLDEN_BLESS").is_some() {
        fs::write(path, actual).unwrap();
        return;
    }
    let expected = fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with GOLDEN_BLESS=1 to create)",
            path.display()
        )
    });
    assert_eq!(actual, expected, "{} differs", path.display());
}

fn no_file(_: &Path) -> Option<String> {
    None
}

#[test]
fn every_golden_input_plans_to_its_expected_output() {
    let cases = cases();
    assert!(cases.len() >= 4, "golden cases missing: {cases:?}");
    for case in cases {
        let input = fs::read_to_string(golden_dir().join(format!("{case}.in.toml"))).unwrap();
        let config_path = Path::new("/etc/containerd/config.toml");
        let plan = plan_install(config_path, Some(&input), None, &handlers(), &no_file)
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        match &plan.action {
            ConfigAction::WriteMain { new_text } => {
                // Layout preserved: every original line is still there, in order.
                assert_subsequence(&input, new_text, &case);
                check_or_bless(&golden_dir().join(format!("{case}.out.toml")), new_text);
            }
            ConfigAction::WriteDropIn { new_text, path } => {
                assert_eq!(
                    path,
                    Path::new("/etc/containerd/conf.d/gvisor-hardened.toml")
                );
                check_or_bless(&golden_dir().join(format!("{case}.dropin.toml")), new_text);
            }
            ConfigAction::Unchanged => panic!("{case}: nothing planned"),
        }
    }
}

#[test]
fn planning_an_installed_config_again_changes_nothing() {
    for case in cases() {
        let input = fs::read_to_string(golden_dir().join(format!("{case}.in.toml"))).unwrap();
        let config_path = Path::new("/etc/containerd/config.toml");
        let first = plan_install(config_path, Some(&input), None, &handlers(), &no_file).unwrap();
        let second = match first.action {
            ConfigAction::WriteMain { new_text } => {
                plan_install(config_path, Some(&new_text), None, &handlers(), &no_file).unwrap()
            }
            ConfigAction::WriteDropIn { new_text, .. } => {
                let read = move |_: &Path| Some(new_text.clone());
                plan_install(config_path, Some(&input), None, &handlers(), &read).unwrap()
            }
            ConfigAction::Unchanged => panic!("{case}: nothing planned"),
        };
        assert_eq!(second.action, ConfigAction::Unchanged, "{case}");
    }
}

#[test]
fn removing_our_tables_from_an_installed_config_gives_the_input_back() {
    for case in cases() {
        let input = fs::read_to_string(golden_dir().join(format!("{case}.in.toml"))).unwrap();
        let config_path = Path::new("/etc/containerd/config.toml");
        let plan = plan_install(config_path, Some(&input), None, &handlers(), &no_file).unwrap();
        if let ConfigAction::WriteMain { new_text } = plan.action {
            let hs = handlers();
            let names: Vec<&str> = hs.iter().map(|h| h.name.as_str()).collect();
            let back = plan_surgical_removal(config_path, &new_text, &names)
                .unwrap()
                .expect("something to remove");
            assert_eq!(back, input, "{case}");
        }
    }
}

fn assert_subsequence(original: &str, edited: &str, case: &str) {
    let mut it = edited.lines();
    for line in original.lines() {
        assert!(
            it.any(|l| l == line),
            "{case}: original line {line:?} lost or reordered"
        );
    }
}
