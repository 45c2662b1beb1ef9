//! JSON lines and JSON arrays. Hub datasets name both `.json`, so the first non-space byte
//! decides: `[` is an array (streamed element by element), anything else is JSON lines.

use super::{ReadError, Record};
use serde::de::{Deserializer, SeqAccess, Visitor};
use serde_json::Value;
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

type Sink<'a> = dyn FnMut(u64, Record) -> bool + 'a;

pub fn read(path: &Path, sink: &mut Sink) -> Result<bool, ReadError> {
    let io = |e| ReadError::Io(path.to_owned(), e);
    let mut reader = BufReader::with_capacity(1 << 20, File::open(path).map_err(io)?);
    let first = loop {
        let buf = reader.fill_buf().map_err(io)?;
        match buf.iter().position(|b| !b.is_ascii_whitespace()) {
            Some(p) => break Some(buf[p]),
            None if buf.is_empty() => break None,
            None => {
                let n = buf.len();
                reader.consume(n);
            }
        }
    };
    match first {
        None => Ok(true),
        Some(b'[') => read_array(path, reader, sink),
        Some(_) => read_lines(path, reader, sink),
    }
}

fn read_lines(
    path: &Path,
    mut reader: BufReader<File>,
    sink: &mut Sink,
) -> Result<bool, ReadError> {
    let mut row = 0u64;
    // Each line is handed on, so each gets its own buffer, sized like the last to avoid regrowth
    // (capped, so that one huge line does not make every later buffer huge).
    let mut capacity = 1024;
    loop {
        let mut line = Vec::with_capacity(capacity);
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| ReadError::Io(path.to_owned(), e))?;
        if n == 0 {
            return Ok(true);
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        capacity = line.len().next_power_of_two().min(1 << 20);
        if !sink(row, Record::Line(line)) {
            return Ok(false);
        }
        row += 1;
    }
}

/// Streams the elements of a top-level array without holding the array.
fn read_array(path: &Path, reader: BufReader<File>, sink: &mut Sink) -> Result<bool, ReadError> {
    struct Elements<'a, 'b> {
        sink: &'a mut Sink<'b>,
        row: &'a mut u64,
        stopped: &'a mut bool,
    }
    impl<'de> Visitor<'de> for Elements<'_, '_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON array of records")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while let Some(value) = seq.next_element::<Value>()? {
                if !(self.sink)(*self.row, Record::Parsed(value)) {
                    *self.stopped = true;
                    // Stop reading; the error this causes at the caller is expected.
                    return Err(serde::de::Error::custom("stopped"));
                }
                *self.row += 1;
            }
            Ok(())
        }
    }
    let mut row = 0u64;
    let mut stopped = false;
    let mut de = serde_json::Deserializer::from_reader(reader);
    let result = de.deserialize_seq(Elements {
        sink,
        row: &mut row,
        stopped: &mut stopped,
    });
    if stopped {
        return Ok(false);
    }
    result
        .and_then(|()| de.end())
        .map_err(|e| ReadError::Json {
            path: path.to_owned(),
            row,
            message: e.to_string(),
        })?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each record of `content` (written to a file) as `into_value` gives it.
    fn records(name: &str, content: &str) -> Vec<Result<Value, String>> {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(name);
        std::fs::write(&path, content).expect("write");
        let mut out = Vec::new();
        super::super::read_files(&[path], &mut |raw| {
            assert_eq!(raw.row, out.len() as u64);
            out.push(raw.into_value());
            true
        })
        .expect("readable");
        out
    }

    #[test]
    fn json_lines_are_parsed_per_row_and_a_bad_line_fails_only_its_row() {
        let got = records("a.jsonl", "{\"a\": 1}\n\n{\"a\": \n  \n[2]\n");
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], Ok(serde_json::json!({"a": 1})));
        assert_eq!(
            got[1],
            Err("EOF while parsing a value at line 2 column 0".to_owned())
        );
        assert_eq!(got[2], Ok(serde_json::json!([2])));
    }

    #[test]
    fn array_elements_arrive_parsed() {
        let got = records("a.json", " [{\"a\": 1}, 2]");
        assert_eq!(
            got,
            [Ok(serde_json::json!({"a": 1})), Ok(serde_json::json!(2))]
        );
    }
}
