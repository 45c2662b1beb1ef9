#!/usr/bin/env python3
"""Draft-vocabulary goldens from speculators' own code.

Usage: python3 tests/oracle/gen_vocab_goldens.py DEMO_OUT_DIR [--out tests/golden/vocab]

Counts the supervised tokens of the demo dataset with speculators'
`save_token_frequency_distribution` (over `datasets.load_from_disk(DIR)`, never chatshards' own
token_freq.pt), builds the mapping with its `build_vocab_mappings_from_distribution` for a few
draft sizes (one below and one above the number of distinct supervised ids, so the top-up path
runs), saves d2t/t2d with `np.save` as its scripts/build_vocab_mapping.py does, and writes
`demo.json`: per draft size, d2t, the ids t2d marks and the SHA-256 of both .npy files.
`tests/it/report.rs` builds the demo, runs `chatshards vocab` and compares.
Needs tests/oracle/requirements-speculators.txt.
"""
import argparse
import hashlib
import io
import json
import tempfile
from pathlib import Path

import datasets
import numpy as np
import torch
from speculators.train.vocab_mapping import (
    build_vocab_mappings_from_distribution,
    save_token_frequency_distribution,
)

TARGET_VOCAB = 248320  # Qwen3.6's config vocab_size
DRAFT_SIZES = [64, 2000]


def npy_sha256(array):
    buf = io.BytesIO()
    np.save(buf, array)
    return hashlib.sha256(buf.getvalue()).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "golden" / "vocab"))
    args = ap.parse_args()
    ds = datasets.load_from_disk(args.dir)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "token_freq.pt"
        save_token_frequency_distribution(ds, path)
        freq = torch.load(path, weights_only=True)
    cases = []
    for draft in DRAFT_SIZES:
        d2t, t2d = build_vocab_mappings_from_distribution(
            token_freq_dict=freq, draft_vocab_size=draft, target_vocab_size=TARGET_VOCAB
        )
        d2t, t2d = d2t.cpu().numpy(), t2d.cpu().numpy()
        cases.append({
            "draft_size": draft,
            "target_vocab_size": TARGET_VOCAB,
            "d2t": d2t.tolist(),
            "t2d_true": np.flatnonzero(t2d).tolist(),
            "d2t_npy_sha256": npy_sha256(d2t),
            "t2d_npy_sha256": npy_sha256(t2d),
        })
    golden = {
        "distinct_supervised_ids": len(freq),
        "supervised_tokens": int(sum(freq.values())),
        "cases": cases,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "demo.json").write_text(json.dumps(golden) + "\n")
    print(f"wrote {out / 'demo.json'}: {len(freq)} distinct supervised ids, draft sizes {DRAFT_SIZES}")


if __name__ == "__main__":
    main()
