//! The Qwen3.6 tokenizer shipped in the repository, built into the binary, so that `normalize`
//! and `inspect` work from any directory without `--tokenizer`.

use super::{Tokenizer, TokenizerError};
use std::path::Path;

/// `templates/qwen3.6/tokenizer.json.zst` (3.8 MB compressed).
const QWEN36_TOKENIZER_ZST: &[u8] = include_bytes!("../../templates/qwen3.6/tokenizer.json.zst");

/// The tokenizer at `path`, or the built-in Qwen3.6 one without a path.
pub fn tokenizer(path: Option<&Path>) -> Result<Tokenizer, TokenizerError> {
    match path {
        Some(path) => Tokenizer::load(path),
        None => {
            let builtin = Path::new("<built-in Qwen3.6 tokenizer>");
            let json = zstd::decode_all(QWEN36_TOKENIZER_ZST)
                .map_err(|e| TokenizerError::Io(builtin.to_owned(), e))?;
            Tokenizer::from_json_bytes(&json).map_err(|e| e.with_path(builtin))
        }
    }
}
