//! Helpers the integration tests share: the binary, the repository root, a command's stderr.
// Each test binary compiles this module and uses some of it.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The binary under test, without a progress display.
pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_chatshards"));
    c.env("CHATSHARDS_NO_PROGRESS", "1");
    c
}

/// A path inside the repository.
pub fn root(p: &str) -> String {
    Path::new(ROOT).join(p).display().to_string()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}
