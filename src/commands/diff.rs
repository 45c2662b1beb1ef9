//! `chatshards diff A B [--json]`: what changed between two built datasets.
//!
//! Inputs and settings come from the manifests (files by source and path, Hub files by repo and
//! path, every setting, the tool version) and from the pipelines copied into the datasets (every
//! key by its path, sources and filters by name: `sources.alpaca.take`); per-source counts are
//! compared field by field. Rows are matched by content identity: the sample's source row (its
//! source, file, segment and copy, from `sample_id`) and a hash of its tokens and mask, so a
//! row deleted or inserted upstream shifts no other row into "changed". A row of A without a
//! twin in B is paired with the row of B that its neighbours' shift predicts (same source row,
//! other content: changed), or else counted removed (and B's left over, added). The shards are
//! called byte-identical only when their bytes were hashed and compared. Memory: one
//! [`RowKey`] (32 bytes) per row of each dataset, so two 913,786-row datasets take about 58 MB;
//! a second pass over the shards names the examples.

use crate::model::SampleId;
use crate::write::read_back::{read_shard, OutputDir, RowColumns};
use anyhow::{bail, Result};
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use xxhash_rust::xxh3::{xxh3_64_with_seed, Xxh3};

/// Examples shown per kind of row change.
const EXAMPLES: usize = 5;
/// Explicit seeds: the hashes only match rows within one run, but stay the same run to run.
const ID_SEED: u64 = 0;
const CONTENT_SEED: u64 = 0;

/// A row, reduced to what matching needs: its lane (a hash of its source, file, segment and
/// copy), its source row number, the hash of its ids and mask, and its position in the dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct RowKey {
    lane: u64,
    content: u64,
    row: u64,
    position: u64,
}

/// `sample_id` = `source:file:row:segment[#copy]` as (lane, row); an id of another shape is a
/// lane of its own.
fn lane_and_row(sample_id: &str) -> (u64, u64) {
    match SampleId::parse(sample_id) {
        Some(
            id @ SampleId {
                segment: Some(segment),
                ..
            },
        ) => {
            let copy = match id.copy {
                0 => String::new(),
                j => j.to_string(),
            };
            let lane = format!("{}:{}:*:{segment}#{copy}", id.source, id.file);
            (xxh3_64_with_seed(lane.as_bytes(), ID_SEED), id.row)
        }
        _ => (xxh3_64_with_seed(sample_id.as_bytes(), ID_SEED), 0),
    }
}

#[derive(Debug, Serialize)]
struct Side {
    dir: String,
    build_id: String,
    dataset_sha256: String,
    rows: u64,
    /// Shards whose bytes do not hash to what the manifest records (`chatshards verify` says
    /// more).
    shards_unlike_manifest: Vec<String>,
}

/// A value that differs between the two manifests (`null` where one does not have it).
#[derive(Debug, Serialize)]
struct Change {
    what: String,
    a: Value,
    b: Value,
}

#[derive(Debug, Serialize)]
struct CountChange {
    source: String,
    field: String,
    a: i128,
    b: i128,
    delta: i128,
}

#[derive(Debug, Default, Serialize)]
struct RowChanges {
    added: u64,
    removed: u64,
    /// The same source row in both, with different tokens or mask.
    changed: u64,
    /// In both with the same tokens, at another position.
    moved: u64,
    /// In both, same tokens, same position.
    unchanged: u64,
    examples: Examples,
}

#[derive(Debug, Default, Serialize)]
struct Examples {
    added: Vec<Example>,
    removed: Vec<Example>,
    changed: Vec<Example>,
}

#[derive(Debug, Serialize)]
struct Example {
    sample_id: String,
    /// Tokens in A (`null` when added).
    tokens_a: Option<u64>,
    /// Tokens in B (`null` when removed).
    tokens_b: Option<u64>,
}

#[derive(Debug, Serialize)]
struct Report {
    a: Side,
    b: Side,
    /// Whether the shards are byte-identical (their bytes hashed here and compared).
    identical: bool,
    inputs: Vec<Change>,
    sources: Vec<CountChange>,
    rows: RowChanges,
}

pub fn run(a: &Path, b: &Path, json: bool) -> Result<()> {
    let (a, b) = (OutputDir::open(a)?, OutputDir::open(b)?);
    let report = diff(&a, &b)?;
    let text = if json {
        crate::write::pretty(&serde_json::to_value(&report)?)
    } else {
        render(&report)
    };
    let mut stdout = std::io::stdout().lock();
    crate::printer::Printer::data(&mut stdout, &text)?;
    Ok(())
}

fn diff(a: &OutputDir, b: &OutputDir) -> Result<Report> {
    let (ka, ha) = row_keys(a)?;
    let (kb, hb) = row_keys(b)?;
    let side = |d: &OutputDir, hashes: &[String]| Side {
        dir: d.path.display().to_string(),
        build_id: d.manifest.build_id.clone(),
        dataset_sha256: d.manifest.dataset_sha256.clone(),
        rows: d.manifest.rows,
        shards_unlike_manifest: d
            .manifest
            .shards
            .iter()
            .zip(hashes)
            .filter(|(s, h)| s.sha256 != **h)
            .map(|(s, _)| s.file.clone())
            .collect(),
    };
    let mut inputs = input_changes(&a.json, &b.json);
    inputs.extend(pipeline_changes(&a.path, &b.path));
    Ok(Report {
        a: side(a, &ha),
        b: side(b, &hb),
        identical: ha == hb,
        inputs,
        sources: count_changes(&a.json, &b.json),
        rows: row_changes(a, b, ka, kb)?,
    })
}

/// Top-level pipeline keys whose values the manifests' `settings` and `inputs` already compare.
const IN_MANIFEST: [&str; 8] = [
    "name",
    "seed",
    "max_tokens",
    "length_policy",
    "min_supervised_tokens",
    "tokenizer",
    "template",
    "output",
];

/// The settings of the two pipelines copied into the datasets, key by key (`pipeline
/// sources.alpaca.take`); nothing where either copy is missing or unreadable (the manifests'
/// `pipeline_sha256` still says whether they differ).
fn pipeline_changes(a: &Path, b: &Path) -> Vec<Change> {
    let read = |dir: &Path| -> Option<BTreeMap<String, Value>> {
        let bytes = std::fs::read(dir.join(crate::write::manifest::PIPELINE_COPY)).ok()?;
        let value: Value = serde_yaml_ng::from_slice(&bytes).ok()?;
        let mut out = BTreeMap::new();
        for (k, v) in value.as_object()? {
            if !IN_MANIFEST.contains(&k.as_str()) {
                flatten(v, k, &mut out);
            }
        }
        Some(out)
    };
    let (Some(fa), Some(fb)) = (read(a), read(b)) else {
        return Vec::new();
    };
    let keys: BTreeSet<&String> = fa.keys().chain(fb.keys()).collect();
    keys.into_iter()
        .filter(|k| fa.get(*k) != fb.get(*k))
        .map(|k| Change {
            what: format!("pipeline {k}"),
            a: fa.get(k).cloned().unwrap_or(Value::Null),
            b: fb.get(k).cloned().unwrap_or(Value::Null),
        })
        .collect()
}

/// Leaves of a pipeline value by dotted path; list items that have a name (a source, a
/// benchmark, a filter's `name:` or kind) by that name, other lists whole.
fn flatten(v: &Value, path: &str, out: &mut BTreeMap<String, Value>) {
    /// An item's name, and the mapping under it.
    fn named(item: &Value) -> Option<(String, &serde_json::Map<String, Value>)> {
        let map = item.as_object()?;
        if let Some(name) = map.get("name").and_then(Value::as_str) {
            return Some((name.to_owned(), map));
        }
        // A filter: `{kind: {name: x, ...}}`.
        match map.iter().next() {
            Some((kind, Value::Object(inner))) if map.len() == 1 => {
                let name = inner.get("name").and_then(Value::as_str).unwrap_or(kind);
                Some((name.to_owned(), inner))
            }
            _ => None,
        }
    }
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                flatten(v, &format!("{path}.{k}"), out);
            }
        }
        Value::Array(items) if !items.is_empty() && items.iter().all(|i| named(i).is_some()) => {
            for (name, map) in items.iter().filter_map(named) {
                for (k, v) in map {
                    if k != "name" {
                        flatten(v, &format!("{path}.{name}.{k}"), out);
                    }
                }
                // A named item with nothing else still exists.
                out.entry(format!("{path}.{name}"))
                    .or_insert(Value::Bool(true));
            }
        }
        other => {
            out.insert(path.to_owned(), other.clone());
        }
    }
}

/// The manifest's inputs and settings as (what, value), keyed so that a list entry is found
/// by what it is, not where it is.
fn facts(m: &Value) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    out.insert("tool version".to_owned(), m["tool"]["version"].clone());
    out.insert("name".to_owned(), m["name"].clone());
    for key in ["pipeline_sha256", "template_sha256", "tokenizer_sha256"] {
        out.insert(format!("inputs.{key}"), m["inputs"][key].clone());
    }
    out.insert(
        "lockfile sha256".to_owned(),
        m["pipeline"]["lock"]["sha256"].clone(),
    );
    for f in m["inputs"]["files"].as_array().into_iter().flatten() {
        let kind = f["kind"].as_str().unwrap_or("source");
        let name = f["source"].as_str().unwrap_or_default();
        let path = f["path"].as_str().unwrap_or_default();
        out.insert(
            format!("{kind} `{name}` file `{path}` sha256"),
            f["sha256"].clone(),
        );
    }
    for f in m["inputs"]["hub"].as_array().into_iter().flatten() {
        let what = format!(
            "hub {} `{}` `{}` at `{}`",
            f["kind"].as_str().unwrap_or_default(),
            f["repo"].as_str().unwrap_or_default(),
            f["path"].as_str().unwrap_or_default(),
            f["revision"].as_str().unwrap_or_default()
        );
        out.insert(format!("{what} commit"), f["commit"].clone());
        out.insert(format!("{what} sha256"), f["sha256"].clone());
    }
    if let Some(settings) = m["settings"].as_object() {
        for (key, value) in settings {
            match value.as_object() {
                Some(inner) if key == "template_kwargs" => {
                    for (k, v) in inner {
                        out.insert(format!("settings.template_kwargs.{k}"), v.clone());
                    }
                }
                _ => {
                    out.insert(format!("settings.{key}"), value.clone());
                }
            }
        }
    }
    out.insert("encoder".to_owned(), m["encoder"]["used"].clone());
    out.insert("renderer".to_owned(), m["renderer"]["used"].clone());
    out.retain(|_, v| !v.is_null());
    out
}

fn input_changes(a: &Value, b: &Value) -> Vec<Change> {
    let (fa, fb) = (facts(a), facts(b));
    let keys: BTreeSet<&String> = fa.keys().chain(fb.keys()).collect();
    keys.into_iter()
        .filter(|k| fa.get(*k) != fb.get(*k))
        .map(|k| Change {
            what: k.clone(),
            a: fa.get(k).cloned().unwrap_or(Value::Null),
            b: fb.get(k).cloned().unwrap_or(Value::Null),
        })
        .collect()
}

/// Every count of a source's accounting, flattened (`rejected.invalid_json`).
fn counts(stats: &Value) -> BTreeMap<String, i128> {
    let mut out = BTreeMap::new();
    if let Some(fields) = stats.as_object() {
        for (key, value) in fields {
            match value {
                Value::Object(inner) => {
                    for (k, v) in inner {
                        if let Some(n) = v.as_u64() {
                            out.insert(format!("{key}.{k}"), i128::from(n));
                        }
                    }
                }
                _ => {
                    if let Some(n) = value.as_u64() {
                        out.insert(key.clone(), i128::from(n));
                    }
                }
            }
        }
    }
    out
}

fn count_changes(a: &Value, b: &Value) -> Vec<CountChange> {
    let empty = serde_json::Map::new();
    let (sa, sb) = (
        a["sources"].as_object().unwrap_or(&empty),
        b["sources"].as_object().unwrap_or(&empty),
    );
    // Sources in A's order, then those only B has.
    let mut names: Vec<&String> = sa.keys().collect();
    names.extend(sb.keys().filter(|k| !sa.contains_key(*k)));
    let mut changes = Vec::new();
    for name in names {
        let ca = sa.get(name).map(counts).unwrap_or_default();
        let cb = sb.get(name).map(counts).unwrap_or_default();
        let fields: BTreeSet<&String> = ca.keys().chain(cb.keys()).collect();
        for field in fields {
            let (x, y) = (
                ca.get(field).copied().unwrap_or(0),
                cb.get(field).copied().unwrap_or(0),
            );
            if x != y {
                changes.push(CountChange {
                    source: name.clone(),
                    field: field.clone(),
                    a: x,
                    b: y,
                    delta: y - x,
                });
            }
        }
    }
    changes
}

/// One pass over a dataset's shards, in order: a key per row (sorted), and each shard's
/// SHA-256 as read.
fn row_keys(dir: &OutputDir) -> Result<(Vec<RowKey>, Vec<String>)> {
    let mut keys = Vec::with_capacity(usize::try_from(dir.manifest.rows).unwrap_or(0));
    let mut hashes = Vec::with_capacity(dir.manifest.shards.len());
    for shard in &dir.manifest.shards {
        let path = dir.path.join(&shard.file);
        let read = read_shard(&path, true, |batch| {
            let cols = RowColumns::of(batch, &path)?;
            let (ids, id_width) =
                value_bytes::<arrow_array::types::Int32Type>(cols.input_ids, &path)?;
            let (mask, mask_width) =
                value_bytes::<arrow_array::types::Int8Type>(cols.loss_mask, &path)?;
            let (id_offsets, mask_offsets) = (cols.input_ids.offsets(), cols.loss_mask.offsets());
            for row in 0..batch.num_rows() {
                // Byte ranges of the row's values (native byte order: the hashes are only
                // compared within this run).
                let span = |o: &arrow_buffer::OffsetBuffer<i32>, width: usize| {
                    let (start, end) = (o[row], o[row + 1]);
                    usize::try_from(start).unwrap_or(0) * width
                        ..usize::try_from(end).unwrap_or(0) * width
                };
                let (ids, mask) = (
                    ids.get(span(id_offsets, id_width)).unwrap_or_default(),
                    mask.get(span(mask_offsets, mask_width)).unwrap_or_default(),
                );
                let mut content = Xxh3::with_seed(CONTENT_SEED);
                content.update(&(ids.len() as u64).to_le_bytes());
                content.update(ids);
                content.update(mask);
                let (lane, source_row) = lane_and_row(cols.sample_id.value(row));
                keys.push(RowKey {
                    lane,
                    content: content.digest(),
                    row: source_row,
                    position: keys.len() as u64,
                });
            }
            Ok(())
        })?;
        hashes.push(read.sha256.unwrap_or_default());
    }
    keys.sort_unstable_by_key(|k| (k.lane, k.row));
    if let Some(pair) = keys
        .windows(2)
        .find(|w| (w[0].lane, w[0].row) == (w[1].lane, w[1].row))
    {
        bail!(
            "`{}` holds two rows with the same sample_id (rows {} and {})",
            dir.path.display(),
            pair[0].position,
            pair[1].position
        );
    }
    keys.sort_unstable();
    Ok((keys, hashes))
}

/// The bytes of a list column's values, and the width of one value.
fn value_bytes<'a, T: arrow_array::ArrowPrimitiveType>(
    list: &'a arrow_array::ListArray,
    path: &Path,
) -> Result<(&'a [u8], usize)> {
    match list
        .values()
        .as_any()
        .downcast_ref::<arrow_array::PrimitiveArray<T>>()
    {
        Some(values) => Ok((
            values.values().inner().as_slice(),
            std::mem::size_of::<T::Native>(),
        )),
        None => bail!(
            "`{}`: a list column has an unexpected item type",
            path.display()
        ),
    }
}

/// The `sample_id`s and token counts of the rows at the wanted positions (a second pass).
fn names(dir: &OutputDir, wanted: &BTreeSet<u64>) -> Result<BTreeMap<u64, (String, u64)>> {
    let mut found = BTreeMap::new();
    if wanted.is_empty() {
        return Ok(found);
    }
    let mut position = 0u64;
    for shard in &dir.manifest.shards {
        let path = dir.path.join(&shard.file);
        read_shard(&path, false, |batch| {
            let cols = RowColumns::of(batch, &path)?;
            for row in 0..batch.num_rows() {
                if wanted.contains(&position) {
                    let tokens = cols.input_ids.value_length(row);
                    let id = cols.sample_id.value(row).to_owned();
                    found.insert(position, (id, u64::try_from(tokens).unwrap_or(0)));
                }
                position += 1;
            }
            Ok(())
        })?;
    }
    Ok(found)
}

/// Matches rows by (lane, content); pairs the rest by the shift of their neighbours.
fn row_changes(
    a: &OutputDir,
    b: &OutputDir,
    ka: Vec<RowKey>,
    kb: Vec<RowKey>,
) -> Result<RowChanges> {
    let mut changes = RowChanges::default();
    // Per lane, (row in A, row in B) of the rows matched by content, in A's row order.
    let mut anchors: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    let (mut only_a, mut only_b) = (Vec::new(), BTreeMap::new());
    let (mut i, mut j) = (0, 0);
    // Both sorted by (lane, content, row): one merge walk; equal content in one lane pairs in
    // row order.
    while i < ka.len() || j < kb.len() {
        match (ka.get(i), kb.get(j)) {
            (Some(x), Some(y)) if (x.lane, x.content) == (y.lane, y.content) => {
                if x.position == y.position {
                    changes.unchanged += 1;
                } else {
                    changes.moved += 1;
                }
                anchors.entry(x.lane).or_default().push((x.row, y.row));
                i += 1;
                j += 1;
            }
            (Some(x), Some(y)) if (x.lane, x.content) < (y.lane, y.content) => {
                only_a.push(*x);
                i += 1;
            }
            (Some(x), None) => {
                only_a.push(*x);
                i += 1;
            }
            (_, Some(y)) => {
                only_b.insert((y.lane, y.row), *y);
                j += 1;
            }
            (None, None) => break,
        }
    }
    drop((ka, kb));
    for list in anchors.values_mut() {
        list.sort_unstable();
    }
    let (mut added, mut removed, mut changed) = (Vec::new(), Vec::new(), Vec::new());
    only_a.sort_unstable_by_key(|k| (k.lane, k.row));
    for x in only_a {
        // Where the nearest matched rows before and after it went in B.
        let lane = anchors.get(&x.lane).map_or(&[][..], Vec::as_slice);
        let at = lane.partition_point(|&(row, _)| row < x.row);
        let shifts = [at.checked_sub(1).and_then(|k| lane.get(k)), lane.get(at)]
            .into_iter()
            .flatten()
            .map(|&(ra, rb)| i128::from(rb) - i128::from(ra))
            .chain([0]);
        let twin = shifts
            .filter_map(|shift| u64::try_from(i128::from(x.row) + shift).ok())
            .find_map(|row| only_b.remove(&(x.lane, row)));
        match twin {
            Some(y) => {
                changes.changed += 1;
                if changed.len() < EXAMPLES {
                    changed.push((x.position, y.position));
                }
            }
            None => {
                changes.removed += 1;
                if removed.len() < EXAMPLES {
                    removed.push(x.position);
                }
            }
        }
    }
    changes.added = only_b.len() as u64;
    added.extend(only_b.values().take(EXAMPLES).map(|y| y.position));
    let in_a: BTreeSet<u64> = removed
        .iter()
        .chain(changed.iter().map(|c| &c.0))
        .copied()
        .collect();
    let in_b: BTreeSet<u64> = added
        .iter()
        .chain(changed.iter().map(|c| &c.1))
        .copied()
        .collect();
    let (na, nb) = (names(a, &in_a)?, names(b, &in_b)?);
    let example = |pa: Option<u64>, pb: Option<u64>| {
        let (x, y) = (pa.and_then(|p| na.get(&p)), pb.and_then(|p| nb.get(&p)));
        Example {
            // B's id for a changed row: where it is now.
            sample_id: y.or(x).map(|(s, _)| s.clone()).unwrap_or_default(),
            tokens_a: x.map(|(_, t)| *t),
            tokens_b: y.map(|(_, t)| *t),
        }
    };
    changes.examples = Examples {
        added: added.iter().map(|p| example(None, Some(*p))).collect(),
        removed: removed.iter().map(|p| example(Some(*p), None)).collect(),
        changed: changed
            .iter()
            .map(|(pa, pb)| example(Some(*pa), Some(*pb)))
            .collect(),
    };
    Ok(changes)
}

fn render(r: &Report) -> String {
    let short = |s: &str| s.chars().take(16).collect::<String>();
    let mut out = String::new();
    for (label, side) in [("A", &r.a), ("B", &r.b)] {
        out.push_str(&format!(
            "{label}: {}  build_id {}  dataset_sha256 {}  {} rows\n",
            side.dir,
            short(&side.build_id),
            short(&side.dataset_sha256),
            side.rows
        ));
    }
    if r.a.build_id == r.b.build_id {
        out.push_str("same build_id: the same inputs and settings\n");
    }
    out.push_str(if r.identical {
        "the shards are byte-identical (hashed and compared)\n"
    } else {
        "the shards differ\n"
    });
    for (label, side) in [("A", &r.a), ("B", &r.b)] {
        for file in &side.shards_unlike_manifest {
            out.push_str(&format!(
                "warning: {label}'s `{file}` is not what its manifest records (`chatshards verify {}`)\n",
                side.dir
            ));
        }
    }
    let value = |v: &Value| match v {
        Value::Null => "(none)".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    out.push_str("\ninputs and settings:\n");
    if r.inputs.is_empty() {
        out.push_str("  no change\n");
    }
    for c in &r.inputs {
        out.push_str(&format!(
            "  {}: {} -> {}\n",
            c.what,
            value(&c.a),
            value(&c.b)
        ));
    }
    out.push_str("\nsources (A -> B):\n");
    if r.sources.is_empty() {
        out.push_str("  no change\n");
    }
    for c in &r.sources {
        out.push_str(&format!(
            "  {} {}: {} -> {} ({:+})\n",
            c.source, c.field, c.a, c.b, c.delta
        ));
    }
    let rows = &r.rows;
    out.push_str(&format!(
        "\nrows (by source row and content): {} added, {} removed, {} changed, {} moved, {} unchanged\n",
        rows.added, rows.removed, rows.changed, rows.moved, rows.unchanged
    ));
    let tokens = |t: Option<u64>| t.map_or("-".to_owned(), |t| t.to_string());
    for (label, examples) in [
        ("added", &rows.examples.added),
        ("removed", &rows.examples.removed),
        ("changed", &rows.examples.changed),
    ] {
        for e in examples {
            out.push_str(&format!(
                "  {label} {} (tokens {} -> {})\n",
                e.sample_id,
                tokens(e.tokens_a),
                tokens(e.tokens_b)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_row_key_is_32_bytes() {
        // The memory figure in the README and the module docs.
        assert_eq!(std::mem::size_of::<RowKey>(), 32);
    }

    #[test]
    fn counts_are_compared_field_by_field_with_signed_deltas() {
        let a =
            json!({"sources": {"chat": {"read": 10, "kept": 9, "rejected": {"invalid_json": 1}}}});
        let b = json!({"sources": {"chat": {"read": 10, "kept": 8, "rejected": {"invalid_json": 2}},
                                   "new": {"read": 3}}});
        let changes: Vec<String> = count_changes(&a, &b)
            .iter()
            .map(|c| format!("{} {} {} {} {}", c.source, c.field, c.a, c.b, c.delta))
            .collect();
        assert_eq!(
            changes,
            [
                "chat kept 9 8 -1",
                "chat rejected.invalid_json 1 2 1",
                "new read 0 3 3"
            ]
        );
    }

    #[test]
    fn inputs_are_matched_by_what_they_are() {
        let a = json!({"tool": {"version": "0.1.0"}, "settings": {"seed": 1, "template_kwargs": {}},
            "inputs": {"files": [{"kind": "source", "source": "x", "path": "a.jsonl", "sha256": "1"},
                                 {"kind": "source", "source": "x", "path": "b.jsonl", "sha256": "2"}]}});
        let b = json!({"tool": {"version": "0.1.0"}, "settings": {"seed": 2, "template_kwargs": {"t": true}},
            "inputs": {"files": [{"kind": "source", "source": "x", "path": "b.jsonl", "sha256": "3"}]}});
        let changes: Vec<String> = input_changes(&a, &b)
            .iter()
            .map(|c| format!("{}: {} {}", c.what, c.a, c.b))
            .collect();
        assert_eq!(
            changes,
            [
                "settings.seed: 1 2",
                "settings.template_kwargs.t: null true",
                "source `x` file `a.jsonl` sha256: \"1\" null",
                "source `x` file `b.jsonl` sha256: \"2\" \"3\"",
            ]
        );
    }
}
