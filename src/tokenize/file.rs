//! The parts of `tokenizer.json` this crate reads itself: the vocabulary and merges (for the
//! fast encoder and the token byte table), the pre-tokenizer, the added tokens. Read directly,
//! on the loading thread, while the `tokenizers` crate parses the same bytes on another.

use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::fmt;

/// `M` is how the merges are read: [`MergeJson`]s, or skipped (see [`VocabFile`]).
#[derive(Deserialize)]
#[serde(bound(deserialize = "M: Deserialize<'de> + Default"))]
pub(crate) struct TokenizerFile<M = Vec<MergeJson>> {
    #[serde(default)]
    pub added_tokens: Vec<AddedTokenJson>,
    pub pre_tokenizer: Option<serde_json::Value>,
    pub model: ModelJson<M>,
}

/// The file without its merges (500K pairs for Qwen, most of the parse), which only the fast
/// encoder needs: enough for the token byte table.
pub(crate) type VocabFile = TokenizerFile<serde::de::IgnoredAny>;

#[derive(Deserialize)]
pub(crate) struct AddedTokenJson {
    pub id: u32,
    pub content: String,
}

#[derive(Deserialize)]
#[serde(bound(deserialize = "M: Deserialize<'de> + Default"))]
pub(crate) struct ModelJson<M> {
    #[serde(default)]
    pub vocab: Vocab,
    #[serde(default)]
    pub merges: M,
    #[serde(default)]
    pub ignore_merges: bool,
}

/// Why a `tokenizer.json` could not be read (by this crate's own reader).
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("tokenizer.json: {0}")]
    Json(#[from] serde_json::Error),
    #[error("merge `{0}` is not two tokens")]
    Merge(String),
}

impl<M: serde::de::DeserializeOwned + Default> TokenizerFile<M> {
    pub fn parse(json: &[u8]) -> Result<Self, FileError> {
        Ok(serde_json::from_slice(json)?)
    }
}

impl TokenizerFile {
    /// The merges as `tokenizers` reads them: `#version` lines skipped, joined merges split on
    /// one space.
    pub fn merge_pairs(&self) -> Result<Vec<(&str, &str)>, FileError> {
        let mut pairs = Vec::with_capacity(self.model.merges.len());
        for merge in &self.model.merges {
            match merge {
                MergeJson::Pair(a, b) => pairs.push((a.as_str(), b.as_str())),
                MergeJson::Joined(line) if line.starts_with("#version") => {}
                MergeJson::Joined(line) => match line.split(' ').collect::<Vec<_>>().as_slice() {
                    [a, b] => pairs.push((a, b)),
                    _ => return Err(FileError::Merge(line.clone())),
                },
            }
        }
        Ok(pairs)
    }
}

/// The model vocabulary in file order (`token → id` object), without building a map.
#[derive(Default)]
pub(crate) struct Vocab(pub Vec<(String, u32)>);

impl<'de> Deserialize<'de> for Vocab {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Vocab;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of token → id")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vocab, A::Error> {
                let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some(entry) = map.next_entry::<String, u32>()? {
                    entries.push(entry);
                }
                Ok(Vocab(entries))
            }
        }
        d.deserialize_map(V)
    }
}

/// A merge as `["a", "b"]` or, in older files, `"a b"`. Hand-written rather than
/// `#[serde(untagged)]`, which buffers every one of the ~250K entries first.
pub(crate) enum MergeJson {
    Pair(String, String),
    Joined(String),
}

impl<'de> Deserialize<'de> for MergeJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MergeJson;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a merge: [\"a\", \"b\"] or \"a b\"")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<MergeJson, E> {
                Ok(MergeJson::Joined(s.to_owned()))
            }
            fn visit_string<E: serde::de::Error>(self, s: String) -> Result<MergeJson, E> {
                Ok(MergeJson::Joined(s))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<MergeJson, A::Error> {
                use serde::de::Error;
                let a: String = seq
                    .next_element()?
                    .ok_or_else(|| A::Error::invalid_length(0, &self))?;
                let b: String = seq
                    .next_element()?
                    .ok_or_else(|| A::Error::invalid_length(1, &self))?;
                if seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    return Err(A::Error::invalid_length(3, &self));
                }
                Ok(MergeJson::Pair(a, b))
            }
        }
        d.deserialize_any(V)
    }
}
