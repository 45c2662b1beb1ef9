//! Seeded row samples of input files (`chatshards check`): which records a read yields, chosen
//! without reading a large file whole, and a count of the bytes every sampled read takes.
//!
//! - Parquet: the row count is exact from the footer; `k` distinct row indices are drawn
//!   uniformly (Floyd's algorithm) and the reader decodes only the row groups and pages that
//!   hold them.
//! - JSON lines up to [`WHOLE_FILE_BYTES`] (and JSON arrays of that size): counted by one read,
//!   then `k` record indices drawn uniformly.
//! - Larger JSON lines: seeded byte offsets, each resolved to the first line that starts after
//!   it (the line holding the offset is skipped; past the last line it wraps to the first). A
//!   line is then picked with a probability proportional to the length of the line before it,
//!   not to its own, so long rows are not favoured. Such a row is identified by the byte
//!   offset of its line (its `row`), since its line number is unknown without reading up to
//!   it; the file's row count is estimated as its size over the mean sampled line length.
//! - Larger JSON arrays cannot be entered at an offset: their first `k` elements are read, and
//!   the row count is estimated from the mean record size (flagged as a head sample).

use super::{file_type, json, FileType, ReadError, ReadOptions, Record};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// JSON files up to this size are read whole to count their records (exact row counts and an
/// exactly uniform sample); larger ones are probed at byte offsets.
pub const WHOLE_FILE_BYTES: u64 = 8 << 20;

/// Byte offsets probed per wanted row at most: offsets that land before an already-found line
/// find it again, so more than `k` probes may be needed for `k` distinct lines; this bounds
/// them (a file of few, huge lines yields fewer rows rather than a long search).
const PROBES_PER_ROW: usize = 4;

/// Read buffer after a seek: small, so that a probe reads little more than its lines.
const PROBE_BUFFER: usize = 16 << 10;

/// Which records of one file a read yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileSample {
    /// Every record (blank lines included), as a build reads it.
    All,
    /// The records with these indices (sorted, distinct); blank lines are left out.
    Records(Vec<u64>),
    /// The JSON lines starting at these byte offsets (sorted, distinct); each record's `row`
    /// is its offset.
    LineStarts(Vec<u64>),
    /// The lines of a JSON lines file whose first byte is in `lo..hi` (a part of a partitioned
    /// build): `row` and `line` count from the first of them (0 and 1).
    LineRange { lo: u64, hi: u64 },
}

/// The samples of a run's files, and the bytes its reads took.
#[derive(Debug, Default)]
pub struct Sampling {
    pub files: BTreeMap<PathBuf, FileSample>,
    /// Bytes read from input files by every sampled read (and survey) so far.
    pub bytes_read: Arc<AtomicU64>,
}

impl Sampling {
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }
}

/// How a file's rows were counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RowCount {
    /// From the Parquet footer, or by reading the file.
    Exact,
    /// From byte offsets: size over the mean sampled line.
    Estimated,
    /// From the first records of a JSON array too large to read whole.
    EstimatedFromHead,
}

/// What is known of one file before sampling it.
#[derive(Debug, Clone)]
pub struct FileSurvey {
    pub bytes: u64,
    /// Rows a build reads (every record and, for line formats, every blank line).
    pub rows: u64,
    pub count: RowCount,
    /// Records that can be sampled (blank lines excluded).
    records: u64,
    /// Distinct line starts found by probing, in the order found.
    starts: Vec<u64>,
}

impl FileSurvey {
    /// Rows a sample of this file can have at most.
    pub fn available(&self) -> u64 {
        match self.count {
            RowCount::Estimated => self.starts.len() as u64,
            RowCount::Exact | RowCount::EstimatedFromHead => self.records,
        }
    }

    /// A seeded sample of `k` rows (all of them when `k` covers the file).
    pub fn sample(&self, k: u64, seed: u64) -> FileSample {
        match self.count {
            RowCount::Exact if k >= self.records => FileSample::All,
            RowCount::Exact => FileSample::Records(choose(self.records, k, seed)),
            RowCount::EstimatedFromHead => FileSample::Records((0..k.min(self.records)).collect()),
            RowCount::Estimated => {
                let mut starts: Vec<u64> = self.starts.iter().copied().take(k as usize).collect();
                starts.sort_unstable();
                FileSample::LineStarts(starts)
            }
        }
    }
}

/// A seed for one file: the run's seed and the file's name, so that two files of a source do
/// not get the same row numbers.
pub fn file_seed(seed: u64, name: &str) -> u64 {
    xxh3_64_with_seed(name.as_bytes(), seed)
}

/// The `i`-th seeded draw, uniform in `0..n` (n ≥ 1).
fn draw(seed: u64, i: u64, n: u64) -> u64 {
    let h = xxh3_64_with_seed(&i.to_le_bytes(), seed);
    ((u128::from(h) * u128::from(n)) >> 64) as u64
}

/// `k` distinct indices of `0..n`, uniformly (Floyd's algorithm: `k` draws, whatever `n`).
fn choose(n: u64, k: u64, seed: u64) -> Vec<u64> {
    let k = k.min(n);
    let mut set = BTreeSet::new();
    for (i, j) in (n - k..n).enumerate() {
        let t = draw(seed, i as u64, j + 1);
        if !set.insert(t) {
            set.insert(j);
        }
    }
    set.into_iter().collect()
}

/// Surveys a file: its row count and, for a large JSON lines file, up to `k` distinct line
/// starts found by seeded probes. Bytes read go to `counter`.
pub fn survey(
    path: &Path,
    k: u64,
    seed: u64,
    options: &ReadOptions,
    counter: &Arc<AtomicU64>,
) -> Result<FileSurvey, ReadError> {
    let io = |e| ReadError::Io(path.to_owned(), e);
    let bytes = std::fs::metadata(path).map_err(io)?.len();
    let kind = file_type(path)?;
    if let FileType::Parquet = kind {
        let rows = super::parquet::row_count(path, counter)?;
        return Ok(FileSurvey {
            bytes,
            rows,
            count: RowCount::Exact,
            records: rows,
            starts: Vec::new(),
        });
    }
    let lines = match kind {
        FileType::JsonLines => true,
        _ => !json::starts_with_array(path, counter)?,
    };
    if bytes <= WHOLE_FILE_BYTES || !lines {
        // Counted by a plain read: the same records a build sees.
        let (mut rows, mut records, mut weight) = (0u64, 0u64, 0u64);
        let head = bytes > WHOLE_FILE_BYTES;
        // No files listed: every record, the reads counted.
        let whole = ReadOptions {
            max_row_bytes: options.max_row_bytes,
            sample: Some(Arc::new(Sampling {
                files: BTreeMap::new(),
                bytes_read: counter.clone(),
            })),
            defer: false,
        };
        let mut sink = |_: u64, _: Option<u64>, record: Record| {
            rows += 1;
            if !matches!(record, Record::Blank) {
                records += 1;
                weight += record.weight() as u64;
            }
            !(head && records >= k)
        };
        json::read(path, lines, &whole, &mut sink)?;
        if head {
            // The mean record size of the head, over the whole file.
            let mean = (weight as f64 / records.max(1) as f64).max(1.0);
            return Ok(FileSurvey {
                bytes,
                rows: (bytes as f64 / mean).round() as u64,
                count: RowCount::EstimatedFromHead,
                records,
                starts: Vec::new(),
            });
        }
        return Ok(FileSurvey {
            bytes,
            rows,
            count: RowCount::Exact,
            records,
            starts: Vec::new(),
        });
    }
    let (starts, lengths) = probe(path, bytes, k, seed, counter)?;
    let mean = lengths as f64 / starts.len().max(1) as f64;
    Ok(FileSurvey {
        bytes,
        rows: (bytes as f64 / mean.max(1.0)).round() as u64,
        count: RowCount::Estimated,
        records: starts.len() as u64,
        starts,
    })
}

/// Up to `k` distinct non-blank line starts of a JSON lines file of `size` bytes, from seeded
/// offsets, and the sum of their lengths (newline included).
fn probe(
    path: &Path,
    size: u64,
    k: u64,
    seed: u64,
    counter: &Arc<AtomicU64>,
) -> Result<(Vec<u64>, u64), ReadError> {
    let io = |e| ReadError::Io(path.to_owned(), e);
    let file = std::fs::File::open(path).map_err(io)?;
    let mut reader =
        BufReader::with_capacity(PROBE_BUFFER, Counted::new(file, Some(counter.clone())));
    let mut found = BTreeSet::new();
    let (mut starts, mut lengths) = (Vec::new(), 0u64);
    let probes = (k as usize).saturating_mul(PROBES_PER_ROW);
    for i in 0..probes {
        if starts.len() as u64 >= k {
            break;
        }
        let offset = draw(seed, i as u64, size);
        let Some((start, len)) = line_after(&mut reader, offset).map_err(io)? else {
            continue;
        };
        if found.insert(start) {
            starts.push(start);
            lengths += len;
        }
    }
    Ok((starts, lengths))
}

/// The first non-blank line that starts after `offset` (the line holding it is skipped),
/// wrapping to the file's first line: (its start, its length with the newline).
fn line_after<R: Read + Seek>(
    reader: &mut BufReader<R>,
    offset: u64,
) -> std::io::Result<Option<(u64, u64)>> {
    reader.seek(SeekFrom::Start(offset))?;
    // Skipped, never held (limit 0); `stream_position` keeps the buffer.
    json::next_line(reader, &mut Vec::new(), 0)?;
    let mut at = reader.stream_position()?;
    // Reaching the end once wraps to the start; reaching it again means no line at all.
    let mut wrapped = false;
    loop {
        let mut line = Vec::new();
        match json::next_line(reader, &mut line, u64::MAX)? {
            None if wrapped => return Ok(None),
            None => {
                wrapped = true;
                at = bom_len(reader)?;
                reader.seek(SeekFrom::Start(at))?;
            }
            Some(_) if line.iter().all(u8::is_ascii_whitespace) => at += line.len() as u64,
            Some(_) => return Ok(Some((at, line.len() as u64))),
        }
    }
}

/// 3 when the file starts with a UTF-8 byte order mark, else 0.
fn bom_len<R: Read + Seek>(reader: &mut BufReader<R>) -> std::io::Result<u64> {
    reader.seek(SeekFrom::Start(0))?;
    Ok(if reader.fill_buf()?.starts_with(json::BOM) {
        json::BOM.len() as u64
    } else {
        0
    })
}

/// A reader that adds the bytes it reads to a counter.
pub struct Counted<R> {
    inner: R,
    counter: Option<Arc<AtomicU64>>,
}

impl<R> Counted<R> {
    pub fn new(inner: R, counter: Option<Arc<AtomicU64>>) -> Self {
        Counted { inner, counter }
    }
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(c) = &self.counter {
            c.fetch_add(n as u64, Ordering::Relaxed);
        }
        Ok(n)
    }
}

impl<R: Seek> Seek for Counted<R> {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.inner.seek(pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choose_is_distinct_sorted_seeded_and_spread() {
        let a = choose(1_000_000, 200, 7);
        assert_eq!(a.len(), 200);
        assert!(a.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(a, choose(1_000_000, 200, 7));
        assert_ne!(a, choose(1_000_000, 200, 8));
        // Spread over the range, not its start: some index in every quarter.
        for q in 0..4u64 {
            assert!(a.iter().any(|&i| i / 250_000 == q), "quarter {q}: {a:?}");
        }
        assert_eq!(choose(5, 10, 1), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn probes_find_line_starts_and_wrap() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("a.jsonl");
        // Lines at 0, 4 and 10 (after a blank line at 9).
        std::fs::write(&path, "abc\ndefg\n\nhi\n").expect("write");
        let file = std::fs::File::open(&path).expect("open");
        let mut r = BufReader::new(file);
        assert_eq!(line_after(&mut r, 0).expect("io"), Some((4, 5)));
        assert_eq!(line_after(&mut r, 3).expect("io"), Some((4, 5)));
        // The blank line is passed over.
        assert_eq!(line_after(&mut r, 4).expect("io"), Some((10, 3)));
        // In the last line: wraps to the first.
        assert_eq!(line_after(&mut r, 11).expect("io"), Some((0, 4)));
    }
}
