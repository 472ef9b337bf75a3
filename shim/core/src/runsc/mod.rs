//! The typed runsc client: flags, command lines, feature detection, invocation, errors.

mod args;
pub mod client;
pub mod command;
pub mod error;
pub mod feature_cache;
pub mod features;
pub mod flags;
pub mod state_dir;

#[cfg(all(test, feature = "host-tests"))]
mod real_tests;
#[cfg(all(test, feature = "host-tests"))]
pub(crate) mod test_support;
