//! Benchmarks of the hot path: `harden` on a realistic CRI-like spec, and policy loading.

use criterion::{criterion_group, criterion_main, Criterion};
use policy_injector::{harden, Context, Policy, DEFAULT_POLICY_TOML};

fn bench(c: &mut Criterion) {
    let spec: serde_json::Value =
        serde_json::from_str(include_str!("../tests/fixtures/bench-cri-like.json"))
            .expect("fixture is JSON");
    let policy = Policy::default();
    // The pod's sandbox namespaces, as the shim would supply them.
    let ctx = Context {
        pod_namespace_paths: vec!["/proc/4242/ns/ipc".into(), "/proc/4242/ns/uts".into()],
        ..Context::default()
    };
    c.bench_function("harden_cri_like_spec", |b| {
        b.iter(|| harden(std::hint::black_box(&spec), &policy, &ctx).expect("accepted"))
    });
    c.bench_function("load_default_policy", |b| {
        b.iter(|| Policy::from_toml_str(std::hint::black_box(DEFAULT_POLICY_TOML)).expect("valid"))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
