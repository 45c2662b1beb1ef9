//! Where a build writes, and how it replaces a previous output without ever destroying anything
//! it did not write.
//!
//! - **What may be an output directory.** Not an input (a source file, the tokenizer, the
//!   template, the pipeline file), not a directory that holds one or lies inside one, not the
//!   pipeline's folder or one of its ancestors, not the current directory or one of its
//!   ancestors, not a project or repository root (a directory holding `.git`, `Cargo.toml`,
//!   `pyproject.toml`, ... see [`PROJECT_MARKERS`]). An output directory *inside* the pipeline's
//!   folder or a repository is the normal case (`out/demo`) and allowed. Paths are compared
//!   canonicalized (symlinks and `..` resolved).
//! - **What counts as a previous output.** A directory whose `manifest.json` parses as a
//!   manifest this tool wrote (`tool.name == "chatshards"` and the manifest's own fields) and
//!   that holds nothing but files this tool writes ([`WRITTEN_FILES`] and the shards its manifest
//!   lists). An empty directory may be used too. Anything else is refused, naming what is in the
//!   way: the user's files are *refused, not kept*, because keeping them means either moving
//!   them into the new output (not atomic, and results computed on the old rows would sit next
//!   to different rows) or leaving them in a directory the tool then cannot remove; so the user
//!   moves them, knowingly. A `hidden_states/` folder is refused with its own reason.
//! - **Replacement.** The new dataset is written into `DIR.partial` beside the output and
//!   swapped with the old one in one atomic `renameat2(RENAME_EXCHANGE)`: at every instant `DIR`
//!   is either the complete old dataset or the complete new one. Then only the files the old
//!   manifest lists are removed, and the directory if that leaves it empty. Where the exchange
//!   is not supported (not Linux, some network file systems) the old output is renamed aside
//!   to `DIR.old` and the new one renamed into place: between those two renames `DIR` does not
//!   exist (the old dataset is whole in `DIR.old`, and the next build renames it back if the
//!   machine died right then).
//! - **Exclusion.** A build holds an advisory `flock` on `DIR.lock` beside the output (never
//!   inside the user's data) from its start to its end; a second build into the same directory
//!   refuses at once. The kernel drops the lock when the process dies, however it dies, so a
//!   killed build never leaves it stuck. The (empty) lock file stays: removing it would let two
//!   builds lock two different files.
//! - **Resume.** The staging directory holds the build's working files in `.work/` (the spill
//!   and the journal, [`crate::engine::journal`]). A build killed (SIGKILL, power loss) or interrupted
//!   (SIGINT / SIGTERM) once a pass is recorded leaves `DIR.partial` in place, and the next build
//!   of the same pipeline and inputs goes on from it; a build of something else refuses, naming
//!   what changed, until it is run with `--fresh` (which discards it). `.work/` is moved out
//!   of the staging directory just before the swap, so it is never part of an output. A build
//!   killed after its dataset was finished (every file synced, the manifest's hash recorded
//!   in the working files) but before the swap leaves a dataset that the next build of the
//!   same pipeline and inputs swaps in as it is, without building it again.
//! - **Clean failure.** On any error and on a panic the staging directory is removed
//!   ([`discard_staging`]); an error is not resumed (fix its cause and build again).

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::fs;
use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use super::journal::{Journal, ResumeKey};
use crate::write::{VALIDATION_DIR, VALIDATION_FILES};

/// Every fixed file name a build writes into its output directory, besides the shards the
/// manifest lists. A new output file is one more line here (and then recognized and replaced).
pub const WRITTEN_FILES: &[&str] = &[
    "manifest.json",
    "dataset_info.json",
    "state.json",
    "rejects.jsonl",
    "filtered.jsonl",
    "conversations.jsonl",
    "pipeline.yaml",
    "pipeline.lock",
    "stats.json",
    "token_freq.pt",
    "token_freq_all.pt",
    "report.html",
    crate::write::derived::RECORD,
];

/// The working files inside the staging directory (never in a finished output): the spill
/// ([`SPILL`]) and the journal ([`JOURNAL`]).
pub const WORK_DIR: &str = ".work";
pub const SPILL: &str = "spill";
pub const JOURNAL: &str = "journal";
/// `conversations.jsonl` as the passes write it, in the working files.
pub const CONVERSATIONS: &str = "conversations.jsonl";
/// In the working files: the SHA-256 of the finished dataset's `manifest.json`, written (after
/// every output file is on disk) just before the swap, so that a build killed before the swap
/// is finished by the next one instead of built again.
const FINISHED: &str = "finished";
/// The name of the spill directory of earlier versions, cleared like the rest.
const OLD_SPILL_DIR: &str = ".spill";

/// Whether a build may go on from an interrupted one in its staging directory.
pub enum Resume<'a> {
    /// Never: an interrupted build's state is discarded.
    Fresh,
    /// When the interrupted build has this key; refused, naming the differences, otherwise.
    /// The key is asked for only when there is an interrupted build to compare it with (it
    /// hashes the inputs, which a build that starts afresh does beside its work instead).
    IfSame(&'a dyn Fn() -> Result<ResumeKey>),
}

/// Entries that mark a directory as a project or repository root, which is never an output.
pub const PROJECT_MARKERS: &[&str] = &[
    ".git",
    ".hg",
    ".svn",
    "Cargo.toml",
    "pyproject.toml",
    "setup.py",
    "package.json",
    "go.mod",
    "Makefile",
];

/// The part of a manifest read back to recognize an old output: the tool's own fields.
#[derive(Debug, Deserialize)]
struct OldManifest {
    tool: OldTool,
    #[allow(dead_code)] // required to be present: part of recognizing the schema
    name: String,
    #[allow(dead_code)]
    rows: u64,
    #[allow(dead_code)]
    inputs: serde_json::Map<String, serde_json::Value>,
    #[allow(dead_code)]
    settings: serde_json::Map<String, serde_json::Value>,
    #[allow(dead_code)]
    sources: serde_json::Map<String, serde_json::Value>,
    shards: Vec<OldShard>,
}

#[derive(Debug, Deserialize)]
struct OldTool {
    name: String,
}

#[derive(Debug, Deserialize)]
struct OldShard {
    file: String,
}

/// What an existing output directory holds.
#[derive(Debug, PartialEq, Eq)]
enum Existing {
    Missing,
    Empty,
    /// A previous output, holding only files this tool wrote.
    Output,
}

/// Whether `name` is a shard file name as [`crate::write::shard_name`] writes it.
fn is_shard_name(name: &str) -> bool {
    let Some(rest) = name
        .strip_prefix("data-")
        .and_then(|r| r.strip_suffix(".arrow"))
    else {
        return false;
    };
    match rest.split_once("-of-") {
        Some((i, n)) => [i, n]
            .iter()
            .all(|d| d.len() >= 5 && d.bytes().all(|b| b.is_ascii_digit())),
        None => false,
    }
}

/// Reads `dir`'s manifest as one this tool wrote, or says why it is not one.
fn read_manifest(dir: &Path) -> Result<OldManifest, String> {
    let path = dir.join("manifest.json");
    let bytes = fs::read(&path).map_err(|e| format!("its manifest.json cannot be read ({e})"))?;
    let manifest: OldManifest = serde_json::from_slice(&bytes)
        .map_err(|e| format!("its manifest.json is not a chatshards manifest ({e})"))?;
    if manifest.tool.name != env!("CARGO_PKG_NAME") {
        return Err(format!(
            "its manifest.json was written by `{}`, not chatshards",
            manifest.tool.name
        ));
    }
    if let Some(bad) = manifest
        .shards
        .iter()
        .find(|s| !is_shard_name(in_validation(&s.file).unwrap_or(&s.file)))
    {
        return Err(format!(
            "its manifest.json lists a shard `{}` that chatshards would not have written",
            bad.file
        ));
    }
    Ok(manifest)
}

/// The name inside [`VALIDATION_DIR`] of a path `validation/NAME`.
fn in_validation(path: &str) -> Option<&str> {
    path.strip_prefix(VALIDATION_DIR)?.strip_prefix('/')
}

/// Whether `dir/validation` holds only files that `ours` (given `validation/NAME`) accepts.
fn validation_is_ours(dir: &Path, ours: &dyn Fn(&str) -> bool) -> Result<bool> {
    Ok(entries(&dir.join(VALIDATION_DIR))?
        .iter()
        .all(|(n, kind)| !kind.is_dir() && ours(&format!("{VALIDATION_DIR}/{n}"))))
}

/// Entry names of a directory, sorted (so messages are deterministic).
fn entries(dir: &Path) -> Result<Vec<(String, fs::FileType)>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).with_context(|| format!("failed to read `{}`", dir.display()))? {
        let entry = entry.with_context(|| format!("failed to read `{}`", dir.display()))?;
        let kind = entry
            .file_type()
            .with_context(|| format!("failed to read `{}`", entry.path().display()))?;
        names.push((entry.file_name().to_string_lossy().into_owned(), kind));
    }
    names.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(names)
}

fn list(names: &[String]) -> String {
    let shown: Vec<String> = names.iter().take(5).map(|n| format!("`{n}`")).collect();
    match names.len() {
        n if n > 5 => format!("{} and {} more", shown.join(", "), n - 5),
        _ => shown.join(", "),
    }
}

/// Classifies an existing output directory, refusing anything that is not empty and not
/// entirely a previous output of this tool.
fn inspect(dir: &Path) -> Result<Existing> {
    let meta = match fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Existing::Missing),
        Err(e) => return Err(e).with_context(|| format!("failed to read `{}`", dir.display())),
    };
    if !meta.is_dir() {
        bail!(
            "`output.dir` `{}` is {}, not a directory; refusing to replace it",
            dir.display(),
            crate::plan::paths::describe(dir)
        );
    }
    let names = entries(dir)?;
    if names.is_empty() {
        return Ok(Existing::Empty);
    }
    if names.iter().any(|(n, _)| n == "hidden_states") {
        bail!(
            "`{}` has a `hidden_states/` folder: its row order is in use and must not change. Choose another `output.dir`",
            dir.display()
        );
    }
    let manifest = read_manifest(dir).map_err(|why| {
        anyhow::anyhow!(
            "`{}` exists and is not a chatshards dataset: {why}; refusing to touch it. Choose another `output.dir` or empty it",
            dir.display()
        )
    })?;
    let derived = crate::write::derived::ours(dir);
    let ours = |name: &str| {
        WRITTEN_FILES.contains(&name)
            || VALIDATION_FILES.contains(&name)
            || manifest.shards.iter().any(|s| s.file == name)
            || derived.iter().any(|d| d == name)
    };
    let mut foreign: Vec<String> = Vec::new();
    for (n, kind) in &names {
        let ok = if kind.is_dir() {
            n == VALIDATION_DIR && validation_is_ours(dir, &ours)?
        } else {
            ours(n)
        };
        if !ok {
            foreign.push(n.clone());
        }
    }
    let foreign: Vec<String> = names
        .iter()
        .filter(|(n, _)| foreign.contains(n))
        .map(|(n, kind)| {
            if kind.is_dir() {
                format!("{n}/")
            } else {
                n.clone()
            }
        })
        .collect();
    if !foreign.is_empty() {
        bail!(
            "`{}` is a chatshards dataset but also holds {} that chatshards did not write; \
             refusing to replace it (a rebuild would remove or orphan them). Move them elsewhere, or choose another `output.dir`",
            dir.display(),
            list(&foreign)
        );
    }
    Ok(Existing::Output)
}

/// Removes a previous output's files (only those its manifest and [`WRITTEN_FILES`] name),
/// then the directory if that emptied it. Returns what was left, if anything.
fn remove_output(dir: &Path) -> Result<Vec<String>> {
    let manifest = read_manifest(dir).ok();
    let derived = crate::write::derived::ours(dir);
    let ours = |name: &str| {
        WRITTEN_FILES.contains(&name)
            || VALIDATION_FILES.contains(&name)
            || derived.iter().any(|d| d == name)
            || manifest
                .as_ref()
                .is_some_and(|m| m.shards.iter().any(|s| s.file == name))
    };
    let mut left = Vec::new();
    // The manifest last: a directory interrupted here is still recognized as an output.
    let mut names = entries(dir)?;
    names.sort_by_key(|(n, _)| n == "manifest.json");
    for (name, kind) in names {
        if kind.is_dir() && name == VALIDATION_DIR {
            // Its files this tool wrote, then the folder if that emptied it.
            let folder = dir.join(VALIDATION_DIR);
            let mut kept = false;
            for (inner, kind) in entries(&folder)? {
                let path = folder.join(&inner);
                if !kind.is_dir() && ours(&format!("{VALIDATION_DIR}/{inner}")) {
                    fs::remove_file(&path)
                        .with_context(|| format!("failed to remove `{}`", path.display()))?;
                } else {
                    kept = true;
                }
            }
            if kept {
                left.push(name);
            } else {
                fs::remove_dir(&folder)
                    .with_context(|| format!("failed to remove `{}`", folder.display()))?;
            }
        } else if ours(&name) && !kind.is_dir() {
            let path = dir.join(&name);
            fs::remove_file(&path)
                .with_context(|| format!("failed to remove `{}`", path.display()))?;
        } else {
            left.push(name);
        }
    }
    if left.is_empty() {
        fs::remove_dir(dir).with_context(|| format!("failed to remove `{}`", dir.display()))?;
    }
    Ok(left)
}

/// `dir` with `.suffix` appended to its last component.
pub fn sibling(dir: &Path, suffix: &str) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{suffix}"));
    dir.with_file_name(name)
}

/// `path` made absolute with symlinks and `..` resolved as far as it exists; the components
/// that do not exist yet are appended as written (`..` among them removes the one before).
pub fn resolve(path: &Path) -> Result<PathBuf> {
    let absolute = if path.is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir()
            .context("failed to read the current directory")?
            .join(path)
    };
    let mut out = PathBuf::new();
    let mut exists = true;
    for component in absolute.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => out.push(component),
            Component::CurDir => {}
            // `out` is canonical while it exists, so its parent is the real `..`.
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => {
                out.push(name);
                if exists {
                    match out.canonicalize() {
                        Ok(real) => out = real,
                        Err(_) => exists = false,
                    }
                }
            }
        }
    }
    Ok(out)
}

/// What the output directory must not be, overlap with, or contain (see the module docs).
pub struct Placement<'a> {
    /// The pipeline file.
    pub pipeline: &'a Path,
    /// Every input file: sources, tokenizer, template.
    pub inputs: Vec<&'a Path>,
}

/// Refuses an output directory that would overwrite or sit over an input, the pipeline's
/// folder, the current directory or a project root. `out` is resolved.
pub fn check_placement(out: &Path, placement: &Placement) -> Result<()> {
    let refuse = |why: String| -> Result<()> {
        bail!(
            "`output.dir` `{}` {why}; a build replaces its output directory, so it must be a directory of its own. Choose another `output.dir` (e.g. a new folder such as `out/NAME`)",
            out.display()
        )
    };
    if out.parent().is_none() {
        return refuse("is the file system root".into());
    }
    if std::env::var_os("HOME")
        .is_some_and(|home| resolve(Path::new(&home)).ok().as_deref() == Some(out))
    {
        return refuse("is the home directory".into());
    }
    let folder = resolve(placement.pipeline.parent().unwrap_or(Path::new(".")))?;
    if folder.starts_with(out) {
        return refuse(if folder == out {
            "is the pipeline's folder".to_owned()
        } else {
            format!("contains the pipeline's folder `{}`", folder.display())
        });
    }
    let inputs = placement.inputs.iter().map(|p| ("input", *p));
    for (what, input) in std::iter::once(("pipeline file", placement.pipeline)).chain(inputs) {
        let input = resolve(input)?;
        if input == out {
            return refuse(format!("is the {what} `{}`", input.display()));
        }
        if input.starts_with(out) {
            return refuse(format!("contains the {what} `{}`", input.display()));
        }
        if out.starts_with(&input) {
            return refuse(format!("is inside the {what} `{}`", input.display()));
        }
    }

    let cwd = resolve(Path::new("."))?;
    if cwd.starts_with(out) {
        return refuse(format!(
            "is or contains the current directory `{}`",
            cwd.display()
        ));
    }
    if let Some(marker) = PROJECT_MARKERS
        .iter()
        .find(|m| fs::symlink_metadata(out.join(m)).is_ok())
    {
        return refuse(format!(
            "is a project or repository folder (it has `{marker}`)"
        ));
    }
    Ok(())
}

/// The staging directory a signal handler removes, while a build writes it. Also held for the
/// whole of the final swap, so that a signal never cuts it in two.
static STAGING: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Removes a failed or interrupted build's staging directory. The one place that decides what
/// happens to staging state (a resume feature would keep it here).
pub fn discard_staging(staging: &Path) {
    // Writer threads may still be creating files while it is removed: try a few times.
    for _ in 0..5 {
        match fs::remove_dir_all(staging) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
}

/// Removes the staging directory on SIGINT / SIGTERM, then exits as the signal would
/// (128 + its number). Installed once, by the first build.
fn install_signal_cleanup() -> Result<()> {
    static INSTALLED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    if INSTALLED.get().is_some() {
        return Ok(());
    }
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .context("failed to install the SIGINT / SIGTERM handler")?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                let staging = STAGING.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(path) = staging.as_deref() {
                    let message = if has_recorded_pass(path) {
                        format!(
                            "interrupted: `{}` keeps the passes done so far; run the same build again to go on from them (or with `--fresh` to start over)",
                            path.display()
                        )
                    } else {
                        discard_staging(path);
                        format!("interrupted: removed the unfinished `{}`", path.display())
                    };
                    let _ = writeln!(std::io::stderr(), "{message}");
                }
                std::process::exit(128 + signal);
            }
        })
        .context("failed to start the signal thread")?;
    let _ = INSTALLED.set(());
    Ok(())
}

/// An output directory being built: locked, checked, with its staging directory created.
/// Dropped without [`Output::commit`] (an error, a panic), it removes the staging directory.
pub struct Output {
    dir: PathBuf,
    staging: PathBuf,
    _lock: fs::File,
    committed: bool,
    resumed: bool,
    /// The staging directory holds an interrupted build's finished dataset, only to be swapped.
    finished: bool,
    /// Set when an interrupted build's state cannot be gone on from: kept, not removed.
    keep: std::sync::atomic::AtomicBool,
}

impl Output {
    /// Checks `dir` (see the module docs), takes its lock, clears what a killed build left
    /// beside it and creates the staging directory.
    pub fn prepare(dir: &Path, placement: &Placement, resume: Resume) -> Result<Output> {
        let dir = resolve(dir)?;
        check_placement(&dir, placement)?;
        inspect(&dir)?;
        let parent = dir.parent().unwrap_or(Path::new("/"));
        fs::create_dir_all(parent)
            .with_context(|| format!("failed to create `{}`", parent.display()))?;
        let lock = lock(&dir)?;
        let staging = sibling(&dir, "partial");
        let aside = sibling(&dir, "old");
        let done = sibling(&dir, "work-done");
        // The directories a build writes into or removes are never reached through a link.
        let work = staging.join(WORK_DIR);
        for path in [
            &staging,
            &aside,
            &done,
            &work,
            &work.join(SPILL),
            &work.join(JOURNAL),
        ] {
            crate::model::nofollow::real_dir(path)
                .with_context(|| format!("`{}` is in the way", path.display()))?;
        }
        // A build killed between the two renames of the fallback replacement: put the old
        // output back, or remove a copy that was already replaced.
        if fs::symlink_metadata(&aside).is_ok() {
            if inspect(&aside).is_err() {
                bail!(
                    "`{}` is in the way and is not a chatshards dataset; move it away",
                    aside.display()
                );
            }
            if fs::symlink_metadata(&dir).is_err() {
                fs::rename(&aside, &dir)
                    .with_context(|| format!("failed to restore `{}`", dir.display()))?;
            } else {
                remove_output(&aside)?;
            }
        }
        // Checked again under the lock: another build may have finished meanwhile.
        inspect(&dir)?;
        let finished = finished_staging(&staging, &[&work, &done], &resume)?;
        if finished.as_deref() != Some(done.as_path()) && fs::symlink_metadata(&done).is_ok() {
            remove_work_files(&done)?;
        }
        let resumed = finished.is_some() || clear_stale_staging(&staging, &resume)?;
        install_signal_cleanup()?;
        let mut registered = STAGING.lock().unwrap_or_else(|e| e.into_inner());
        if !resumed {
            fs::create_dir(&staging)
                .with_context(|| format!("failed to create `{}`", staging.display()))?;
        }
        *registered = Some(staging.clone());
        drop(registered);
        Ok(Output {
            dir,
            staging,
            _lock: lock,
            committed: false,
            resumed,
            finished: finished.is_some(),
            keep: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The output directory (resolved).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the build writes.
    pub fn staging(&self) -> &Path {
        &self.staging
    }

    /// The build's working files (spill, journal), inside the staging directory.
    pub fn work_dir(&self) -> PathBuf {
        self.staging.join(WORK_DIR)
    }

    /// Whether the staging directory is an interrupted build's, to go on from.
    pub fn resumed(&self) -> bool {
        self.resumed
    }

    /// Whether the staging directory holds an interrupted build's finished dataset, for this
    /// build (same pipeline and inputs), to be put in place with [`Output::commit`] as it is.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// Leaves the staging directory in place when this build fails (an interrupted build's
    /// recorded passes that this one could not go on from).
    pub fn keep_staging(&self) {
        self.keep.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut registered = STAGING.lock().unwrap_or_else(|e| e.into_inner());
        *registered = None;
    }

    /// Keeps the rejects of a build that is about to fail (no row kept, say) beside the
    /// output as `DIR.rejects.jsonl`, since they are the whole answer then. Returns the path.
    pub fn keep_rejects(&self) -> Result<PathBuf> {
        let kept = sibling(&self.dir, "rejects.jsonl");
        fs::rename(self.staging.join("rejects.jsonl"), &kept)
            .with_context(|| format!("failed to write `{}`", kept.display()))?;
        Ok(kept)
    }

    /// Puts the finished staging directory in place of the output, atomically where the file
    /// system allows, then removes the files of the output it replaced.
    pub fn commit(mut self) -> Result<()> {
        let mut registered = STAGING.lock().unwrap_or_else(|e| e.into_inner());
        // The working files leave first (one rename): they are never part of an output, and
        // removing them (the spill is as large as the shards) waits until the swap is done.
        let work = self.staging.join(WORK_DIR);
        let done = sibling(&self.dir, "work-done");
        if fs::symlink_metadata(&work).is_ok() {
            if !self.finished {
                mark_finished(&self.staging, &work)?;
            }
            fs::rename(&work, &done)
                .with_context(|| format!("failed to move `{}` aside", work.display()))?;
        }
        // The directory may have changed during a long build: checked once more.
        let existing = inspect(&self.dir)?;
        let replaced = match existing {
            Existing::Missing => {
                fs::rename(&self.staging, &self.dir).with_context(|| {
                    format!("failed to move the dataset into `{}`", self.dir.display())
                })?;
                None
            }
            Existing::Empty | Existing::Output => match exchange(&self.staging, &self.dir) {
                Ok(()) => Some(self.staging.clone()),
                Err(e) if exchange_unsupported(&e) => {
                    let aside = sibling(&self.dir, "old");
                    fs::rename(&self.dir, &aside).with_context(|| {
                        format!("failed to move `{}` aside", self.dir.display())
                    })?;
                    fs::rename(&self.staging, &self.dir).with_context(|| {
                        format!("failed to move the dataset into `{}`", self.dir.display())
                    })?;
                    Some(aside)
                }
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!("failed to swap the dataset into `{}`", self.dir.display())
                    })
                }
            },
        };
        self.committed = true;
        *registered = None;
        drop(registered);
        if fs::symlink_metadata(&done).is_ok() {
            remove_work_files(&done)?;
        }
        // A stale rejects file of an earlier failed build is misleading now.
        let stale = sibling(&self.dir, "rejects.jsonl");
        if fs::symlink_metadata(&stale).is_ok_and(|m| m.is_file()) {
            fs::remove_file(&stale).ok();
        }
        if let Some(old) = replaced {
            let left = remove_output(&old)?;
            if !left.is_empty() {
                eprintln!(
                    "note: the replaced output was kept at `{}`: it holds {} that chatshards did not write",
                    old.display(),
                    list(&left)
                );
            }
        }
        Ok(())
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        if self.committed || self.keep.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let mut registered = STAGING.lock().unwrap_or_else(|e| e.into_inner());
        discard_staging(&self.staging);
        *registered = None;
    }
}

/// Takes the build lock on `DIR.lock`, or says who holds it.
fn lock(dir: &Path) -> Result<fs::File> {
    let path = sibling(dir, "lock");
    let mut options = crate::model::nofollow::options();
    options.read(true).write(true).create(true).truncate(false);
    let mut file = crate::model::nofollow::open(&options, &path)
        .with_context(|| format!("failed to open the lock file `{}`", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            let holder = fs::read_to_string(&path).unwrap_or_default();
            let holder = match holder.trim() {
                "" => String::new(),
                pid => format!(" (process {pid})"),
            };
            bail!(
                "another build is writing `{}`{holder}: it holds `{}`. Wait for it to finish, or choose another `output.dir`",
                dir.display(),
                path.display()
            );
        }
        Err(fs::TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("failed to lock `{}`", path.display()))
        }
    }
    // Only ever a process id: anything else there (a pipeline `X.yaml` beside `output.dir: X`
    // has its lockfile at this very path) is not overwritten.
    let mut held = String::new();
    let ours = std::io::Read::read_to_string(&mut file, &mut held)
        .is_ok_and(|_| held.trim().bytes().all(|b| b.is_ascii_digit()));
    if !ours {
        bail!(
            "`{}` is in the way: the build locks its output `{}` with a file of that name, and this one holds something else (a pipeline's lockfile?). Move it, or choose another `output.dir`",
            path.display(),
            dir.display()
        );
    }
    // Who holds it, for the message above (informational only: the flock is the lock).
    file.set_len(0).ok();
    let _ = std::io::Seek::rewind(&mut file);
    let _ = write!(file, "{}", std::process::id());
    Ok(file)
}

/// Whether an interrupted build in `staging` recorded a pass or a segment of its first pass
/// (so that it can go on). A pass's `.tmp` reaches the disk at its first segment.
fn has_recorded_pass(staging: &Path) -> bool {
    let journal = staging.join(WORK_DIR).join(JOURNAL);
    journal.join("pass-000000.bin").is_file()
        || fs::metadata(journal.join("pass-000000.tmp")).is_ok_and(|m| m.len() > 0)
}

/// Makes every file of the finished dataset in `staging` durable, then records the hash of its
/// manifest in `work` ([`FINISHED`]): from then on the next build swaps it in as it is.
fn mark_finished(staging: &Path, work: &Path) -> Result<()> {
    use sha2::{Digest, Sha256};
    let failed = |p: &Path| format!("failed to sync `{}`", p.display());
    for (name, kind) in entries(staging)? {
        if kind.is_file() {
            let path = staging.join(name);
            fs::File::open(&path)
                .and_then(|f| f.sync_all())
                .with_context(|| failed(&path))?;
        }
    }
    fs::File::open(staging)
        .and_then(|d| d.sync_all())
        .with_context(|| failed(staging))?;
    let path = staging.join("manifest.json");
    let manifest =
        fs::read(&path).with_context(|| format!("failed to read `{}`", path.display()))?;
    let marker = work.join(FINISHED);
    let written = crate::model::nofollow::create(&marker).and_then(|mut f| {
        f.write_all(hex::encode(Sha256::digest(&manifest)).as_bytes())?;
        f.sync_all()
    });
    written.with_context(|| format!("failed to write `{}`", marker.display()))
}

/// Which of `works` (the staging directory's working files, or those moved aside for the
/// swap) says that `staging` holds a finished dataset of this build: a [`FINISHED`] hash equal
/// to the hash of `staging`'s manifest, a journal with this build's key, and every shard the
/// manifest lists in place. `None` if none does (then the usual resume rules apply).
fn finished_staging(staging: &Path, works: &[&Path], resume: &Resume) -> Result<Option<PathBuf>> {
    use sha2::{Digest, Sha256};
    let Resume::IfSame(key) = resume else {
        return Ok(None);
    };
    let Ok(manifest) = fs::read(staging.join("manifest.json")) else {
        return Ok(None);
    };
    let hash = hex::encode(Sha256::digest(&manifest));
    let Ok(shards) = read_manifest(staging).map(|m| m.shards) else {
        return Ok(None);
    };
    let whole = shards
        .iter()
        .all(|s| fs::symlink_metadata(staging.join(&s.file)).is_ok_and(|m| m.is_file()));
    if !whole {
        return Ok(None);
    }
    for work in works {
        let Ok(marker) = fs::read_to_string(work.join(FINISHED)) else {
            continue;
        };
        let Some(then) = Journal::key_in(&work.join(JOURNAL)) else {
            continue;
        };
        if marker.trim() == hash && then.differences(&key()?).is_empty() {
            return Ok(Some(work.to_path_buf()));
        }
    }
    Ok(None)
}

/// Removes the working files a finished build moved aside (`DIR.work-done`), checking that
/// they are nothing else.
fn remove_work_files(done: &Path) -> Result<()> {
    let names = entries(done)?;
    if !names.iter().all(|(n, kind)| {
        (kind.is_dir() && (n == SPILL || n == JOURNAL)) || n == CONVERSATIONS || n == FINISHED
    }) {
        bail!(
            "`{}` is in the way: it holds {} that a chatshards build did not write. Move it away",
            done.display(),
            list(&names.into_iter().map(|(n, _)| n).collect::<Vec<_>>())
        );
    }
    fs::remove_dir_all(done).with_context(|| format!("failed to remove `{}`", done.display()))
}

/// Deals with what a killed build left in `DIR.partial`: its staging files are kept to go on
/// from (returns `true`) when `resume` allows it and they have a recorded pass, else removed;
/// an old output it had swapped out but not yet removed is removed. Anything else there is
/// refused.
fn clear_stale_staging(staging: &Path, resume: &Resume) -> Result<bool> {
    if fs::symlink_metadata(staging).is_err() {
        return Ok(false);
    }
    let names = entries(staging)?;
    let shard_or_partial = |n: &str| {
        is_shard_name(n)
            || n.strip_prefix('.')
                .and_then(|n| n.strip_suffix(".partial"))
                .is_some_and(is_shard_name)
    };
    let staged_validation = |path: &str| {
        VALIDATION_FILES.contains(&path) || in_validation(path).is_some_and(shard_or_partial)
    };
    let mut staged = true;
    for (n, kind) in &names {
        staged &= if kind.is_dir() {
            n == WORK_DIR
                || n == OLD_SPILL_DIR
                || (n == VALIDATION_DIR && validation_is_ours(staging, &staged_validation)?)
        } else {
            WRITTEN_FILES.contains(&n.as_str()) || shard_or_partial(n)
        };
    }
    if staged {
        if let Resume::IfSame(key) = resume {
            let journal = staging.join(WORK_DIR).join(JOURNAL);
            let resumable = has_recorded_pass(staging) && super::journal::same_boot(&journal);
            if let Some(then) = Journal::key_in(&journal).filter(|_| resumable) {
                let changed = then.differences(&key()?);
                if changed.is_empty() {
                    return Ok(true);
                }
                bail!(
                    "`{}` holds an interrupted build whose inputs or settings differ from this one: {} changed since. Build with `--fresh` to discard it and start over, or undo the change to go on from it",
                    staging.display(),
                    changed.join(", ")
                );
            }
        }
        discard_staging(staging);
        return Ok(false);
    }
    if read_manifest(staging).is_ok() && inspect(staging).is_ok() {
        remove_output(staging)?;
        return Ok(false);
    }
    bail!(
        "`{}` is in the way: it holds {} that a chatshards build did not write. Move it away",
        staging.display(),
        list(&names.into_iter().map(|(n, _)| n).collect::<Vec<_>>())
    )
}

/// Swaps two paths atomically (Linux `renameat2(RENAME_EXCHANGE)`).
#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        CString::new(p.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL in a path"))
    };
    let (a, b) = (c(a)?, c(b)?);
    // SAFETY: both are valid NUL-terminated paths that outlive the call.
    let status = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if status == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn exchange(_: &Path, _: &Path) -> std::io::Result<()> {
    Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
}

/// Whether an exchange failed because the system or file system cannot do it (then the
/// rename-aside fallback is used).
fn exchange_unsupported(e: &std::io::Error) -> bool {
    #[cfg(target_os = "linux")]
    if matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)
    ) {
        return true;
    }
    e.kind() == std::io::ErrorKind::Unsupported
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_names_are_recognized_exactly() {
        assert!(is_shard_name("data-00000-of-00001.arrow"));
        assert!(is_shard_name(&crate::write::shard_name(12, 100_000)));
        for name in [
            "data-0-of-1.arrow",
            "data-00000-of-00001.arrow.bak",
            "../data-00000-of-00001.arrow",
            "data-00000-of-0000x.arrow",
            "notes.txt",
        ] {
            assert!(!is_shard_name(name), "{name}");
        }
    }

    #[test]
    fn resolve_removes_dot_dot_and_follows_symlinks_as_far_as_the_path_exists() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let real = resolve(tmp.path()).expect("resolve");
        fs::create_dir(real.join("a")).expect("mkdir");
        std::os::unix::fs::symlink(real.join("a"), real.join("link")).expect("symlink");
        assert_eq!(
            resolve(&real.join("link/new/../x")).expect("resolve"),
            real.join("a/x")
        );
        assert_eq!(
            resolve(&real.join("a/./b/c/..")).expect("resolve"),
            real.join("a/b")
        );
    }

    /// A folder with a pipeline file and an input, and the placement of a build over them.
    fn folder() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let pipeline = tmp.path().join("p.yaml");
        let input = tmp.path().join("in.jsonl");
        fs::write(&pipeline, "").expect("pipeline");
        fs::write(&input, "").expect("input");
        (tmp, pipeline, input)
    }

    /// A minimal previous output in `dir`, with one shard.
    fn old_output(dir: &Path, rows: &str) {
        fs::create_dir_all(dir).expect("mkdir");
        fs::write(
            dir.join("manifest.json"),
            r#"{"tool": {"name": "chatshards"}, "name": "x", "rows": 1, "inputs": {}, "settings": {}, "sources": {}, "shards": [{"file": "data-00000-of-00001.arrow"}]}"#,
        )
        .expect("manifest");
        fs::write(dir.join("data-00000-of-00001.arrow"), rows).expect("shard");
        fs::write(dir.join("state.json"), "{}").expect("state");
    }

    #[test]
    fn a_replacement_swaps_in_the_new_output_and_removes_only_the_old_files() {
        let (tmp, pipeline, input) = folder();
        let placement = Placement {
            pipeline: &pipeline,
            inputs: vec![&input],
        };
        let out = tmp.path().join("out");
        old_output(&out, "old");
        let output = Output::prepare(&out, &placement, Resume::Fresh).expect("prepare");
        old_output(output.staging(), "new");
        let staging = output.staging().to_owned();
        output.commit().expect("commit");
        assert_eq!(
            fs::read_to_string(out.join("data-00000-of-00001.arrow")).expect("shard"),
            "new"
        );
        assert!(!staging.exists());
        // Dropped without commit (an error): the staging directory goes, the output stays.
        let output = Output::prepare(&out, &placement, Resume::Fresh).expect("prepare");
        fs::write(output.staging().join("rejects.jsonl"), "x").expect("write");
        drop(output);
        assert!(!staging.exists());
        assert!(out.join("manifest.json").exists());
    }

    #[test]
    fn leftovers_of_a_killed_build_are_recovered() {
        let (tmp, pipeline, input) = folder();
        let placement = Placement {
            pipeline: &pipeline,
            inputs: vec![&input],
        };
        let resolved = resolve(tmp.path()).expect("resolve");
        let out = resolved.join("out");
        // Killed between the fallback's two renames: the old output is put back first.
        old_output(&sibling(&out, "old"), "old");
        let output = Output::prepare(&out, &placement, Resume::Fresh).expect("prepare");
        assert_eq!(
            fs::read_to_string(out.join("data-00000-of-00001.arrow")).expect("restored"),
            "old"
        );
        assert!(!sibling(&out, "old").exists());
        drop(output);
        // Killed after the exchange, before the old files were removed: they are removed.
        old_output(&sibling(&out, "partial"), "swapped out");
        drop(Output::prepare(&out, &placement, Resume::Fresh).expect("prepare"));
        assert!(!sibling(&out, "partial").exists());
        // A `DIR.partial` holding someone else's files is refused, not removed.
        fs::create_dir(sibling(&out, "partial")).expect("mkdir");
        fs::write(sibling(&out, "partial").join("mine.txt"), "x").expect("write");
        let err = Output::prepare(&out, &placement, Resume::Fresh)
            .err()
            .expect("refused");
        assert!(
            err.to_string()
                .contains("is in the way: it holds `mine.txt`"),
            "{err}"
        );
        assert!(sibling(&out, "partial").join("mine.txt").exists());
    }

    #[test]
    fn exchange_swaps_two_directories() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        fs::create_dir(&a).expect("a");
        fs::create_dir(&b).expect("b");
        fs::write(a.join("x"), "a").expect("x");
        fs::write(b.join("y"), "b").expect("y");
        match exchange(&a, &b) {
            Ok(()) => {
                assert!(b.join("x").exists() && a.join("y").exists());
            }
            Err(e) => assert!(exchange_unsupported(&e), "{e}"),
        }
    }
}
