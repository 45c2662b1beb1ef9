//! The build engine: the passes over a plan's sources ([`run`]), the per-row path through
//! render, tokenize and mask ([`row_path`]), curation's per-row steps ([`curator`]), the build
//! journal that lets a killed build resume ([`journal`]) in an output directory it stages and
//! swaps ([`output`]), the partitioned scan with its merge ([`partition`]), and progress on
//! the terminal, the build's and the Hub downloads' ([`progress`]).

pub mod curator;
pub mod journal;
pub mod output;
pub mod partition;
pub mod progress;
pub mod row_path;
pub mod run;
pub mod session;

pub use run::{
    run, run_journaled, scan_part, NoProgress, Pass, Progress, RunError, RunOutput, ScanRow, Sinks,
    WorkSample, JOB_BYTES, JOB_MAX_ROWS,
};
