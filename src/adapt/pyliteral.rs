//! A small parser for Python literals as `repr()` prints them (Hermes writes tool calls and
//! tool lists this way): dicts, lists, tuples, single- or double-quoted strings with Python
//! escapes, ints, floats, `True`/`False`/`None`. JSON's `true`/`false`/`null` are accepted too,
//! because some rows mix the two styles. Keys keep their order.
//!
//! Input is untrusted: nesting is capped (like serde_json's recursion limit) and every error is
//! a message, never a panic.

use serde_json::{Map, Number, Value};

/// Deepest nesting accepted (serde_json's default recursion limit).
const MAX_DEPTH: usize = 128;

/// Why a text is not a Python literal; `at` is a byte offset in the text.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PyLiteralError {
    #[error("{what} at byte {at}")]
    Syntax { what: &'static str, at: usize },
    #[error("unexpected text after the literal at byte {at}")]
    TrailingText { at: usize },
    #[error("unknown name `{name}` at byte {at}")]
    UnknownName { name: String, at: usize },
    #[error("integer `{raw}` is outside the 64-bit range")]
    IntegerOutOfRange { raw: String },
    #[error("number `{raw}` is not finite")]
    NotFinite { raw: String },
    #[error("invalid number `{raw}` at byte {at}")]
    InvalidNumber { raw: String, at: usize },
    #[error("unterminated string starting at byte {at}")]
    UnterminatedString { at: usize },
    #[error("escape \\u{code:x} is not a character at byte {at}")]
    NotACharacter { code: u32, at: usize },
    #[error(transparent)]
    Escape(#[from] std::num::ParseIntError),
}

/// Parses `text` as exactly one Python literal (surrounding whitespace allowed).
pub fn parse(text: &str) -> Result<Value, PyLiteralError> {
    let mut p = Parser {
        s: text.as_bytes(),
        text,
        pos: 0,
    };
    let value = p.value(0)?;
    p.skip_ws();
    if p.pos != p.s.len() {
        return Err(PyLiteralError::TrailingText { at: p.pos });
    }
    Ok(value)
}

struct Parser<'a> {
    s: &'a [u8],
    text: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while self
            .s
            .get(self.pos)
            .is_some_and(|b| b.is_ascii_whitespace())
        {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn error<T>(&self, what: &'static str) -> Result<T, PyLiteralError> {
        Err(PyLiteralError::Syntax { what, at: self.pos })
    }

    fn value(&mut self, depth: usize) -> Result<Value, PyLiteralError> {
        if depth > MAX_DEPTH {
            return self.error("nesting too deep");
        }
        self.skip_ws();
        match self.peek() {
            None => self.error("unexpected end of input"),
            Some(b'{') => self.dict(depth),
            Some(b'[') => self.sequence(b']', depth),
            Some(b'(') => self.sequence(b')', depth),
            Some(q @ (b'\'' | b'"')) => self.string(q).map(Value::String),
            Some(b'-' | b'+' | b'.' | b'0'..=b'9') => self.number(),
            Some(c) if c.is_ascii_alphabetic() => self.word(),
            Some(_) => self.error("unexpected character"),
        }
    }

    fn dict(&mut self, depth: usize) -> Result<Value, PyLiteralError> {
        self.pos += 1; // `{`
        let mut map = Map::new();
        loop {
            self.skip_ws();
            if self.peek() == Some(b'}') {
                self.pos += 1;
                return Ok(Value::Object(map));
            }
            let key = match self.value(depth + 1)? {
                Value::String(s) => s,
                // Python allows any hashable key; JSON objects need strings.
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => if b { "True" } else { "False" }.to_owned(),
                _ => return self.error("a dict key that is not a string"),
            };
            self.skip_ws();
            if self.peek() != Some(b':') {
                return self.error("expected `:` after a dict key");
            }
            self.pos += 1;
            let value = self.value(depth + 1)?;
            map.insert(key, value);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {}
                _ => return self.error("expected `,` or `}` in a dict"),
            }
        }
    }

    fn sequence(&mut self, close: u8, depth: usize) -> Result<Value, PyLiteralError> {
        self.pos += 1; // `[` or `(`
        let mut items = Vec::new();
        loop {
            self.skip_ws();
            if self.peek() == Some(close) {
                self.pos += 1;
                return Ok(Value::Array(items));
            }
            items.push(self.value(depth + 1)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(c) if c == close => {}
                _ => return self.error("expected `,` or a closing bracket"),
            }
        }
    }

    fn word(&mut self) -> Result<Value, PyLiteralError> {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
        {
            self.pos += 1;
        }
        match &self.text[start..self.pos] {
            "True" | "true" => Ok(Value::Bool(true)),
            "False" | "false" => Ok(Value::Bool(false)),
            "None" | "null" => Ok(Value::Null),
            other => Err(PyLiteralError::UnknownName {
                name: other.to_owned(),
                at: start,
            }),
        }
    }

    fn number(&mut self) -> Result<Value, PyLiteralError> {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'-' | b'.' | b'_'))
        {
            self.pos += 1;
        }
        let raw: String = self.text[start..self.pos]
            .chars()
            .filter(|&c| c != '_')
            .collect();
        let raw = raw.strip_prefix('+').unwrap_or(&raw);
        if let Ok(i) = raw.parse::<i64>() {
            return Ok(Value::Number(i.into()));
        }
        if let Ok(u) = raw.parse::<u64>() {
            return Ok(Value::Number(u.into()));
        }
        let is_float_syntax = raw
            .bytes()
            .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-'));
        let digits = raw.strip_prefix('-').unwrap_or(raw);
        if !digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit()) {
            // Python keeps it exact; as a float it would render differently.
            return Err(PyLiteralError::IntegerOutOfRange {
                raw: raw.to_owned(),
            });
        }
        match raw.parse::<f64>() {
            Ok(f) if is_float_syntax => {
                Number::from_f64(f)
                    .map(Value::Number)
                    .ok_or_else(|| PyLiteralError::NotFinite {
                        raw: raw.to_owned(),
                    })
            }
            _ => Err(PyLiteralError::InvalidNumber {
                raw: raw.to_owned(),
                at: start,
            }),
        }
    }

    fn string(&mut self, quote: u8) -> Result<String, PyLiteralError> {
        let start = self.pos;
        self.pos += 1;
        let mut out = String::new();
        loop {
            // Copy the run up to the next quote or backslash in one go (UTF-8 safe: both
            // delimiters are ASCII, so the run ends on a character boundary).
            let run_end = self.s[self.pos..]
                .iter()
                .position(|&c| c == quote || c == b'\\')
                .map(|i| self.pos + i);
            let Some(end) = run_end else {
                return Err(PyLiteralError::UnterminatedString { at: start });
            };
            out.push_str(&self.text[self.pos..end]);
            self.pos = end;
            if self.s[end] == quote {
                self.pos += 1;
                return Ok(out);
            }
            self.escape(&mut out)?;
        }
    }

    /// One backslash escape (the backslash is at `self.pos`).
    fn escape(&mut self, out: &mut String) -> Result<(), PyLiteralError> {
        self.pos += 1;
        let Some(c) = self.peek() else {
            return self.error("unterminated escape");
        };
        self.pos += 1;
        let simple = match c {
            b'n' => Some('\n'),
            b't' => Some('\t'),
            b'r' => Some('\r'),
            b'\\' => Some('\\'),
            b'\'' => Some('\''),
            b'"' => Some('"'),
            b'a' => Some('\u{7}'),
            b'b' => Some('\u{8}'),
            b'f' => Some('\u{c}'),
            b'v' => Some('\u{b}'),
            b'\n' => return Ok(()), // line continuation
            _ => None,
        };
        if let Some(ch) = simple {
            out.push(ch);
            return Ok(());
        }
        let hex_len = match c {
            b'x' => 2,
            b'u' => 4,
            b'U' => 8,
            b'0'..=b'7' => {
                // Up to three octal digits, the first already consumed.
                let start = self.pos - 1;
                while self.pos < start + 3 && matches!(self.peek(), Some(b'0'..=b'7')) {
                    self.pos += 1;
                }
                let code = u32::from_str_radix(&self.text[start..self.pos], 8)?;
                return self.push_code(out, code);
            }
            _ => {
                // Python keeps unknown escapes verbatim, backslash included. `c` may be the
                // first byte of a multi-byte character: step back and copy the whole char.
                self.pos -= 1;
                out.push('\\');
                return Ok(());
            }
        };
        let digits = self
            .text
            .get(self.pos..self.pos + hex_len)
            .filter(|d| d.bytes().all(|b| b.is_ascii_hexdigit()));
        let Some(digits) = digits else {
            return self.error("truncated hex escape");
        };
        let code = u32::from_str_radix(digits, 16)?;
        self.pos += hex_len;
        if c == b'u' && (0xD800..0xDC00).contains(&code) {
            // A surrogate pair written as two `\u` escapes.
            let low = self
                .text
                .get(self.pos..self.pos + 6)
                .and_then(|t| t.strip_prefix("\\u"))
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .filter(|l| (0xDC00..0xE000).contains(l));
            if let Some(low) = low {
                self.pos += 6;
                return self.push_code(out, 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00));
            }
        }
        self.push_code(out, code)
    }

    fn push_code(&self, out: &mut String, code: u32) -> Result<(), PyLiteralError> {
        match char::from_u32(code) {
            Some(ch) => {
                out.push(ch);
                Ok(())
            }
            None => Err(PyLiteralError::NotACharacter { code, at: self.pos }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse;
    use serde_json::json;

    #[test]
    fn parses_hermes_call() {
        let v = parse("{'arguments': {'city': 'Los Angeles', 'flexible': True, 'n': 2, 'x': None}, 'name': 'search'}")
            .expect("parses");
        assert_eq!(
            v,
            json!({"arguments": {"city": "Los Angeles", "flexible": true, "n": 2, "x": null}, "name": "search"})
        );
        assert_eq!(
            serde_json::to_string(&v).expect("json"),
            r#"{"arguments":{"city":"Los Angeles","flexible":true,"n":2,"x":null},"name":"search"}"#
        );
    }

    #[test]
    fn strings_escapes_and_numbers() {
        assert_eq!(parse(r#""it's""#), Ok(json!("it's")));
        assert_eq!(
            parse(r"'it\'s \n \x41 \u00e9 \\'"),
            Ok(json!("it's \n A é \\"))
        );
        assert_eq!(parse(r"'\d'"), Ok(json!("\\d")));
        assert_eq!(parse(r"'\é'"), Ok(json!("\\é")));
        assert_eq!(
            parse("[1, -2, 2.5, 1e3, (3, 4), true, null,]"),
            Ok(json!([1, -2, 2.5, 1000.0, [3, 4], true, null]))
        );
        assert_eq!(parse("{'ünï': 'çödé'}"), Ok(json!({"ünï": "çödé"})));
    }

    #[test]
    fn errors_do_not_panic() {
        for bad in [
            "",
            "{",
            "{'a' 1}",
            "'abc",
            "[1 2]",
            "nan",
            "{'a': inf}",
            "'\\u12'",
            "{}}",
            "1e999",
            "'\\",
            "-",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        let deep = "[".repeat(1000);
        assert!(parse(&deep).is_err());
    }
}
