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
