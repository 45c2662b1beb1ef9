//! Tokenize stage: rendered text → token ids + loss mask, self-checked.
//!
//! Encoding goes through the [`Encoder`] trait so that a faster exact backend can replace the
//! `tokenizers` crate without touching the mask logic. The mask is computed in token space in one
//! linear pass ([`mask`]), then checked against the assistant spans found in the text.

pub mod fast;
mod file;
mod hf_load;
pub mod mask;
pub mod mask_config;
pub mod outcome;
pub mod segments;
pub mod shipped;
mod vocab;

pub use fast::FastError;
pub use file::FileError;
pub use mask::{ChatMarkers, MaskError};
pub use segments::SegmentCacheError;
pub use vocab::{TokenBytes, TokenizerError};

use std::path::Path;

/// Turns text into token ids. Implementations must be exact (same ids as the reference
/// tokenizer) and must not parallelise internally: the pipeline owns the thread pool.
pub trait Encoder: Send + Sync {
    fn encode(&self, text: &str) -> Result<Vec<u32>, EncodeError>;

    /// [`encode`](Self::encode), also saying where the ids came from: a spot check only tells
    /// something about ids that are not the `tokenizers` crate's own for the whole text.
    fn encode_traced(&self, text: &str) -> Result<(Vec<u32>, Origin), EncodeError> {
        self.encode(text).map(|ids| (ids, Origin::Derived))
    }
}

/// Why a text could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The `tokenizers` crate's message (its error type is an opaque box).
    #[error("{0}")]
    Tokenizers(String),
    #[error("segment off a char boundary")]
    OffCharBoundary,
}

/// Where an encoding's ids came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// One call of the `tokenizers` crate on the whole text: the reference itself.
    Reference,
    /// Another encoder, or pieces of the text encoded apart: worth a spot check.
    Derived,
}

/// The `tokenizers` crate backend.
pub struct HfEncoder {
    tokenizer: std::sync::Arc<tokenizers::Tokenizer>,
}

impl Encoder for HfEncoder {
    fn encode(&self, text: &str) -> Result<Vec<u32>, EncodeError> {
        hf_encode(&self.tokenizer, text)
    }

    fn encode_traced(&self, text: &str) -> Result<(Vec<u32>, Origin), EncodeError> {
        self.encode(text).map(|ids| (ids, Origin::Reference))
    }
}

fn hf_encode(tokenizer: &tokenizers::Tokenizer, text: &str) -> Result<Vec<u32>, EncodeError> {
    tokenizer
        .encode_fast(text, false)
        .map(|e| e.get_ids().to_vec())
        .map_err(|e| EncodeError::Tokenizers(e.to_string()))
}

/// Which encoder to use (`tokenizer.backend` in the pipeline config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// The fast encoder if the tokenizer qualifies and passes the self-check, else `Hf`.
    #[default]
    Auto,
    /// The `tokenizers` crate.
    Hf,
    /// The fast encoder, or an error if it cannot be used.
    Fast,
}

/// What [`Tokenizer::load_with_backend`] chose, and why.
#[derive(Debug, Clone)]
pub struct BackendReport {
    pub requested: Backend,
    /// [`Backend::Hf`] or [`Backend::Fast`].
    pub used: Backend,
    /// Why the fast encoder is not used, when `Auto` fell back to `Hf`.
    pub fallback_reason: Option<String>,
    /// Texts the fast encoder was compared with the `tokenizers` crate on before use.
    pub probe_texts: usize,
    /// Whether recurring segments are encoded once ([`Tokenizer::cache_segments`]), or why
    /// not; `None` when not asked for.
    pub segment_cache: Option<Result<(), SegmentCacheError>>,
}

impl BackendReport {
    /// Whether the encoder is anything but the `tokenizers` crate on whole texts (so a share
    /// of rows is re-encoded with it).
    pub fn needs_spot_checks(&self) -> bool {
        self.used == Backend::Fast || matches!(self.segment_cache, Some(Ok(())))
    }
}

impl std::fmt::Display for BackendReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.used, &self.fallback_reason) {
            (Backend::Fast, _) => write!(
                f,
                "fast encoder (identical ids to the `tokenizers` crate on {} probe texts)",
                self.probe_texts
            ),
            (_, Some(reason)) => write!(f, "`tokenizers` crate (fast encoder not used: {reason})"),
            _ => write!(f, "`tokenizers` crate"),
        }?;
        match &self.segment_cache {
            Some(Ok(())) => write!(f, ", recurring segments encoded once"),
            Some(Err(reason)) => write!(f, ", no segment cache ({reason})"),
            None => Ok(()),
        }
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
    /// Shared with the `tokenizers` encoder: one in-memory copy of the vocabulary.
    hf: std::sync::Arc<tokenizers::Tokenizer>,
}

impl Tokenizer {
    /// Loads a `tokenizer.json` (optionally zstd-compressed, by a `.zst` extension) with the
    /// `tokenizers` crate as encoder.
    pub fn load(path: &Path) -> Result<Self, TokenizerError> {
        let json = read_json(path)?;
        Self::from_json_bytes(&json).map_err(|e| e.with_path(path))
    }

    /// Loads a `tokenizer.json` like [`load`](Self::load), with the encoder `backend` asks for.
    pub fn load_with_backend(
        path: &Path,
        backend: Backend,
    ) -> Result<(Self, BackendReport), TokenizerError> {
        let json = read_json(path)?;
        Self::from_json_bytes_with_backend(&json, backend).map_err(|e| e.with_path(path))
    }

    /// The tokenizer at `path` like [`load_with_backend`](Self::load_with_backend), or without
    /// a path the Qwen3.6 one built into the binary.
    pub fn load_or_embedded(
        path: Option<&Path>,
        backend: Backend,
    ) -> Result<(Self, BackendReport), TokenizerError> {
        match path {
            Some(path) => Self::load_with_backend(path, backend),
            None => {
                let json = unzstd(crate::model::embedded::TOKENIZER_ZST)
                    .map_err(TokenizerError::Embedded)?;
                Self::from_json_bytes_with_backend(&json, backend)
            }
        }
    }

    /// The id → bytes table of the Qwen3.6 tokenizer built into the binary, without the
    /// encoders (for decoding rows: ~0.1 s against ~0.5 s for a whole tokenizer).
    pub fn embedded_token_bytes() -> Result<TokenBytes, TokenizerError> {
        let json =
            unzstd(crate::model::embedded::TOKENIZER_ZST).map_err(TokenizerError::Embedded)?;
        let file =
            file::VocabFile::parse(&json).map_err(|e| TokenizerError::Parse(e.to_string()))?;
        Ok(TokenBytes::from_file(&file))
    }

    pub fn from_json_bytes_with_backend(
        json: &[u8],
        backend: Backend,
    ) -> Result<(Self, BackendReport), TokenizerError> {
        // Loading the `tokenizers` crate's tokenizer is the longest step (~0.45 s for a 250K
        // vocabulary, read directly: see `hf_load`); the file is read and the fast encoder
        // built on this thread meanwhile.
        let (hf, own) = std::thread::scope(|scope| {
            let hf = scope.spawn(|| hf_load::load(json));
            if backend != Backend::Hf {
                scope.spawn(fast::FastParts::warm_up);
            }
            let own = if backend == Backend::Hf {
                file::VocabFile::parse(json).map(|file| (TokenBytes::from_file(&file), None))
            } else {
                file::TokenizerFile::parse(json).map(|file| {
                    // The id → bytes table (~0.05 s) beside the encoder's tables.
                    std::thread::scope(|inner| {
                        let bytes = inner.spawn(|| TokenBytes::from_file(&file));
                        let fast = fast::FastParts::new(&file, false);
                        match bytes.join() {
                            Ok(bytes) => (bytes, Some(fast)),
                            Err(panic) => std::panic::resume_unwind(panic),
                        }
                    })
                })
            };
            match hf.join() {
                Ok(hf) => (hf, own),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        });
        let hf = std::sync::Arc::new(hf.map_err(|e| TokenizerError::Parse(e.to_string()))?);
        vocab::check_byte_level(&hf)?;
        let (bytes, fast_parts) = match own {
            Ok(own) => own,
            // `tokenizers` read it, so only our reading failed: keep its table, refuse `fast`.
            Err(reason) => (
                TokenBytes::from_tokenizer(&hf)?,
                (backend != Backend::Hf).then_some(Err(reason.into())),
            ),
        };
        let mut tokenizer = Self::assemble(hf, bytes)?;
        let mut report = BackendReport {
            requested: backend,
            used: Backend::Hf,
            fallback_reason: None,
            probe_texts: 0,
            segment_cache: None,
        };
        let Some(parts) = fast_parts else {
            return Ok((tokenizer, report));
        };
        match tokenizer.checked_fast_encoder(parts) {
            Ok((fast, probes)) => {
                tokenizer.encoder = Box::new(fast);
                report.used = Backend::Fast;
                report.probe_texts = probes;
            }
            Err(reason) if backend == Backend::Auto => {
                report.fallback_reason = Some(reason.to_string())
            }
            Err(reason) => return Err(TokenizerError::FastBackend(reason)),
        }
        Ok((tokenizer, report))
    }

    /// The fast encoder, if the tokenizer qualifies and it gives the same ids as the current
    /// (`tokenizers`) encoder on every probe text.
    fn checked_fast_encoder(
        &self,
        parts: Result<fast::FastParts, FastError>,
    ) -> Result<(fast::FastEncoder, usize), FastError> {
        let encoder = fast::FastEncoder::assemble(parts, &self.hf)?;
        let mut added: Vec<String> = self
            .hf
            .get_added_tokens_decoder()
            .into_values()
            .map(|t| t.content)
            .collect();
        added.sort();
        let probes = fast::self_check(&encoder, self.encoder.as_ref(), &added)?;
        Ok((encoder, probes))
    }

    /// Makes the encoder reuse the ids of long segments that recur from row to row (exact; see
    /// `segments`). `Err` says why this tokenizer cannot, and leaves the encoder as it was.
    pub fn cache_segments(&mut self) -> Result<(), SegmentCacheError> {
        let splitter = segments::splitter(&self.hf)?;
        let placeholder = Box::new(HfEncoder {
            tokenizer: std::sync::Arc::clone(&self.hf),
        });
        let inner = std::mem::replace(&mut self.encoder, placeholder);
        self.encoder = Box::new(segments::SegmentCache::new(inner, splitter));
        Ok(())
    }

    /// The `tokenizers` crate's tokenizer this one was loaded with (the reference encoder).
    pub fn reference(&self) -> std::sync::Arc<tokenizers::Tokenizer> {
        std::sync::Arc::clone(&self.hf)
    }

    /// `reference().get_vocab_size(true)` without the copy of the whole vocabulary that the
    /// crate makes to count it (~40 ms of start-up): the model's tokens and the added tokens
    /// that are not among them.
    pub fn vocab_size_with_added(&self) -> usize {
        use tokenizers::Model;
        let model = self.hf.get_model();
        let added = self.hf.get_added_vocabulary().get_vocab().keys();
        model.get_vocab_size()
            + added
                .filter(|token| model.token_to_id(token).is_none())
                .count()
    }

    /// Encodes with the `tokenizers` crate whatever the backend, to spot-check the encoder.
    pub fn reference_encode(&self, text: &str) -> Result<Vec<u32>, EncodeError> {
        hf_encode(&self.hf, text)
    }

    /// Loads with the `tokenizers` crate as encoder.
    pub fn from_json_bytes(json: &[u8]) -> Result<Self, TokenizerError> {
        Self::from_json_bytes_with_backend(json, Backend::Hf).map(|(t, _)| t)
    }

    fn assemble(
        hf: std::sync::Arc<tokenizers::Tokenizer>,
        bytes: TokenBytes,
    ) -> Result<Self, TokenizerError> {
        let encoder = HfEncoder {
            tokenizer: std::sync::Arc::clone(&hf),
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
        match self.hf.get_normalizer() {
            None => std::borrow::Cow::Borrowed(text),
            // The tokenizer's own NFC tables (Unicode 9): a newer NFC differs on rare sequences.
            // Applied to the whole text, while the tokenizer applies it between special tokens: a
            // combining mark right after a special token makes the row fail the mask check
            // (rejected, never mis-masked).
            Some(NormalizerWrapper::NFC(_)) => fast::normalize(true, text),
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

/// The bytes of a `tokenizer.json`, decompressed if the name ends in `.zst`.
fn read_json(path: &Path) -> Result<Vec<u8>, TokenizerError> {
    let raw = std::fs::read(path).map_err(|e| TokenizerError::Io(path.to_owned(), e))?;
    if path.extension().is_none_or(|e| e != "zst") {
        return Ok(raw);
    }
    unzstd(&raw).map_err(|e| TokenizerError::Io(path.to_owned(), e))
}

/// zstd-compressed bytes, decompressed.
fn unzstd(raw: &[u8]) -> std::io::Result<Vec<u8>> {
    // Into one buffer of the size the frame declares (33 MB for Qwen), 20 ms sooner than
    // streaming into a growing one; anything else (no size, several frames) streams.
    let declared = zstd::zstd_safe::get_frame_content_size(raw).ok().flatten();
    if let Some(size) = declared
        .and_then(|size| usize::try_from(size).ok())
        .filter(|&size| size <= MAX_JSON_BYTES)
    {
        if let Ok(json) = zstd::bulk::decompress(raw, size) {
            return Ok(json);
        }
    }
    zstd::decode_all(raw)
}

/// The largest `tokenizer.json` decompressed into a buffer of its declared size up front.
const MAX_JSON_BYTES: usize = 1 << 30;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vocabulary_with_added_tokens_counts_as_the_crate_counts_it() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/qwen3.6/tokenizer.json.zst"
        );
        let json = read_json(Path::new(path)).expect("shipped tokenizer");
        let mut tokenizer = Tokenizer::from_json_bytes(&json).expect("loads");
        let crate_count = |t: &Tokenizer| t.reference().get_vocab_size(true);
        assert_eq!(tokenizer.vocab_size_with_added(), crate_count(&tokenizer));
        let before = tokenizer.vocab_size_with_added();
        // One token the model has (counted once) and one it has not.
        let mut hf = (*tokenizer.hf).clone();
        hf.add_tokens(&[
            tokenizers::AddedToken::from("hello", false),
            tokenizers::AddedToken::from("<|not-in-the-model|>", true),
        ]);
        tokenizer.hf = std::sync::Arc::new(hf);
        assert_eq!(tokenizer.vocab_size_with_added(), crate_count(&tokenizer));
        assert_eq!(tokenizer.vocab_size_with_added(), before + 1);
    }

    #[test]
    fn zstd_json_reads_the_same_with_and_without_a_declared_size() {
        let dir = tempfile::tempdir().expect("tempdir");
        let json: Vec<u8> = (0..50_000)
            .flat_map(|i| format!("\"t{i}\": {i},").into_bytes())
            .collect();
        let sized = zstd::bulk::compress(&json, 3).expect("compress");
        let streamed = zstd::encode_all(json.as_slice(), 3).expect("compress");
        assert!(zstd::zstd_safe::get_frame_content_size(&sized)
            .expect("frame")
            .is_some());
        assert_eq!(
            zstd::zstd_safe::get_frame_content_size(&streamed).expect("frame"),
            None
        );
        // Two frames: the first declares only its own size.
        let two = [sized.clone(), sized.clone()].concat();
        for (name, bytes, want) in [
            ("sized.json.zst", &sized, json.clone()),
            ("streamed.json.zst", &streamed, json.clone()),
            ("two.json.zst", &two, [json.clone(), json.clone()].concat()),
        ] {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).expect("write");
            assert!(read_json(&path).expect("read") == want, "{name}");
        }
        let path = dir.path().join("bad.json.zst");
        std::fs::write(&path, b"not zstd").expect("write");
        assert!(matches!(read_json(&path), Err(TokenizerError::Io(p, _)) if p == path));
    }
}
