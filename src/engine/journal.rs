//! The checkpoint journal of a build: what lets `chatshards build` go on after it was killed.
//!
//! A build is a fixed sequence of *passes* (a scan per source, then work passes; see
//! [`crate::engine`]), each a deterministic function of the inputs and of the ledger's state
//! before it. When a pass ends, its effect on the ledger (one record per row: what the scan
//! found, or what the work made of it) and the length of every side output are made durable
//! as `pass-NNNNNN.bin` (written as `.tmp`, synced, then renamed, so a file is whole or absent).
//! A resumed build replays the recorded passes into a fresh ledger without reading their rows,
//! cuts the side outputs back to where the last recorded pass left them, and runs on from the
//! first pass not recorded. A long pass also records a *segment* every
//! [`Journal::segment_rows`] rows (its records so far and the files' lengths, synced, in the
//! pass's `.tmp`): a build killed inside it replays those rows too and reads on after them. So at
//! most one segment of rows is done again, and the output is byte for byte the output of an
//! uninterrupted build.
//!
//! `key.json` holds what the recorded passes depend on ([`ResumeKey`]); a resume whose key
//! differs is refused, naming what changed.
//!
//! Files are checksummed frames ([`crate::frames`]) of a postcard value ([`Frame`]): a header
//! naming the pass, its events, and an end frame with the event count and the positions. A
//! frame that fails its check is damage, refused naming the file and the frame, except at the
//! end of a pass cut short (a `.tmp`), where it is the torn write of a kill: the pass resumes
//! from its last whole segment before it.

use crate::curate::ledger::{Scanned, Work};
use crate::frames::{FrameError, FrameReader};
use crate::model::nofollow;
use crate::reject::RejectReason;
use crate::write::SpillState;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Version of the pass file format; a journal of another version is not resumed. 4: the
/// regeneration tally of a kept row gained `not_verbatim`; 5: a kept row gained its split
/// `group`; 6: a candidate's benchmark hit gained the text it shares.
const FORMAT: u32 = 6;

/// Rows between two segments of a pass, unless the build says otherwise: a few seconds of work,
/// and few enough syncs (each syncs every open spill bucket) to cost nothing measurable.
pub const SEGMENT_ROWS: u64 = 100_000;

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("failed to write the build journal `{0}`")]
    Write(PathBuf, #[source] io::Error),
    #[error(
        "the build journal `{0}` is damaged ({1}); run the build with `--fresh` to start over"
    )]
    Damaged(PathBuf, String),
    /// The key of a journal opened with [`Journal::open_deferred`] could not be had.
    #[error("{0}")]
    Key(String),
}

/// The file in which a journal notes the boot it was recorded under.
const BOOT: &str = "boot_id";

/// The running system's boot id (Linux), which changes at every restart.
pub fn boot_id() -> Option<String> {
    let id = fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_owned()).filter(|id| !id.is_empty())
}

/// Whether the journal in `dir` was recorded since the system last started: the spill and
/// the working `conversations.jsonl` are not synced where the boot id is known (they survive
/// a killed build in the page cache, not a restart), so a journal of another boot is not gone
/// on from.
pub fn same_boot(dir: &Path) -> bool {
    match (fs::read_to_string(dir.join(BOOT)).ok(), boot_id()) {
        (Some(then), Some(now)) => then.trim() == now,
        (None, None) => true,
        _ => false,
    }
}

/// Where the key of a build that starts afresh comes from: its inputs are hashed beside its
/// work rather than before it, and the key is written to `key.json` once they are, before any
/// segment or pass is recorded (an interrupted build without `key.json` is never gone on from).
pub trait KeySource: Send + Sync {
    /// Whether [`KeySource::key`] would answer without waiting.
    fn ready(&self) -> bool;
    /// The key, waiting for the hashing; an error names the input that could not be read.
    fn key(&self) -> Result<ResumeKey, String>;
}

/// A `key.json` still to be written, shared by the journal and its recorders.
struct PendingKey {
    path: PathBuf,
    source: Arc<dyn KeySource>,
    written: Mutex<bool>,
}

impl PendingKey {
    /// Writes `key.json` if it is not yet written and the key is ready, or `wait`s for it;
    /// says whether it is written.
    fn write(&self, wait: bool) -> Result<bool, JournalError> {
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        if *written {
            return Ok(true);
        }
        if !wait && !self.source.ready() {
            return Ok(false);
        }
        let key = self.source.key().map_err(JournalError::Key)?;
        write_key(&self.path, &key)?;
        *written = true;
        Ok(true)
    }
}

fn write_key(path: &Path, key: &ResumeKey) -> Result<(), JournalError> {
    let text = serde_json::to_string_pretty(key)
        .map_err(|e| JournalError::Write(path.to_owned(), e.into()))?;
    write_synced(path, text.as_bytes()).map_err(|e| JournalError::Write(path.to_owned(), e))
}

/// What one row did in a pass, as the ledger needs it to replay the pass.
#[derive(Debug, Serialize, Deserialize)]
pub enum RowEvent {
    /// Scan: the row was rejected (its line is in `rejects.jsonl`).
    Rejected(RejectReason),
    /// Scan: a content filter dropped it (its line is in `filtered.jsonl`).
    Filtered(String),
    /// Scan: the row is a candidate.
    Candidate {
        file: u32,
        row: u64,
        shown: u64,
        scanned: Scanned,
    },
    /// Work: the outcome of rendering and tokenizing a wanted row (or one copy of it).
    Worked {
        file: u32,
        row: u64,
        copy: u32,
        work: Work,
    },
}

/// What a pass is: checked on replay against what the build expects at that point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PassKind {
    Scan,
    Work,
    /// A scan that works its candidates as it goes: scan and work events.
    Whole,
}

/// The lengths of every side output at the end of a pass.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Positions {
    pub rejects: u64,
    pub filtered: u64,
    pub conversations: u64,
    /// The next arrival sequence number (the sort key when not shuffling).
    pub sequence: u64,
    pub spill: SpillState,
}

/// A frame as read back.
#[derive(Debug, Deserialize)]
enum Frame {
    Header {
        format: u32,
        pass: u32,
        kind: PassKind,
        source: u32,
    },
    Event(RowEvent),
    End {
        events: u64,
        positions: Positions,
    },
    Segment {
        events: u64,
        rows: u64,
        positions: Positions,
    },
}

/// A frame as written: [`Frame`] with borrowed contents (the same variants in the same order,
/// so the same bytes).
#[derive(Serialize)]
enum FrameOut<'a> {
    Header {
        format: u32,
        pass: u32,
        kind: PassKind,
        source: u32,
    },
    Event(&'a RowEvent),
    End {
        events: u64,
        positions: &'a Positions,
    },
    Segment {
        events: u64,
        rows: u64,
        positions: &'a Positions,
    },
}

/// Everything the recorded passes depend on besides the tool's code: compared field by field
/// when a build resumes (inputs by size and content hash; a part's inputs, which a part does
/// not hash, by size and modification time).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResumeKey {
    pub tool_version: String,
    /// The pipeline by meaning (`identity::pipeline_value`).
    pub pipeline: Value,
    pub lock_sha256: Option<String>,
    pub template_sha256: String,
    pub template_kwargs: Value,
    pub tokenizer_sha256: String,
    pub inputs: Vec<InputStamp>,
}

/// An input file as a resume sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputStamp {
    pub path: String,
    pub bytes: u64,
    pub modified_ns: u64,
    /// SHA-256 of the file's bytes, hashed before the build read them (none in a part's key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

impl InputStamp {
    pub fn of(path: &Path, shown: &str, sha256: Option<String>) -> io::Result<InputStamp> {
        let meta = fs::metadata(path)?;
        let modified_ns = meta
            .modified()?
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        Ok(InputStamp {
            path: shown.to_owned(),
            bytes: meta.len(),
            modified_ns,
            sha256,
        })
    }
}

impl ResumeKey {
    /// What differs between the key of an interrupted build (`self`) and this one's, in words;
    /// empty when they are equal.
    pub fn differences(&self, now: &ResumeKey) -> Vec<String> {
        let mut out = Vec::new();
        if self.tool_version != now.tool_version {
            out.push(format!(
                "the tool version ({} then, {} now)",
                self.tool_version, now.tool_version
            ));
        }
        if self.pipeline != now.pipeline {
            out.push("the pipeline's settings".to_owned());
        }
        if self.lock_sha256 != now.lock_sha256 {
            out.push("the lockfile".to_owned());
        }
        if self.template_sha256 != now.template_sha256 {
            out.push("the template".to_owned());
        }
        if self.template_kwargs != now.template_kwargs {
            out.push("the template variables".to_owned());
        }
        if self.tokenizer_sha256 != now.tokenizer_sha256 {
            out.push("the tokenizer".to_owned());
        }
        for input in &now.inputs {
            match self.inputs.iter().find(|i| i.path == input.path) {
                None => out.push(format!("input `{}` (new)", input.path)),
                Some(then) if then.bytes != input.bytes => out.push(format!(
                    "input `{}` ({} bytes then, {} now)",
                    input.path, then.bytes, input.bytes
                )),
                // Content when both were hashed: an edit that keeps the size and the time
                // (`cp -p`, `touch -r`) is caught, a `touch` alone is not a change.
                Some(then) => match (&then.sha256, &input.sha256) {
                    (Some(a), Some(b)) if a != b => out.push(format!(
                        "input `{}` (its content: SHA-256 {a} then, {b} now)",
                        input.path
                    )),
                    (Some(_), Some(_)) => {}
                    _ if then.modified_ns != input.modified_ns => {
                        out.push(format!("input `{}` (modified since)", input.path))
                    }
                    _ => {}
                },
            }
        }
        for then in &self.inputs {
            if !now.inputs.iter().any(|i| i.path == then.path) {
                out.push(format!("input `{}` (no longer read)", then.path));
            }
        }
        out
    }
}

/// The journal directory of a build being written.
pub struct Journal {
    /// `None`: nothing is recorded (a build into a temporary directory, `check`).
    dir: Option<PathBuf>,
    /// Passes recorded whole, numbered from 0.
    recorded: usize,
    /// The next pass the build runs.
    next: usize,
    /// The pass after the recorded ones, when a segment of it is recorded.
    partial: Option<Partial>,
    segment_rows: u64,
    /// `key.json`, when it is written once the inputs are hashed ([`Journal::open_deferred`]).
    pending: Option<Arc<PendingKey>>,
}

/// A pass cut short after a recorded segment.
#[derive(Debug)]
struct Partial {
    path: PathBuf,
    /// Events and input rows of the pass up to the segment, and where the files stood.
    events: u64,
    rows: u64,
    positions: Positions,
}

/// How a pass runs: from its record, for real (and recorded), or from its recorded segments
/// on (their events replayed, then its input read on after their `rows` rows).
pub enum PassMode {
    Replay(Replay),
    Record(Recorder),
    Resume {
        replay: Replay,
        recorder: Recorder,
        rows: u64,
    },
}

impl Journal {
    /// A journal that records nothing.
    pub fn disabled() -> Journal {
        Journal {
            dir: None,
            recorded: 0,
            next: 0,
            partial: None,
            segment_rows: u64::MAX,
            pending: None,
        }
    }

    pub const KEY: &'static str = "key.json";

    /// Opens the journal in `dir` (created if missing) for a build whose key is `key`: the
    /// caller has checked that a journal already there has this key. Unfinished pass files
    /// are removed.
    pub fn open(dir: &Path, key: &ResumeKey, segment_rows: u64) -> Result<Journal, JournalError> {
        Self::open_with(dir, Ok(key), segment_rows)
    }

    /// [`Journal::open`] for a build that starts afresh while its inputs are still being
    /// hashed: `key.json` is written from `source` once it is ready (see [`KeySource`]).
    pub fn open_deferred(
        dir: &Path,
        source: Arc<dyn KeySource>,
        segment_rows: u64,
    ) -> Result<Journal, JournalError> {
        Self::open_with(dir, Err(source), segment_rows)
    }

    fn open_with(
        dir: &Path,
        key: Result<&ResumeKey, Arc<dyn KeySource>>,
        segment_rows: u64,
    ) -> Result<Journal, JournalError> {
        let write_err = |e| JournalError::Write(dir.to_owned(), e);
        fs::create_dir_all(dir).map_err(write_err)?;
        let mut recorded = 0;
        while dir.join(pass_name(recorded, "bin")).is_file() {
            recorded += 1;
        }
        let partial = Partial::find(&dir.join(pass_name(recorded, "tmp")), recorded)?;
        for entry in fs::read_dir(dir).map_err(write_err)? {
            let path = entry.map_err(write_err)?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let numbered = name
                .strip_prefix("pass-")
                .and_then(|n| n.split_once('.'))
                .and_then(|(n, _)| n.parse::<usize>().ok());
            // A pass file after a gap cannot be replayed (nor can a `.tmp` without a segment):
            // it goes.
            let kept = partial.as_ref().is_some_and(|p| p.path == path);
            if !kept && (numbered.is_some_and(|n| n >= recorded) || name.ends_with(".tmp")) {
                fs::remove_file(&path).map_err(|e| JournalError::Write(path.clone(), e))?;
            }
        }
        let boot = dir.join(BOOT);
        if let (Some(id), false) = (boot_id(), boot.is_file()) {
            write_synced(&boot, id.as_bytes()).map_err(|e| JournalError::Write(boot.clone(), e))?;
        }
        let key_path = dir.join(Self::KEY);
        let pending = match key {
            Ok(key) => {
                if !key_path.is_file() {
                    write_key(&key_path, key)?;
                }
                None
            }
            Err(source) => Some(Arc::new(PendingKey {
                path: key_path,
                source,
                written: Mutex::new(false),
            })),
        };
        Ok(Journal {
            dir: Some(dir.to_owned()),
            recorded,
            next: 0,
            partial,
            segment_rows: segment_rows.max(1),
            pending,
        })
    }

    /// Rows between two segments of a pass.
    /// Writes a deferred `key.json` now, waiting for the inputs' hashing: after the last pass,
    /// so that a build killed in its shard phase goes on from its passes.
    pub fn write_key(&self) -> Result<(), JournalError> {
        match &self.pending {
            Some(key) => key.write(true).map(|_| ()),
            None => Ok(()),
        }
    }

    pub fn segment_rows(&self) -> u64 {
        self.segment_rows
    }

    /// The key of a journal in `dir`, if one is there (and readable).
    pub fn key_in(dir: &Path) -> Option<ResumeKey> {
        let text = fs::read_to_string(dir.join(Self::KEY)).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Passes recorded whole (replayed by a resumed build).
    pub fn recorded(&self) -> usize {
        self.recorded
    }

    /// Rows of the pass after them recorded in segments.
    pub fn recorded_rows(&self) -> u64 {
        self.partial.as_ref().map_or(0, |p| p.rows)
    }

    /// Whether the pass about to run has a record (whole or in segments).
    pub fn replaying(&self) -> bool {
        self.next < self.recorded || (self.next == self.recorded && self.partial.is_some())
    }

    /// Where the side outputs stood at the end of the last recorded pass (`None`: nothing
    /// recorded, start from empty outputs).
    pub fn positions(&self) -> Result<Option<Positions>, JournalError> {
        let Some(dir) = &self.dir else {
            return Ok(None);
        };
        if let Some(partial) = &self.partial {
            return Ok(Some(partial.positions.clone()));
        }
        if self.recorded == 0 {
            return Ok(None);
        }
        let path = dir.join(pass_name(self.recorded - 1, "bin"));
        let mut reader = Replay::open(&path)?;
        let mut headers = 0;
        loop {
            match reader.frame()? {
                Frame::End { positions, .. } => return Ok(Some(positions)),
                Frame::Event(_) | Frame::Segment { .. } => {}
                Frame::Header { .. } if headers == 0 => headers += 1,
                Frame::Header { .. } => return Err(reader.damaged("a second header")),
            }
        }
    }

    /// Starts the next pass, a `kind` pass over source `source`: whatever of it is recorded
    /// goes to `apply`, event by event. `None` when the pass is recorded whole (it is done);
    /// else its recorder and how many of its input rows are done (recorded segments).
    pub fn start<E: From<JournalError>>(
        &mut self,
        kind: PassKind,
        source: usize,
        apply: &mut dyn FnMut(RowEvent) -> Result<(), E>,
    ) -> Result<Option<(Recorder, u64)>, E> {
        let mut replay_all = |mut replay: Replay| -> Result<(), E> {
            while let Some(event) = replay.next_event()? {
                apply(event)?;
            }
            Ok(())
        };
        Ok(match self.begin(kind, source)? {
            PassMode::Record(recorder) => Some((recorder, 0)),
            PassMode::Replay(replay) => {
                replay_all(replay)?;
                None
            }
            PassMode::Resume {
                replay,
                recorder,
                rows,
            } => {
                replay_all(replay)?;
                Some((recorder, rows))
            }
        })
    }

    /// Starts the next pass, a `kind` pass over source `source`.
    pub fn begin(&mut self, kind: PassKind, source: usize) -> Result<PassMode, JournalError> {
        let pass = self.next;
        self.next += 1;
        let Some(dir) = &self.dir else {
            return Ok(PassMode::Record(Recorder::inactive()));
        };
        let partial = if pass == self.recorded {
            self.partial.take()
        } else {
            None
        };
        if pass < self.recorded || partial.is_some() {
            let path = match &partial {
                Some(p) => p.path.clone(),
                None => dir.join(pass_name(pass, "bin")),
            };
            let mut replay = Replay::open(&path)?;
            match replay.frame()? {
                Frame::Header {
                    format: FORMAT,
                    pass: p,
                    kind: k,
                    source: s,
                } if p as usize == pass && k == kind && s as usize == source => {}
                other => {
                    return Err(replay.damaged(&format!(
                        "it records {other:?} where the build expects a {kind:?} pass over source {source}"
                    )))
                }
            }
            let Some(partial) = partial else {
                return Ok(PassMode::Replay(replay));
            };
            replay.limit = Some(partial.events);
            let err = |e| JournalError::Write(partial.path.clone(), e);
            let file =
                nofollow::open(nofollow::options().append(true), &partial.path).map_err(err)?;
            let recorder = Recorder {
                writer: Some(BufWriter::with_capacity(1 << 20, file)),
                tmp: partial.path.clone(),
                path: dir.join(pass_name(pass, "bin")),
                dir: dir.clone(),
                events: partial.events,
                key: self.pending.clone(),
            };
            return Ok(PassMode::Resume {
                replay,
                recorder,
                rows: partial.rows,
            });
        }
        let tmp = dir.join(pass_name(pass, "tmp"));
        let file = nofollow::create(&tmp).map_err(|e| JournalError::Write(tmp.clone(), e))?;
        let mut recorder = Recorder {
            writer: Some(BufWriter::with_capacity(1 << 20, file)),
            tmp,
            path: dir.join(pass_name(pass, "bin")),
            dir: dir.clone(),
            events: 0,
            key: self.pending.clone(),
        };
        recorder.frame(&FrameOut::Header {
            format: FORMAT,
            pass: pass as u32,
            kind,
            source: source as u32,
        })?;
        Ok(PassMode::Record(recorder))
    }
}

impl Partial {
    /// The recorded segments of the pass cut short at `path` (the `.tmp` of pass `pass`): the
    /// file is cut back to its last whole segment; `None` when it has none (or is not there).
    fn find(path: &Path, pass: usize) -> Result<Option<Partial>, JournalError> {
        if !path.is_file() {
            return Ok(None);
        }
        let mut replay = Replay::open(path)?;
        match replay.try_frame() {
            Ok(Some(Frame::Header {
                format: FORMAT,
                pass: p,
                ..
            })) if p as usize == pass => {}
            Err(e) if !e.is_torn_tail() => return Err(replay.damaged(&e.to_string())),
            _ => return Ok(None),
        }
        let mut offset = replay.consumed();
        let mut last = None;
        loop {
            match replay.try_frame() {
                Ok(Some(Frame::Segment {
                    events,
                    rows,
                    positions,
                })) => {
                    offset = replay.consumed();
                    last = Some((events, rows, positions));
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                // The last frame may be torn (the kill came while it was written): the pass
                // ends before it. Damage before it is not a kill's doing.
                Err(e) if e.is_torn_tail() => break,
                Err(e) => return Err(replay.damaged(&e.to_string())),
            }
        }
        let Some((events, rows, positions)) = last else {
            return Ok(None);
        };
        let err = |e| JournalError::Write(path.to_owned(), e);
        let file = nofollow::open(nofollow::options().write(true), path).map_err(err)?;
        file.set_len(offset).map_err(err)?;
        file.sync_all().map_err(err)?;
        Ok(Some(Partial {
            path: path.to_owned(),
            events,
            rows,
            positions,
        }))
    }
}

fn pass_name(pass: usize, ext: &str) -> String {
    format!("pass-{pass:06}.{ext}")
}

/// Writes a file and syncs it.
fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = nofollow::create(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Records one pass as it runs.
pub struct Recorder {
    /// `None`: records nothing.
    writer: Option<BufWriter<File>>,
    tmp: PathBuf,
    path: PathBuf,
    dir: PathBuf,
    events: u64,
    /// Written before the first segment or the end of a pass is.
    key: Option<Arc<PendingKey>>,
}

impl Recorder {
    fn inactive() -> Recorder {
        Recorder {
            writer: None,
            tmp: PathBuf::new(),
            path: PathBuf::new(),
            dir: PathBuf::new(),
            events: 0,
            key: None,
        }
    }

    /// Whether the pass is recorded (else the caller need not compute positions).
    pub fn active(&self) -> bool {
        self.writer.is_some()
    }

    pub fn record(&mut self, event: &RowEvent) -> Result<(), JournalError> {
        if self.writer.is_none() {
            return Ok(());
        }
        self.events += 1;
        self.frame(&FrameOut::Event(event))
    }

    fn frame(&mut self, frame: &FrameOut) -> Result<(), JournalError> {
        let Some(w) = self.writer.as_mut() else {
            return Ok(());
        };
        let err = |e| JournalError::Write(self.tmp.clone(), e);
        let bytes = crate::frames::to_vec(frame).map_err(|e| err(io::Error::other(e)))?;
        w.write_all(&bytes).map_err(err)
    }

    /// Records a segment: the pass's first `rows` input rows are done, and the files stand at
    /// `positions` (taken after they were synced). Synced before it returns.
    /// Not recorded while the inputs are still being hashed (the pass goes on; it is only
    /// a later point to resume from).
    pub fn segment(&mut self, rows: u64, positions: Positions) -> Result<(), JournalError> {
        if self.writer.is_none() {
            return Ok(());
        }
        if let Some(key) = &self.key {
            if !key.write(false)? {
                return Ok(());
            }
        }
        let events = self.events;
        self.frame(&FrameOut::Segment {
            events,
            rows,
            positions: &positions,
        })?;
        let err = |e| JournalError::Write(self.tmp.clone(), e);
        let Some(w) = self.writer.as_mut() else {
            return Ok(());
        };
        w.flush().map_err(err)?;
        w.get_ref().sync_data().map_err(err)
    }

    /// Ends the pass: `positions` (taken after the side outputs were synced) close the file,
    /// which is synced and renamed into place. Does not wait for a deferred key: the next pass
    /// starts at once, and until `key.json` is written (by a later segment or pass, or
    /// [`Journal::write_key`]) a killed build starts afresh, as it would have before this pass.
    pub fn finish(mut self, positions: Positions) -> Result<(), JournalError> {
        if self.writer.is_none() {
            return Ok(());
        }
        if let Some(key) = &self.key {
            key.write(false)?;
        }
        let events = self.events;
        self.frame(&FrameOut::End {
            events,
            positions: &positions,
        })?;
        let err = |e| JournalError::Write(self.tmp.clone(), e);
        let Some(w) = self.writer.take() else {
            return Ok(());
        };
        let file = w.into_inner().map_err(|e| err(e.into_error()))?;
        file.sync_all().map_err(err)?;
        fs::rename(&self.tmp, &self.path).map_err(err)?;
        // The rename itself is durable once the directory is synced.
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(err)
    }
}

/// Reads a recorded pass back.
pub struct Replay {
    frames: FrameReader<BufReader<File>>,
    path: PathBuf,
    events: u64,
    /// For a pass cut short: the events of its recorded segments.
    limit: Option<u64>,
}

impl Replay {
    fn open(path: &Path) -> Result<Replay, JournalError> {
        let damaged = |e: io::Error| JournalError::Damaged(path.to_owned(), e.to_string());
        let file = File::open(path).map_err(damaged)?;
        let len = file.metadata().map_err(damaged)?.len();
        Ok(Replay {
            frames: FrameReader::new(BufReader::with_capacity(1 << 20, file), len),
            path: path.to_owned(),
            events: 0,
            limit: None,
        })
    }

    fn damaged(&self, what: &str) -> JournalError {
        JournalError::Damaged(self.path.clone(), what.to_owned())
    }

    /// Bytes of the file read so far (frames read whole).
    fn consumed(&self) -> u64 {
        self.frames.offset()
    }

    fn try_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        self.frames.read()
    }

    /// The next frame, which must be there: a recorded pass ends with its end frame.
    fn frame(&mut self) -> Result<Frame, JournalError> {
        match self.frames.read() {
            Ok(Some(frame)) => Ok(frame),
            Ok(None) => Err(self.damaged(&format!(
                "cut short after frame {} at byte {}",
                self.frames.index(),
                self.frames.offset()
            ))),
            Err(e) => Err(self.damaged(&e.to_string())),
        }
    }

    /// The next event of the pass, `None` at its end.
    pub fn next_event(&mut self) -> Result<Option<RowEvent>, JournalError> {
        if self.limit.is_some_and(|limit| self.events >= limit) {
            return Ok(None);
        }
        match self.frame()? {
            Frame::Event(event) => {
                self.events += 1;
                Ok(Some(event))
            }
            Frame::Segment { .. } => self.next_event(),
            Frame::End { events, .. } if events == self.events => Ok(None),
            Frame::End { events, .. } => {
                Err(self.damaged(&format!("{events} events announced, {} read", self.events)))
            }
            Frame::Header { .. } => Err(self.damaged("a second header")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::curate::ledger::KeptWork;

    fn key() -> ResumeKey {
        ResumeKey {
            tool_version: "0.1.0".into(),
            pipeline: serde_json::json!({"name": "t"}),
            lock_sha256: None,
            template_sha256: "a".into(),
            template_kwargs: serde_json::json!({}),
            tokenizer_sha256: "b".into(),
            inputs: vec![InputStamp {
                path: "data/a.jsonl".into(),
                bytes: 10,
                modified_ns: 1,
                sha256: None,
            }],
        }
    }

    #[test]
    fn a_recorded_pass_replays_its_events_and_positions() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut journal = Journal::open(dir.path(), &key(), SEGMENT_ROWS).expect("open");
        let PassMode::Record(mut r) = journal.begin(PassKind::Scan, 0).expect("begin") else {
            panic!("a new journal replays")
        };
        r.record(&RowEvent::Rejected(RejectReason::InvalidJson))
            .expect("record");
        r.record(&RowEvent::Filtered("language".into()))
            .expect("record");
        let positions = Positions {
            rejects: 5,
            filtered: 6,
            conversations: 7,
            sequence: 8,
            spill: SpillState {
                rows: 9,
                buckets: vec![(3, 4096)],
            },
        };
        r.finish(positions.clone()).expect("finish");
        // A pass cut short leaves a `.tmp` that the next open removes.
        let PassMode::Record(mut r) = journal.begin(PassKind::Work, 0).expect("begin") else {
            panic!("replays a pass never recorded")
        };
        r.record(&RowEvent::Worked {
            file: 0,
            row: 1,
            copy: 0,
            work: Work::Kept(KeptWork::default()),
        })
        .expect("record");
        drop(r);

        let mut journal = Journal::open(dir.path(), &key(), SEGMENT_ROWS).expect("reopen");
        assert_eq!(journal.recorded(), 1);
        assert_eq!(journal.positions().expect("positions"), Some(positions));
        assert!(!dir.path().join("pass-000001.tmp").exists());
        // Replayed as the same kind of pass over the same source only.
        let PassMode::Replay(mut replay) = journal.begin(PassKind::Scan, 0).expect("begin") else {
            panic!("not replayed")
        };
        assert!(matches!(
            replay.next_event().expect("event"),
            Some(RowEvent::Rejected(RejectReason::InvalidJson))
        ));
        assert!(matches!(
            replay.next_event().expect("event"),
            Some(RowEvent::Filtered(f)) if f == "language"
        ));
        assert!(replay.next_event().expect("end").is_none());
        assert!(!journal.replaying());
        let mut other = Journal::open(dir.path(), &key(), SEGMENT_ROWS).expect("reopen");
        let err = match other.begin(PassKind::Work, 0) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a scan record replayed as work"),
        };
        assert!(
            err.contains("pass-000000.bin` is damaged (it records Header"),
            "{err}"
        );
    }

    /// A key that becomes ready when the test says so.
    struct Later(std::sync::atomic::AtomicBool);
    impl KeySource for Later {
        fn ready(&self) -> bool {
            self.0.load(std::sync::atomic::Ordering::SeqCst)
        }
        fn key(&self) -> Result<ResumeKey, String> {
            Ok(key())
        }
    }

    #[test]
    fn a_deferred_key_is_written_before_any_segment_or_pass_is_recorded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let source = Arc::new(Later(false.into()));
        let mut journal = Journal::open_deferred(dir.path(), source.clone(), 1).expect("open");
        assert!(Journal::key_in(dir.path()).is_none());
        let PassMode::Record(mut r) = journal.begin(PassKind::Scan, 0).expect("begin") else {
            panic!("a new journal replays")
        };
        r.record(&RowEvent::Filtered("language".into()))
            .expect("record");
        // Not ready: the segment is left out (a resume could not check the inputs).
        r.segment(1, Positions::default()).expect("segment");
        assert!(Journal::key_in(dir.path()).is_none());
        drop(r);
        let reopened = Journal::open(dir.path(), &key(), 1).expect("reopen");
        assert_eq!((reopened.recorded(), reopened.recorded_rows()), (0, 0));

        let mut journal = Journal::open_deferred(dir.path(), source.clone(), 1).expect("open");
        let PassMode::Record(mut r) = journal.begin(PassKind::Scan, 0).expect("begin") else {
            panic!("nothing was recorded")
        };
        r.record(&RowEvent::Filtered("language".into()))
            .expect("record");
        source.0.store(true, std::sync::atomic::Ordering::SeqCst);
        r.segment(1, Positions::default()).expect("segment");
        assert_eq!(Journal::key_in(dir.path()), Some(key()));
        r.finish(Positions::default()).expect("finish");
        assert_eq!(
            Journal::open(dir.path(), &key(), 1)
                .expect("reopen")
                .recorded(),
            1
        );
    }

    #[test]
    fn a_finished_pass_does_not_wait_for_a_deferred_key_and_write_key_does() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut journal =
            Journal::open_deferred(dir.path(), Arc::new(Later(false.into())), 1).expect("open");
        let PassMode::Record(r) = journal.begin(PassKind::Scan, 0).expect("begin") else {
            panic!("a new journal replays")
        };
        // Not ready: the pass is recorded, the key is not (a kill now starts afresh).
        r.finish(Positions::default()).expect("finish");
        assert_eq!(Journal::key_in(dir.path()), None);
        assert!(dir.path().join(pass_name(0, "bin")).is_file());
        // `key` answers (it waits for the hashing); `ready` only says it would not wait.
        journal.write_key().expect("write key");
        assert_eq!(Journal::key_in(dir.path()), Some(key()));
        assert_eq!(
            Journal::open(dir.path(), &key(), 1)
                .expect("reopen")
                .recorded(),
            1
        );
    }

    #[test]
    fn a_pass_cut_short_resumes_after_its_last_whole_segment() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut journal = Journal::open(dir.path(), &key(), 2).expect("open");
        let PassMode::Record(mut r) = journal.begin(PassKind::Scan, 0).expect("begin") else {
            panic!("a new journal replays")
        };
        let at = |n| Positions {
            rejects: n,
            ..Positions::default()
        };
        for i in 0..5u64 {
            r.record(&RowEvent::Filtered(format!("f{i}")))
                .expect("record");
            if i == 1 || i == 3 {
                r.segment(i + 1, at(i + 1)).expect("segment");
            }
        }
        // Killed: the fifth event and whatever was buffered never became a segment; a torn
        // frame at the end is dropped too.
        drop(r);
        let tmp = dir.path().join("pass-000000.tmp");
        let mut f = fs::OpenOptions::new().append(true).open(&tmp).expect("tmp");
        f.write_all(&[200, 0, 0, 0, 1, 2]).expect("torn frame");
        drop(f);
        let mut journal = Journal::open(dir.path(), &key(), 2).expect("reopen");
        assert_eq!(journal.recorded(), 0);
        assert_eq!(journal.recorded_rows(), 4);
        assert!(journal.replaying());
        assert_eq!(journal.positions().expect("positions"), Some(at(4)));
        let PassMode::Resume {
            mut replay,
            mut recorder,
            rows,
        } = journal.begin(PassKind::Scan, 0).expect("begin")
        else {
            panic!("not resumed")
        };
        assert_eq!(rows, 4);
        let mut seen = Vec::new();
        while let Some(RowEvent::Filtered(f)) = replay.next_event().expect("event") {
            seen.push(f);
        }
        assert_eq!(seen, ["f0", "f1", "f2", "f3"]);
        // Goes on recording where the segment ended, and the finished pass replays whole.
        recorder
            .record(&RowEvent::Filtered("f4".into()))
            .expect("record");
        recorder.finish(at(5)).expect("finish");
        let mut journal = Journal::open(dir.path(), &key(), 2).expect("reopen");
        assert_eq!(journal.recorded(), 1);
        assert_eq!(journal.positions().expect("positions"), Some(at(5)));
        let PassMode::Replay(mut replay) = journal.begin(PassKind::Scan, 0).expect("begin") else {
            panic!("not replayed")
        };
        let mut seen = Vec::new();
        while let Some(RowEvent::Filtered(f)) = replay.next_event().expect("event") {
            seen.push(f);
        }
        assert_eq!(seen, ["f0", "f1", "f2", "f3", "f4"]);
    }

    /// Records pass 0 whole and pass 1 in two segments (killed after them); the two files.
    fn recorded(dir: &Path) -> (PathBuf, PathBuf) {
        let mut journal = Journal::open(dir, &key(), 1).expect("open");
        let PassMode::Record(mut r) = journal.begin(PassKind::Scan, 0).expect("begin") else {
            panic!("a new journal replays")
        };
        r.record(&RowEvent::Filtered("a".into())).expect("record");
        r.finish(Positions::default()).expect("finish");
        let PassMode::Record(mut r) = journal.begin(PassKind::Scan, 1).expect("begin") else {
            panic!("a new journal replays")
        };
        for i in 0..2u64 {
            r.record(&RowEvent::Filtered(format!("f{i}")))
                .expect("record");
            r.segment(i + 1, Positions::default()).expect("segment");
        }
        drop(r);
        (dir.join("pass-000000.bin"), dir.join("pass-000001.tmp"))
    }

    fn open_err(dir: &Path) -> String {
        match Journal::open(dir, &key(), 1) {
            Err(e) => e.to_string(),
            Ok(mut j) => match j.begin(PassKind::Scan, 0) {
                Err(e) => e.to_string(),
                Ok(PassMode::Replay(mut r)) => loop {
                    match r.next_event() {
                        Err(e) => break e.to_string(),
                        Ok(Some(_)) => {}
                        Ok(None) => panic!("a damaged journal replayed"),
                    }
                },
                Ok(_) => panic!("a damaged journal was not replayed"),
            },
        }
    }

    #[test]
    fn a_flipped_bit_in_any_frame_is_refused_naming_the_file_and_frame() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (bin, tmp) = recorded(dir.path());
        let good = (fs::read(&bin).expect("bin"), fs::read(&tmp).expect("tmp"));
        // The event frame of the whole pass: frame 1, after the header frame.
        let header = 12 + u32::from_le_bytes(good.0[..4].try_into().expect("len")) as usize;
        let mut bad = good.0.clone();
        bad[header + 12] ^= 4;
        fs::write(&bin, &bad).expect("write");
        let err = open_err(dir.path());
        assert!(
            err.contains("pass-000000.bin` is damaged (frame 1 at byte")
                && err.contains("fails its checksum"),
            "{err}"
        );
        fs::write(&bin, &good.0).expect("write");
        // The segmented pass, damaged in its first event (frames follow it): refused too.
        let header = 12 + u32::from_le_bytes(good.1[..4].try_into().expect("len")) as usize;
        let mut bad = good.1.clone();
        bad[header + 12] ^= 4;
        fs::write(&tmp, &bad).expect("write");
        let err = match Journal::open(dir.path(), &key(), 1) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a damaged segment was resumed"),
        };
        assert_eq!(
            err,
            format!(
                "the build journal `{}` is damaged (frame 1 at byte {header} fails its checksum); \
                 run the build with `--fresh` to start over",
                tmp.display()
            )
        );
        // A flipped bit in the whole pass's end frame (the last frame of a renamed file):
        // damage, not a torn write.
        let mut bad = good.0.clone();
        let n = bad.len();
        bad[n - 1] ^= 1;
        fs::write(&bin, &bad).expect("write");
        fs::write(&tmp, &good.1).expect("write");
        let err = open_err(dir.path());
        assert!(err.contains("pass-000000.bin` is damaged (frame"), "{err}");
    }

    #[test]
    fn a_pass_cut_anywhere_in_its_last_frame_resumes_from_the_segment_before() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_, tmp) = recorded(dir.path());
        let good = fs::read(&tmp).expect("tmp");
        // The frames: header, f0, segment 1, f1, segment 2. Cut inside the last frame (or its
        // last byte flipped, a torn write): the pass resumes after segment 1.
        let mut ends = Vec::new();
        let mut at = 0;
        while at < good.len() {
            at += 12 + u32::from_le_bytes(good[at..at + 4].try_into().expect("len")) as usize;
            ends.push(at);
        }
        assert_eq!(ends.len(), 5);
        let mut cases: Vec<Vec<u8>> = (ends[3] + 1..ends[4])
            .map(|cut| good[..cut].to_vec())
            .collect();
        let mut flipped = good.clone();
        flipped[ends[4] - 1] ^= 1;
        cases.push(flipped);
        for case in cases {
            fs::write(&tmp, &case).expect("write");
            let journal = Journal::open(dir.path(), &key(), 1).expect("a torn tail resumes");
            assert_eq!(journal.recorded(), 1);
            assert_eq!(journal.recorded_rows(), 1, "{} bytes", case.len());
            assert_eq!(
                fs::metadata(&tmp).expect("tmp").len(),
                ends[2] as u64,
                "cut back to the segment"
            );
        }
    }

    #[test]
    fn differences_name_what_changed() {
        let then = key();
        assert!(then.differences(&then).is_empty());
        let mut now = key();
        now.template_sha256 = "c".into();
        now.inputs[0].modified_ns = 2;
        now.inputs.push(InputStamp {
            path: "data/b.jsonl".into(),
            bytes: 1,
            modified_ns: 1,
            sha256: None,
        });
        assert_eq!(
            then.differences(&now),
            [
                "the template",
                "input `data/a.jsonl` (modified since)",
                "input `data/b.jsonl` (new)"
            ]
        );
        // Hashed inputs compare by content, not by time.
        let hashed = |sha: &str, modified_ns| {
            let mut k = key();
            k.inputs[0].sha256 = Some(sha.into());
            k.inputs[0].modified_ns = modified_ns;
            k
        };
        assert!(hashed("aa", 1).differences(&hashed("aa", 2)).is_empty());
        assert_eq!(
            hashed("aa", 1).differences(&hashed("bb", 1)),
            ["input `data/a.jsonl` (its content: SHA-256 aa then, bb now)"]
        );
    }
}
