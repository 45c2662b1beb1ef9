#!/usr/bin/env python3
"""The draft vocabulary files `chatshards vocab` writes, read the way the trainers read them.

Usage: python3 tests/oracle/check_vocab_files.py DIR DRAFT_SIZE TARGET_VOCAB_SIZE

- `d2t-N.npy` / `t2d-N.npy` with `np.load`, then `torch.from_numpy` as speculators' train.py
  does, checked against speculators' own `build_vocab_mappings_from_distribution` of
  `DIR/token_freq.pt` and against the checks of its `load_vocab_mappings` (shapes, dtypes,
  `t2d.sum() == N`);
- `vocab_mapping-N.pt` with `torch.load(..., weights_only=True)` as SpecForge's
  `prepare_hidden_states.py` does (dict of `d2t`/`t2d` tensors, shapes `(N,)` and
  `(target,)`), equal to the .npy data.

Needs the speculators venv (tests/oracle/requirements-speculators.txt).
"""
import sys
from pathlib import Path

import numpy as np
import torch
from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution


def main():
    root, draft, target = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    d2t = torch.from_numpy(np.load(root / f"d2t-{draft}.npy"))
    t2d = torch.from_numpy(np.load(root / f"t2d-{draft}.npy"))
    assert d2t.dtype == torch.int64 and tuple(d2t.shape) == (draft,), (d2t.dtype, d2t.shape)
    assert t2d.dtype == torch.bool and tuple(t2d.shape) == (target,), (t2d.dtype, t2d.shape)
    assert int(t2d.sum(dtype=torch.long)) == draft
    freq = torch.load(root / "token_freq.pt", weights_only=True)
    want_d2t, want_t2d = build_vocab_mappings_from_distribution(
        token_freq_dict=freq, draft_vocab_size=draft, target_vocab_size=target)
    assert torch.equal(d2t, want_d2t), "d2t differs from speculators' mapping"
    assert torch.equal(t2d, want_t2d), "t2d differs from speculators' mapping"
    mapping = torch.load(root / f"vocab_mapping-{draft}.pt", map_location="cpu", weights_only=True)
    assert set(mapping) == {"d2t", "t2d"}, mapping.keys()
    assert mapping["d2t"].dtype == torch.int64 and mapping["t2d"].dtype == torch.bool
    assert torch.equal(mapping["d2t"], d2t) and torch.equal(mapping["t2d"], t2d)
    print(f"check_vocab_files: OK draft {draft} of {target}: .npy as speculators builds them, "
          f".pt loads with torch {torch.__version__} (weights_only) to the same tensors")


if __name__ == "__main__":
    main()
