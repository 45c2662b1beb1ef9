//! The response cache: one file per request under the cache directory, named by the SHA-256
//! of the request's exact payload (`ab/abcdef….json`), written to a temporary file, synced and
//! renamed into place, so that a killed build leaves either the whole record or none. A record
//! holds its key and a SHA-256 of its body: a damaged file is a miss (sent again, then replaced),
//! never a wrong answer.

use super::client::Generation;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
}

#[derive(Serialize, Deserialize)]
struct Record {
    key: String,
    /// SHA-256 of `body`'s bytes.
    sha256: String,
    /// The generation as JSON text.
    body: String,
}

/// The cache key of a request payload: SHA-256 of its JSON text. The payload is built in one
/// fixed field order (with `preserve_order`), so the same request always gives the same text.
pub fn key(payload: &serde_json::Value) -> String {
    hex::encode(Sha256::digest(payload.to_string().as_bytes()))
}

impl Cache {
    pub fn new(dir: PathBuf) -> Cache {
        Cache { dir }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(&key[..2]).join(format!("{key}.json"))
    }

    /// The cached generation for `key`, if a sound record is there.
    pub fn get(&self, key: &str) -> Option<Generation> {
        let bytes = std::fs::read(self.path(key)).ok()?;
        let record: Record = serde_json::from_slice(&bytes).ok()?;
        let sound = record.key == key
            && hex::encode(Sha256::digest(record.body.as_bytes())) == record.sha256;
        sound
            .then(|| serde_json::from_str(&record.body).ok())
            .flatten()
    }

    /// Stores `generation` under `key` atomically.
    pub fn put(&self, key: &str, generation: &Generation) -> std::io::Result<()> {
        let path = self.path(key);
        let parent = path.parent().unwrap_or(&self.dir);
        std::fs::create_dir_all(parent)?;
        let body = serde_json::to_string(generation).map_err(std::io::Error::other)?;
        let record = Record {
            key: key.to_owned(),
            sha256: hex::encode(Sha256::digest(body.as_bytes())),
            body,
        };
        let mut tmp = tempfile::NamedTempFile::new_in(parent)?;
        serde_json::to_writer(&mut tmp, &record).map_err(std::io::Error::other)?;
        tmp.write_all(b"\n")?;
        tmp.as_file().sync_all()?;
        tmp.persist(&path).map_err(|e| e.error)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generation() -> Generation {
        Generation {
            prompt_ids: vec![1, 2, 3],
            completion_ids: vec![4, 5],
            content: Some("hi".into()),
            reasoning: None,
            tool_calls: Vec::new(),
            finish_reason: "stop".into(),
            fingerprint: None,
        }
    }

    #[test]
    fn a_record_round_trips_and_a_damaged_one_is_a_miss() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path().to_owned());
        let k = key(&serde_json::json!({"model": "m", "messages": []}));
        assert!(cache.get(&k).is_none());
        cache.put(&k, &generation()).unwrap();
        assert_eq!(cache.get(&k), Some(generation()));
        let path = cache.path(&k);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("[4,5]", "[4,6]")).unwrap();
        assert_eq!(
            cache.get(&k),
            None,
            "a body that fails its checksum is a miss"
        );
        std::fs::write(&path, &text[..text.len() / 2]).unwrap();
        assert_eq!(cache.get(&k), None, "a torn record is a miss");
        // Another key's record copied over this one is not taken for it.
        let other = key(&serde_json::json!({"model": "n"}));
        cache.put(&other, &generation()).unwrap();
        std::fs::copy(cache.path(&other), &path).unwrap();
        assert_eq!(cache.get(&k), None);
    }
}
