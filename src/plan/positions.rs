//! Where each setting of a pipeline file is, from the marks of a YAML event parser: a config
//! path (`sources[3].take`, `filters[0].regex`, `mix.total`) to the line and column of its key,
//! or of the item for a list entry. Block and flow style alike. The pipeline itself is parsed
//! by serde; this only points at the places the checks after parsing are about.

use saphyr_parser::{Event, Parser, Span};
use std::collections::HashMap;

/// 1-based line and column.
type At = (usize, usize);

#[derive(Debug, Default)]
pub struct Positions {
    at: HashMap<String, At>,
    /// A key written twice in one mapping: its second occurrence.
    repeated: HashMap<String, At>,
}

impl Positions {
    /// The positions of the first document of `text`; as far as it parses (a syntax error stops
    /// the map there, and serde reports that error itself).
    pub fn of(text: &str) -> Positions {
        let mut positions = Positions::default();
        let mut events = Parser::new_from_str(text).map_while(Result::ok);
        // The root node: the first event after the document's start.
        if events.any(|(e, _)| matches!(e, Event::DocumentStart(_))) {
            if let Some(root) = events.next() {
                positions.node(&mut events, root, "");
            }
        }
        positions
    }

    /// The line of `path`, or of the closest enclosing setting the file shows (a `sources[2]`
    /// item for a `sources[2].take` left to its default).
    pub fn line(&self, path: &str) -> Option<usize> {
        let mut path = path;
        loop {
            if let Some((line, _)) = self.at.get(path) {
                return Some(*line);
            }
            path = &path[..path.rfind(['.', '['])?];
        }
    }

    /// Where the key `path` (`sources[0].name`) is written a second time in its mapping.
    pub fn repeated(&self, path: &str) -> Option<At> {
        self.repeated.get(path).copied()
    }

    /// Records the node starting with `first` and everything under it at `path`; `None` where
    /// the events end early.
    fn node<'a>(
        &mut self,
        events: &mut impl Iterator<Item = (Event<'a>, Span)>,
        first: (Event<'a>, Span),
        path: &str,
    ) -> Option<()> {
        match first.0 {
            Event::MappingStart(..) => loop {
                let (key, span) = events.next()?;
                let key = match key {
                    Event::MappingEnd => return Some(()),
                    Event::Scalar(key, ..) => key,
                    // A key that is a list or a mapping names no setting: skipped.
                    other => {
                        skip(events, other)?;
                        let value = events.next()?;
                        skip(events, value.0)?;
                        continue;
                    }
                };
                let child = match path {
                    "" => key.into_owned(),
                    _ => format!("{path}.{key}"),
                };
                let at = mark(span);
                if self.at.contains_key(&child) {
                    self.repeated.entry(child.clone()).or_insert(at);
                } else {
                    self.at.insert(child.clone(), at);
                }
                let value = events.next()?;
                self.node(events, value, &child)?;
            },
            Event::SequenceStart(..) => {
                for i in 0.. {
                    let item = events.next()?;
                    if matches!(item.0, Event::SequenceEnd) {
                        break;
                    }
                    let child = format!("{path}[{i}]");
                    self.at.entry(child.clone()).or_insert(mark(item.1));
                    self.node(events, item, &child)?;
                }
                Some(())
            }
            _ => Some(()),
        }
    }
}

fn mark(span: Span) -> At {
    (span.start.line(), span.start.col() + 1)
}

/// Consumes the rest of the node that `first` starts.
fn skip<'a>(events: &mut impl Iterator<Item = (Event<'a>, Span)>, first: Event<'a>) -> Option<()> {
    let mut depth = 0usize;
    let mut event = first;
    loop {
        match event {
            Event::MappingStart(..) | Event::SequenceStart(..) => depth += 1,
            Event::MappingEnd | Event::SequenceEnd => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth == 0 {
            return Some(());
        }
        event = events.next()?.0;
    }
}

/// The config path a check's message is about, from how the messages start: `sources[2].take:
/// ...`, `` `tokenizer.verify_percent` must ... ``, `near_dup.sources: ...`, and for a source's
/// own settings `sources[1] (`a`): filters: ...` (its `filters`). Words that name no setting
/// give paths the file does not have, so no line.
pub fn message_path(message: &str) -> String {
    let path = |text: &str| -> String {
        text.trim_start_matches('`')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '[' | ']'))
            .collect::<String>()
            .trim_end_matches('.')
            .to_owned()
    };
    let head = path(message);
    // `sources[i] (`name`): key: ...`: the key, where the rest starts with one.
    let key = message
        .get(head.len()..)
        .and_then(|rest| rest.strip_prefix(" (`"))
        .and_then(|rest| rest.split_once("`): "))
        .map(|(_, rest)| rest)
        .and_then(|rest| rest.split_once(':'))
        .map(|(key, _)| key)
        .filter(|key| !key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c == '_'));
    match key {
        Some(key) => format!("{head}.{key}"),
        None => head,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOCK: &str = "name: t
sources:
  - name: a
    files: [a.jsonl]
    take: 5
  -
    name: b
    filters:
      - regex: {name: r, exclude: ['(']}
mix: {target: rows, total: 10}
";

    #[test]
    fn keys_and_items_are_at_their_marks() {
        let p = Positions::of(BLOCK);
        assert_eq!(p.line("name"), Some(1));
        assert_eq!(p.line("sources"), Some(2));
        assert_eq!(p.line("sources[0]"), Some(3));
        assert_eq!(p.line("sources[0].take"), Some(5));
        assert_eq!(p.line("sources[0].files[0]"), Some(4));
        // An item whose `-` stands alone starts with its first key.
        assert_eq!(p.line("sources[1]"), Some(7));
        assert_eq!(p.line("sources[1].filters"), Some(8));
        assert_eq!(p.line("sources[1].filters[0].regex.exclude"), Some(9));
        assert_eq!(p.at["sources[1].filters[0].regex.exclude"], (9, 26));
        assert_eq!(p.line("mix.total"), Some(10));
        // Unwritten settings: the closest enclosing one, or nothing.
        assert_eq!(p.line("sources[1].take"), Some(7));
        assert_eq!(p.line("sources[7]"), Some(2));
        assert_eq!(p.line("seed"), None);
        assert_eq!(p.line("input"), None);
    }

    #[test]
    fn flow_style_has_positions_too() {
        let p = Positions::of(
            "sources: [{name: a, files: [a.jsonl]},\n  {name: b, take: 3}]\nseed: 1\n",
        );
        assert_eq!(p.at["sources[0]"], (1, 11));
        assert_eq!(p.at["sources[1]"], (2, 3));
        assert_eq!(p.at["sources[1].take"], (2, 13));
        assert_eq!(p.line("seed"), Some(3));
    }

    #[test]
    fn a_repeated_key_and_a_syntax_error() {
        let p = Positions::of("seed: 1\nsources:\n  - name: a\n    name: b\nseed: 2\n");
        assert_eq!(p.repeated("seed"), Some((5, 1)));
        assert_eq!(p.repeated("sources[0].name"), Some((4, 5)));
        assert_eq!(p.line("sources[0].name"), Some(3));
        assert_eq!(p.repeated("sources"), None);
        // What parses before the error is mapped.
        let p = Positions::of("seed: 1\nname: [a\n");
        assert_eq!(p.line("seed"), Some(1));
    }

    #[test]
    fn messages_name_their_path() {
        for (message, path) in [
            ("sources[2].take: `take: 5` ...", "sources[2].take"),
            (
                "`tokenizer.verify_percent` must be between 0 and 100",
                "tokenizer.verify_percent",
            ),
            ("`sources` is empty: name at least one source", "sources"),
            (
                "near_dup.sources: `x` is not the name of a source",
                "near_dup.sources",
            ),
            ("filters: filter `bad` (regex): ...", "filters"),
            ("sources[1]: the name `a` is used twice", "sources[1]"),
            (
                "sources[1] (`a`): filters: filter `r` (regex): ...",
                "sources[1].filters",
            ),
            (
                "sources[1] (`a`): `weight` needs a pipeline-level `mix`",
                "sources[1]",
            ),
            (
                "sources[1] (`a:b`): input file `x`: not found",
                "sources[1]",
            ),
            ("template `t.jinja` has sha256 ...", "template"),
        ] {
            assert_eq!(message_path(message), path, "{message}");
        }
    }
}
