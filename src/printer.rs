//! All terminal output goes through here: data to stdout, messages to stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::Write;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Printer {
    Quiet,
    Default,
}

impl Printer {
    /// A message for the user (stderr).
    pub fn info(&self, message: &str) {
        if *self != Printer::Quiet {
            to_stderr(message);
        }
    }

    /// Output the user asked for by name (stderr), printed even with `--quiet`.
    pub fn requested(&self, message: &str) {
        to_stderr(message);
    }

    pub fn error(&self, message: &str) {
        to_stderr(message);
    }

    /// Whether progress bars may be drawn.
    pub fn progress_enabled(&self) -> bool {
        *self != Printer::Quiet && std::env::var_os("CHATSHARDS_NO_PROGRESS").is_none()
    }

    /// Data output (stdout), e.g. `render` lines or `inspect` text.
    pub fn data(out: &mut impl Write, text: &str) -> std::io::Result<()> {
        out.write_all(text.as_bytes())
    }
}

/// A line on stderr. A stderr that cannot be written (a closed pipe) loses the message but
/// neither panics (`eprintln!` does) nor changes the exit status.
fn to_stderr(message: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err
        .write_all(message.as_bytes())
        .and_then(|()| err.write_all(b"\n"));
}
