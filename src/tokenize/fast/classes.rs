//! Character classes for the hand-written pre-tokenizer scanner.
//!
//! The classes are not taken from a Unicode table of our own: they are read out of the regex
//! engine the `tokenizers` crate splits with ([`SysRegex`], Oniguruma here), by running `\p{L}+`,
//! `\p{M}+`, `\p{N}+` and `\s+` over a string holding every Unicode scalar value. The scanner and
//! the `Split` pre-tokenizer therefore agree on every code point by construction, whatever
//! Unicode version that engine ships; `tests/it/fast_encoder.rs` re-checks it code point by code
//! point. Building the table takes about 0.2 s (release build), once per process.

use std::sync::OnceLock;
use tokenizers::utils::SysRegex;

/// What the GPT-4-style pattern distinguishes about a character.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(super) enum Class {
    /// Anything else: punctuation, symbols, controls, unassigned code points.
    Other,
    /// `\p{L}`.
    Letter,
    /// `\p{M}`.
    Mark,
    /// `\p{N}`.
    Number,
    /// `\s` except `\r` and `\n`.
    Space,
    /// `\r` or `\n`.
    Newline,
}

/// Code point → [`Class`] as a two-stage table (256-code-point blocks, deduplicated), plus the
/// characters that the case-insensitive contraction alternatives match.
pub(super) struct CharClasses {
    block_of: Box<[u16]>,
    blocks: Box<[[Class; 256]]>,
    /// `(character, ASCII letter)`: the characters `(?i:x)` matches for each letter `x` of the
    /// contractions `'s 't 're 've 'm 'll 'd` (e.g. `S`, and `ſ` U+017F for `s`).
    folds: Box<[(char, u8)]>,
}

const CONTRACTION_LETTERS: &[u8] = b"strevmld";

/// Why the regex engine's character classes do not fit the scanner (the regex path is used).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClassesError {
    #[error("regex `{pattern}`: {message}")]
    Regex { pattern: String, message: String },
    #[error("U+{0:04X} is in more than one class")]
    Overlap(u32),
    #[error("{0:?} is not matched by `\\s`")]
    NotSpace(char),
    #[error("`{0}` matches a multi-character sequence")]
    MultiCharacterFold(String),
    #[error("a character case-folds to two contraction letters")]
    TwoFolds,
    #[error("too many distinct blocks")]
    TooManyBlocks,
}

/// `pattern` compiled by the `tokenizers` crate's regex engine.
fn sys_regex(pattern: &str) -> Result<SysRegex, ClassesError> {
    SysRegex::new(pattern).map_err(|e| ClassesError::Regex {
        pattern: pattern.to_owned(),
        message: e.to_string(),
    })
}

impl CharClasses {
    /// The process-wide table, or why it could not be built.
    pub(super) fn get() -> Result<&'static CharClasses, ClassesError> {
        static TABLE: OnceLock<Result<CharClasses, ClassesError>> = OnceLock::new();
        TABLE
            .get_or_init(Self::from_engine)
            .as_ref()
            .map_err(Clone::clone)
    }

    fn from_engine() -> Result<CharClasses, ClassesError> {
        let every_char: String = (0..=char::MAX as u32).filter_map(char::from_u32).collect();
        let classes = [
            (r"\s+", Class::Space),
            (r"\p{L}+", Class::Letter),
            (r"\p{M}+", Class::Mark),
            (r"\p{N}+", Class::Number),
        ];
        let fold_patterns: Vec<String> = CONTRACTION_LETTERS
            .iter()
            .map(|&letter| format!("(?i:{})", letter as char))
            .collect();
        // Each pattern runs over the whole of Unicode (~0.03 s): on threads of their own, the
        // start-up waits for the longest one rather than all twelve. Read in order below.
        let mut found = std::thread::scope(|scope| {
            let every_char = &every_char;
            let runs: Vec<_> = classes
                .iter()
                .map(|&(pattern, _)| pattern)
                .chain(fold_patterns.iter().map(String::as_str))
                .map(|pattern| {
                    scope.spawn(move || {
                        sys_regex(pattern)
                            .map(|regex| regex.find_iter(every_char).collect::<Vec<_>>())
                    })
                })
                .collect();
            runs.into_iter()
                .map(|run| run.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect::<Vec<_>>()
                .into_iter()
        });
        let mut class = vec![Class::Other; char::MAX as usize + 1];
        for (_, value) in classes {
            let matches = found.next().unwrap_or_else(|| Ok(Vec::new()))?;
            for (start, end) in matches {
                for c in every_char.get(start..end).unwrap_or_default().chars() {
                    let slot = &mut class[c as usize];
                    if *slot != Class::Other {
                        // The scanner assumes the four classes are disjoint, as they are in
                        // Unicode (general categories L, M, N; White_Space is Z* and Cc).
                        return Err(ClassesError::Overlap(c as u32));
                    }
                    *slot = value;
                }
            }
        }
        for c in ['\r', '\n'] {
            if class[c as usize] != Class::Space {
                return Err(ClassesError::NotSpace(c));
            }
            class[c as usize] = Class::Newline;
        }

        let mut folds = Vec::new();
        for (&letter, pattern) in CONTRACTION_LETTERS.iter().zip(fold_patterns) {
            let matches = found.next().unwrap_or_else(|| Ok(Vec::new()))?;
            for (start, end) in matches {
                let mut chars = every_char.get(start..end).unwrap_or_default().chars();
                match (chars.next(), chars.next()) {
                    (Some(c), None) => folds.push((c, letter)),
                    // A letter matching a sequence would need a look-ahead the scanner lacks.
                    _ => return Err(ClassesError::MultiCharacterFold(pattern)),
                }
            }
        }
        folds.sort_unstable();
        if folds.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(ClassesError::TwoFolds);
        }

        let mut block_of = Vec::with_capacity(class.len() / 256);
        let mut blocks: Vec<[Class; 256]> = Vec::new();
        let mut seen = std::collections::HashMap::new();
        for chunk in class.chunks_exact(256) {
            let mut block = [Class::Other; 256];
            block.copy_from_slice(chunk);
            let index = *seen.entry(block).or_insert_with(|| {
                blocks.push(block);
                blocks.len() - 1
            });
            block_of.push(u16::try_from(index).map_err(|_| ClassesError::TooManyBlocks)?);
        }
        Ok(CharClasses {
            block_of: block_of.into(),
            blocks: blocks.into(),
            folds: folds.into(),
        })
    }

    /// The class of code point `cp` (any `u32`; out-of-range values are `Other`).
    #[inline]
    pub(super) fn of(&self, cp: u32) -> Class {
        match self.block_of.get((cp >> 8) as usize) {
            Some(&block) => self.blocks[block as usize][(cp & 0xff) as usize],
            None => Class::Other,
        }
    }

    /// The contraction letter (`s t r e v m l d`) that `(?i:…)` matches with `c`, if any.
    #[inline]
    pub(super) fn contraction_letter(&self, c: u32) -> Option<u8> {
        let c = char::from_u32(c)?;
        self.folds
            .binary_search_by_key(&c, |&(f, _)| f)
            .ok()
            .map(|i| self.folds[i].1)
    }
}
