//! No silent loss: a source that keeps less than its `min_keep` share of the rows it read
//! fails the build (and `check`), naming its top reasons with one example message and a fix
//! hint each. A dataset that ships without one of its sources is never a success.

use super::SourceStats;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// Reasons named per failing source.
const TOP_REASONS: usize = 3;

/// Where a reason was first seen and what it said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Example {
    pub file: String,
    pub row: u64,
    pub message: String,
}

/// The first example of each (source, reason), read from `rejects.jsonl` / `filtered.jsonl`
/// lines.
#[derive(Debug, Default)]
pub struct Examples(BTreeMap<(String, String), Example>);

impl Examples {
    /// Takes the JSON lines of a side output; lines it cannot read are skipped (they are the
    /// tool's own output: an example is a courtesy, not an accounting).
    pub fn add_lines(&mut self, reader: impl BufRead) {
        for line in reader.lines() {
            let Ok(line) = line else { break };
            let Ok(serde_json::Value::Object(v)) = serde_json::from_str(&line) else {
                continue;
            };
            let text = |k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or("").to_owned();
            let key = (text("source"), text("reason"));
            self.0.entry(key).or_insert_with(|| Example {
                file: text("file"),
                row: v.get("row").and_then(|r| r.as_u64()).unwrap_or(0),
                message: describe(&v),
            });
        }
    }

    /// [`Examples::add_lines`] on a file; a missing file adds nothing.
    pub fn add_file(&mut self, path: &Path) {
        if let Ok(file) = std::fs::File::open(path) {
            self.add_lines(std::io::BufReader::new(file));
        }
    }

    fn get(&self, source: &str, reason: &str) -> Option<&Example> {
        self.0.get(&(source.to_owned(), reason.to_owned()))
    }
}

/// The message of a side-output line; dedup and decontamination lines have none, but say of
/// which row or benchmark item they are a copy.
fn describe(v: &serde_json::Map<String, serde_json::Value>) -> String {
    let text = |k: &str| v.get(k).and_then(|x| x.as_str());
    if let Some(m) = text("message") {
        return m.to_owned();
    }
    if let Some(of) = text("duplicate_of") {
        return format!("a copy of `{of}`");
    }
    match (text("benchmark"), text("item")) {
        (Some(b), Some(i)) => format!("shares an n-gram with {b} item `{i}`"),
        _ => String::new(),
    }
}

/// What is known of a source besides its counts, for the hints.
#[derive(Debug, Clone, Default)]
pub struct SourceFacts {
    pub name: String,
    /// Its `format:`.
    pub format: String,
    /// Its least share to keep.
    pub min_keep: f64,
    /// The keys of its first record (empty when unknown).
    pub first_keys: Vec<String>,
}

/// One reason a failing source lost rows.
#[derive(Debug, Clone, Serialize)]
pub struct LossReason {
    /// `rejected unknown_role`, `filtered too_long`, `deduplicated`...
    pub reason: String,
    pub rows: u64,
    pub example: Option<Example>,
    pub hint: Option<String>,
}

/// A source that kept less than its `min_keep` share.
#[derive(Debug, Clone, Serialize)]
pub struct Loss {
    pub source: String,
    pub read: u64,
    /// Rows that survived curation (kept, or left out only by `take` / `mix`).
    pub survived: u64,
    pub min_keep: f64,
    pub reasons: Vec<LossReason>,
}

/// Rows of a source that survived curation: kept, or left out only by the selection.
pub fn survived(s: &SourceStats) -> u64 {
    s.kept + s.sampled_out
}

/// The source's loss, when it kept less than `facts.min_keep` of what it read (a source that
/// read nothing kept nothing: it fails unless `min_keep` is 0).
pub fn check(facts: &SourceFacts, s: &SourceStats, examples: &Examples) -> Option<Loss> {
    let kept = survived(s);
    let failing = if s.read == 0 {
        facts.min_keep > 0.0
    } else {
        (kept as f64) < facts.min_keep * s.read as f64 || (kept == 0 && facts.min_keep > 0.0)
    };
    if !failing {
        return None;
    }
    let mut reasons: Vec<(String, String, u64)> = s
        .rejected
        .iter()
        .map(|(k, v)| (format!("rejected {}", k.code()), k.code().to_owned(), *v))
        .chain(
            s.filtered
                .iter()
                .map(|(k, v)| (format!("filtered {k}"), k.clone(), *v)),
        )
        .chain(
            [
                ("deduplicated", s.deduplicated),
                ("near_duplicate", s.near_duplicate),
                ("contaminated", s.contaminated),
            ]
            .map(|(k, v)| (k.to_owned(), k.to_owned(), v)),
        )
        .filter(|r| r.2 > 0)
        .collect();
    reasons.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
    let reasons = reasons
        .into_iter()
        .take(TOP_REASONS)
        .map(|(reason, code, rows)| {
            let example = examples.get(&facts.name, &code).cloned();
            let message = example.as_ref().map_or("", |e| e.message.as_str());
            LossReason {
                hint: hint(&reason, message, facts),
                reason,
                rows,
                example,
            }
        })
        .collect();
    Some(Loss {
        source: facts.name.clone(),
        read: s.read,
        survived: kept,
        min_keep: facts.min_keep,
        reasons,
    })
}

/// The format whose default columns a row's keys look like.
fn likely_format(keys: &[String]) -> Option<&'static str> {
    let has = |k: &str| keys.iter().any(|x| x == k);
    if has("messages") {
        Some("openai")
    } else if has("conversations") {
        Some("sharegpt")
    } else if has("system_prompt") && has("question") && has("response") {
        Some("openorca")
    } else if has("instruction") && (has("output") || has("response")) {
        Some("alpaca")
    } else {
        None
    }
}

/// A fix to try for a reason, when one is likely.
fn hint(reason: &str, message: &str, facts: &SourceFacts) -> Option<String> {
    let keys = || {
        facts
            .first_keys
            .iter()
            .take(6)
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("/")
    };
    let wrong_format = || match likely_format(&facts.first_keys) {
        Some(f) if f != facts.format => Some(format!("rows have `{}`: `format: {f}`?", keys())),
        _ if !facts.first_keys.is_empty() => Some(format!(
            "rows have `{}`: name the format's fields with `columns:` (README, \"Sources\")",
            keys()
        )),
        _ => None,
    };
    match reason {
        "rejected unknown_role" if facts.format == "sharegpt" => {
            // "`conversations[1].from` is `user`; expected one of ..."
            let tag = message
                .split_once(" is `")
                .and_then(|(_, rest)| rest.split_once('`'))
                .map_or("user", |(tag, _)| tag);
            let (user, assistant) = match tag {
                "user" | "assistant" => ("user", "assistant"),
                other => (other, "…"),
            };
            Some(format!(
                "set the role tags the rows use: `tags: {{user_tag: {user}, assistant_tag: {assistant}}}`"
            ))
        }
        "rejected unknown_role" => wrong_format(),
        "rejected missing_field"
        | "rejected invalid_field"
        | "rejected empty_conversation"
        | "rejected no_user_query"
        | "rejected no_assistant_turn" => wrong_format(),
        "filtered too_long" => {
            Some("raise `max_tokens`, or set `length_policy: truncate`".to_owned())
        }
        "filtered too_few_supervised" => Some("lower `min_supervised_tokens`".to_owned()),
        "filtered unresolved" => Some(
            "keep unresolved trajectories too: `resolved_only: false` on the source".to_owned(),
        ),
        "filtered blank_line" => None,
        "deduplicated" | "near_duplicate" => Some(
            "the rows repeat rows of this or an earlier source; if that is expected, set `min_keep: 0` on the source"
                .to_owned(),
        ),
        r if r.starts_with("filtered ") => Some(format!(
            "loosen the filter `{}` (its parameters, or `scope:`)",
            &r["filtered ".len()..]
        )),
        _ => None,
    }
}

impl Loss {
    /// The reason lines alone (each on its own indented line, with its example and hint).
    pub fn reasons_text(&self) -> String {
        let mut out = String::new();
        for r in &self.reasons {
            out.push_str(&format!(
                "\n    {}: {} rows",
                r.reason,
                super::thousands(r.rows)
            ));
            if let Some(e) = &r.example {
                out.push_str(&format!("; e.g. {} row {}", e.file, e.row));
                if !e.message.is_empty() {
                    out.push_str(&format!(": {}", e.message));
                }
            }
            if let Some(h) = &r.hint {
                out.push_str(&format!("\n      fix: {h}"));
            }
        }
        out
    }
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pct = |x: f64| format!("{:.1}%", 100.0 * x);
        if self.read == 0 {
            write!(f, "source `{}` read no rows", self.source)?;
        } else {
            write!(
                f,
                "source `{}` keeps {} of {} rows read ({}), below its `min_keep` of {}",
                self.source,
                super::thousands(self.survived),
                super::thousands(self.read),
                pct(self.survived as f64 / self.read as f64),
                pct(self.min_keep)
            )?;
        }
        f.write_str(&self.reasons_text())
    }
}

/// The keys of the first record of `files` that is a JSON object (nothing when none is).
pub fn first_keys(files: &[PathBuf]) -> Vec<String> {
    let mut keys = Vec::new();
    // A few records at most: a file of invalid lines is not read to its end for a hint.
    let mut left = 100;
    // An unreadable file already failed the build or the check; nothing to add here.
    let _ = crate::read::read_files(files, &mut |row| {
        left -= 1;
        match row.into_value() {
            Ok(serde_json::Value::Object(m)) => {
                keys = m.keys().cloned().collect();
                false
            }
            _ => left > 0,
        }
    });
    keys
}

/// The error that fails a build or a check: every failing source, then how to accept it.
#[derive(Debug, thiserror::Error)]
#[error("{}", failure_text(.0))]
pub struct LossError(pub Vec<Loss>);

fn failure_text(losses: &[Loss]) -> String {
    let mut out = String::new();
    for l in losses {
        out.push_str(&format!("{l}\n"));
    }
    out.push_str(
        "(a source may keep less with `min_keep: 0.001` or `min_keep: 0` on it, or at the top of the pipeline for every source)",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reject::RejectReason;

    fn facts(format: &str, keys: &[&str]) -> SourceFacts {
        SourceFacts {
            name: "s".to_owned(),
            format: format.to_owned(),
            min_keep: 0.01,
            first_keys: keys.iter().map(|k| k.to_string()).collect(),
        }
    }

    #[test]
    fn a_source_below_min_keep_names_its_top_reasons_with_examples_and_hints() {
        let mut s = SourceStats {
            read: 1000,
            kept: 5,
            sampled_out: 4,
            deduplicated: 10,
            ..Default::default()
        };
        s.rejected.insert(RejectReason::MissingField, 900);
        s.filtered.insert("too_long".to_owned(), 81);
        let mut examples = Examples::default();
        examples.add_lines(
            &b"{\"source\":\"s\",\"file\":\"a.jsonl\",\"row\":3,\"reason\":\"missing_field\",\"message\":\"field `messages` is missing\"}\nnot json\n{\"source\":\"s\",\"file\":\"a.jsonl\",\"row\":9,\"reason\":\"deduplicated\",\"duplicate_of\":\"s:0:1\"}\n"[..],
        );
        let loss = check(
            &facts("openai", &["instruction", "input", "output"]),
            &s,
            &examples,
        )
        .expect("9 of 1,000 is below 1%");
        assert_eq!(
            loss.to_string(),
            "source `s` keeps 9 of 1,000 rows read (0.9%), below its `min_keep` of 1.0%
    rejected missing_field: 900 rows; e.g. a.jsonl row 3: field `messages` is missing
      fix: rows have `instruction/input/output`: `format: alpaca`?
    filtered too_long: 81 rows
      fix: raise `max_tokens`, or set `length_policy: truncate`
    deduplicated: 10 rows; e.g. a.jsonl row 9: a copy of `s:0:1`
      fix: the rows repeat rows of this or an earlier source; if that is expected, set `min_keep: 0` on the source"
        );
        // 10 of 1,000 is 1%: kept.
        s.kept = 6;
        assert!(check(&facts("openai", &[]), &s, &examples).is_none());
        // Nothing read: a loss unless `min_keep` is 0.
        let empty = SourceStats::default();
        assert!(check(&facts("openai", &[]), &empty, &examples).is_some());
        let mut zero = facts("openai", &[]);
        zero.min_keep = 0.0;
        assert!(check(&zero, &empty, &examples).is_none());
    }
}
