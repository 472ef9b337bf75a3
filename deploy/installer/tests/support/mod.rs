//! Test support for the installer: a private containerd (1.6 or 2.x) with CRI, the installer's
//! view of a node running it, and a fake Kubernetes API. Self-contained on purpose (the shared
//! harness lives elsewhere).

#![allow(dead_code)]

pub mod containerd;
pub mod deps;
pub mod fake_api;
pub mod node;

/// For each named test body `fn body(release: Release)`, a module `body` with two `#[test]`s,
/// `containerd_1_6` and `containerd_2`: every real-containerd test runs on both releases the
/// project supports, and a failure names the release.
#[allow(unused_macros)] // support is shared by test binaries that start no containerd
macro_rules! on_both_releases {
    ($($body:ident),* $(,)?) => {$(
        mod $body {
            #[test]
            fn containerd_1_6() {
                super::$body(super::support::containerd::Release::V1_6)
            }
            #[test]
            fn containerd_2() {
                super::$body(super::support::containerd::Release::V2)
            }
        }
    )*};
}
#[allow(unused_imports)]
pub(crate) use on_both_releases;
