//! `chatshards inspect DIR [--row N | --sample-id ID | --source NAME [--row N]]`: one row
//! decoded, supervised tokens highlighted.
//!
//! The shard holding the row is found from the manifest's per-shard row counts (no other shard
//! is opened, so a broken shard does not hide the rows of the others) and hashed against the
//! manifest before it is decoded: a flipped byte or a truncated file is reported, naming the
//! shard, never decoded. Ids outside the tokenizer's vocabulary are an error too.

use crate::printer::Printer;
use crate::tokenize::Tokenizer;
use anyhow::{bail, Context, Result};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int8Type};
use serde::Deserialize;
use std::io::IsTerminal;
use std::path::Path;

/// The part of `manifest.json` that locates and verifies the shards.
#[derive(Deserialize)]
struct Manifest {
    shards: Vec<Shard>,
}

#[derive(Deserialize)]
struct Shard {
    file: String,
    rows: u64,
    bytes: u64,
    sha256: String,
}

/// Which row to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Which {
    /// The Nth row of the dataset (in shard order, from 0).
    Row(u64),
    /// The row with this `sample_id` (`source:file:row:segment`), or the first row of a source
    /// row (`source:file:row`).
    SampleId(String),
    /// The Nth row of a source (in shard order, from 0).
    Source(String, u64),
}

pub fn run(dir: &Path, which: &Which, tokenizer: Option<&Path>) -> Result<()> {
    let path = dir.join("manifest.json");
    let manifest: Manifest = serde_json::from_slice(&std::fs::read(&path).with_context(|| {
        format!(
            "`{}` is not a chatshards dataset directory (no manifest.json)",
            dir.display()
        )
    })?)
    .with_context(|| format!("`{}` is not a chatshards manifest", path.display()))?;
    let total: u64 = manifest.shards.iter().map(|s| s.rows).sum();
    for shard in &manifest.shards {
        // A plain name, or one in the validation split's folder.
        let name = shard
            .file
            .strip_prefix(crate::write::VALIDATION_DIR)
            .and_then(|n| n.strip_prefix('/'))
            .unwrap_or(&shard.file);
        if name.contains(['/', '\\']) || name.starts_with('.') {
            bail!(
                "the manifest names a shard `{}` outside the dataset",
                shard.file
            );
        }
    }
    // By index: only the shard that holds the row is opened.
    let (shards, mut skip): (Vec<&Shard>, u64) = match which {
        Which::Row(row) => {
            let mut skip = *row;
            let Some(shard) = manifest.shards.iter().find(|s| {
                if skip < s.rows {
                    return true;
                }
                skip -= s.rows;
                false
            }) else {
                bail!("row {row} is past the end of the dataset ({total} rows)");
            };
            (vec![shard], skip)
        }
        _ => (manifest.shards.iter().collect(), 0),
    };
    let mut row = match which {
        Which::Row(row) => row - skip,
        _ => 0,
    };
    // Rows of the wanted source seen so far.
    let mut of_source = 0u64;
    let tokenizer = crate::tokenize::shipped::tokenizer(tokenizer)?;
    for shard in shards {
        let path = dir.join(&shard.file);
        verify(&path, shard)?;
        let f = std::fs::File::open(&path)
            .with_context(|| format!("failed to open `{}`", path.display()))?;
        let reader = arrow_ipc::reader::StreamReader::try_new(std::io::BufReader::new(f), None)
            .with_context(|| format!("`{}` is not an Arrow stream", path.display()))?;
        for batch in reader {
            let batch = batch.with_context(|| format!("failed to read `{}`", path.display()))?;
            let column = |name: &str| {
                batch
                    .column_by_name(name)
                    .with_context(|| format!("`{}` has no `{name}` column", path.display()))
            };
            let n = batch.num_rows() as u64;
            let found = match which {
                Which::Row(_) if skip >= n => None,
                Which::Row(_) => Some(skip as usize),
                Which::SampleId(id) => {
                    let ids = column("sample_id")?.as_string::<i32>();
                    let prefix = format!("{id}:");
                    (0..batch.num_rows()).find(|&i| {
                        let v = ids.value(i);
                        v == id.as_str() || v.starts_with(&prefix)
                    })
                }
                Which::Source(name, nth) => {
                    let sources = column("source")?.as_string::<i32>();
                    (0..batch.num_rows()).find(|&i| {
                        if sources.value(i) != name.as_str() {
                            return false;
                        }
                        of_source += 1;
                        of_source == nth + 1
                    })
                }
            };
            let Some(i) = found else {
                skip = skip.saturating_sub(n);
                row += n;
                continue;
            };
            return show(&batch, i, row + i as u64, &shard.file, &tokenizer);
        }
        if let Which::Row(_) = which {
            bail!(
                "`{}` holds fewer rows than the manifest says ({})",
                shard.file,
                shard.rows
            );
        }
    }
    match which {
        Which::Row(_) => unreachable!("a row index within the total is found or an error"),
        Which::SampleId(id) => bail!(
            "no row of the dataset has sample_id `{id}` (ids are `source:file:row:segment`, the file and row counted from 0; `source:file:row` finds its first segment)"
        ),
        Which::Source(name, nth) if of_source > 0 => bail!(
            "source `{name}` has {of_source} row(s) in the dataset; --row {nth} is past its last (they count from 0)"
        ),
        Which::Source(name, _) => bail!(
            "no row of the dataset comes from a source named `{name}` (`chatshards stats` lists the sources)"
        ),
    }
}

/// Prints row `i` of `batch`, row `row` of the dataset.
fn show(
    batch: &arrow_array::RecordBatch,
    i: usize,
    row: u64,
    file: &str,
    tokenizer: &Tokenizer,
) -> Result<()> {
    let column = |name: &str| {
        batch
            .column_by_name(name)
            .with_context(|| format!("`{file}` has no `{name}` column"))
    };
    let ids_list = column("input_ids")?.as_list::<i32>().value(i);
    let mask_list = column("loss_mask")?.as_list::<i32>().value(i);
    let ids: Vec<u32> = ids_list
        .as_primitive::<Int32Type>()
        .values()
        .iter()
        .map(|&x| x as u32)
        .collect();
    let mask: Vec<i8> = mask_list.as_primitive::<Int8Type>().values().to_vec();
    let sample_id = column("sample_id")?.as_string::<i32>().value(i).to_owned();
    let source = column("source")?.as_string::<i32>().value(i).to_owned();
    if mask.len() != ids.len() {
        bail!(
            "row {row} of `{file}` has {} ids but {} mask values",
            ids.len(),
            mask.len()
        );
    }
    let vocab = tokenizer.reference();
    if let Some(bad) = ids.iter().find(|&&id| vocab.id_to_token(id).is_none()) {
        bail!(
            "row {row} of `{file}` holds id {bad}, which the tokenizer does not have: built with another tokenizer? (pass it with --tokenizer)"
        );
    }
    let supervised = mask.iter().filter(|&&m| m == 1).count();
    let mut text = format!(
        "row {row}  sample_id {sample_id}  source {source}  seq_len {}  supervised {supervised}\n\n",
        ids.len()
    );
    text.push_str(&crate::tokenize::mask::highlight(
        tokenizer,
        &ids,
        &mask,
        std::io::stdout().is_terminal(),
    ));
    text.push('\n');
    Printer::data(&mut std::io::stdout().lock(), &text).context("failed to write stdout")?;
    Ok(())
}

/// Checks a shard's size and SHA-256 against the manifest, streaming it.
fn verify(path: &Path, shard: &Shard) -> Result<()> {
    let (bytes, sha256) = crate::model::digest::hash_file(path)
        .with_context(|| format!("failed to read shard `{}`", path.display()))?;
    if bytes != shard.bytes {
        bail!(
            "shard `{}` is {bytes} bytes but the manifest says {} (truncated or changed); it is not decoded. The other shards are unaffected",
            shard.file,
            shard.bytes
        );
    }
    if sha256 != shard.sha256 {
        bail!(
            "shard `{}` does not match the manifest (sha256 {sha256}, expected {}): the file is corrupt or was changed; it is not decoded. The other shards are unaffected",
            shard.file,
            shard.sha256
        );
    }
    Ok(())
}
