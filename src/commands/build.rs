//! `chatshards build PIPELINE.yaml` (and `merge`): the build is an [`crate::engine::session`].

pub use crate::engine::session::{run, BuildArgs};
