//! `chatshards inspect DIR --row N`: one row decoded, supervised tokens highlighted.
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

pub fn run(dir: &Path, row: u64, tokenizer: Option<&Path>) -> Result<()> {
    let path = dir.join("manifest.json");
    let manifest: Manifest = serde_json::from_slice(&std::fs::read(&path).with_context(|| {
        format!(
            "`{}` is not a chatshards dataset directory (no manifest.json)",
            dir.display()
        )
    })?)
    .with_context(|| format!("`{}` is not a chatshards manifest", path.display()))?;
    let total: u64 = manifest.shards.iter().map(|s| s.rows).sum();
    let mut skip = row;
    let Some(shard) = manifest.shards.iter().find(|s| {
        if skip < s.rows {
            return true;
        }
        skip -= s.rows;
        false
    }) else {
        bail!("row {row} is past the end of the dataset ({total} rows)");
    };
    let path = dir.join(&shard.file);
    if shard.file.contains(['/', '\\']) {
        bail!(
            "the manifest names a shard `{}` outside the dataset",
            shard.file
        );
    }
    verify(&path, shard)?;
    let tokenizer = super::shipped::tokenizer(tokenizer)?;
    let f = std::fs::File::open(&path)
        .with_context(|| format!("failed to open `{}`", path.display()))?;
    let reader = arrow_ipc::reader::StreamReader::try_new(std::io::BufReader::new(f), None)
        .with_context(|| format!("`{}` is not an Arrow stream", path.display()))?;
    for batch in reader {
        let batch = batch.with_context(|| format!("failed to read `{}`", path.display()))?;
        let n = batch.num_rows() as u64;
        if skip >= n {
            skip -= n;
            continue;
        }
        let i = skip as usize;
        let column = |name: &str| {
            batch
                .column_by_name(name)
                .with_context(|| format!("`{}` has no `{name}` column", path.display()))
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
                "row {row} of `{}` has {} ids but {} mask values",
                shard.file,
                ids.len(),
                mask.len()
            );
        }
        let vocab = tokenizer.reference();
        if let Some(bad) = ids.iter().find(|&&id| vocab.id_to_token(id).is_none()) {
            bail!(
                "row {row} of `{}` holds id {bad}, which the tokenizer does not have: built with another tokenizer? (pass it with --tokenizer)",
                shard.file
            );
        }
        let supervised = mask.iter().filter(|&&m| m == 1).count();
        let mut text = format!(
            "row {row}  sample_id {sample_id}  source {source}  seq_len {}  supervised {supervised}\n\n",
            ids.len()
        );
        text.push_str(&highlight(
            &tokenizer,
            &ids,
            &mask,
            std::io::stdout().is_terminal(),
        ));
        text.push('\n');
        Printer::data(&mut std::io::stdout().lock(), &text).context("failed to write stdout")?;
        return Ok(());
    }
    bail!(
        "`{}` holds fewer rows than the manifest says ({})",
        shard.file,
        shard.rows
    )
}

/// Checks a shard's size and SHA-256 against the manifest, streaming it.
fn verify(path: &Path, shard: &Shard) -> Result<()> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let mut file = std::fs::File::open(path)
        .with_context(|| format!("failed to open shard `{}`", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(e).with_context(|| format!("failed to read shard `{}`", path.display()))
            }
        };
        hasher.update(&buf[..n]);
        bytes += n as u64;
    }
    if bytes != shard.bytes {
        bail!(
            "shard `{}` is {bytes} bytes but the manifest says {} (truncated or changed); it is not decoded. The other shards are unaffected",
            shard.file,
            shard.bytes
        );
    }
    let sha256 = hex::encode(hasher.finalize());
    if sha256 != shard.sha256 {
        bail!(
            "shard `{}` does not match the manifest (sha256 {sha256}, expected {}): the file is corrupt or was changed; it is not decoded. The other shards are unaffected",
            shard.file,
            shard.sha256
        );
    }
    Ok(())
}

/// Decodes ids, marking supervised runs with color on a terminal and `⟦…⟧` otherwise.
pub(crate) fn highlight(tokenizer: &Tokenizer, ids: &[u32], mask: &[i8], color: bool) -> String {
    let (open, close) = if color {
        ("\x1b[32m", "\x1b[0m")
    } else {
        ("⟦", "⟧")
    };
    let mut out = String::new();
    let mut start = 0;
    while start < ids.len() {
        let m = mask[start];
        let end = (start..ids.len())
            .find(|&j| mask[j] != m)
            .unwrap_or(ids.len());
        let text = String::from_utf8_lossy(&tokenizer.decode_bytes(&ids[start..end])).into_owned();
        if m == 1 {
            out.push_str(open);
            out.push_str(&text);
            out.push_str(close);
        } else {
            out.push_str(&text);
        }
        start = end;
    }
    out
}
