//! Digests and the JSON forms they are taken over, shared by the lockfile, the build's identity
//! and the files a build writes.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Compact JSON with object keys sorted at every depth.
pub fn canonical_json(value: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&map[k.as_str()])))
                        .collect(),
                )
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(value).to_string()
}

/// Pretty JSON with a final newline, as every JSON file chatshards writes.
pub fn pretty(v: &Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string());
    s.push('\n');
    s
}

/// Size and lowercase hex SHA-256 of a file, streamed (inputs can be gigabytes): the one
/// hash of a file's bytes that the manifest, the lockfile, a resume and `verify` compare.
pub fn hash_file(path: &std::path::Path) -> std::io::Result<(u64, String)> {
    hash_file_with(path, &mut || Ok(()))
}

/// [`hash_file`], calling `chunk` after each MiB read: its error (a cancelled build) stops it.
pub fn hash_file_with(
    path: &std::path::Path,
    chunk: &mut dyn FnMut() -> std::io::Result<()>,
) -> std::io::Result<(u64, String)> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        bytes += n as u64;
        chunk()?;
    }
    Ok((bytes, hex::encode(hasher.finalize())))
}
