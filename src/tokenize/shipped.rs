//! The tokenizer of `normalize` and `inspect`: the one at `--tokenizer`, or the Qwen3.6 one
//! built into the binary, so that they work from any directory.

use super::{Backend, Tokenizer, TokenizerError};
use std::path::Path;

/// The tokenizer at `path`, or the built-in Qwen3.6 one without a path.
pub fn tokenizer(path: Option<&Path>) -> Result<Tokenizer, TokenizerError> {
    Tokenizer::load_or_embedded(path, Backend::Hf).map(|(t, _)| t)
}
