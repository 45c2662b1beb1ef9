//! The Qwen3.6 tokenizer shipped in the repository, built into the binary, so that `normalize`
//! and `inspect` work from any directory without `--tokenizer`.

use crate::tokenize::Tokenizer;
use anyhow::{Context, Result};
use std::path::Path;

/// `templates/qwen3.6/tokenizer.json.zst` (3.8 MB compressed).
const QWEN36_TOKENIZER_ZST: &[u8] = include_bytes!("../../templates/qwen3.6/tokenizer.json.zst");

/// The tokenizer at `path`, or the built-in Qwen3.6 one without a path.
pub fn tokenizer(path: Option<&Path>) -> Result<Tokenizer> {
    match path {
        Some(path) => Tokenizer::load(path)
            .with_context(|| format!("failed to load tokenizer `{}`", path.display())),
        None => {
            let json = zstd::decode_all(QWEN36_TOKENIZER_ZST)
                .context("failed to unpack the built-in Qwen3.6 tokenizer")?;
            Tokenizer::from_json_bytes(&json)
                .context("failed to load the built-in Qwen3.6 tokenizer")
        }
    }
}
