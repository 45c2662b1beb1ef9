//! Added (special) tokens, split out of the text exactly as the `tokenizers` crate does it
//! (`AddedVocabulary::extract_and_normalize` / `find_matches`, ported line by line): one
//! leftmost-longest Aho-Corasick pass over the raw text for tokens with `normalized: false`, then
//! one over each normalized remainder for tokens with `normalized: true`, honouring `single_word`,
//! `lstrip`, `rstrip` and `encode_special_tokens`.

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use regex::Regex;
use std::sync::LazyLock;

/// A piece of text after splitting out added tokens.
pub(super) enum Piece<'t> {
    Token(u32),
    Text(&'t str),
}

struct Entry {
    id: u32,
    special: bool,
    single_word: bool,
    lstrip: bool,
    rstrip: bool,
}

struct Matcher {
    automaton: AhoCorasick,
    entries: Vec<Entry>,
}

pub(super) struct AddedTokens {
    raw: Option<Matcher>,
    normalized: Option<Matcher>,
    encode_special_tokens: bool,
}

impl AddedTokens {
    /// `tokens` in the order the `tokenizers` crate registers them; `normalize` is the
    /// tokenizer's normalizer, applied to the contents of `normalized: true` tokens.
    pub(super) fn new(
        tokens: &[(u32, tokenizers::AddedToken)],
        encode_special_tokens: bool,
        normalize: impl Fn(&str) -> String,
    ) -> Result<Self, aho_corasick::BuildError> {
        let build = |normalized: bool| -> Result<Option<Matcher>, aho_corasick::BuildError> {
            let chosen: Vec<&(u32, tokenizers::AddedToken)> = tokens
                .iter()
                .filter(|(_, t)| t.normalized == normalized && !t.content.is_empty())
                .collect();
            if chosen.is_empty() {
                return Ok(None);
            }
            let patterns: Vec<String> = chosen
                .iter()
                .map(|(_, t)| {
                    if normalized {
                        normalize(&t.content)
                    } else {
                        t.content.clone()
                    }
                })
                .collect();
            let automaton = AhoCorasickBuilder::new()
                .match_kind(MatchKind::LeftmostLongest)
                .build(&patterns)?;
            let entries = chosen
                .iter()
                .map(|(id, t)| Entry {
                    id: *id,
                    special: t.special,
                    single_word: t.single_word,
                    lstrip: t.lstrip,
                    rstrip: t.rstrip,
                })
                .collect();
            Ok(Some(Matcher { automaton, entries }))
        };
        Ok(AddedTokens {
            raw: build(false)?,
            normalized: build(true)?,
            encode_special_tokens,
        })
    }

    /// Splits the raw text on `normalized: false` tokens.
    #[inline]
    pub(super) fn split_raw<'t>(&self, text: &'t str, emit: impl FnMut(Piece<'t>)) {
        self.split(self.raw.as_ref(), text, emit)
    }

    /// Splits an already-normalized piece on `normalized: true` tokens.
    #[inline]
    pub(super) fn split_normalized<'t>(&self, text: &'t str, emit: impl FnMut(Piece<'t>)) {
        self.split(self.normalized.as_ref(), text, emit)
    }

    fn split<'t>(&self, matcher: Option<&Matcher>, text: &'t str, mut emit: impl FnMut(Piece<'t>)) {
        let Some(matcher) = matcher else {
            if !text.is_empty() {
                emit(Piece::Text(text));
            }
            return;
        };
        let mut start_offset = 0;
        for found in matcher.automaton.find_iter(text) {
            let (mut start, mut stop) = (found.start(), found.end());
            let entry = &matcher.entries[found.pattern().as_usize()];
            if self.encode_special_tokens && entry.special {
                continue;
            }
            if entry.single_word {
                let start_space = start == 0 || !ends_with_word(&text[..start]);
                let stop_space = stop == text.len() || !starts_with_word(&text[stop..]);
                if !stop_space || !start_space {
                    continue;
                }
            }
            if entry.lstrip {
                // As in `tokenizers`: spaces a previous match already took are not taken twice.
                start = space_leftmost_at_end(&text[..start]).max(start_offset);
            }
            if entry.rstrip {
                stop += space_rightmost_at_start(&text[stop..]);
            }
            if start_offset < start {
                emit(Piece::Text(&text[start_offset..start]));
            }
            emit(Piece::Token(entry.id));
            start_offset = stop;
        }
        if start_offset < text.len() {
            emit(Piece::Text(&text[start_offset..]));
        }
    }
}

// The same `regex` crate patterns `tokenizers` uses for these flags (so `\w`/`\s` agree), only
// compiled if a token has one of them.
fn ends_with_word(s: &str) -> bool {
    static RE: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"\w$").ok());
    RE.as_ref().is_some_and(|r| r.is_match(s))
}

fn starts_with_word(s: &str) -> bool {
    static RE: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"^\w").ok());
    RE.as_ref().is_some_and(|r| r.is_match(s))
}

fn space_leftmost_at_end(s: &str) -> usize {
    static RE: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"\s*$").ok());
    RE.as_ref()
        .and_then(|r| r.find(s))
        .map_or(s.len(), |m| m.start())
}

fn space_rightmost_at_start(s: &str) -> usize {
    static RE: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"^\s*").ok());
    RE.as_ref().and_then(|r| r.find(s)).map_or(0, |m| m.end())
}
