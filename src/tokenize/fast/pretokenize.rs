//! Pre-tokenization: cutting normalized text into the pieces BPE runs on.
//!
//! Two implementations of HF's `Split(pattern, Isolated)`:
//! - [`Scanner`], hand-written for the GPT-4-style pattern family (Qwen2 … Qwen3.6, Llama-3,
//!   cl100k). It recognizes the pattern text exactly and runs in one forward pass without
//!   backtracking; this is the main speed lever of the fast encoder.
//! - the reference path, the pattern itself run by the regex engine the `tokenizers` crate uses
//!   ([`SysRegex`]). It serves any other pattern and is the oracle the scanner is tested against.

use super::classes::{CharClasses, Class, ClassesError};
use tokenizers::utils::SysRegex;

/// Splits text into pre-tokenizer pieces.
pub enum PreTokenizer {
    Scanner(Scanner),
    Regex(SysRegex),
}

impl PreTokenizer {
    /// The scanner if it implements `pattern`, otherwise the regex (also if the scanner's
    /// character tables could not be built: the regex path is exact too, only slower).
    pub fn new(pattern: &str) -> Result<Self, super::FastError> {
        match Scanner::for_pattern(pattern) {
            Ok(Some(scanner)) => Ok(PreTokenizer::Scanner(scanner)),
            Ok(None) | Err(_) => Self::regex(pattern),
        }
    }

    /// The reference path: `pattern` run by the `tokenizers` crate's own regex engine.
    pub fn regex(pattern: &str) -> Result<Self, super::FastError> {
        SysRegex::new(pattern)
            .map(PreTokenizer::Regex)
            .map_err(|e| super::FastError::Regex(e.to_string()))
    }

    pub fn is_scanner(&self) -> bool {
        matches!(self, PreTokenizer::Scanner(_))
    }

    /// Calls `piece` with every non-empty piece of `text`, in order; the pieces cover `text`.
    #[inline]
    pub fn for_each_piece<'t>(&self, text: &'t str, mut piece: impl FnMut(&'t str)) {
        match self {
            PreTokenizer::Scanner(scanner) => {
                let mut start = 0;
                while start < text.len() {
                    let end = scanner.piece_end(text.as_bytes(), start);
                    // `piece_end` only stops on character boundaries; `get` keeps that an
                    // invariant rather than a panic.
                    if let Some(p) = text.get(start..end) {
                        piece(p);
                    }
                    start = end;
                }
            }
            PreTokenizer::Regex(regex) => {
                // `Split` with `Isolated`: matches and the gaps between them are pieces.
                let mut prev = 0;
                for (start, end) in regex.find_iter(text) {
                    if prev < start {
                        piece(&text[prev..start]);
                    }
                    if start < end {
                        piece(&text[start..end]);
                    }
                    prev = end;
                }
                if prev < text.len() {
                    piece(&text[prev..]);
                }
            }
        }
    }

    /// Byte ranges of the pieces of `text` (for tests and diagnostics).
    pub fn pieces(&self, text: &str) -> Vec<std::ops::Range<usize>> {
        let base = text.as_ptr() as usize;
        let mut out = Vec::new();
        self.for_each_piece(text, |p| {
            let start = p.as_ptr() as usize - base;
            out.push(start..start + p.len());
        });
        out
    }
}

/// The GPT-4-style split pattern family, as one forward scan.
///
/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?LETTERS+|DIGITS| ?OTHER+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
/// where LETTERS is `\p{L}` or `[\p{L}\p{M}]`, DIGITS is `\p{N}` or `\p{N}{1,3}`, and OTHER is
/// everything that is neither whitespace, LETTERS nor `\p{N}`.
pub struct Scanner {
    classes: &'static CharClasses,
    /// `[\p{L}\p{M}]` (Qwen3.5/3.6) rather than `\p{L}` (Qwen2/3, Llama-3, cl100k).
    marks_are_letters: bool,
    /// The `n` of `\p{N}{1,n}`.
    max_digits: u8,
    /// [`Class`] of every ASCII byte, already remapped for `marks_are_letters`.
    ascii: [Class; 128],
}

impl Scanner {
    /// The exact pattern text a scanner with these parameters implements.
    pub fn pattern_text(marks_are_letters: bool, max_digits: u8) -> String {
        let letters = if marks_are_letters {
            r"[\p{L}\p{M}]+"
        } else {
            r"\p{L}+"
        };
        let other = if marks_are_letters {
            r"[^\s\p{L}\p{M}\p{N}]"
        } else {
            r"[^\s\p{L}\p{N}]"
        };
        let digits = if max_digits == 1 {
            r"\p{N}".to_owned()
        } else {
            format!(r"\p{{N}}{{1,{max_digits}}}")
        };
        format!(
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{{L}}\p{{N}}]?{letters}|{digits}| ?{other}+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
        )
    }

    /// A scanner for `pattern` if it is one of the family (compared as text, so a pattern that
    /// differs in any way goes to the regex path), `Ok(None)` otherwise.
    pub fn for_pattern(pattern: &str) -> Result<Option<Scanner>, ClassesError> {
        for marks_are_letters in [true, false] {
            for max_digits in [1, 3] {
                if pattern == Self::pattern_text(marks_are_letters, max_digits) {
                    return Self::new(marks_are_letters, max_digits).map(Some);
                }
            }
        }
        Ok(None)
    }

    pub fn new(marks_are_letters: bool, max_digits: u8) -> Result<Scanner, ClassesError> {
        let classes = CharClasses::get()?;
        let mut scanner = Scanner {
            classes,
            marks_are_letters,
            max_digits: max_digits.max(1),
            ascii: [Class::Other; 128],
        };
        for b in 0..128u8 {
            scanner.ascii[b as usize] = scanner.remap(classes.of(b as u32));
        }
        Ok(scanner)
    }

    /// Marks count as letters or as "other", depending on the pattern.
    #[inline]
    fn remap(&self, class: Class) -> Class {
        match class {
            Class::Mark if self.marks_are_letters => Class::Letter,
            Class::Mark => Class::Other,
            c => c,
        }
    }

    /// Class and UTF-8 length of the character at byte `i` (a character boundary of valid UTF-8).
    #[inline(always)]
    fn class_at(&self, s: &[u8], i: usize) -> (Class, usize) {
        let b = s[i];
        if b < 0x80 {
            (self.ascii[b as usize], 1)
        } else {
            self.class_non_ascii(s, i)
        }
    }

    #[inline(never)]
    fn class_non_ascii(&self, s: &[u8], i: usize) -> (Class, usize) {
        let (cp, len) = decode(s, i);
        (self.remap(self.classes.of(cp)), len)
    }

    /// End of the maximal run of `class` characters starting at `i`.
    #[inline(always)]
    fn run(&self, s: &[u8], mut i: usize, class: Class) -> usize {
        while i < s.len() {
            let (c, len) = self.class_at(s, i);
            if c != class {
                break;
            }
            i += len;
        }
        i
    }

    /// End of the piece starting at byte `i`: the match of the first alternative that matches
    /// there (the pattern matches at every position, so pieces are contiguous).
    fn piece_end(&self, s: &[u8], i: usize) -> usize {
        let (class, len) = self.class_at(s, i);
        let next = i + len;

        // (?i:'s|'t|'re|'ve|'m|'ll|'d)
        if s[i] == b'\'' {
            if let Some(end) = self.contraction(s, next) {
                return end;
            }
        }
        match class {
            // [^\r\n\p{L}\p{N}]?LETTERS+ with the optional part empty (a mark taken as the
            // optional part gives the same end).
            Class::Letter => return self.run(s, next, Class::Letter),
            // DIGITS: the letter alternative cannot start on a number.
            Class::Number => {
                let mut end = next;
                for _ in 1..self.max_digits {
                    if end >= s.len() {
                        break;
                    }
                    let (c, len) = self.class_at(s, end);
                    if c != Class::Number {
                        break;
                    }
                    end += len;
                }
                return end;
            }
            _ => {}
        }
        let next_class = (next < s.len()).then(|| self.class_at(s, next));
        // [^\r\n\p{L}\p{N}]LETTERS+: any other character but \r \n may lead a word.
        if class != Class::Newline {
            if let Some((Class::Letter, len)) = next_class {
                return self.run(s, next + len, Class::Letter);
            }
        }
        // ` ?OTHER+[\r\n]*`
        if class == Class::Other {
            return newlines(s, self.run(s, next, Class::Other));
        }
        if s[i] == b' ' {
            if let Some((Class::Other, len)) = next_class {
                return newlines(s, self.run(s, next + len, Class::Other));
            }
        }

        // Whitespace. W = the maximal run of \s from i.
        let mut last_newline_end = None;
        let mut last_start = i;
        let mut end = i;
        while end < s.len() {
            let (c, len) = self.class_at(s, end);
            match c {
                Class::Newline => last_newline_end = Some(end + len),
                Class::Space => {}
                _ => break,
            }
            last_start = end;
            end += len;
        }
        // `\s*[\r\n]+`: backtracking stops at W's last newline.
        if let Some(e) = last_newline_end {
            return e;
        }
        // `\s+(?!\S)`: all of W at the end of text, else W minus its last character; a single
        // character before non-space falls through to `\s+`, which is all of W too.
        if end == s.len() || last_start == i {
            end
        } else {
            last_start
        }
    }

    /// End of a contraction whose letters start at `i` (just after the apostrophe), if any.
    #[inline]
    fn contraction(&self, s: &[u8], i: usize) -> Option<usize> {
        let letter = |at: usize| -> Option<(u8, usize)> {
            if at >= s.len() {
                return None;
            }
            let (cp, len) = decode(s, at);
            self.classes.contraction_letter(cp).map(|l| (l, len))
        };
        let (first, len) = letter(i)?;
        match first {
            b's' | b't' | b'm' | b'd' => Some(i + len),
            b'r' | b'v' | b'l' => {
                let want = if first == b'l' { b'l' } else { b'e' };
                match letter(i + len) {
                    Some((second, len2)) if second == want => Some(i + len + len2),
                    _ => None,
                }
            }
            _ => None,
        }
    }
}

/// End of the run of `\r`/`\n` bytes starting at `i`.
#[inline]
fn newlines(s: &[u8], mut i: usize) -> usize {
    while i < s.len() && matches!(s[i], b'\r' | b'\n') {
        i += 1;
    }
    i
}

/// The code point at byte `i` of valid UTF-8 and its length. Missing continuation bytes (which
/// valid UTF-8 never has) read as zero instead of panicking.
#[inline]
fn decode(s: &[u8], i: usize) -> (u32, usize) {
    let b0 = s[i] as u32;
    let cont = |k: usize| (s.get(i + k).copied().unwrap_or(0x80) & 0x3f) as u32;
    if b0 < 0x80 {
        (b0, 1)
    } else if b0 < 0xe0 {
        (((b0 & 0x1f) << 6) | cont(1), 2)
    } else if b0 < 0xf0 {
        (((b0 & 0x0f) << 12) | (cont(1) << 6) | cont(2), 3)
    } else {
        (
            ((b0 & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3),
            4,
        )
    }
}
