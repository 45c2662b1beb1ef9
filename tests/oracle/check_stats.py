#!/usr/bin/env python3
"""Independent check of a dataset's stats.json and token-frequency files.

Usage: python3 tests/oracle/check_stats.py DIR

Reads the shards with pyarrow only (never our Rust code) and recomputes, per source and overall:
rows, tokens, supervised tokens, and the histograms of tokens per row (seq_len) and supervised
tokens per row with the bin layout stats.json documents (one bin per value below 32, then 16 equal
bins per power of two), their count/sum/min/max and the nearest-rank percentiles p50/p90/p99
(reported as the top of their bin, capped at max). Every figure must equal stats.json exactly, and
each reported percentile must lie within 1/16 above the exact one (numpy, nearest rank).

The token-frequency files are loaded with `torch.load(weights_only=True)`, as speculators loads
them: `token_freq.pt` must equal speculators' own `save_token_frequency_distribution` run on the
dataset (loaded with `datasets.load_from_disk`), and its `data.pkl` must be byte-identical to
`pickle.dumps(counts, protocol=2)`; `token_freq_all.pt` must equal the count of every id.

Needs tests/oracle/requirements-speculators.txt (torch, speculators). Prints one line; exits non-zero
on the first difference.
"""
import json
import pickle
import sys
import tempfile
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import torch

EXACT_BELOW = 32


def bin_of(v):
    if v < EXACT_BELOW:
        return (v, v + 1)
    octave = v.bit_length() - 1
    width = 1 << (octave - 4)
    lo = (v // width) * width
    return (lo, lo + width)


def hist(values):
    values = np.asarray(values, dtype=np.int64)
    counts = Counter(bin_of(int(v)) for v in values)
    n = len(values)
    s = np.sort(values)

    def q(permille):
        if n == 0:
            return 0
        rank = max(1, -(-n * permille // 1000))
        exact = int(s[rank - 1])
        top = min(bin_of(exact)[1] - 1, int(s[-1]))
        assert exact <= top, (exact, top)
        assert exact < EXACT_BELOW and top == exact or top - exact <= exact / 16, (exact, top)
        return top

    return {
        "count": n,
        "sum": int(values.sum()) if n else 0,
        "min": int(s[0]) if n else 0,
        "p50": q(500),
        "p90": q(900),
        "p99": q(990),
        "max": int(s[-1]) if n else 0,
        "bins": [[lo, hi, c] for (lo, hi), c in sorted(counts.items())],
    }


def fail(msg):
    print(f"check_stats: FAIL: {msg}")
    sys.exit(1)


def compare(what, want, got):
    for key, value in want.items():
        if got.get(key) != value:
            fail(f"{what}.{key}: recomputed {value!r}, stats.json has {got.get(key)!r}")
    mean = want["sum"] / want["count"] if want["count"] else 0.0
    if abs(got["mean"] - mean) > 0.0051:
        fail(f"{what}.mean: recomputed {mean}, stats.json has {got['mean']}")


def main():
    out = Path(sys.argv[1])
    stats = json.loads((out / "stats.json").read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    state = json.loads((out / "state.json").read_text())
    per = {}
    all_ids, sup_ids = Counter(), Counter()
    for f in state["_data_files"]:
        with open(out / f["filename"], "rb") as fh:
            table = ipc.open_stream(fh).read_all()
        for ids, mask, src in zip(
            table.column("input_ids").to_pylist(),
            table.column("loss_mask").to_pylist(),
            table.column("source").to_pylist(),
        ):
            ids, mask = np.asarray(ids), np.asarray(mask)
            sup = ids[mask == 1]
            entry = per.setdefault(src, {"seq": [], "sup": []})
            entry["seq"].append(len(ids))
            entry["sup"].append(len(sup))
            all_ids.update(ids.tolist())
            sup_ids.update(sup.tolist())
    names = list(manifest["sources"])
    if list(stats["sources"]) != names:
        fail(f"sources {list(stats['sources'])} != manifest {names}")
    total_seq, total_sup = [], []
    for name in names:
        got = stats["sources"][name]
        e = per.get(name, {"seq": [], "sup": []})
        total_seq += e["seq"]
        total_sup += e["sup"]
        for key, want in [
            ("rows", len(e["seq"])),
            ("tokens", sum(e["seq"])),
            ("supervised_tokens", sum(e["sup"])),
        ]:
            if got[key] != want or manifest["sources"][name][key] != want:
                fail(f"{name}.{key}: shards {want}, stats {got[key]}, manifest {manifest['sources'][name][key]}")
        compare(f"{name}.seq_len", hist(e["seq"]), got["seq_len"])
        compare(f"{name}.supervised_per_row", hist(e["sup"]), got["supervised_per_row"])
    compare("total.seq_len", hist(total_seq), stats["total"]["seq_len"])
    compare("total.supervised_per_row", hist(total_sup), stats["total"]["supervised_per_row"])
    if stats["total"]["rows"] != manifest["rows"] or stats["total"]["tokens"] != manifest["tokens"]:
        fail("total rows/tokens differ from the manifest")
    if stats["distinct_ids"] != len(all_ids) or stats["distinct_supervised_ids"] != len(sup_ids):
        fail("distinct id counts differ")

    # Token frequencies, loaded as speculators loads them.
    ours = torch.load(out / "token_freq.pt", weights_only=True)
    if ours != dict(sup_ids):
        fail("token_freq.pt differs from the supervised counts of the shards")
    if torch.load(out / "token_freq_all.pt", weights_only=True) != dict(all_ids):
        fail("token_freq_all.pt differs from the counts of all tokens")
    with zipfile.ZipFile(out / "token_freq.pt") as z:
        data = z.read("token_freq/data.pkl")
    if data != pickle.dumps(dict(sorted(sup_ids.items())), protocol=2):
        fail("token_freq.pt's data.pkl is not pickle.dumps(counts, protocol=2)")
    # speculators' own counting over the dataset, through datasets.load_from_disk (torch format).
    import datasets
    from speculators.train.vocab_mapping import save_token_frequency_distribution

    ds = datasets.load_from_disk(str(out))
    with tempfile.TemporaryDirectory() as tmp:
        theirs_path = Path(tmp) / "token_freq.pt"
        save_token_frequency_distribution(ds, theirs_path)
        theirs = torch.load(theirs_path, weights_only=True)
    if ours != theirs:
        fail("token_freq.pt differs from speculators' save_token_frequency_distribution")
    print(
        f"check_stats: OK: {len(names)} sources, {stats['total']['rows']} rows, "
        f"{len(sup_ids)} supervised ids, token_freq.pt == speculators' counts"
    )


if __name__ == "__main__":
    main()
