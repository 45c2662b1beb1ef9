//! `tokenizers::Tokenizer::from_bytes`, minus its slow path. The crate reads a model through two
//! buffering layers (an untagged enum of a `type`-tagged struct with a flattened
//! `serde_json::Value`) before building it: for a 250K-vocabulary BPE that is most of a second
//! of start-up. Even `BPE`'s own `Deserialize` buffers its merges (500K for Qwen) through an
//! untagged enum. Here the file is read in one pass, the BPE model's fields directly, and they
//! are handed to its builder as its `Deserialize` does; the tokenizer is assembled exactly as
//! the crate's `TokenizerVisitor` does (builder, then the added tokens). Anything else (another
//! model type, an error) goes to `from_bytes`, so its results and messages are unchanged; a
//! test checks that both loads serialize identically.

use serde::Deserialize;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::bpe::{BpeBuilder, Vocab, BPE};
use tokenizers::models::ModelWrapper;
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::processors::PostProcessorWrapper;
use tokenizers::{AddedToken, PaddingParams, Tokenizer, TokenizerBuilder, TruncationParams};

/// The top level of `tokenizer.json` with a BPE model's fields, read in one pass (a file whose
/// model is not of that shape fails here and goes to `from_bytes`).
#[derive(Deserialize)]
struct Parts {
    version: String,
    truncation: Option<TruncationParams>,
    padding: Option<PaddingParams>,
    #[serde(default)]
    added_tokens: Vec<AddedTokenWithId>,
    normalizer: Option<NormalizerWrapper>,
    pre_tokenizer: Option<PreTokenizerWrapper>,
    model: BpeJson,
    decoder: Option<DecoderWrapper>,
    post_processor: Option<PostProcessorWrapper>,
}

/// An entry of `added_tokens` (the id only tells where the token is expected).
#[derive(Deserialize)]
struct AddedTokenWithId {
    #[serde(flatten)]
    token: AddedToken,
}

/// The fields `BPE`'s `Deserialize` reads. Merges in the `[a, b]` form only: the older
/// `"a b"` strings fail here and go to `from_bytes`.
#[derive(Deserialize)]
struct BpeJson {
    #[serde(rename = "type")]
    kind: Option<String>,
    dropout: Option<f32>,
    unk_token: Option<String>,
    continuing_subword_prefix: Option<String>,
    end_of_word_suffix: Option<String>,
    fuse_unk: Option<bool>,
    byte_fallback: Option<bool>,
    ignore_merges: Option<bool>,
    vocab: Vocab,
    merges: Vec<(String, String)>,
}

impl BpeJson {
    /// The model, built as `BPE`'s `Deserialize` builds it (unset options keep their defaults).
    fn build(self) -> Option<BPE> {
        /// Applies `set` to the builder when the file gives a value.
        fn opt<T>(b: BpeBuilder, v: Option<T>, set: fn(BpeBuilder, T) -> BpeBuilder) -> BpeBuilder {
            match v {
                Some(v) => set(b, v),
                None => b,
            }
        }
        let b = BPE::builder().vocab_and_merges(self.vocab, self.merges);
        let b = opt(b, self.dropout, BpeBuilder::dropout);
        let b = opt(b, self.unk_token, BpeBuilder::unk_token);
        let b = opt(
            b,
            self.continuing_subword_prefix,
            BpeBuilder::continuing_subword_prefix,
        );
        let b = opt(b, self.end_of_word_suffix, BpeBuilder::end_of_word_suffix);
        let b = opt(b, self.fuse_unk, BpeBuilder::fuse_unk);
        let b = opt(b, self.byte_fallback, BpeBuilder::byte_fallback);
        let b = opt(b, self.ignore_merges, BpeBuilder::ignore_merges);
        b.build().ok()
    }
}

/// Loads `tokenizer.json` bytes as `Tokenizer::from_bytes` does.
pub fn load(json: &[u8]) -> tokenizers::Result<Tokenizer> {
    match direct(json) {
        Some(tokenizer) => Ok(tokenizer),
        None => Tokenizer::from_bytes(json),
    }
}

/// The direct load of a BPE tokenizer; `None` for anything `from_bytes` should handle.
fn direct(json: &[u8]) -> Option<Tokenizer> {
    let parts: Parts = serde_json::from_slice(json).ok()?;
    if parts.version != "1.0" || parts.model.kind.as_deref() != Some("BPE") {
        return None;
    }
    let bpe = parts.model.build()?;
    let built = TokenizerBuilder::new()
        .with_truncation(parts.truncation)
        .with_padding(parts.padding)
        .with_normalizer(parts.normalizer)
        .with_pre_tokenizer(parts.pre_tokenizer)
        .with_model(ModelWrapper::BPE(bpe))
        .with_decoder(parts.decoder)
        .with_post_processor(parts.post_processor)
        .build()
        .ok()?;
    let mut tokenizer = Tokenizer::from(built);
    let added: Vec<AddedToken> = parts.added_tokens.into_iter().map(|t| t.token).collect();
    tokenizer.add_tokens(&added);
    Some(tokenizer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped() -> Vec<u8> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/qwen3.6/tokenizer.json.zst"
        );
        let raw = std::fs::read(path).expect("shipped tokenizer");
        zstd::decode_all(raw.as_slice()).expect("zstd")
    }

    #[test]
    fn the_direct_load_equals_from_bytes() {
        let json = shipped();
        let direct = direct(&json).expect("a BPE tokenizer loads directly");
        let reference = Tokenizer::from_bytes(&json).expect("from_bytes");
        let a = serde_json::to_string(&direct).expect("serialize");
        let b = serde_json::to_string(&reference).expect("serialize");
        assert!(a == b, "the two loads differ");
        let text = "<|im_start|>user\nHéllo wörld 你好 <think>\n</think> 12345<|im_end|>\n";
        let ids = |t: &Tokenizer| {
            t.encode_fast(text, false)
                .map(|e| e.get_ids().to_vec())
                .ok()
        };
        assert_eq!(ids(&direct), ids(&reference));
    }

    #[test]
    fn other_models_and_errors_go_to_from_bytes() {
        let json = shipped();
        let text = String::from_utf8(json).expect("utf-8");
        // Another version, a model without a type, not JSON: all left to `from_bytes`.
        let renamed = text.replacen("\"version\":\"1.0\"", "\"version\":\"9.9\"", 1);
        let renamed = renamed.replacen("\"version\": \"1.0\"", "\"version\": \"9.9\"", 1);
        assert!(direct(renamed.as_bytes()).is_none());
        assert_eq!(
            load(renamed.as_bytes()).err().map(|e| e.to_string()),
            Tokenizer::from_bytes(renamed.as_bytes())
                .err()
                .map(|e| e.to_string())
        );
        assert!(direct(b"{").is_none());
        assert!(direct(br#"{"version":"1.0","model":{"vocab":{}}}"#).is_none());
    }
}
