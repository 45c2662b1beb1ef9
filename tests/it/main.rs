//! The integration tests, one binary: the crate and its dependencies are linked once, not
//! once per test file, and the helpers in [`common`] are compiled once.
//!
//! Adding a test file: put it here as `tests/it/NAME.rs`, add `mod NAME;` below (in
//! alphabetical order), and take the shared helpers with `use crate::common;` (the loopback
//! Hub: `use crate::common::hub;`). Run one file's tests with `cargo test --test it NAME::`,
//! one test with `cargo test --test it -- --exact NAME::TEST`.

mod common;

mod adapters;
mod check;
mod cli;
mod conventions;
mod curate;
mod decontaminate;
mod embedded_defaults;
mod fast_encoder;
mod first_hour;
mod golden;
mod hostile;
mod hub;
mod near_dup;
mod partition;
mod progress;
mod regenerate;
mod report;
mod report_examples;
mod resume;
mod serve_render;
mod snapshots;
mod speculator;
mod structure;
mod trainers;
mod validation;
mod validation_groups;
mod validation_layout;
mod versions;
mod write_safety;
