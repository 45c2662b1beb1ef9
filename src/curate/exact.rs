//! Exact deduplication: a 128-bit fingerprint of the conversation (or of its prompt), and the
//! first row (in position order) of each fingerprint survives.

use crate::conversation::{py_trim, Conversation, Role};
use crate::tokenize::fast::normalize;
use serde::{Deserialize, Deserializer};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::collections::HashMap;

/// SHA-256 of the key's bytes, truncated to 128 bits.
pub type Fingerprint = [u8; 16];

/// What two rows must share to be exact duplicates.
#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DedupKey {
    /// The whole normalized conversation: messages and tool schemas.
    #[default]
    Conversation,
    /// The prompt only (system and user turns, role and content): the same question answered
    /// twice is a duplicate.
    Prompt,
}

/// `dedup:` in the YAML: `true` (key `conversation`), `false`, or `{key: prompt|conversation}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DedupConfig {
    Off,
    On(DedupKey),
}

impl Default for DedupConfig {
    fn default() -> Self {
        DedupConfig::On(DedupKey::Conversation)
    }
}

impl DedupConfig {
    pub fn key(self) -> Option<DedupKey> {
        match self {
            DedupConfig::Off => None,
            DedupConfig::On(key) => Some(key),
        }
    }
}

impl<'de> Deserialize<'de> for DedupConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Keyed {
            #[serde(default)]
            key: DedupKey,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Flag(bool),
            Keyed(Keyed),
        }
        match Form::deserialize(deserializer).map_err(|_| {
            serde::de::Error::custom("`dedup` must be true, false or {key: conversation|prompt}")
        })? {
            Form::Flag(false) => Ok(DedupConfig::Off),
            Form::Flag(true) => Ok(DedupConfig::On(DedupKey::Conversation)),
            Form::Keyed(k) => Ok(DedupConfig::On(k.key)),
        }
    }
}

/// The fingerprint of `c` under `key`, over what the model sees of each message: its content
/// and reasoning with leading and trailing whitespace removed (the Qwen templates `trim` each
/// message) in Unicode NFC (the tokenizer's normalizer), case kept. Two rows differing only
/// there tokenize alike, so they are duplicates.
///
/// `Conversation` hashes the conversation's JSON serialization (for a row whose text is
/// already trimmed and NFC, the bytes earlier versions used, so their outputs do not change);
/// `Prompt` hashes the JSON array of `[role, content]` pairs of the system and user turns.
pub fn fingerprint(c: &Conversation, key: DedupKey) -> Fingerprint {
    let normalized = as_seen(c);
    let c = normalized.as_ref().unwrap_or(c);
    let mut hasher = Sha256::new();
    // Serializing structs of strings and JSON values cannot fail.
    let bytes = match key {
        DedupKey::Conversation => serde_json::to_vec(c),
        DedupKey::Prompt => {
            let prompt: Vec<(&str, &str)> = c
                .messages
                .iter()
                .filter(|m| matches!(m.role, Role::System | Role::User))
                .map(|m| (m.role.as_str(), m.content.as_str()))
                .collect();
            serde_json::to_vec(&prompt)
        }
    };
    if let Ok(bytes) = bytes {
        hasher.update(bytes);
    }
    let digest = hasher.finalize();
    let mut out = [0u8; 16];
    out.copy_from_slice(&digest[..16]);
    out
}

/// The fingerprint of a pre-tokenized row (`format: speculator`) under `key`: its ids and mask
/// (`Conversation`), or the ids before its first supervised token (`Prompt`: the same prompt
/// answered twice). Prefixed so that no conversation's JSON can hash alike.
pub fn token_fingerprint(ids: &[u32], mask: &[u8], key: DedupKey) -> Fingerprint {
    let mut hasher = Sha256::new();
    hasher.update(b"chatshards token row\0");
    let prompt = mask.iter().position(|&m| m == 1).unwrap_or(ids.len());
    let ids = match key {
        DedupKey::Conversation => ids,
        DedupKey::Prompt => &ids[..prompt.min(ids.len())],
    };
    for id in ids {
        hasher.update(id.to_le_bytes());
    }
    if key == DedupKey::Conversation {
        hasher.update(mask);
    }
    let digest = hasher.finalize();
    let mut out = [0u8; 16];
    out.copy_from_slice(&digest[..16]);
    out
}

/// `c` with each message's content and reasoning trimmed and in NFC (as the tokenizer
/// computes it); `None` when nothing changes (the common case: no copy).
fn as_seen(c: &Conversation) -> Option<Conversation> {
    // `str.strip()`, as the template's `trim` filter.
    fn seen(t: &str) -> Cow<'_, str> {
        normalize(true, py_trim(t))
    }
    let changes = |t: &str| matches!(seen(t), Cow::Owned(_)) || py_trim(t).len() != t.len();
    let changed = c
        .messages
        .iter()
        .any(|m| changes(&m.content) || m.reasoning.as_deref().is_some_and(changes));
    if !changed {
        return None;
    }
    let mut c = c.clone();
    for m in &mut c.messages {
        m.content = seen(&m.content).into_owned();
        if let Some(r) = &mut m.reasoning {
            *r = seen(r).into_owned();
        }
    }
    Some(c)
}

/// Fingerprints seen so far, each with the first row that had it.
#[derive(Default, Debug)]
pub struct ExactIndex {
    first: HashMap<Fingerprint, u32>,
}

impl ExactIndex {
    pub fn new() -> Self {
        Self::default()
    }

    /// `Some(survivor)` when `fp` was seen before (this row is a duplicate of `survivor`),
    /// `None` when `row` is its first. Rows must be fed in position order, so the survivor is
    /// the smallest position.
    pub fn first_or_insert(&mut self, fp: Fingerprint, row: u32) -> Option<u32> {
        match self.first.entry(fp) {
            std::collections::hash_map::Entry::Occupied(e) => Some(*e.get()),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(row);
                None
            }
        }
    }

    pub fn len(&self) -> usize {
        self.first.len()
    }

    pub fn is_empty(&self) -> bool {
        self.first.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::Message;

    fn conv(system: Option<&str>, user: &str, assistant: &str) -> Conversation {
        let mut messages = Vec::new();
        if let Some(s) = system {
            messages.push(Message::system(s));
        }
        messages.push(Message::user(user));
        messages.push(Message::assistant(assistant));
        Conversation {
            messages,
            tools: vec![],
        }
    }

    #[test]
    fn conversation_fingerprint_keeps_its_bytes() {
        // SHA-256 of the serialized conversation, first 16 bytes: what earlier builds wrote.
        let c = conv(None, "hi", "hello");
        let json = serde_json::to_vec(&c).expect("json");
        assert_eq!(
            json,
            br#"{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}"#
        );
        // hashlib.sha256(json).hexdigest()[:32] in Python.
        assert_eq!(
            hex::encode(fingerprint(&c, DedupKey::Conversation)),
            "1f2ed03373c7bda84f23400fc3bb43ee"
        );
    }

    #[test]
    fn prompt_key_ignores_the_answer() {
        let a = conv(Some("sys"), "q", "answer one");
        let b = conv(Some("sys"), "q", "answer two");
        let c = conv(None, "q", "answer one");
        let d = conv(Some("sys"), "q2", "answer one");
        let p = |c: &Conversation| fingerprint(c, DedupKey::Prompt);
        assert_eq!(p(&a), p(&b));
        assert_ne!(p(&a), p(&c), "the system turn is part of the prompt");
        assert_ne!(p(&a), p(&d));
        assert_ne!(
            fingerprint(&a, DedupKey::Conversation),
            fingerprint(&b, DedupKey::Conversation)
        );
        // [role, content] pairs: the split between turns is part of the key.
        let e = conv(Some("s"), "ys q", "x");
        let f = conv(Some("s ys"), "q", "x");
        assert_ne!(p(&e), p(&f));
    }

    #[test]
    fn rows_that_tokenize_alike_share_a_fingerprint() {
        // Per-message surrounding whitespace and NFD vs NFC: the template trims each message
        // and the tokenizer normalizes to NFC, so these give the same input_ids.
        let plain = conv(Some("Be brief."), "Café?", "Oui.");
        let spaced = conv(Some("  Be brief.\n"), "\tCafé?  ", "\nOui.\n\n");
        let nfd = conv(Some("Be brief."), "Cafe\u{301}?", "Oui.");
        for key in [DedupKey::Conversation, DedupKey::Prompt] {
            let p = |c: &Conversation| fingerprint(c, key);
            assert_eq!(p(&plain), p(&spaced), "{key:?}");
            assert_eq!(p(&plain), p(&nfd), "{key:?}");
            // Case and inner whitespace are seen by the model: different rows.
            assert_ne!(
                p(&plain),
                p(&conv(Some("Be brief."), "café?", "Oui.")),
                "{key:?}"
            );
            assert_ne!(
                p(&plain),
                p(&conv(Some("Be  brief."), "Café?", "Oui.")),
                "{key:?}"
            );
        }
        // Reasoning too.
        let mut a = conv(None, "q", "a");
        let mut b = a.clone();
        a.messages[1].reasoning = Some("think".into());
        b.messages[1].reasoning = Some("\nthink\n".into());
        assert_eq!(
            fingerprint(&a, DedupKey::Conversation),
            fingerprint(&b, DedupKey::Conversation)
        );
    }

    #[test]
    fn index_names_the_first_row() {
        let mut index = ExactIndex::new();
        let x = [1u8; 16];
        let y = [2u8; 16];
        assert_eq!(index.first_or_insert(x, 0), None);
        assert_eq!(index.first_or_insert(y, 1), None);
        assert_eq!(index.first_or_insert(x, 2), Some(0));
        assert_eq!(index.first_or_insert(x, 3), Some(0));
        assert_eq!(index.first_or_insert(y, 4), Some(1));
        assert_eq!(index.len(), 2);
    }

    #[test]
    fn dedup_config_forms() {
        let parse = |s: &str| serde_yaml_ng::from_str::<DedupConfig>(s);
        assert_eq!(
            parse("true").ok(),
            Some(DedupConfig::On(DedupKey::Conversation))
        );
        assert_eq!(parse("false").ok(), Some(DedupConfig::Off));
        assert_eq!(
            parse("{key: prompt}").ok(),
            Some(DedupConfig::On(DedupKey::Prompt))
        );
        assert_eq!(
            parse("{key: conversation}").ok(),
            Some(DedupConfig::On(DedupKey::Conversation))
        );
        assert_eq!(
            parse("{}").ok(),
            Some(DedupConfig::On(DedupKey::Conversation))
        );
        let err = parse("{key: answer}").expect_err("bad key").to_string();
        assert!(
            err.contains("`dedup` must be true, false or {key: conversation|prompt}"),
            "{err}"
        );
        assert!(parse("{kye: prompt}").is_err());
        assert!(parse("yes please").is_err());
    }
}
