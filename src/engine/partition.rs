//! Partitioned builds: part I of N scans its share of every source (read, adapt, validate,
//! content filters, fingerprints, MinHash bands, benchmark n-grams: the per-row curation) into
//! one file of compact per-row records; the merge replays the parts' records in the order a
//! single build scans its rows, so every later step (dedup survivors, near-duplicate groups,
//! selection and mix, work passes, shuffle, shards) is the single build's own code on the same
//! records, and the output is the same bytes.
//!
//! **Shares.** A JSON lines file is cut into N equal byte ranges, part I reading the lines
//! that *start* in range I (so every line is read by exactly one part, whatever the line
//! lengths); a Parquet file's row groups go to the part whose equal share of the file's rows
//! holds the group's first row; a JSON array goes whole to one part, the arrays taken in
//! pipeline order round-robin. The rule depends only on the file sizes and N: a task run again
//! reads the same rows and writes the same bytes.
//!
//! **Row numbers.** A part numbers the records and lines of a byte range from its start; it
//! records, per file, how many records and lines its range held, and the merge adds those of
//! the parts before (Parquet rows and JSON array elements carry their index in the file, and
//! count 0 there) (a line's number is known only after reading every byte before it, which
//! no part does).
//!
//! **Format** (`PART-I-of-N.bin`, written as `.tmp` and renamed when complete): checksummed
//! frames of postcard values ([`crate::frames`]; a frame that fails its check is refused, naming
//! the part file, the frame and its byte offset): a header with the part's index, the part
//! count and the build's [`ResumeKey`] (pipeline, lockfile, template, tokenizer, tool version,
//! every input's size and modification time); per source and file, the rows in read order and
//! a file end with the counts; an end frame with the row count.

use crate::engine::journal::ResumeKey;
use crate::engine::ScanRow;
use crate::frames::FrameReader;
use crate::plan::Plan;
use crate::read::{FileSample, ReadError, Sampling, Splitting};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// 3: a filtered row carries the text its filter judged; 4: a benchmark hit, the text it
/// shares.
const PART_FORMAT: u32 = 4;

/// Which part of how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartSpec {
    pub index: usize,
    pub count: usize,
}

impl PartSpec {
    pub fn new(index: usize, count: usize) -> Result<PartSpec, String> {
        if count == 0 || count > 100_000 {
            return Err(format!(
                "the part count must be 1 to 100000 (it is {count})"
            ));
        }
        if index >= count {
            return Err(format!(
                "part {index} of {count} does not exist: parts are numbered 0 to {}",
                count - 1
            ));
        }
        Ok(PartSpec { index, count })
    }

    /// `I/N`, as `--part` takes it.
    pub fn parse(text: &str) -> Result<PartSpec, String> {
        let bad = || format!("`--part` takes I/N, part I (from 0) of N parts (not `{text}`)");
        let (i, n) = text.split_once('/').ok_or_else(bad)?;
        let (i, n) = (
            i.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        PartSpec::new(i, n)
    }

    /// Part of `count` whose index the scheduler gives: `SLURM_ARRAY_TASK_ID` (a Slurm job
    /// array) or `JOB_COMPLETION_INDEX` (a Kubernetes Indexed Job).
    pub fn from_env(count: usize) -> Result<PartSpec, String> {
        for variable in ["SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX"] {
            if let Ok(value) = std::env::var(variable) {
                let index = value.trim().parse().map_err(|_| {
                    format!("`{variable}` must be a part index, a whole number (it is `{value}`)")
                })?;
                return PartSpec::new(index, count);
            }
        }
        Err(format!(
            "`--parts {count}` takes the part's index from SLURM_ARRAY_TASK_ID or \
             JOB_COMPLETION_INDEX, and neither is set: give it with `--part I/{count}`"
        ))
    }

    pub fn file_name(&self) -> String {
        format!("part-{:05}-of-{:05}.bin", self.index, self.count)
    }

    pub fn path(&self, dir: &Path) -> PathBuf {
        dir.join(self.file_name())
    }
}

/// Where the parts of a pipeline go unless `--parts-dir` says: `OUTPUT.parts` beside the
/// output directory.
pub fn default_parts_dir(output: &Path) -> PathBuf {
    let mut name = output.file_name().unwrap_or_default().to_os_string();
    name.push(".parts");
    output.with_file_name(name)
}

/// The rows of every input file part `part` reads.
pub fn shares(plan: &Plan, part: PartSpec) -> Result<Sampling, ReadError> {
    let mut files = BTreeMap::new();
    let mut whole = 0usize;
    for path in plan.sources.iter().flat_map(|s| &s.files) {
        if files.contains_key(path) {
            continue;
        }
        let splitting = crate::read::splitting(path)?;
        let size = match splitting {
            Splitting::Lines => fs::metadata(path)
                .map_err(|e| ReadError::Io(path.clone(), e))?
                .len(),
            _ => 0,
        };
        files.insert(path.clone(), share(&splitting, size, whole, part));
        if matches!(splitting, Splitting::Whole) {
            whole += 1;
        }
    }
    Ok(Sampling {
        files,
        bytes_read: Arc::default(),
    })
}

/// Part `part`'s share of one file split as `splitting`: `size` is its length in bytes (JSON
/// lines), `whole` the number of files before it that go whole to one part (they are dealt
/// round-robin).
fn share(splitting: &Splitting, size: u64, whole: usize, part: PartSpec) -> FileSample {
    match splitting {
        Splitting::Lines => {
            let cut = |i: usize| (u128::from(size) * i as u128 / part.count as u128) as u64;
            FileSample::LineRange {
                lo: cut(part.index),
                hi: cut(part.index + 1),
            }
        }
        Splitting::RowGroups(groups) => {
            // A group goes to the part whose share of the file's rows holds its first row.
            let total: u64 = groups.iter().sum();
            let mut rows = Vec::new();
            let mut first = 0u64;
            for &n in groups {
                let owner = u128::from(first) * part.count as u128 / u128::from(total.max(1));
                if owner as usize == part.index {
                    rows.extend(first..first + n);
                }
                first += n;
            }
            FileSample::Records(rows)
        }
        Splitting::Whole => {
            if whole % part.count == part.index {
                FileSample::All
            } else {
                FileSample::Records(Vec::new())
            }
        }
    }
}

/// A frame of a part file as written and read.
#[derive(Serialize, Deserialize)]
enum Frame {
    Header {
        format: u32,
        index: u32,
        count: u32,
        /// The [`ResumeKey`] as JSON (it holds JSON values, which postcard cannot read back).
        key: String,
    },
    Row {
        file: u32,
        row: u64,
        shown: u64,
        scan: ScanRow,
    },
    FileEnd {
        source: u32,
        file: u32,
        records: u64,
        lines: u64,
    },
    End {
        rows: u64,
    },
}

/// Writes one part's records.
pub struct PartWriter {
    writer: BufWriter<File>,
    tmp: PathBuf,
    path: PathBuf,
    rows: u64,
}

impl PartWriter {
    /// Starts `part`'s file in `dir` (created if missing), as a `.tmp` beside it.
    pub fn create(dir: &Path, part: PartSpec, key: &ResumeKey) -> io::Result<PartWriter> {
        fs::create_dir_all(dir)?;
        crate::model::nofollow::real_dir(dir)?;
        let path = part.path(dir);
        let tmp = path.with_extension("bin.tmp");
        let mut w = PartWriter {
            writer: BufWriter::with_capacity(1 << 20, crate::model::nofollow::create(&tmp)?),
            tmp,
            path,
            rows: 0,
        };
        w.frame(&Frame::Header {
            format: PART_FORMAT,
            index: part.index as u32,
            count: part.count as u32,
            key: serde_json::to_string(key).map_err(io::Error::other)?,
        })?;
        Ok(w)
    }

    fn frame(&mut self, frame: &Frame) -> io::Result<()> {
        let bytes = crate::frames::to_vec(frame).map_err(io::Error::other)?;
        self.writer.write_all(&bytes)
    }

    pub fn row(&mut self, file: u32, row: u64, shown: u64, scan: ScanRow) -> io::Result<()> {
        self.rows += 1;
        self.frame(&Frame::Row {
            file,
            row,
            shown,
            scan,
        })
    }

    pub fn file_end(
        &mut self,
        source: usize,
        file: usize,
        records: u64,
        lines: u64,
    ) -> io::Result<()> {
        self.frame(&Frame::FileEnd {
            source: source as u32,
            file: file as u32,
            records,
            lines,
        })
    }

    /// Ends the file, makes it durable and puts it in place; the path and row count.
    pub fn finish(mut self) -> io::Result<(PathBuf, u64)> {
        let rows = self.rows;
        self.frame(&Frame::End { rows })?;
        let file = self.writer.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        fs::rename(&self.tmp, &self.path)?;
        Ok((self.path, rows))
    }
}

/// Why a merge cannot use its parts.
#[derive(Debug, thiserror::Error)]
pub enum PartError {
    #[error("part {index} of {count} is missing: `{path}` does not exist (build it with `chatshards build PIPELINE --part {index}/{count}`)")]
    Missing {
        index: usize,
        count: usize,
        path: PathBuf,
    },
    #[error("`{path}` holds part {held} of {held_count}, not part {index} of {count}: it was copied or renamed; build part {index}/{count} again")]
    Misplaced {
        path: PathBuf,
        held: u32,
        held_count: u32,
        index: usize,
        count: usize,
    },
    #[error("`{path}` was built from other inputs or settings than this merge: {}; build the part again", differences.join("; "))]
    Stale {
        path: PathBuf,
        differences: Vec<String>,
    },
    #[error("`{0}`: {1}")]
    Damaged(PathBuf, String),
    #[error("failed to read `{0}`: {1}")]
    Io(PathBuf, io::Error),
}

/// One part being replayed.
struct PartReader {
    frames: FrameReader<BufReader<File>>,
    path: PathBuf,
    rows: u64,
}

impl PartReader {
    /// The next frame, which must be there (a part ends with its end frame) and pass its check.
    fn frame(&mut self) -> Result<Frame, PartError> {
        let damaged = |what: String| {
            PartError::Damaged(self.path.clone(), format!("{what}: build the part again"))
        };
        match self.frames.read() {
            Ok(Some(frame)) => Ok(frame),
            Ok(None) => Err(damaged(format!(
                "cut short after frame {} at byte {}",
                self.frames.index(),
                self.frames.offset()
            ))),
            Err(e) => Err(damaged(e.to_string())),
        }
    }
}

/// The parts of a merge, checked, read in step.
pub struct Parts {
    parts: Vec<PartReader>,
}

/// One replayed row: (file, row, shown row, what the scan found), numbered as a single build
/// numbers it.
pub type PartRow = (u32, u64, u64, ScanRow);

impl Parts {
    /// Opens parts 0..count in `dir` and checks each was built as part `i` of `count` with
    /// the same key as this merge.
    pub fn open(dir: &Path, count: usize, key: &ResumeKey) -> Result<Parts, PartError> {
        let mut parts = Vec::with_capacity(count);
        for index in 0..count {
            let spec = PartSpec { index, count };
            let path = spec.path(dir);
            let file = match File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Err(PartError::Missing { index, count, path })
                }
                Err(e) => return Err(PartError::Io(path, e)),
            };
            let len = file
                .metadata()
                .map_err(|e| PartError::Io(path.clone(), e))?
                .len();
            let mut part = PartReader {
                frames: FrameReader::new(BufReader::with_capacity(1 << 20, file), len),
                path: path.clone(),
                rows: 0,
            };
            match part.frame()? {
                Frame::Header {
                    format,
                    index: held,
                    count: held_count,
                    key: held_key,
                } => {
                    if format != PART_FORMAT {
                        return Err(PartError::Damaged(
                            path,
                            format!("part format {format}, this tool reads {PART_FORMAT}: build the part again"),
                        ));
                    }
                    if held as usize != index || held_count as usize != count {
                        return Err(PartError::Misplaced {
                            path,
                            held,
                            held_count,
                            index,
                            count,
                        });
                    }
                    let held_key: ResumeKey = serde_json::from_str(&held_key)
                        .map_err(|e| PartError::Damaged(path.clone(), e.to_string()))?;
                    let differences = held_key.differences(key);
                    if !differences.is_empty() {
                        return Err(PartError::Stale { path, differences });
                    }
                }
                _ => return Err(PartError::Damaged(path, "no header".to_owned())),
            }
            parts.push(part);
        }
        Ok(Parts { parts })
    }

    /// Replays source `source`'s rows (with `files` files): file by file, each file's rows part
    /// by part, renumbered after the records and lines of the parts before.
    pub fn replay_source(
        &mut self,
        source: usize,
        files: usize,
        sink: &mut dyn FnMut(PartRow) -> Result<(), crate::engine::RunError>,
    ) -> Result<(), crate::engine::RunError> {
        for file in 0..files {
            let (mut records, mut lines) = (0u64, 0u64);
            for part in &mut self.parts {
                loop {
                    match part.frame()? {
                        Frame::Row {
                            file: f,
                            row,
                            shown,
                            scan,
                        } if f as usize == file => {
                            part.rows += 1;
                            sink((f, row + records, shown + lines, scan))?;
                        }
                        Frame::FileEnd {
                            source: s,
                            file: f,
                            records: r,
                            lines: l,
                        } if s as usize == source && f as usize == file => {
                            records += r;
                            lines += l;
                            break;
                        }
                        _ => {
                            return Err(PartError::Damaged(
                                part.path.clone(),
                                format!("out of order at source {source} file {file}: was it built from another pipeline?"),
                            )
                            .into())
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks every part was read to its end.
    pub fn finish(&mut self) -> Result<(), PartError> {
        for part in &mut self.parts {
            match part.frame()? {
                Frame::End { rows } if rows == part.rows => {}
                _ => {
                    return Err(PartError::Damaged(
                        part.path.clone(),
                        "rows after the last source".to_owned(),
                    ))
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
