//! `chatshards verify DIR [--rebuild]`: proves that an output directory is the dataset its
//! manifest describes, and with `--rebuild` that its pipeline still builds exactly those bytes.
//!
//! Checks, in order, stopping at the first difference: every file the manifest names is a
//! plain file inside the directory (a name without a folder, not `..`, not a symbolic link);
//! every other file's size and SHA-256; every shard's size, SHA-256, row count and Arrow schema
//! (against chatshards' schema and `dataset_info.json`'s features); `state.json`'s shard list
//! and fingerprint; the manifest's own sums (`dataset_sha256`, rows, the accounting identity of
//! every source); with `output.validation`, the split recomputed from the rows (the same
//! conversations chosen, the training rows first and the validation rows last, the counts and
//! `train_data_ratio`); its `build_id` recomputed from the inputs it records and the pipeline copy;
//! and its seal (`manifest_sha256`, see [`crate::write::manifest`]), which catches any other
//! edited field (a setting, a count, a name). The seal is computed first, and reported last so
//! that an edit the checks before it explain is named by them.
//!
//! A dataset replaced while it is read (a build's final swap) could look damaged: a check that
//! fails when the directory or its manifest changed during it runs again on the new one.

use crate::engine::session::BuildArgs;
use crate::hub::{hash_file, Lockfile};
use crate::model::split;
use crate::printer::Printer;
use crate::write::identity::{self, Identity, IdentityInput};
use crate::write::manifest::Validation;
use crate::write::read_back::{read_shard, OutputDir};
use crate::write::VALIDATION_DIR;
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::fs;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

pub struct VerifyArgs {
    pub dir: PathBuf,
    /// Also rebuild from the recorded pipeline into a temporary directory and compare bytes.
    pub rebuild: bool,
    pub threads: Option<usize>,
}

pub fn run(args: &VerifyArgs, printer: &Printer) -> Result<()> {
    let out = open_checked(&args.dir)?;
    let m = &out.manifest;
    printer.info(&format!(
        "`{}` matches its manifest: {} shard(s), {} rows, {} other files\n  build_id       {}\n  dataset_sha256 {}",
        out.path.display(),
        m.shards.len(),
        m.rows,
        m.files.len(),
        m.build_id,
        m.dataset_sha256
    ));
    if args.rebuild {
        let files = rebuild(&out, args.threads, printer)?;
        printer.info(&format!(
            "rebuilt from the recorded pipeline: all {files} files are byte-identical"
        ));
    }
    Ok(())
}

/// Opens `dir` and runs every check but the rebuild. A check that fails while the directory
/// was replaced under it (the final swap of a build) is run again on the new dataset; if it
/// keeps being replaced (builds in a loop), verify says so instead of reporting damage that
/// is only a mix of two datasets.
fn open_checked(dir: &Path) -> Result<OutputDir> {
    until_unchanged(dir, |dir| {
        OutputDir::open(dir).and_then(|out| check(&out).map(|()| out))
    })
}

/// `attempt` on `dir`, run again while it fails and `dir` was replaced during it.
fn until_unchanged<T>(dir: &Path, mut attempt: impl FnMut(&Path) -> Result<T>) -> Result<T> {
    const ATTEMPTS: usize = 3;
    for _ in 0..ATTEMPTS {
        let before = snapshot(dir);
        match attempt(dir) {
            Err(_) if snapshot(dir) != before => continue,
            checked => return checked,
        }
    }
    bail!(
        "`{}` changed during verify, retry: a build replaced it {ATTEMPTS} times while it was read",
        dir.display()
    )
}

/// What identifies the dataset at `dir` now: the directory's and its manifest's inodes, and
/// the manifest's size and modification time.
fn snapshot(dir: &Path) -> Option<(u64, u64, u64, u64, std::time::SystemTime)> {
    use std::os::unix::fs::MetadataExt;
    let folder = fs::metadata(dir).ok()?;
    let manifest = fs::symlink_metadata(dir.join("manifest.json")).ok()?;
    Some((
        folder.dev(),
        folder.ino(),
        manifest.ino(),
        manifest.len(),
        manifest.modified().ok()?,
    ))
}

/// `dir`'s file `name`, as the manifest names it (`what`): a plain name (no folder, no `..`,
/// not absolute), or one inside the validation split's folder (`validation/NAME`), of a
/// regular file that is not a symbolic link, so that nothing outside the dataset is read or
/// vouched for.
fn member(dir: &Path, name: &str, what: &str) -> Result<PathBuf> {
    let plain = |name: &str| {
        let mut parts = Path::new(name).components();
        matches!(
            (parts.next(), parts.next()),
            (Some(Component::Normal(part)), None) if part == std::ffi::OsStr::new(name)
        )
    };
    let inner = name
        .strip_prefix(VALIDATION_DIR)
        .and_then(|n| n.strip_prefix('/'));
    if inner.is_some_and(plain) {
        let folder = dir.join(VALIDATION_DIR);
        match fs::symlink_metadata(&folder) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => bail!(
                "`{}` is not a folder: the validation split's files are plain files in it",
                folder.display()
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                bail!(
                    "`{}` is missing (the manifest lists `{name}`)",
                    folder.display()
                )
            }
            Err(e) => return Err(e).with_context(|| format!("cannot read `{}`", folder.display())),
        }
    } else if !plain(name) {
        bail!(
            "`{}` names {what} `{name}`, which is not a file name inside the dataset directory",
            dir.join("manifest.json").display()
        );
    }
    let path = dir.join(name);
    match fs::symlink_metadata(&path) {
        Ok(meta) if meta.file_type().is_symlink() => bail!(
            "`{}` is a symbolic link: the files of a dataset are plain files inside its directory",
            path.display()
        ),
        Ok(meta) if meta.is_file() => Ok(path),
        Ok(_) => bail!("`{}` is not a file (the manifest lists it)", path.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("`{}` is missing (the manifest lists it)", path.display())
        }
        Err(e) => Err(e).with_context(|| format!("cannot read `{}`", path.display())),
    }
}

/// Every check but the rebuild; the error names the first difference.
pub fn check(out: &OutputDir) -> Result<()> {
    let dir = &out.path;
    let m = &out.manifest;
    let shown = |file: &str| dir.join(file).display().to_string();
    let seal = seal_status(&out.json);

    for f in &m.files {
        let path = member(dir, &f.file, "the file")?;
        let (bytes, sha256) =
            hash_file(&path).with_context(|| format!("cannot read `{}`", path.display()))?;
        if bytes != f.bytes {
            bail!(
                "`{}` has {bytes} bytes; the manifest records {}",
                path.display(),
                f.bytes
            );
        }
        if sha256 != f.sha256 {
            bail!(
                "`{}` has sha256 {sha256}; the manifest records {}",
                path.display(),
                f.sha256
            );
        }
    }

    let info = read_json(&member(dir, "dataset_info.json", "the file")?)?;
    let features = &info["features"];
    // The `loss_mask` dtype is a build setting (`mask.dtype`): the features say which.
    use crate::tokenize::mask_config::MaskDtype;
    let Some(dtype) = [MaskDtype::Int8, MaskDtype::Bool]
        .into_iter()
        .find(|&d| features == &crate::write::features(d))
    else {
        bail!(
            "`{}`: the features are not chatshards' columns: {features}",
            shown("dataset_info.json")
        );
    };
    let expected = crate::write::schema(dtype);
    let validation = m.validation.as_ref();
    // With a split: each row's split key and source, in order (16 bytes a row).
    let mut split_rows: Vec<(u64, String)> = Vec::new();
    let split_seed = validation.map(|v| v.seed);
    let no_groups = split::Groups::new();
    let groups = validation.map_or(&no_groups, |v| &v.groups);
    for s in &m.shards {
        let path = member(dir, &s.file, "the shard")?;
        let read = read_shard(&path, true, |batch| {
            let Some(seed) = split_seed else {
                return Ok(());
            };
            let ids = crate::write::read_back::RowColumns::of(batch, &path)?.sample_id;
            let Some(sources) = batch
                .column_by_name("source")
                .and_then(|c| c.as_any().downcast_ref::<arrow_array::StringArray>())
            else {
                bail!("`{}` has no `source` column of strings", path.display());
            };
            for (id, source) in ids.iter().zip(sources.iter()) {
                let key = split::conversation_key(seed, split::unit_of(groups, id.unwrap_or("")));
                split_rows.push((key, source.unwrap_or("").to_owned()));
            }
            Ok(())
        })?;
        let sha256 = read.sha256.unwrap_or_default();
        if read.bytes != s.bytes {
            bail!(
                "`{}` has {} bytes; the manifest records {}",
                path.display(),
                read.bytes,
                s.bytes
            );
        }
        if sha256 != s.sha256 {
            bail!(
                "`{}` has sha256 {sha256}; the manifest records {}",
                path.display(),
                s.sha256
            );
        }
        if read.rows != s.rows {
            bail!(
                "`{}` has {} rows; the manifest records {}",
                path.display(),
                read.rows,
                s.rows
            );
        }
        if read.schema.fields() != expected.fields() {
            bail!(
                "`{}`: the columns differ from chatshards' schema: {:?}",
                path.display(),
                read.schema.fields()
            );
        }
        let recorded = read
            .schema
            .metadata()
            .get("huggingface")
            .and_then(|text| serde_json::from_str::<Value>(text).ok());
        if recorded.as_ref().map(|v| &v["info"]["features"]) != Some(features) {
            bail!(
                "`{}`: the schema's `huggingface` features differ from `{}`",
                path.display(),
                shown("dataset_info.json")
            );
        }
    }

    let state = read_json(&member(dir, "state.json", "the file")?)?;
    let listed = listed_files(&state);
    let shards: Vec<&str> = m.shards.iter().map(|s| s.file.as_str()).collect();
    if listed != shards {
        bail!(
            "`{}` lists the shards {listed:?}; the manifest lists {shards:?}",
            shown("state.json")
        );
    }
    let dataset_sha256 = identity::dataset_sha256(m.shards.iter().map(|s| s.sha256.as_str()));
    if dataset_sha256 != m.dataset_sha256 {
        bail!(
            "`{}`: dataset_sha256 is {}, but the shard hashes it lists give {dataset_sha256}",
            shown("manifest.json"),
            m.dataset_sha256
        );
    }
    let fingerprint = &dataset_sha256[..identity::FINGERPRINT_CHARS];
    if state["_fingerprint"].as_str() != Some(fingerprint) {
        bail!(
            "`{}`: _fingerprint is {}, not {fingerprint} (the start of dataset_sha256)",
            shown("state.json"),
            state["_fingerprint"]
        );
    }
    let rows: u64 = m.shards.iter().map(|s| s.rows).sum();
    if rows != m.rows {
        bail!(
            "`{}`: rows is {}, but its shards hold {rows}",
            shown("manifest.json"),
            m.rows
        );
    }
    check_accounting(&m.sources, m.rows)
        .map_err(|e| anyhow::anyhow!("`{}`: {e}", shown("manifest.json")))?;
    if let Some(validation) = validation {
        check_split(validation, &split_rows)
            .map_err(|e| anyhow::anyhow!("`{}`: validation: {e}", shown("manifest.json")))?;
        check_validation_dataset(out, validation, dtype)?;
    }

    let build_id = recorded_build_id(out)?;
    if build_id != m.build_id {
        bail!(
            "`{}`: build_id is {}, but the inputs it records and `{}` give {build_id}",
            shown("manifest.json"),
            m.build_id,
            m.pipeline.copy
        );
    }
    seal.map_err(|e| anyhow::anyhow!("`{}`: {e}", shown("manifest.json")))
}

/// With a split: the training shards in the directory and the validation shards in its
/// `validation/` folder, which is a dataset of its own: its `state.json` lists exactly those
/// shards with their fingerprint, and its `dataset_info.json` has the dataset's features.
fn check_validation_dataset(
    out: &OutputDir,
    recorded: &Validation,
    dtype: crate::tokenize::mask_config::MaskDtype,
) -> Result<()> {
    let (dir, m) = (&out.path, &out.manifest);
    let prefix = format!("{VALIDATION_DIR}/");
    let (validation, train): (Vec<_>, Vec<_>) =
        m.shards.iter().partition(|s| s.file.starts_with(&prefix));
    if let Some(i) = m.shards.iter().position(|s| s.file.starts_with(&prefix)) {
        if m.shards[i..].iter().any(|s| !s.file.starts_with(&prefix)) {
            bail!(
                "`{}` lists a training shard after a validation shard",
                dir.join("manifest.json").display()
            );
        }
    }
    let total = |shards: &[&crate::write::ShardSummary]| shards.iter().map(|s| s.rows).sum::<u64>();
    if total(&train) != recorded.total.train_rows
        || total(&validation) != recorded.total.validation_rows
    {
        bail!(
            "`{}`: the shards hold {} training and {} validation rows (`{VALIDATION_DIR}/`); the manifest records {} and {}",
            dir.join("manifest.json").display(),
            total(&train),
            total(&validation),
            recorded.total.train_rows,
            recorded.total.validation_rows
        );
    }
    let info = member(dir, &format!("{prefix}dataset_info.json"), "the file")?;
    if read_json(&info)?["features"] != crate::write::features(dtype) {
        bail!(
            "`{}`: the features differ from the dataset's",
            info.display()
        );
    }
    let state_path = member(dir, &format!("{prefix}state.json"), "the file")?;
    let state = read_json(&state_path)?;
    let listed = listed_files(&state);
    let names: Vec<&str> = validation
        .iter()
        .map(|s| s.file.strip_prefix(&prefix).unwrap_or(&s.file))
        .collect();
    if listed != names {
        bail!(
            "`{}` lists the shards {listed:?}; the manifest lists {names:?} in `{VALIDATION_DIR}/`",
            state_path.display()
        );
    }
    let sha = identity::dataset_sha256(validation.iter().map(|s| s.sha256.as_str()));
    let fingerprint = &sha[..identity::FINGERPRINT_CHARS];
    if state["_fingerprint"].as_str() != Some(fingerprint) {
        bail!(
            "`{}`: _fingerprint is {}, not {fingerprint} (from the validation shards' hashes)",
            state_path.display(),
            state["_fingerprint"]
        );
    }
    Ok(())
}

/// Whether the manifest's seal matches its content (see [`crate::write::manifest`]).
fn seal_status(manifest: &Value) -> Result<(), String> {
    use crate::write::manifest::{seal_of, SEAL};
    let content = seal_of(manifest);
    match manifest.get(SEAL).and_then(Value::as_str) {
        Some(recorded) if recorded == content => Ok(()),
        Some(recorded) => Err(format!(
            "the manifest was edited after the build: its content hashes to {content}, but its \
             {SEAL} records {recorded}"
        )),
        None => Err(format!(
            "no {SEAL}: the manifest was not written by this version of chatshards, or was edited"
        )),
    }
}

/// `read = kept + Σ rejected + Σ filtered + deduplicated` for every source (the identity of
/// `SourceStats::balanced`), and the sources' output rows add up to the dataset's.
/// The manifest's `validation` against the split recomputed from the rows (`(split key,
/// source)` in order): the same conversations chosen, all of them in the tail, the same counts.
fn check_split(validation: &Validation, rows: &[(u64, String)]) -> Result<(), String> {
    let config = split::ValidationConfig {
        fraction: validation.fraction,
        rows: validation.rows,
        seed: Some(validation.seed),
    };
    let target = config.target()?;
    let seed = validation.seed;
    let recorded = &validation.sources;
    let names: Vec<&String> = recorded.keys().collect();
    let mut conversations = vec![std::collections::HashMap::new(); names.len()];
    for (key, source) in rows {
        let Some(s) = names.iter().position(|n| *n == source) else {
            return Err(format!(
                "a row of source `{source}`, which it does not list"
            ));
        };
        *conversations[s].entry(*key).or_insert(0u64) += 1;
    }
    let split = split::choose(target, seed, &conversations)?;
    // As the manifest writes them.
    let shown = |c: &split::SideCounts| serde_json::to_string(c).unwrap_or_default();
    for (name, counts) in names.iter().zip(&split.by_source) {
        if &recorded[name.as_str()] != counts {
            return Err(format!(
                "source `{name}` records {}, but its rows give {}",
                shown(&recorded[name.as_str()]),
                shown(counts)
            ));
        }
    }
    let (total, written) = (split.total(), validation.total);
    for (field, recorded, value) in [
        ("train_rows", written.train_rows, total.train_rows),
        (
            "validation_rows",
            written.validation_rows,
            total.validation_rows,
        ),
        (
            "train_conversations",
            written.train_conversations,
            total.train_conversations,
        ),
        (
            "validation_conversations",
            written.validation_conversations,
            total.validation_conversations,
        ),
    ] {
        if recorded != value {
            return Err(format!("{field} is {recorded}, but the rows give {value}"));
        }
    }
    let train = total.train_rows;
    if let Some(i) = (0..rows.len()).find(|&i| split.is_chosen(rows[i].0) != (i as u64 >= train)) {
        return Err(format!(
            "row {i} belongs to a {} conversation but lies in the {} rows (the first {train} rows are the training rows)",
            if split.is_chosen(rows[i].0) { "validation" } else { "training" },
            if i as u64 >= train { "validation" } else { "training" },
        ));
    }
    let ratio = validation.train_data_ratio;
    if (rows.len() as f64 * ratio).floor() as u64 != train {
        return Err(format!(
            "train_data_ratio {ratio} does not split {} rows after the {train} training rows",
            rows.len()
        ));
    }
    Ok(())
}

fn check_accounting(
    sources: &indexmap::IndexMap<String, crate::model::stats::SourceStats>,
    rows: u64,
) -> Result<(), String> {
    let mut total_rows = 0;
    for (name, s) in sources {
        // The identity of `SourceStats::balanced`.
        let accounted = s.kept
            + s.rejected.values().sum::<u64>()
            + s.filtered.values().sum::<u64>()
            + s.deduplicated
            + s.near_duplicate
            + s.contaminated
            + s.sampled_out;
        if s.read != accounted {
            return Err(format!(
                "source `{name}` read {} rows but accounts for {accounted} (kept + rejected + filtered + deduplicated + near_duplicate + contaminated + sampled_out)",
                s.read
            ));
        }
        total_rows += s.rows;
    }
    if total_rows != rows {
        return Err(format!(
            "the sources' rows add up to {total_rows}, not the dataset's {rows}"
        ));
    }
    Ok(())
}

/// The build_id of what the manifest records (inputs, settings, lockfile) and the pipeline copy.
fn recorded_build_id(out: &OutputDir) -> Result<String> {
    let m = &out.manifest;
    let copy = member(&out.path, &m.pipeline.copy, "the pipeline copy")?;
    let yaml = fs::read(&copy).with_context(|| format!("cannot read `{}`", copy.display()))?;
    let pipeline = identity::pipeline_value(&yaml)
        .with_context(|| format!("`{}` is not YAML", copy.display()))?;
    let inputs: Vec<IdentityInput> = m.inputs.files.iter().map(IdentityInput::from).collect();
    Ok(Identity {
        tool_name: &m.tool.name,
        tool_version: &m.tool.version,
        pipeline: &pipeline,
        lock_sha256: m.pipeline.lock.as_ref().map(|l| l.sha256.as_str()),
        template_sha256: &m.inputs.template_sha256,
        template_kwargs: &m.settings.template_kwargs,
        tokenizer_sha256: &m.inputs.tokenizer_sha256,
        inputs: &inputs,
    }
    .build_id())
}

fn read_json(path: &Path) -> Result<Value> {
    let bytes = fs::read(path).with_context(|| format!("`{}` is missing", path.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("`{}` is not JSON", path.display()))
}

/// Builds the recorded pipeline into a temporary sibling of the output directory and compares
/// every file it writes with the output's. Returns how many files were compared.
fn rebuild(out: &OutputDir, threads: Option<usize>, printer: &Printer) -> Result<usize> {
    let record = &out.manifest.pipeline;
    let Some(relative) = &record.path else {
        bail!("the manifest does not record where the pipeline was, so it cannot be rebuilt");
    };
    let pipeline = out.path.join(relative);
    let copy = member(&out.path, &record.copy, "the pipeline copy")?;
    let same_as_copy = |path: &Path, copy: &Path, what: &str| -> Result<()> {
        let now = fs::read(path).with_context(|| {
            format!(
                "the {what} was `{}` when this dataset was built, and cannot be read now",
                path.display()
            )
        })?;
        let then = fs::read(copy).with_context(|| format!("cannot read `{}`", copy.display()))?;
        if now != then {
            bail!(
                "the {what} `{}` has changed since this dataset was built; restore it from `{}` to rebuild",
                path.display(),
                copy.display()
            );
        }
        Ok(())
    };
    same_as_copy(&pipeline, &copy, "pipeline")?;
    if let Some(lock) = &record.lock {
        same_as_copy(
            &Lockfile::path_for(&pipeline),
            &member(&out.path, &lock.copy, "the lockfile copy")?,
            "lockfile",
        )?;
    }
    // A sibling, so that the pipeline's path relative to the output (recorded in the manifest)
    // is the same.
    let name = out
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "dataset".to_owned());
    let temp = out
        .path
        .with_file_name(format!(".{name}.rebuild-{}", std::process::id()));
    if temp.exists() {
        bail!("`{}` exists; remove it to rebuild", temp.display());
    }
    printer.info(&format!(
        "rebuilding `{}` into `{}`...",
        pipeline.display(),
        temp.display()
    ));
    let built = crate::engine::session::run(
        &BuildArgs {
            pipeline,
            threads,
            locked: record.lock.is_some(),
            timings: false,
            output: Some(temp.clone()),
            fresh: true,
            merge: None,
            wide: false,
        },
        &Printer::Quiet,
    )
    .context("the rebuild failed");
    let compared = built.and_then(|()| compare_dirs(&out.path, &temp));
    // Both were written by this rebuild only (the name is new and holds our process id).
    for path in [
        temp.clone(),
        temp.with_file_name(format!(".{name}.rebuild-{}.partial", std::process::id())),
    ] {
        if path.exists() {
            fs::remove_dir_all(&path).ok();
        }
    }
    // And the build lock beside it (a build leaves its `DIR.lock` in place; this one is ours).
    fs::remove_file(temp.with_file_name(format!(".{name}.rebuild-{}.lock", std::process::id())))
        .ok();
    compared
}

/// Every file of `rebuilt` must be in `dir` with the same bytes. Returns how many there are.
fn compare_dirs(dir: &Path, rebuilt: &Path) -> Result<usize> {
    let mut names = Vec::new();
    // The directory's files, and those of the validation split's folder.
    for folder in [Path::new(""), Path::new(VALIDATION_DIR)] {
        let at = rebuilt.join(folder);
        if !at.is_dir() {
            continue;
        }
        for entry in fs::read_dir(&at).with_context(|| format!("cannot read `{}`", at.display()))? {
            let entry = entry.with_context(|| format!("cannot read `{}`", at.display()))?;
            if entry.path().is_file() {
                names.push(folder.join(entry.file_name()));
            }
        }
    }
    names.sort();
    for name in &names {
        let (ours, theirs) = (dir.join(name), rebuilt.join(name));
        if !ours.is_file() {
            bail!(
                "the rebuild wrote `{}`, which `{}` does not have",
                name.to_string_lossy(),
                dir.display()
            );
        }
        if let Some(offset) = first_difference(&ours, &theirs)? {
            bail!(
                "`{}` differs from the rebuild at byte {offset}",
                ours.display()
            );
        }
    }
    Ok(names.len())
}

/// The offset of the first byte where two files differ (the shorter one's length when one is
/// a prefix of the other), or `None` when they are equal.
fn first_difference(a: &Path, b: &Path) -> Result<Option<u64>> {
    let open = |p: &Path| {
        fs::File::open(p)
            .map(|f| std::io::BufReader::with_capacity(1 << 20, f))
            .with_context(|| format!("cannot read `{}`", p.display()))
    };
    let (mut a_file, mut b_file) = (open(a)?, open(b)?);
    let (mut a_buf, mut b_buf) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    let mut offset = 0u64;
    loop {
        let n = read_full(&mut a_file, &mut a_buf)
            .with_context(|| format!("cannot read `{}`", a.display()))?;
        let m = read_full(&mut b_file, &mut b_buf)
            .with_context(|| format!("cannot read `{}`", b.display()))?;
        let common = n.min(m);
        if let Some(i) = (0..common).find(|&i| a_buf[i] != b_buf[i]) {
            return Ok(Some(offset + i as u64));
        }
        if n != m {
            return Ok(Some(offset + common as u64));
        }
        if n == 0 {
            return Ok(None);
        }
        offset += n as u64;
    }
}

/// Fills `buf` unless the file ends first; returns the bytes read.
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// The file names a `state.json` lists (`_data_files[].filename`).
fn listed_files(state: &Value) -> Vec<&str> {
    state["_data_files"]
        .as_array()
        .map(|files| {
            files
                .iter()
                .filter_map(|f| f["filename"].as_str())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replaces `dir` with a new directory (another manifest), as a build's
    /// final swap does (the old one moved aside).
    fn swap(dir: &Path, round: usize) {
        let aside = dir.with_extension(format!("old{round}"));
        fs::rename(dir, &aside).expect("aside");
        fs::create_dir(dir).expect("new");
        fs::write(dir.join("manifest.json"), "x".repeat(round + 1)).expect("manifest");
    }

    fn setup() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("ds");
        fs::create_dir(&dir).expect("mkdir");
        fs::write(dir.join("manifest.json"), "{}").expect("manifest");
        (tmp, dir)
    }

    #[test]
    fn a_check_failing_across_a_swap_runs_again_on_the_new_dataset() {
        let (_tmp, dir) = setup();
        let mut round = 0;
        let got = until_unchanged(&dir, |_| {
            round += 1;
            if round == 1 {
                swap(&dir, round);
                bail!("shard 0 differs"); // the old manifest against the new shards
            }
            Ok(round)
        });
        assert_eq!(got.expect("passes on the new dataset"), 2);
    }

    #[test]
    fn a_dataset_swapped_during_every_run_is_reported_changed_not_damaged() {
        let (_tmp, dir) = setup();
        let mut round = 0;
        let got: Result<()> = until_unchanged(&dir, |_| {
            round += 1;
            swap(&dir, round);
            bail!("shard 0 differs");
        });
        assert_eq!(round, 3);
        assert_eq!(
            got.expect_err("changed").to_string(),
            format!(
                "`{}` changed during verify, retry: a build replaced it 3 times while it was read",
                dir.display()
            )
        );
    }

    #[test]
    fn damage_while_nothing_changes_is_reported_at_once() {
        let (_tmp, dir) = setup();
        let mut round = 0;
        let got: Result<()> = until_unchanged(&dir, |_| {
            round += 1;
            bail!("shard 0 differs");
        });
        assert_eq!(round, 1);
        assert_eq!(got.expect_err("damaged").to_string(), "shard 0 differs");
    }
}
