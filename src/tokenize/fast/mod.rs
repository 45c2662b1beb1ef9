//! An exact, fast encoder for byte-level BPE tokenizers (GitHub issue #6).
//!
//! It reimplements, for the configurations it accepts, exactly what the `tokenizers` crate does in
//! `encode_fast(text, false)`:
//! 1. split added tokens out of the raw text ([`added`], a port of `AddedVocabulary`);
//! 2. normalize each remaining piece on its own (NFC, by the same `unicode-normalization-alignments`
//!    code `tokenizers` runs, after a quick check that skips text already in NFC);
//! 3. pre-tokenize with the `Split` pattern ([`pretokenize`]: a hand-written scanner for the
//!    GPT-4-style family, the `tokenizers` regex engine for anything else);
//! 4. byte-level BPE each piece with the merge ranks of the file ([`bpe`]), through a per-thread
//!    cache.
//!
//! [`FastEncoder::new`] refuses, with a reason, any tokenizer outside that set (other models,
//! normalizers or pre-tokenizers, dropout, prefixes, truncation/padding, merges that are not
//! rank-consistent). `Tokenizer::load_with_backend` additionally compares it with the
//! `tokenizers` crate on [`probe_texts`] before using it.

mod added;
mod bpe;
mod classes;
mod pretokenize;
mod probe;

pub use bpe::BpeError;
pub use classes::ClassesError;
pub use pretokenize::{PreTokenizer, Scanner};
pub use probe::probe_texts;

use super::file::{FileError, TokenizerFile};
use super::{EncodeError, Encoder};
use added::{AddedTokens, Piece};
use bpe::{Bpe, PieceCache};
use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use tokenizers::models::ModelWrapper;
use tokenizers::normalizers::NormalizerWrapper;

/// Why the fast encoder does not apply to a tokenizer, or differs from the `tokenizers` crate.
#[derive(Debug, thiserror::Error)]
pub enum FastError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error(transparent)]
    Bpe(#[from] BpeError),
    #[error(transparent)]
    Classes(#[from] ClassesError),
    #[error("pre-tokenizer not supported: {0}")]
    PreTokenizer(String),
    #[error("the pre-tokenizer regex does not compile: {0}")]
    Regex(String),
    #[error("added tokens: {0}")]
    AddedTokens(#[from] aho_corasick::BuildError),
    #[error("the tokenizer truncates or pads")]
    TruncatesOrPads,
    #[error("normalizer {0} is not supported (only NFC or none)")]
    Normalizer(String),
    #[error("the model is {0}, not BPE")]
    NotBpe(&'static str),
    #[error("BPE dropout is on")]
    Dropout,
    #[error("BPE has a continuing-subword prefix or end-of-word suffix")]
    SubwordAffix,
    #[error("the model read from the file differs from the `tokenizers` crate's")]
    ModelDiffers,
    #[error(
        "ids differ from the `tokenizers` crate on probe text {text:?} at token {at} \
         (fast {fast:?}, tokenizers {reference:?})"
    )]
    ProbeDiffers {
        /// The probe text's first 80 characters.
        text: String,
        at: usize,
        fast: Option<u32>,
        reference: Option<u32>,
    },
    #[error(transparent)]
    Encode(#[from] EncodeError),
}

/// The fast encoder. `Send + Sync`; per-thread state lives in a thread-local cache.
pub struct FastEncoder {
    added: AddedTokens,
    nfc: bool,
    pretokenizer: PreTokenizer,
    bpe: Bpe,
    /// Distinguishes encoders in the thread-local cache.
    instance: u64,
}

thread_local! {
    static CACHE: RefCell<PieceCache> = RefCell::new(PieceCache::default());
}

/// The parts of a [`FastEncoder`] built from the file alone, before the `tokenizers` crate's
/// view of it is available (so both can load at once).
pub(crate) struct FastParts {
    pretokenizer: PreTokenizer,
    bpe: Bpe,
    vocab_size: usize,
    ignore_merges: bool,
}

impl FastParts {
    /// Builds the pre-tokenizer's character tables now (the longest step of building the
    /// parts, ~0.2 s), so that a thread can do it while the file is being parsed.
    pub(crate) fn warm_up() {
        // An error is met again, and reported, where the tables are used.
        let _ = classes::CharClasses::get();
    }

    pub(crate) fn new(file: &TokenizerFile, force_regex: bool) -> Result<Self, FastError> {
        let pattern = byte_level_split_pattern(file.pre_tokenizer.as_ref())?;
        let pretokenizer = if force_regex {
            PreTokenizer::regex(&pattern)?
        } else {
            PreTokenizer::new(&pattern)?
        };
        let bpe = Bpe::new(
            &file.model.vocab.0,
            &file.merge_pairs()?,
            file.model.ignore_merges,
            super::vocab::byte_level_inverse(),
        )?;
        Ok(FastParts {
            pretokenizer,
            bpe,
            vocab_size: file.model.vocab.0.len(),
            ignore_merges: file.model.ignore_merges,
        })
    }
}

impl FastEncoder {
    /// Builds the encoder from a `tokenizer.json` and the `tokenizers` crate's view of the same
    /// file, or says why the tokenizer does not qualify.
    pub fn new(json: &[u8], hf: &tokenizers::Tokenizer) -> Result<Self, FastError> {
        Self::assemble(Self::parts(json, false), hf)
    }

    /// Like [`new`](Self::new), but always pre-tokenizes with the regex engine (the reference
    /// path), even where the scanner applies. For tests and benchmarks.
    pub fn with_regex_pretokenizer(
        json: &[u8],
        hf: &tokenizers::Tokenizer,
    ) -> Result<Self, FastError> {
        Self::assemble(Self::parts(json, true), hf)
    }

    fn parts(json: &[u8], force_regex: bool) -> Result<FastParts, FastError> {
        FastParts::new(&TokenizerFile::parse(json)?, force_regex)
    }

    /// Checks the `tokenizers` crate's view of the tokenizer (first, so that an unsupported model
    /// is named as such) and completes the encoder from `parts`.
    pub(crate) fn assemble(
        parts: Result<FastParts, FastError>,
        hf: &tokenizers::Tokenizer,
    ) -> Result<Self, FastError> {
        if hf.get_truncation().is_some() || hf.get_padding().is_some() {
            return Err(FastError::TruncatesOrPads);
        }
        let nfc = match hf.get_normalizer() {
            None => false,
            Some(NormalizerWrapper::NFC(_)) => true,
            Some(other) => return Err(FastError::Normalizer(variant_name(other))),
        };
        let model = match hf.get_model() {
            ModelWrapper::BPE(model) => model,
            ModelWrapper::WordPiece(_) => return Err(FastError::NotBpe("WordPiece")),
            ModelWrapper::WordLevel(_) => return Err(FastError::NotBpe("WordLevel")),
            ModelWrapper::Unigram(_) => return Err(FastError::NotBpe("Unigram")),
        };
        if model.dropout.is_some_and(|d| d > 0.0) {
            return Err(FastError::Dropout);
        }
        if model.continuing_subword_prefix.is_some() || model.end_of_word_suffix.is_some() {
            return Err(FastError::SubwordAffix);
        }
        let FastParts {
            pretokenizer,
            bpe,
            vocab_size,
            ignore_merges,
        } = parts?;
        // Both read the same bytes; a difference would mean one of them misread the file.
        if vocab_size != tokenizers::Model::get_vocab_size(model)
            || ignore_merges != model.ignore_merges
        {
            return Err(FastError::ModelDiffers);
        }

        let mut tokens: Vec<(u32, tokenizers::AddedToken)> =
            hf.get_added_tokens_decoder().into_iter().collect();
        tokens.sort_by_key(|(id, _)| *id);
        let added = AddedTokens::new(&tokens, hf.get_encode_special_tokens(), |s| {
            normalize(nfc, s).into_owned()
        })?;

        static INSTANCES: AtomicU64 = AtomicU64::new(1);
        Ok(FastEncoder {
            added,
            nfc,
            pretokenizer,
            bpe,
            instance: INSTANCES.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// Whether the hand-written scanner pre-tokenizes (rather than the regex engine).
    pub fn uses_scanner(&self) -> bool {
        self.pretokenizer.is_scanner()
    }

    /// Appends the ids of `text` to `out`.
    pub fn encode_into(&self, text: &str, out: &mut Vec<u32>) {
        CACHE.with(|cell| match cell.try_borrow_mut() {
            Ok(mut cache) => self.encode_with(text, &mut cache, out),
            // Only reachable by re-entrance, which `encode` never does; stay correct anyway.
            Err(_) => self.encode_with(text, &mut PieceCache::default(), out),
        })
    }

    fn encode_with(&self, text: &str, cache: &mut PieceCache, out: &mut Vec<u32>) {
        if cache.owner != self.instance {
            cache.reset(self.instance);
        }
        self.added.split_raw(text, |piece| match piece {
            Piece::Token(id) => out.push(id),
            Piece::Text(raw) => {
                // Normalized per piece, after the added-token split, as `tokenizers` does: NFC
                // over the whole text could fuse a token's last character with what follows.
                let normalized = normalize(self.nfc, raw);
                self.added
                    .split_normalized(&normalized, |piece| match piece {
                        Piece::Token(id) => out.push(id),
                        Piece::Text(text) => self.pretokenizer.for_each_piece(text, |p| {
                            self.bpe.encode_piece(p.as_bytes(), cache, out)
                        }),
                    });
            }
        });
    }
}

impl Encoder for FastEncoder {
    fn encode(&self, text: &str) -> Result<Vec<u32>, EncodeError> {
        // Text averages about four bytes per token; reserving for three avoids most regrowth.
        let mut out = Vec::with_capacity(text.len() / 3 + 4);
        self.encode_into(text, &mut out);
        Ok(out)
    }
}

/// Compares `fast` with `reference` on [`probe_texts`]; `Ok(n)` is the number of texts checked,
/// `Err` describes the first difference.
pub fn self_check(
    fast: &dyn Encoder,
    reference: &dyn Encoder,
    added_tokens: &[String],
) -> Result<usize, FastError> {
    let texts = probe_texts(added_tokens);
    for text in &texts {
        let want = reference.encode(text)?;
        let got = fast.encode(text)?;
        if got != want {
            let at = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
            return Err(FastError::ProbeDiffers {
                text: text.chars().take(80).collect(),
                at,
                fast: got.get(at).copied(),
                reference: want.get(at).copied(),
            });
        }
    }
    Ok(texts.len())
}

/// NFC as `tokenizers` computes it (Unicode 9 tables of `unicode-normalization-alignments`),
/// skipping text that is already NFC by a quick check.
pub(crate) fn normalize(nfc: bool, text: &str) -> Cow<'_, str> {
    use unicode_normalization_alignments::UnicodeNormalization;
    if !nfc || nfc_quick_yes(text) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(text.nfc().map(|(c, _)| c).collect())
}

/// `is_nfc_quick(text) == Yes`, checking only what can fail. Every character below U+0300 is
/// NFC and has combining class 0, which resets the quick check's ordering state, so the text
/// splits at them into runs that are checked independently; in UTF-8 a character ≥ U+0300
/// starts with a byte ≥ 0xCC (always a lead byte), found by a vectorised scan. ASCII and Latin
/// text is one scan; other text is checked per character only within its runs.
fn nfc_quick_yes(text: &str) -> bool {
    use unicode_normalization_alignments::{is_nfc_quick, IsNormalized};
    const CHUNK: usize = 32;
    let bytes = text.as_bytes();
    let mut from = 0;
    loop {
        // The next byte ≥ 0xCC: whole chunks first (branch-free, vectorised), then the byte.
        let rest = &bytes[from..];
        let chunk = rest
            .chunks(CHUNK)
            .position(|c| c.iter().fold(false, |any, &b| any | (b >= 0xcc)));
        let Some(chunk) = chunk else {
            return true;
        };
        let Some(start) = rest[chunk * CHUNK..].iter().position(|&b| b >= 0xcc) else {
            return true;
        };
        let start = from + chunk * CHUNK + start;
        let run = text.get(start..).unwrap_or_default();
        let len = run
            .char_indices()
            .find(|&(_, c)| c < '\u{300}')
            .map_or(run.len(), |(i, _)| i);
        if is_nfc_quick(run[..len].chars()) != IsNormalized::Yes {
            return false;
        }
        from = start + len;
    }
}

/// The `Split` regex of a `Sequence[Split(Regex, Isolated), ByteLevel(no prefix space, no
/// regex)]` pre-tokenizer, the only shape accepted.
fn byte_level_split_pattern(pre: Option<&serde_json::Value>) -> Result<String, FastError> {
    let unsupported = |why: &str| Err(FastError::PreTokenizer(why.to_owned()));
    let Some(pre) = pre else {
        return unsupported("none");
    };
    let kind = |v: &serde_json::Value| {
        v.get("type")
            .and_then(|t| t.as_str())
            .unwrap_or("?")
            .to_owned()
    };
    let steps = match (
        kind(pre).as_str(),
        pre.get("pretokenizers").and_then(|p| p.as_array()),
    ) {
        ("Sequence", Some(steps)) => steps,
        (other, _) => {
            return unsupported(&format!("{other} (expected Sequence[Split, ByteLevel])"))
        }
    };
    let [split, byte_level] = steps.as_slice() else {
        return unsupported("expected exactly Sequence[Split, ByteLevel]");
    };
    let flag = |v: &serde_json::Value, key: &str| v.get(key).and_then(|b| b.as_bool());
    if kind(split) != "Split" || kind(byte_level) != "ByteLevel" {
        return unsupported(&format!(
            "Sequence[{}, {}] (expected Sequence[Split, ByteLevel])",
            kind(split),
            kind(byte_level)
        ));
    }
    if split.get("behavior").and_then(|b| b.as_str()) != Some("Isolated")
        || flag(split, "invert").unwrap_or(false)
    {
        return unsupported("Split must be Isolated and not inverted");
    }
    // ByteLevel defaults to add_prefix_space and use_regex true, so both must be explicit.
    if flag(byte_level, "add_prefix_space") != Some(false)
        || flag(byte_level, "use_regex") != Some(false)
    {
        return unsupported("ByteLevel must have add_prefix_space and use_regex false");
    }
    match split.pointer("/pattern/Regex").and_then(|p| p.as_str()) {
        Some(pattern) => Ok(pattern.to_owned()),
        None => unsupported("the Split pattern is not a regex"),
    }
}

fn variant_name(value: &impl serde::Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

#[cfg(test)]
mod tests {
    use unicode_normalization_alignments::{is_nfc_quick, IsNormalized};

    #[test]
    fn the_run_wise_quick_check_agrees_with_the_whole_text_one() {
        // Starters, combining marks of several classes, NFC_QC=Maybe and =No characters, and
        // characters just below and above U+0300 (0xCB/0xCC lead bytes).
        let alphabet = [
            "a", " ", "\n", "é", "\u{2ff}", "\u{300}", "\u{301}", "\u{327}", "\u{340}", "\u{1161}",
            "\u{1100}", "Å", "\u{212b}", "语", "。", "а", "\u{3099}", "か", "😀", "\u{ff9e}",
        ];
        let mut state = 0x2545_f491_u64;
        let mut next = |n: usize| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) as usize % n
        };
        let (mut yes, mut other) = (0, 0);
        for _ in 0..20_000 {
            let len = next(80);
            let text: String = (0..len)
                .map(|_| {
                    // Mostly ASCII, so that runs and chunk edges vary.
                    if next(3) == 0 {
                        alphabet[next(alphabet.len())]
                    } else {
                        "x"
                    }
                })
                .collect();
            let want = is_nfc_quick(text.chars()) == IsNormalized::Yes;
            assert_eq!(super::nfc_quick_yes(&text), want, "{text:?}");
            if want {
                yes += 1;
            } else {
                other += 1;
            }
        }
        // Both answers were exercised.
        assert!(yes > 1000 && other > 1000, "{yes} {other}");
    }
}
