//! Python semantics the chat templates rely on and jinja2 provides: `json.dumps`, `str()` and
//! `str.strip()`. minijinja's built-ins differ (compact separators, HTML escaping, `true`/`none`).

use crate::conversation::py_trim;
use minijinja::value::{Value, ValueKind};
use minijinja::{Error, ErrorKind};
use std::fmt::Write;

/// Writes `value` as Python's `json.dumps(value, ensure_ascii=False, indent=indent)` does:
/// `", "` / `": "` separators, insertion order, no HTML escaping, Python float repr.
pub fn dump_json(
    value: &Value,
    indent: Option<usize>,
    depth: usize,
    out: &mut String,
) -> Result<(), Error> {
    match value.kind() {
        // Python's json.dumps raises on jinja2's Undefined; so do we.
        ValueKind::Undefined => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "Object of type Undefined is not JSON serializable",
            ))
        }
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => write_number(value, out)?,
        ValueKind::String => write_string(value.as_str().unwrap_or_default(), out),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            write_container(out, '[', ']', items.len(), indent, depth, |i, out| {
                dump_json(&items[i], indent, depth + 1, out)
            })?;
        }
        ValueKind::Map => {
            let keys: Vec<Value> = value.try_iter()?.collect();
            write_container(out, '{', '}', keys.len(), indent, depth, |i, out| {
                let key = &keys[i];
                match key.as_str() {
                    Some(k) => write_string(k, out),
                    // json.dumps turns non-string keys into strings.
                    None => write_string(&py_str_value(key), out),
                }
                out.push_str(": ");
                dump_json(&value.get_item(key)?, indent, depth + 1, out)
            })?;
        }
        kind => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("Object of type {kind} is not JSON serializable"),
            ))
        }
    }
    Ok(())
}

fn write_container(
    out: &mut String,
    open: char,
    close: char,
    len: usize,
    indent: Option<usize>,
    depth: usize,
    mut item: impl FnMut(usize, &mut String) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if len == 0 {
        out.push(close);
        return Ok(());
    }
    for i in 0..len {
        match indent {
            Some(n) => {
                out.push_str(if i == 0 { "\n" } else { ",\n" });
                out.extend(std::iter::repeat_n(' ', n * (depth + 1)));
            }
            None if i > 0 => out.push_str(", "),
            None => {}
        }
        item(i, out)?;
    }
    if let Some(n) = indent {
        out.push('\n');
        out.extend(std::iter::repeat_n(' ', n * depth));
    }
    out.push(close);
    Ok(())
}

fn write_number(value: &Value, out: &mut String) -> Result<(), Error> {
    if value.is_integer() {
        // Integers print the same in Rust and Python.
        let _ = write!(out, "{value}");
        return Ok(());
    }
    let f = f64::try_from(value.clone())?;
    out.push_str(&py_float_repr(f, true));
    Ok(())
}

/// Python's `repr(float)` (also `str(float)`); with `json` set, non-finite values use the
/// spellings `json.dumps` emits (`Infinity`, `NaN`).
pub fn py_float_repr(f: f64, json: bool) -> String {
    if f.is_nan() {
        return if json { "NaN" } else { "nan" }.into();
    }
    if f.is_infinite() {
        let s = if json { "Infinity" } else { "inf" };
        return if f < 0.0 { format!("-{s}") } else { s.into() };
    }
    // `{:e}` yields the shortest round-trip digits, as Python's repr does; only the layout differs.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if !(-4..16).contains(&exp) {
        let (head, tail) = digits.split_at(1);
        let frac = if tail.is_empty() {
            String::new()
        } else {
            format!(".{tail}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{head}{frac}e{esign}{:02}", exp.abs());
    }
    let point = exp + 1; // digits before the decimal point
    if point <= 0 {
        let zeros = "0".repeat(point.unsigned_abs() as usize);
        format!("{sign}0.{zeros}{digits}")
    } else if point as usize >= digits.len() {
        let zeros = "0".repeat(point as usize - digits.len());
        format!("{sign}{digits}{zeros}.0")
    } else {
        let (int, frac) = digits.split_at(point as usize);
        format!("{sign}{int}.{frac}")
    }
}

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python `str(x)` for scalars: `True`, `False`, `None`, float repr. Containers keep
/// minijinja's rendering (the supported templates only stringify scalars).
fn py_str_value(value: &Value) -> String {
    match value.kind() {
        ValueKind::None => "None".into(),
        ValueKind::Bool => if value.is_true() { "True" } else { "False" }.into(),
        ValueKind::Number if !value.is_integer() => match f64::try_from(value.clone()) {
            Ok(f) => py_float_repr(f, false),
            Err(_) => value.to_string(),
        },
        _ => value.to_string(),
    }
}

/// The `string` filter with Python `str()` semantics.
pub fn py_str(value: &Value) -> Value {
    if value.kind() == ValueKind::String {
        return value.clone();
    }
    Value::from(py_str_value(value))
}

/// jinja2's `trim` filter: Python `str.strip()` (or `strip(chars)`).
pub fn py_trim_filter(value: &Value, chars: Option<String>) -> Value {
    let s = py_str_value(value);
    let trimmed = match chars {
        Some(chars) => s.trim_matches(|c| chars.contains(c)).to_owned(),
        None => py_trim(&s).to_owned(),
    };
    if value.as_str() == Some(trimmed.as_str()) {
        return value.clone();
    }
    Value::from(trimmed)
}

#[cfg(test)]
mod tests {
    use super::py_float_repr;

    #[test]
    fn float_repr_matches_python() {
        // Expected values are Python 3 `repr(float)` outputs.
        let cases = [
            (2.5, "2.5"),
            (3.0, "3.0"),
            (1e-05, "1e-05"),
            (0.0001, "0.0001"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (123456789.125, "123456789.125"),
            (-0.5, "-0.5"),
            (0.1, "0.1"),
            (1.5e-7, "1.5e-07"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (12345678901234567.0, "1.2345678901234568e+16"),
        ];
        for (f, want) in cases {
            assert_eq!(py_float_repr(f, true), want, "repr({f:?})");
        }
        assert_eq!(py_float_repr(f64::INFINITY, true), "Infinity");
        assert_eq!(py_float_repr(f64::NEG_INFINITY, false), "-inf");
    }
}
