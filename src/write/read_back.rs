//! Reading a built output directory back: its manifest and its shards' rows (`verify`, `diff`).

pub use super::manifest::Recorded;
use anyhow::{bail, Context, Result};
use arrow_array::RecordBatch;
use serde_json::Value;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

/// An output directory and its manifest: read through [`Recorded`], and as the JSON text's
/// value (what the seal hashes, and what `diff` compares member by member).
pub struct OutputDir {
    pub path: PathBuf,
    pub manifest: Recorded,
    pub json: Value,
}

impl OutputDir {
    pub fn open(path: &Path) -> Result<Self> {
        let file = path.join("manifest.json");
        let bytes = fs::read(&file).with_context(|| {
            format!(
                "`{}` is not a chatshards dataset: cannot read `{}`",
                path.display(),
                file.display()
            )
        })?;
        let json: Value = serde_json::from_slice(&bytes)
            .with_context(|| format!("`{}` is not valid JSON", file.display()))?;
        let manifest: Recorded = serde_json::from_value(json.clone()).with_context(|| {
            format!(
                "`{}` is not a manifest this chatshards can check (written by an older version?)",
                file.display()
            )
        })?;
        Ok(OutputDir {
            path: path.to_owned(),
            manifest,
            json,
        })
    }
}

/// Counts and optionally hashes the bytes read through it.
struct Tally<R> {
    inner: R,
    bytes: u64,
    hasher: Option<sha2::Sha256>,
}

impl<R: Read> Read for Tally<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes += n as u64;
        if let Some(hasher) = &mut self.hasher {
            sha2::Digest::update(hasher, &buf[..n]);
        }
        Ok(n)
    }
}

/// What reading a shard found.
pub struct ShardRead {
    pub bytes: u64,
    /// With `hash`: the file's SHA-256 (every byte, the stream's end marker and anything after it
    /// included).
    pub sha256: Option<String>,
    pub rows: u64,
    pub schema: arrow_schema::SchemaRef,
}

/// Reads a shard's Arrow stream batch by batch (one batch in memory at a time), in one pass over
/// the file that also hashes it when `hash` is set.
pub fn read_shard(
    path: &Path,
    hash: bool,
    mut each: impl FnMut(&RecordBatch) -> Result<()>,
) -> Result<ShardRead> {
    let file = fs::File::open(path).with_context(|| format!("cannot read `{}`", path.display()))?;
    let tally = Tally {
        inner: file,
        bytes: 0,
        hasher: hash.then(<sha2::Sha256 as sha2::Digest>::new),
    };
    let mut reader = arrow_ipc::reader::StreamReader::try_new(std::io::BufReader::new(tally), None)
        .with_context(|| format!("`{}` is not an Arrow IPC stream", path.display()))?;
    let schema = reader.schema();
    let mut rows = 0u64;
    for batch in &mut reader {
        let batch =
            batch.with_context(|| format!("`{}`: unreadable record batch", path.display()))?;
        rows += batch.num_rows() as u64;
        each(&batch)?;
    }
    // The end-of-stream marker and anything after it count too.
    std::io::copy(reader.get_mut(), &mut std::io::sink())
        .with_context(|| format!("cannot read `{}`", path.display()))?;
    let tally = reader.get_mut().get_mut();
    Ok(ShardRead {
        bytes: tally.bytes,
        sha256: tally
            .hasher
            .take()
            .map(|h| hex::encode(sha2::Digest::finalize(h))),
        rows,
        schema,
    })
}

/// The `sample_id`, `input_ids` and `loss_mask` columns of a batch of chatshards' schema.
pub struct RowColumns<'a> {
    pub sample_id: &'a arrow_array::StringArray,
    pub input_ids: &'a arrow_array::ListArray,
    pub loss_mask: &'a arrow_array::ListArray,
}

impl<'a> RowColumns<'a> {
    pub fn of(batch: &'a RecordBatch, path: &Path) -> Result<Self> {
        use arrow_array::Array;
        fn column<'b, T: 'static>(
            batch: &'b RecordBatch,
            name: &str,
            path: &Path,
        ) -> Result<&'b T> {
            let Some(column) = batch.column_by_name(name) else {
                bail!("`{}` has no `{name}` column", path.display());
            };
            match column.as_any().downcast_ref::<T>() {
                Some(array) => Ok(array),
                None => bail!(
                    "`{}`: column `{name}` has type {}",
                    path.display(),
                    column.data_type()
                ),
            }
        }
        Ok(RowColumns {
            sample_id: column(batch, "sample_id", path)?,
            input_ids: column(batch, "input_ids", path)?,
            loss_mask: column(batch, "loss_mask", path)?,
        })
    }
}
