//! The attack catalogue (`gvisor_hardened_tests::attacks`): every hostile workload in a
//! hardened sandbox through the real containerd, shim and runsc, one test per category. Each
//! attack asserts its promised outcome and that the host is unchanged; each category also
//! compares the whole watched host before and after, and ends with a clean shutdown.
//!
//! `hack/redteam.sh` runs these and prints the table. Needs root and the shim built
//! (`cargo build -p containerd-shim-gvisor-hardened`). `GVH_ATTACKS=fork,dns` runs only the
//! attacks whose names contain one of the words.

use gvisor_hardened_tests::attacks::{assert_all_held, run_category, Category};

#[test]
fn filesystem_attacks_are_held() {
    assert_all_held(&run_category(Category::Filesystem));
}

#[test]
fn privilege_attacks_are_held() {
    assert_all_held(&run_category(Category::Privileges));
}

#[test]
fn resource_attacks_are_held() {
    assert_all_held(&run_category(Category::Resources));
}

#[test]
fn network_attacks_are_held() {
    assert_all_held(&run_category(Category::Network));
}

#[test]
fn secret_attacks_are_held() {
    assert_all_held(&run_category(Category::Secrets));
}

#[test]
fn spec_smuggling_is_rejected_or_neutralised() {
    assert_all_held(&run_category(Category::Smuggling));
}

#[test]
fn egress_attacks_are_held() {
    assert_all_held(&run_category(Category::Egress));
}

#[test]
fn runsc_flags_that_weaken_the_sandbox_are_refused_on_every_path() {
    assert_all_held(&run_category(Category::RunscFlags));
}

/// Every flag the policy's decision table calls weakening has its row, and no row is for a flag
/// the table does not call weakening (but `--network=host`, which a policy key owns).
#[test]
fn the_runsc_flag_rows_are_the_weakening_flags_of_the_decision_table() {
    use gvisor_hardened_tests::attacks::runsc_flags::CASES;
    let mut rows: Vec<&str> = CASES.iter().map(|c| c.flag).collect();
    let mut table: Vec<&str> = policy_injector::policy::runsc_flags::weakening_flags()
        .map(|(f, _)| f)
        .chain(["network"])
        .collect();
    rows.sort();
    table.sort();
    assert_eq!(rows, table);
    let rows = gvisor_hardened_tests::attacks::runsc_flags::attacks();
    assert_eq!(rows.len(), CASES.len(), "one row per case");
}

#[test]
fn the_catalogue_has_at_least_30_attacks_with_unique_names() {
    let all = gvisor_hardened_tests::attacks::catalogue();
    assert!(all.len() >= 30, "{} attacks", all.len());
    let mut names: Vec<&str> = all.iter().map(|a| a.name).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), all.len(), "duplicate attack names");
}

#[test]
fn hostile_workloads_through_docker_are_held() {
    assert_all_held(&gvisor_hardened_tests::attacks::docker::run_through_docker());
}
