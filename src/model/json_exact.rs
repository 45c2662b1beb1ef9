//! JSON parsed with Python's reading of integers, where serde_json's `Value` differs.
//!
//! serde_json (without `arbitrary_precision`, which breaks untagged enums and `flatten` in
//! dependencies) reads the integer `-0` and the float `-0.0` both as the float -0.0, and an
//! integer outside i64/u64 as a float. Python's `json.loads` keeps both as integers: `-0` is
//! `0` and `2**64` stays exact, so a chat template renders `0` and `18446744073709551616` where
//! a serde_json value would render `-0.0` and `1.8446744073709552e+19`. [`from_slice`] reads
//! `-0` as the integer 0 and refuses an integer outside 64 bits ([`Error::OutOfRange`], naming
//! where it is), so that no such number is ever rendered differently without a word.
//!
//! Cost on ordinary JSON: one walk of the parsed tree looking for a float that is -0.0 or an
//! integral value of magnitude at least 2^63 (the only floats those literals can become). Only
//! then is the text scanned for the literals themselves.

use crate::reject::{Reject, RejectReason};
use serde_json::Value;

/// Why a JSON text was not read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// An integer literal outside the 64-bit range at `path` (`.key` and `[index]` segments
    /// from the text's root; empty for the root itself).
    #[error("integer {literal} at `{path}` is outside the 64-bit range")]
    OutOfRange { path: String, literal: String },
}

impl Error {
    /// The reject for an integer out of range in the JSON at `field` (the row itself when
    /// empty, else the field holding the JSON text); `None` for a syntax error, which each
    /// caller words itself.
    pub fn out_of_range(&self, field: &str) -> Option<Reject> {
        let Error::OutOfRange { path, literal } = self else {
            return None;
        };
        let at = match (field, path.as_str()) {
            ("", "") => "the record".to_owned(),
            ("", p) => format!("`{}`", p.trim_start_matches('.')),
            (f, p) => format!("`{f}{p}`"),
        };
        Some(Reject::new(
            RejectReason::NumberOutOfRange,
            format!(
                "{at} is the integer {literal}, outside the 64-bit range: Python (transformers) \
                 renders it exactly, chatshards would render it as a float"
            ),
        ))
    }
}

/// `serde_json::from_slice::<Value>`, with `-0` read as the integer 0 and an integer literal
/// outside i64/u64 refused.
pub fn from_slice(bytes: &[u8]) -> Result<Value, Error> {
    exact(bytes, serde_json::from_slice(bytes)?)
}

/// [`from_slice`] on a string.
pub fn from_str(text: &str) -> Result<Value, Error> {
    from_slice(text.as_bytes())
}

/// Each value of a stream of JSON texts (`{...} {...}`), as [`from_slice`] reads it.
pub fn stream(text: &str) -> impl Iterator<Item = Result<Value, Error>> + '_ {
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let mut start = 0;
    std::iter::from_fn(move || {
        let value = values.next()?;
        let end = values.byte_offset();
        let bytes = text.as_bytes().get(start..end).unwrap_or_default();
        start = end;
        Some(value.map_err(Error::from).and_then(|v| exact(bytes, v)))
    })
}

/// `value` as [`from_slice`] reads it, given that serde_json parsed it from `bytes`.
pub fn exact(bytes: &[u8], value: Value) -> Result<Value, Error> {
    if !holds_suspect(&value) {
        return Ok(value);
    }
    let found = scan(bytes);
    if let Some((path, literal)) = found.out_of_range.into_iter().next() {
        return Err(Error::OutOfRange { path, literal });
    }
    if found.minus_zero.is_empty() {
        return Ok(value); // floats written as floats (`-0.0`, `1e19`): Python reads them so too
    }
    // `-0` → ` 0`: the same length, so nothing else moves, and an integer 0 to serde_json.
    let mut copy = bytes.to_vec();
    for at in found.minus_zero {
        copy[at] = b' ';
    }
    Ok(serde_json::from_slice(&copy)?)
}

/// Whether `number` is a float that an integer literal `-0` or one outside 64 bits becomes.
pub fn is_suspect(number: &serde_json::Number) -> bool {
    // 2^63: every integer literal below it in magnitude is read as an i64 or u64.
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    number.as_f64().is_some_and(|x| {
        number.is_f64()
            && ((x == 0.0 && x.is_sign_negative()) || (x.fract() == 0.0 && x.abs() >= TWO_63))
    })
}

/// Whether any number in `value` [`is_suspect`].
pub fn holds_suspect(value: &Value) -> bool {
    match value {
        Value::Number(n) => is_suspect(n),
        Value::Array(items) => items.iter().any(holds_suspect),
        Value::Object(fields) => fields.values().any(holds_suspect),
        Value::Null | Value::Bool(_) | Value::String(_) => false,
    }
}

/// Integer literals of a valid JSON text that serde_json reads differently from Python.
#[derive(Debug, Default, PartialEq)]
struct Found {
    /// Byte offsets of the `-` of each `-0` integer literal.
    minus_zero: Vec<usize>,
    /// `(path, literal)` of each integer outside i64/u64 that the parsed value keeps (one
    /// under a key given again later is dropped, as the later key replaces it), in text order.
    out_of_range: Vec<(String, String)>,
}

/// A container being scanned: its path segment for the current element (`[i]` or `.key`).
struct Frame {
    object: bool,
    index: usize,
    segment: String,
    /// In an object: the next string is a key.
    expect_key: bool,
}

/// A lexical pass over `bytes`, which must be valid JSON (serde_json parsed it): never
/// panics on other input, but then finds nothing meaningful.
fn scan(bytes: &[u8]) -> Found {
    let mut found = Found::default();
    let mut stack: Vec<Frame> = Vec::new();
    let path = |stack: &[Frame]| stack.iter().map(|f| f.segment.as_str()).collect::<String>();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                let start = i;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                let raw = bytes.get(start..=i).unwrap_or_default();
                if let Some(frame) = stack.last_mut().filter(|f| f.object && f.expect_key) {
                    let key = serde_json::from_slice::<String>(raw)
                        .unwrap_or_else(|_| String::from_utf8_lossy(raw).into_owned());
                    frame.segment = format!(".{key}");
                    frame.expect_key = false;
                    // A key given again replaces what the earlier one held.
                    let replaced = path(&stack);
                    found.out_of_range.retain(|(p, _)| !within(p, &replaced));
                }
            }
            b'{' | b'[' => {
                let object = bytes[i] == b'{';
                stack.push(Frame {
                    object,
                    index: 0,
                    segment: if object { String::new() } else { "[0]".into() },
                    expect_key: object,
                });
            }
            b'}' | b']' => {
                stack.pop();
            }
            b',' => {
                if let Some(frame) = stack.last_mut() {
                    if frame.object {
                        frame.expect_key = true;
                    } else {
                        frame.index += 1;
                        frame.segment = format!("[{}]", frame.index);
                    }
                }
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i + 1 < bytes.len()
                    && matches!(bytes[i + 1], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                {
                    i += 1;
                }
                let token = &bytes[start..=i];
                if !token.iter().any(|b| matches!(b, b'.' | b'e' | b'E')) {
                    if token == b"-0" {
                        found.minus_zero.push(start);
                    } else if out_of_range(token) {
                        let literal = String::from_utf8_lossy(token).into_owned();
                        found.out_of_range.push((path(&stack), literal));
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// Whether `path` is `prefix` or lies under it.
fn within(path: &str, prefix: &str) -> bool {
    path.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
}

/// Whether an integer literal is outside i64 (negative) or u64 (positive).
fn out_of_range(token: &[u8]) -> bool {
    let (negative, digits) = match token.strip_prefix(b"-") {
        Some(rest) => (true, rest),
        None => (false, token),
    };
    let Some(magnitude) = std::str::from_utf8(digits)
        .ok()
        .and_then(|d| d.parse::<u128>().ok())
    else {
        return true; // more digits than u128 holds
    };
    if negative {
        magnitude > 1u128 << 63
    } else {
        magnitude > u128::from(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(text: &str) -> Value {
        from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn refused(text: &str) -> (String, String) {
        match from_str(text) {
            Err(Error::OutOfRange { path, literal }) => (path, literal),
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn minus_zero_integer_is_zero_and_float_stays_negative() {
        // What serde_json alone does, the reason for this module.
        let plain: Value = serde_json::from_str(r#"{"a": -0}"#).expect("json");
        assert_eq!(plain["a"].to_string(), "-0.0");

        assert_eq!(read(r#"{"a": -0}"#).to_string(), r#"{"a":0}"#);
        assert_eq!(read(r#"{"a": -0.0}"#).to_string(), r#"{"a":-0.0}"#);
        // An exponent makes a float in Python too (`json.loads("-0e0")` is -0.0).
        assert_eq!(
            read(r#"{"a": -0e0, "b": -0E+1}"#).to_string(),
            r#"{"a":-0.0,"b":-0.0}"#
        );
        assert_eq!(read("-0").to_string(), "0");
        assert_eq!(read("[-0,-0.0,-0]").to_string(), "[0,-0.0,0]");
        assert!(read(r#"{"a": -0}"#)["a"].is_u64());
    }

    #[test]
    fn minus_zero_inside_strings_is_text() {
        let text = r#"{"s": "-0", "t": "x\"-0", "u": "\\", "v": -0, "-0": "2024-01-05"}"#;
        assert_eq!(
            read(text).to_string(),
            r#"{"s":"-0","t":"x\"-0","u":"\\","v":0,"-0":"2024-01-05"}"#
        );
        assert_eq!(
            scan(text.as_bytes()).minus_zero,
            vec![text.find("-0,").expect("v")]
        );
    }

    #[test]
    fn integers_outside_64_bits_are_refused_with_their_path() {
        let row = r#"{"messages": [{"role": "user"}, {"tool_calls": [{"function":
            {"arguments": {"a": 18446744073709551616}}}]}]}"#;
        assert_eq!(
            refused(row),
            (
                ".messages[1].tool_calls[0].function.arguments.a".into(),
                "18446744073709551616".into()
            )
        );
        assert_eq!(
            refused("[1, -9223372036854775809]"),
            ("[1]".into(), "-9223372036854775809".into())
        );
        assert_eq!(
            refused("123456789012345678901234567890123456789012"),
            (
                String::new(),
                "123456789012345678901234567890123456789012".into()
            )
        );
        // The edges of the 64-bit range are exact and read as integers.
        let edges = read("[18446744073709551615, -9223372036854775808, 9223372036854775807]");
        assert_eq!(edges, json!([u64::MAX, i64::MIN, i64::MAX]));
    }

    #[test]
    fn large_floats_are_floats() {
        // Python reads these as floats too: same text either way.
        let v = read(r#"{"a": 1e19, "b": 18446744073709551616.0, "c": -1E30}"#);
        assert_eq!(
            v.to_string(),
            r#"{"a":1e+19,"b":1.8446744073709552e+19,"c":-1e+30}"#
        );
    }

    #[test]
    fn a_key_given_again_replaces_what_it_held() {
        // Python's json keeps the last value of a repeated key; so does serde_json.
        assert_eq!(
            read(r#"{"a": 18446744073709551616, "a": 1e19}"#),
            json!({"a": 1e19})
        );
        assert_eq!(
            read(r#"{"a": {"b": [18446744073709551616]}, "ab": 1e19, "a": 1}"#),
            json!({"a": 1, "ab": 1e19})
        );
        // The replacement is what counts, and a sibling with a longer name is not under it.
        assert_eq!(
            refused(r#"{"a": 1, "ab": 1e19, "a": 18446744073709551616}"#),
            (".a".into(), "18446744073709551616".into())
        );
        assert_eq!(
            refused(r#"{"ab": 18446744073709551616, "a": 1e19}"#),
            (".ab".into(), "18446744073709551616".into())
        );
        // Escaped keys are the same key.
        assert_eq!(
            read(r#"{"a": 18446744073709551616, "\u0061": -0}"#),
            json!({"a": 0})
        );
    }

    #[test]
    fn streams_read_each_value_exactly() {
        let values: Vec<Value> = stream(r#"{"a": -0} [1e19, -0.0]  {"b": -0}"#)
            .collect::<Result<_, _>>()
            .expect("stream");
        assert_eq!(
            Value::Array(values).to_string(),
            r#"[{"a":0},[1e+19,-0.0],{"b":0}]"#
        );
        assert!(matches!(
            stream(r#"{"a": 1} {"b": 18446744073709551616}"#).collect::<Result<Vec<_>, _>>(),
            Err(Error::OutOfRange { path, .. }) if path == ".b"
        ));
    }

    #[test]
    fn the_reject_names_the_field() {
        let e = from_str(r#"{"x": {"default": 18446744073709551616}}"#).expect_err("refused");
        let reject = e.out_of_range("tools[0].parameters").expect("out of range");
        assert_eq!(reject.reason.code(), "number_out_of_range");
        assert_eq!(
            reject.message,
            "`tools[0].parameters.x.default` is the integer 18446744073709551616, outside the \
             64-bit range: Python (transformers) renders it exactly, chatshards would render it \
             as a float"
        );
        let e = from_str(r#"{"a": [18446744073709551616]}"#).expect_err("refused");
        assert!(e
            .out_of_range("")
            .expect("reject")
            .message
            .starts_with("`a[0]` is"));
        let syntax = from_str("{").expect_err("syntax");
        assert!(syntax.out_of_range("").is_none());
    }
}
