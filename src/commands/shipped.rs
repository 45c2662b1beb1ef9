//! The tokenizer of `normalize` and `inspect`: the one at `--tokenizer`, or the Qwen3.6 one
//! built into the binary, so that they work from any directory.

use crate::tokenize::{Backend, Tokenizer};
use anyhow::{Context, Result};
use std::path::Path;

/// The tokenizer at `path`, or the built-in Qwen3.6 one without a path.
pub fn tokenizer(path: Option<&Path>) -> Result<Tokenizer> {
    let loaded = Tokenizer::load_or_embedded(path, Backend::Hf).map(|(t, _)| t);
    match path {
        Some(path) => {
            loaded.with_context(|| format!("failed to load tokenizer `{}`", path.display()))
        }
        None => loaded.context("failed to load the built-in Qwen3.6 tokenizer"),
    }
}
