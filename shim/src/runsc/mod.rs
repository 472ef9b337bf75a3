//! The typed runsc client: flags, command lines, feature detection, invocation, errors.

pub mod client;
pub mod command;
pub mod error;
pub mod feature_cache;
pub mod features;
pub mod flags;

#[cfg(test)]
mod real_tests;
#[cfg(test)]
pub(crate) mod test_support;
