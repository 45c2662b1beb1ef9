//! Config errors a person can act on at once: "did you mean" for a misspelled key or value,
//! and every schema error of a pipeline, not only the first one serde stops at.

use super::config::PipelineConfig;

/// Schema errors reported per run at most (each costs one parse of the file).
const MAX_ERRORS: usize = 20;

/// How alike (Jaro-Winkler, 0 to 1) a misspelling and the name it is taken for must be; the
/// threshold clap uses for its own suggestions.
const ALIKE: f64 = 0.8;

/// serde's "unknown field `x`, expected one of `a`, `b`" (or "unknown variant ...") with
/// "; did you mean `a`?" appended when one expected name is close to `x`.
pub fn did_you_mean(message: &str) -> String {
    let suggestion = ["unknown field `", "unknown variant `"]
        .iter()
        .find_map(|head| message.split_once(head))
        .and_then(|(_, rest)| {
            let (given, expected) = rest.split_once('`')?;
            let expected = expected.split_once("expected")?.1;
            expected
                .split('`')
                .skip(1)
                .step_by(2)
                .map(|name| (strsim::jaro_winkler(given, name), name))
                .filter(|(score, _)| *score >= ALIKE)
                .max_by(|a, b| a.0.total_cmp(&b.0))
                .map(|(_, name)| name.to_owned())
        });
    match suggestion {
        Some(name) => format!("{message}; did you mean `{name}`?"),
        None => message.to_owned(),
    }
}

/// The schema errors of a pipeline whose first one is `first`, at (line, column) each: after
/// each error, the key it is about (its line and the lines indented under it) is blanked and
/// the text parsed again, until it parses, an error cannot be blanked (flow style, a syntax
/// error) or [`MAX_ERRORS`]. A `missing field` error about a blanked key is the blanking's
/// doing, not the user's, and is left out.
pub fn schema_errors(text: &str, first: &serde_yaml_ng::Error) -> Vec<(usize, usize, String)> {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let mut blanked: Vec<String> = Vec::new();
    let mut errors = Vec::new();
    let mut error = clone_error(first);
    // After a YAML syntax error, what the text means is unknown: that error alone.
    let syntax = error.as_ref().is_some_and(|(_, _, m)| !is_schema_error(m));
    while let Some((line, column, message)) = error {
        let missing_blanked = message
            .split_once("missing field `")
            .and_then(|(_, rest)| rest.split_once('`'))
            .is_some_and(|(key, _)| blanked.iter().any(|b| b == key));
        if !missing_blanked {
            errors.push((line, column, message.clone()));
        }
        if syntax || errors.len() >= MAX_ERRORS {
            break;
        }
        let Some(key) = blank_key(&mut lines, line) else {
            break;
        };
        blanked.push(key);
        error = match serde_yaml_ng::from_str::<PipelineConfig>(&lines.join("\n")) {
            Ok(_) => None,
            Err(e) => clone_error(&e),
        };
        // A syntax error made by the blanking itself ends the search.
        if error.as_ref().is_some_and(|(_, _, m)| !is_schema_error(m)) {
            break;
        }
    }
    errors
}

/// Line, column and message (without serde's trailing " at line L column C").
fn clone_error(e: &serde_yaml_ng::Error) -> Option<(usize, usize, String)> {
    let l = e.location()?;
    let text = e.to_string();
    let text = text
        .rsplit_once(" at line ")
        .map_or(text.as_str(), |(head, _)| head)
        .to_owned();
    Some((l.line(), l.column(), text))
}

/// Errors about the content (serde's), as opposed to YAML syntax.
fn is_schema_error(message: &str) -> bool {
    [
        "unknown field",
        "unknown variant",
        "missing field",
        "invalid type",
        "invalid value",
        "invalid length",
        "duplicate field",
    ]
    .iter()
    .any(|m| message.contains(m))
}

/// Blanks the block-style key on 1-based `line` and the lines indented under it; returns the
/// key, or `None` when the line holds no `key:` (a list item's value, flow style).
fn blank_key(lines: &mut [String], line: usize) -> Option<String> {
    let at = line.checked_sub(1)?;
    let l = lines.get(at)?;
    let body = l.trim_start_matches([' ', '-']);
    let indent = l.len() - body.len();
    let (key, _) = body.split_once(':')?;
    let key = key.trim().trim_matches(['"', '\'']).to_owned();
    if key.is_empty() || key.contains([' ', '{', '[', ',']) {
        return None;
    }
    // A list item's first key (`- name: x`) keeps its `-`, so the item stays an item.
    lines[at] = l[..indent].trim_end().to_owned();
    for next in lines.iter_mut().skip(at + 1) {
        let content = next.trim_start();
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        if next.len() - content.len() <= indent {
            break;
        }
        next.clear();
    }
    Some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_the_closest_expected_name() {
        assert_eq!(
            did_you_mean("unknown field `tokeniser`, expected one of `name`, `seed`, `tokenizer`"),
            "unknown field `tokeniser`, expected one of `name`, `seed`, `tokenizer`; did you mean `tokenizer`?"
        );
        assert_eq!(
            did_you_mean("unknown variant `openaii`, expected one of `openai`, `sharegpt`"),
            "unknown variant `openaii`, expected one of `openai`, `sharegpt`; did you mean `openai`?"
        );
        // Nothing close: no guess.
        assert_eq!(
            did_you_mean("unknown field `zzz`, expected `name` or `seed`"),
            "unknown field `zzz`, expected `name` or `seed`"
        );
    }
}
