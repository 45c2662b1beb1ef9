//! JSON lines and JSON arrays. Hub datasets name both `.json`, so the first non-space byte
//! decides: `[` is an array (streamed element by element), anything else is JSON lines.

use super::ReadError;
use serde::de::{Deserializer, SeqAccess, Visitor};
use serde_json::Value;
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

type Sink<'a> = dyn FnMut(u64, Result<Value, String>) -> bool + 'a;

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
    let mut line = Vec::new();
    let mut row = 0u64;
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| ReadError::Io(path.to_owned(), e))?;
        if n == 0 {
            return Ok(true);
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let value = serde_json::from_slice::<Value>(&line).map_err(|e| e.to_string());
        if !sink(row, value) {
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
                if !(self.sink)(*self.row, Ok(value)) {
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
