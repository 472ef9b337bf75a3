//! Benchmarks of the hot path: `harden` on real CRI specs (the sandbox and an app container of a
//! pod, captured from containerd 1.6), on a hand-made CRI-like spec, and policy loading.
//!
//! `harden` borrows the spec and so pays for a copy of it; `harden_owned` is what the shim calls
//! (it owns the parsed config.json) and rewrites the spec in place: both are measured.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use policy_injector::{harden, harden_owned, Context, Policy, DEFAULT_POLICY_TOML};
use serde_json::Value;

fn fixture(text: &str) -> Value {
    serde_json::from_str(text).expect("fixture is JSON")
}

/// The context the shim gives an app container: the namespaces of its pod's sandbox.
fn in_pod(spec: &Value) -> Context {
    Context {
        pod_namespace_paths: spec["linux"]["namespaces"]
            .as_array()
            .map(|ns| {
                ns.iter()
                    .filter_map(|n| n["path"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default(),
        ..Context::default()
    }
}

fn bench(c: &mut Criterion) {
    let policy = Policy::default();
    let cases = [
        (
            "cri_app_container",
            fixture(include_str!("../tests/fixtures/cri-container.json")),
        ),
        (
            "cri_sandbox",
            fixture(include_str!("../tests/fixtures/cri-sandbox.json")),
        ),
        (
            "cri_like_handmade",
            fixture(include_str!("../tests/fixtures/bench-cri-like.json")),
        ),
    ];
    for (name, spec) in &cases {
        let ctx = in_pod(spec);
        harden(spec, &policy, &ctx).expect("the bench spec is accepted");
        c.bench_function(&format!("harden/{name}"), |b| {
            b.iter(|| harden(std::hint::black_box(spec), &policy, &ctx).expect("accepted"))
        });
        c.bench_function(&format!("harden_owned/{name}"), |b| {
            b.iter_batched(
                || spec.clone(),
                |s| harden_owned(std::hint::black_box(s), &policy, &ctx).expect("accepted"),
                BatchSize::SmallInput,
            )
        });
    }
    c.bench_function("load_default_policy", |b| {
        b.iter(|| Policy::from_toml_str(std::hint::black_box(DEFAULT_POLICY_TOML)).expect("valid"))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
