//! A row's identity, as written in `sample_id` and in the side files:
//! `source:file:row[:segment][#copy]`.
//!
//! `file` is the file's index in the source, `row` the record's index in the file (both from
//! 0); `segment` is the row's index among the rows of its conversation (`expand` / `turns`),
//! absent for the conversation as a whole (`conversations.jsonl`, `rejects.jsonl`,
//! `duplicate_of`); `copy` is the `max_repeats` copy (≥ 1), absent for the row itself. A
//! source name holds no `:` (the plan checks it), so the text parses back unambiguously; it
//! parses only as written, so an id and its text are one-to-one.

use std::fmt;

/// A row or conversation id, borrowing its source name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SampleId<'a> {
    pub source: &'a str,
    pub file: u32,
    pub row: u64,
    /// The row's index in its conversation; `None` for the conversation itself.
    pub segment: Option<u64>,
    /// The `max_repeats` copy; 0 for the row itself.
    pub copy: u32,
}

impl<'a> SampleId<'a> {
    /// The id of a conversation: record `row` of file `file` of source `source`.
    pub fn conversation_of_row(source: &'a str, file: u32, row: u64) -> SampleId<'a> {
        SampleId {
            source,
            file,
            row,
            segment: None,
            copy: 0,
        }
    }

    /// This id with row `segment` of the conversation.
    pub fn with_segment(self, segment: u64) -> SampleId<'a> {
        SampleId {
            segment: Some(segment),
            ..self
        }
    }

    /// This id with the `max_repeats` copy `copy` (0: the row itself).
    pub fn with_copy(self, copy: u32) -> SampleId<'a> {
        SampleId { copy, ..self }
    }

    /// The id of the conversation the row belongs to (no segment, no copy): the unit of the
    /// validation split and of curation.
    pub fn conversation(self) -> SampleId<'a> {
        SampleId::conversation_of_row(self.source, self.file, self.row)
    }

    /// Parses an id as [`fmt::Display`] writes it; `None` for any other text.
    pub fn parse(text: &'a str) -> Option<SampleId<'a>> {
        let mut parts = text.split(':');
        let source = parts.next().filter(|s| !s.is_empty())?;
        let file = parts.next()?;
        let row = parts.next()?;
        let segment = parts.next();
        if parts.next().is_some() {
            return None;
        }
        // The copy suffix follows the last field.
        let last = segment.unwrap_or(row);
        let (last, copy) = match last.split_once('#') {
            Some((last, copy)) => (last, Some(number::<u32>(copy).filter(|&c| c > 0)?)),
            None => (last, None),
        };
        let (row, segment) = match segment {
            Some(_) => (row, Some(number::<u64>(last)?)),
            None => (last, None),
        };
        Some(SampleId {
            source,
            file: number(file)?,
            row: number(row)?,
            segment,
            copy: copy.unwrap_or(0),
        })
    }

    /// The conversation part (`source:file:row`) of the id `text`, borrowed from it; the whole
    /// text when it is not an id.
    pub fn conversation_text(text: &str) -> &str {
        match SampleId::parse(text) {
            // Canonical numbers: the conversation is written in exactly these bytes.
            Some(id) => &text[..id.source.len() + 2 + digits(id.file.into()) + digits(id.row)],
            None => text,
        }
    }
}

impl fmt::Display for SampleId<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.source, self.file, self.row)?;
        if let Some(segment) = self.segment {
            write!(f, ":{segment}")?;
        }
        if self.copy > 0 {
            write!(f, "#{}", self.copy)?;
        }
        Ok(())
    }
}

/// A decimal number as `Display` writes it: digits only, no leading zero.
fn number<T: std::str::FromStr>(text: &str) -> Option<T> {
    let canonical = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    canonical.then(|| text.parse().ok()).flatten()
}

/// The number of decimal digits of `n`.
fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

#[cfg(test)]
mod tests {
    use super::SampleId;

    #[test]
    fn ids_are_written_as_before_and_parse_back() {
        let conversation = SampleId::conversation_of_row("web#2", 3, 41);
        let cases = [
            (conversation, "web#2:3:41"),
            (conversation.with_copy(2), "web#2:3:41#2"),
            (conversation.with_segment(0), "web#2:3:41:0"),
            (
                conversation.with_segment(7).with_copy(12),
                "web#2:3:41:7#12",
            ),
        ];
        for (id, text) in cases {
            assert_eq!(id.to_string(), text);
            assert_eq!(SampleId::parse(text), Some(id));
            assert_eq!(id.conversation(), conversation);
            assert_eq!(SampleId::conversation_text(text), "web#2:3:41");
        }
        let big = SampleId::conversation_of_row("s", u32::MAX, u64::MAX).with_segment(10);
        assert_eq!(SampleId::parse(&big.to_string()), Some(big));
        assert_eq!(
            SampleId::conversation_text(&big.to_string()),
            format!("s:{}:{}", u32::MAX, u64::MAX)
        );
    }

    #[test]
    fn only_the_written_form_parses() {
        for text in [
            "",
            "s",
            "s:0",
            ":0:1",
            "s:0:1:2:3",
            "s:00:1",
            "s:0:01",
            "s:0:1:+2",
            "s:0:1#0",
            "s:0:1#",
            "s:0:1:2#03",
            "s:0:x",
            "s:0:1:",
            "s:4294967296:1",
            "s:0:1#2:3",
        ] {
            assert_eq!(SampleId::parse(text), None, "{text:?}");
            assert_eq!(SampleId::conversation_text(text), text);
        }
    }
}
