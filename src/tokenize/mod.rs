//! Tokenize stage: rendered text → token ids + loss mask, self-checked.
//!
//! Encoding goes through the [`Encoder`] trait so that a faster exact backend can replace the
//! `tokenizers` crate without touching the mask logic. The mask is computed in token space in one
//! linear pass ([`mask`]), then checked against the assistant spans found in the text.

pub mod mask;
mod vocab;

pub use mask::{ChatMarkers, MaskError};
pub use vocab::{TokenBytes, TokenizerError};

use std::path::Path;

/// Turns text into token ids. Implementations must be exact (same ids as the reference
/// tokenizer) and must not parallelise internally: the pipeline owns the thread pool.
pub trait Encoder: Send + Sync {
    fn encode(&self, text: &str) -> Result<Vec<u32>, String>;
}

/// The `tokenizers` crate backend.
pub struct HfEncoder {
    tokenizer: tokenizers::Tokenizer,
}

impl Encoder for HfEncoder {
    fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        self.tokenizer
            .encode_fast(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| e.to_string())
    }
}

/// A loaded tokenizer: the encoder plus the vocabulary facts the mask and checks need.
pub struct Tokenizer {
    pub encoder: Box<dyn Encoder>,
    pub bytes: TokenBytes,
    pub markers: ChatMarkers,
    /// Contents of control tokens (`<|im_start|>`, `<|endoftext|>`, ...) that must never come
    /// from data: text containing them is rejected instead of tokenized into control ids.
    pub forbidden: Vec<String>,
    hf: tokenizers::Tokenizer,
}

impl Tokenizer {
    /// Loads a `tokenizer.json` (optionally zstd-compressed, by a `.zst` extension).
    pub fn load(path: &Path) -> Result<Self, TokenizerError> {
        let raw = std::fs::read(path).map_err(|e| TokenizerError::Io(path.to_owned(), e))?;
        let json = if path.extension().is_some_and(|e| e == "zst") {
            zstd::decode_all(raw.as_slice()).map_err(|e| TokenizerError::Io(path.to_owned(), e))?
        } else {
            raw
        };
        Self::from_json_bytes(&json).map_err(|e| e.with_path(path))
    }

    pub fn from_json_bytes(json: &[u8]) -> Result<Self, TokenizerError> {
        let hf = tokenizers::Tokenizer::from_bytes(json)
            .map_err(|e| TokenizerError::Parse(e.to_string()))?;
        let bytes = TokenBytes::from_tokenizer(&hf)?;
        let encoder = HfEncoder {
            tokenizer: hf.clone(),
        };
        let markers = ChatMarkers::chatml(&encoder, &bytes)?;
        let mut forbidden: Vec<String> = hf
            .get_added_tokens_decoder()
            .values()
            .filter(|t| t.special && t.content.starts_with("<|") && t.content.ends_with("|>"))
            .map(|t| t.content.clone())
            .collect();
        forbidden.sort();
        Ok(Tokenizer {
            encoder: Box::new(encoder),
            bytes,
            markers,
            forbidden,
            hf,
        })
    }

    /// Applies the tokenizer's normalizer, so that text offsets line up with token bytes.
    /// Already-NFC text (nearly all of it) takes a fast path.
    pub fn normalize<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        use tokenizers::normalizers::NormalizerWrapper;
        use tokenizers::{NormalizedString, Normalizer};
        use unicode_normalization::{is_nfc_quick, IsNormalized, UnicodeNormalization};
        match self.hf.get_normalizer() {
            None => std::borrow::Cow::Borrowed(text),
            Some(NormalizerWrapper::NFC(_)) => {
                if is_nfc_quick(text.chars()) == IsNormalized::Yes {
                    std::borrow::Cow::Borrowed(text)
                } else {
                    std::borrow::Cow::Owned(text.nfc().collect())
                }
            }
            Some(other) => {
                let mut normalized = NormalizedString::from(text);
                match other.normalize(&mut normalized) {
                    Ok(()) => std::borrow::Cow::Owned(normalized.get().to_owned()),
                    Err(_) => std::borrow::Cow::Borrowed(text),
                }
            }
        }
    }

    /// Decodes ids back to text (for `inspect`).
    pub fn decode_bytes(&self, ids: &[u32]) -> Vec<u8> {
        ids.iter()
            .flat_map(|&id| self.bytes.get(id).iter().copied())
            .collect()
    }
}
