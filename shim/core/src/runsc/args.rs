//! A runsc argument list as the typed builders (`command.rs`'s subcommands, `flags.rs`'s global
//! flags) spell it: `--name`, `--name=value` and plain words. A leaf both build on.

use std::ffi::OsString;

#[derive(Default)]
pub(super) struct Args(pub(super) Vec<OsString>);

impl Args {
    pub(super) fn word(&mut self, w: impl Into<OsString>) {
        self.0.push(w.into());
    }

    pub(super) fn switch(&mut self, name: &str) {
        self.0.push(format!("--{name}").into());
    }

    pub(super) fn value(&mut self, name: &str, value: impl AsRef<std::ffi::OsStr>) {
        let mut arg = OsString::from(format!("--{name}="));
        arg.push(value.as_ref());
        self.0.push(arg);
    }
}
