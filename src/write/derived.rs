//! Files that commands other than `build` write into a dataset directory, derived from the
//! dataset (today the draft vocabulary files of `chatshards vocab`). They are listed with
//! their SHA-256 in [`RECORD`], so that the next build into the directory recognizes them as
//! this tool's own and removes them with the dataset they were derived from (a kept mapping
//! would silently describe the old rows), while a file of the same name that anyone else wrote
//! or changed is still refused, never deleted.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

/// The list of derived files, in the dataset directory.
pub const RECORD: &str = "derived_files.json";

#[derive(Debug, Default, Serialize, Deserialize)]
struct Record {
    /// File name → SHA-256 (hex) of the bytes this tool wrote.
    files: BTreeMap<String, String>,
}

fn read(dir: &Path) -> Record {
    // A missing or unreadable record lists nothing: its files are then refused as foreign.
    fs::read(dir.join(RECORD))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

fn sha256_file(path: &Path) -> Option<String> {
    let bytes = fs::read(path).ok()?;
    Some(hex::encode(Sha256::digest(bytes)))
}

/// The names in `dir` that this tool wrote as derived files and nobody changed since.
pub fn ours(dir: &Path) -> Vec<String> {
    read(dir)
        .files
        .into_iter()
        .filter(|(name, sha)| {
            // Plain names only: the record never reaches outside the directory.
            !name.contains(['/', '\\'])
                && name != ".."
                && sha256_file(&dir.join(name)).as_deref() == Some(sha.as_str())
        })
        .map(|(name, _)| name)
        .collect()
}

/// Writes derived files into `dir`, refusing to replace a file this tool did not write there.
/// The record is updated before the files are, so a file is never ours without being listed.
pub fn write(dir: &Path, files: &[(String, Vec<u8>)]) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("failed to create `{}`", dir.display()))?;
    let mine = ours(dir);
    for (name, _) in files {
        let path = dir.join(name);
        if fs::symlink_metadata(&path).is_ok() && !mine.contains(name) {
            anyhow::bail!(
                "`{}` exists and was not written by chatshards (or was changed since); refusing to replace it. Move it away first",
                path.display()
            );
        }
    }
    let mut record = read(dir);
    for (name, bytes) in files {
        record
            .files
            .insert(name.clone(), hex::encode(Sha256::digest(bytes)));
    }
    let record_path = dir.join(RECORD);
    let json = serde_json::to_vec_pretty(&record).context("failed to encode the record")?;
    crate::model::nofollow::write(&record_path, &json)
        .with_context(|| format!("failed to write `{}`", record_path.display()))?;
    for (name, bytes) in files {
        let path = dir.join(name);
        crate::model::nofollow::write(&path, bytes)
            .with_context(|| format!("failed to write `{}`", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unchanged_recorded_files_are_ours_and_foreign_ones_are_not_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        write(d, &[("a.npy".into(), b"one".to_vec())]).expect("write");
        assert_eq!(ours(d), vec!["a.npy".to_string()]);
        // Rewriting our own file is allowed; a file someone else put there is not replaced.
        write(d, &[("a.npy".into(), b"two".to_vec())]).expect("rewrite");
        fs::write(d.join("b.npy"), b"theirs").expect("write");
        let err = write(d, &[("b.npy".into(), b"x".to_vec())]).expect_err("foreign");
        assert!(err
            .to_string()
            .contains("b.npy` exists and was not written by chatshards"));
        assert_eq!(fs::read(d.join("b.npy")).expect("read"), b"theirs");
        // A recorded file changed by someone else stops being ours.
        fs::write(d.join("a.npy"), b"edited").expect("write");
        assert!(ours(d).is_empty());
    }
}
