//! The byte string of every token id, for byte-level BPE vocabularies.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("failed to read tokenizer `{}`", .0.display())]
    Io(PathBuf, #[source] std::io::Error),
    #[error("failed to unpack the built-in Qwen3.6 tokenizer")]
    Embedded(#[source] std::io::Error),
    #[error("the tokenizer does not parse: {0}")]
    Parse(String),
    #[error("the tokenizer is not byte-level BPE (decoder must be `ByteLevel`); only byte-level vocabularies are supported")]
    NotByteLevel,
    #[error("the tokenizer has no token for `{0}`, which the chat format needs")]
    MissingToken(String),
    #[error("the fast encoder cannot be used: {0}")]
    FastBackend(super::FastError),
    #[error("in `{}`: {source}", path.display())]
    AtPath {
        path: PathBuf,
        #[source]
        source: Box<TokenizerError>,
    },
}

impl TokenizerError {
    pub fn with_path(self, path: &Path) -> Self {
        match self {
            e @ (TokenizerError::Io(..) | TokenizerError::AtPath { .. }) => e,
            e => TokenizerError::AtPath {
                path: path.to_owned(),
                source: Box::new(e),
            },
        }
    }
}

/// Token id → the exact bytes it stands for, in one flat buffer.
pub struct TokenBytes {
    offsets: Vec<u32>,
    data: Vec<u8>,
    /// Per id, its first 8 bytes as a little-endian word (zero past its end) and its length
    /// (255 for 255 and more): the mask check's lookup, one independent load per table.
    heads: Vec<u64>,
    lens: Vec<u8>,
}

impl TokenBytes {
    /// The table of a byte-level tokenizer, from the `tokenizers` crate's view of it.
    pub fn from_tokenizer(tokenizer: &tokenizers::Tokenizer) -> Result<Self, TokenizerError> {
        check_byte_level(tokenizer)?;
        let vocab = tokenizer.get_vocab(false).into_iter();
        let added = tokenizer
            .get_added_tokens_decoder()
            .into_iter()
            .map(|(id, t)| (id, t.content));
        Ok(Self::from_entries(vocab.map(|(t, id)| (id, t)), added))
    }

    /// The same table from the file read directly; call [`check_byte_level`] on the
    /// `tokenizers` view too.
    pub(crate) fn from_file<M>(file: &super::file::TokenizerFile<M>) -> Self {
        let vocab = file.model.vocab.0.iter().map(|(t, id)| (*id, t.clone()));
        let added = file.added_tokens.iter().map(|t| (t.id, t.content.clone()));
        Self::from_entries(vocab, added)
    }

    /// `vocab`: byte-level token strings; `added`: added tokens, whose content is their bytes
    /// (they win over a vocabulary entry with the same id).
    fn from_entries(
        vocab: impl Iterator<Item = (u32, String)>,
        added: impl Iterator<Item = (u32, String)>,
    ) -> Self {
        let char_to_byte = byte_level_inverse();
        let mut entries: Vec<(u32, Vec<u8>)> = vocab
            .map(|(id, token)| {
                let bytes = token
                    .chars()
                    .map(|c| char_to_byte(c).unwrap_or(b'?'))
                    .collect();
                (id, bytes)
            })
            .collect();
        entries.extend(added.map(|(id, content)| (id, content.into_bytes())));
        let size = entries
            .iter()
            .map(|(id, _)| *id as usize + 1)
            .max()
            .unwrap_or(0);
        let mut table: Vec<Vec<u8>> = vec![Vec::new(); size];
        for (id, bytes) in entries {
            table[id as usize] = bytes;
        }
        let mut offsets = Vec::with_capacity(size + 1);
        let mut data = Vec::new();
        offsets.push(0);
        for bytes in table {
            data.extend_from_slice(&bytes);
            offsets.push(data.len() as u32);
        }
        data.extend_from_slice(&[0; 8]);
        let (heads, lens) = offsets
            .windows(2)
            .map(|w| {
                let (a, b) = (w[0] as usize, w[1] as usize);
                let mut word = [0u8; 8];
                let n = (b - a).min(8);
                word[..n].copy_from_slice(&data[a..a + n]);
                (u64::from_le_bytes(word), (b - a).min(255) as u8)
            })
            .unzip();
        TokenBytes {
            offsets,
            data,
            heads,
            lens,
        }
    }

    /// The first 8 bytes of `id` as a little-endian word (zero past its end) and its length,
    /// for the mask check's branch-free compare of short tokens.
    #[inline]
    pub fn head(&self, id: u32) -> (u64, usize) {
        let i = id as usize;
        match (self.heads.get(i), self.lens.get(i)) {
            (Some(&word), Some(&255)) => (word, self.get(id).len()),
            (Some(&word), Some(&len)) => (word, len as usize),
            _ => (0, 0),
        }
    }

    /// Ids in the table: one past the largest id of the vocabulary or its added tokens.
    pub fn vocab_size(&self) -> usize {
        self.lens.len()
    }

    /// The bytes of `id` (empty for an id outside the vocabulary).
    #[inline]
    pub fn get(&self, id: u32) -> &[u8] {
        let i = id as usize;
        match (self.offsets.get(i), self.offsets.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.data[a as usize..b as usize],
            _ => &[],
        }
    }
}

/// Token bytes are only defined for byte-level vocabularies (decoder `ByteLevel`).
pub(crate) fn check_byte_level(tokenizer: &tokenizers::Tokenizer) -> Result<(), TokenizerError> {
    use tokenizers::decoders::DecoderWrapper;
    match tokenizer.get_decoder() {
        Some(DecoderWrapper::ByteLevel(_)) => Ok(()),
        _ => Err(TokenizerError::NotByteLevel),
    }
}

/// The inverse of GPT-2's `bytes_to_unicode`: printable bytes map to themselves, the rest to
/// U+0100 onwards in byte order.
pub(super) fn byte_level_inverse() -> impl Fn(char) -> Option<u8> {
    let mut map = std::collections::HashMap::with_capacity(256);
    let mut next = 0u32;
    for b in 0u32..256 {
        let printable =
            (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b);
        let c = if printable {
            b
        } else {
            next += 1;
            255 + next
        };
        if let Some(c) = char::from_u32(c) {
            map.insert(c, b as u8);
        }
    }
    move |c| map.get(&c).copied()
}
