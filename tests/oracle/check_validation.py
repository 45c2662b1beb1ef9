#!/usr/bin/env python3
"""Independent check of a chatshards dataset built with `output.validation`.

Usage: python3 tests/oracle/check_validation.py DIR

Reads DIR only through `datasets` and the manifest (never our Rust code) and checks that
  * `datasets.load_from_disk(DIR)` loads every row (on a copy with _format_type null when torch
    is not installed), and `ds.select(range(train_rows))` / `ds.select(range(train_rows, len(ds)))`
    are the two splits;
  * `datasets.load_from_disk(DIR/validation)` loads the validation split on its own: the same rows,
    in the same order, as the tail of DIR (whose `state.json` lists the same shard files: no copy);
  * no conversation (`source:file:row` of `sample_id`, copies `#j` included) has rows on both sides;
  * the rows and conversations per source and split equal the manifest's `validation`;
  * speculators' own split expression, `int(len(ds) * train_data_ratio)`, is exactly `train_rows`.
Prints one summary line; exits non-zero with a clear message on the first failure.
"""
import collections
import json
import shutil
import sys
import tempfile
from pathlib import Path

import datasets


def fail(message):
    sys.exit(f"check_validation: FAIL {message}")


def load(d, inner=""):
    """`load_from_disk(d / inner)`."""
    try:
        return datasets.load_from_disk(str(d / inner))
    except Exception as e:  # torch not installed: the state asks for the torch format
        if "torch" not in str(e).lower():
            raise
    tmp = Path(tempfile.mkdtemp(prefix="check-validation-"))
    copy = tmp / "ds"
    shutil.copytree(d, copy)
    for state_path in (copy / "state.json", copy / "validation" / "state.json"):
        state = json.loads(state_path.read_text())
        state_path.write_text(json.dumps({**state, "_format_type": None}))
    return datasets.load_from_disk(str(copy / inner))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = Path(sys.argv[1])
    manifest = json.loads((d / "manifest.json").read_text())
    v = manifest.get("validation")
    if not v:
        fail(f"{d}/manifest.json has no `validation`")
    ds = load(d).with_format(None)
    n, train_rows = len(ds), v["train_rows"]
    if n != manifest["rows"] or n != train_rows + v["validation_rows"]:
        fail(f"{n} rows loaded; the manifest records {manifest['rows']} = {train_rows} + {v['validation_rows']}")
    if int(n * v["train_data_ratio"]) != train_rows:
        fail(f"int({n} * {v['train_data_ratio']}) = {int(n * v['train_data_ratio'])}, not {train_rows}")
    train = ds.select(range(train_rows))
    val = ds.select(range(train_rows, n))
    own = load(d, "validation").with_format(None)
    if own["sample_id"] != val["sample_id"] or own["input_ids"] != val["input_ids"]:
        fail(f"{d}/validation ({len(own)} rows) is not the tail of {d} ({len(val)} rows)")
    state = json.loads((d / "state.json").read_text())
    listed = [f["filename"] for f in state["_data_files"]]
    own_listed = ["validation/" + f["filename"]
                  for f in json.loads((d / "validation" / "state.json").read_text())["_data_files"]]
    if listed[len(listed) - len(own_listed):] != own_listed or any("/" in f for f in listed[:len(listed) - len(own_listed)]):
        fail(f"{d}/state.json lists {listed}, not the training shards and then {own_listed}")

    def conversation(sample_id):
        return sample_id.rsplit(":", 1)[0]

    counts = collections.defaultdict(lambda: [0, 0, set(), set()])
    for side, split in ((0, train), (1, val)):
        for sample_id, source in zip(split["sample_id"], split["source"]):
            counts[source][side] += 1
            counts[source][2 + side].add(conversation(sample_id))
    straddling = set()
    for source, c in counts.items():
        straddling |= c[2] & c[3]
    if straddling:
        fail(f"{len(straddling)} conversations on both sides, e.g. {sorted(straddling)[:3]}")
    for source, c in counts.items():
        got = {"train_rows": c[0], "validation_rows": c[1],
               "train_conversations": len(c[2]), "validation_conversations": len(c[3])}
        if v["sources"].get(source) != got:
            fail(f"source `{source}`: the rows give {got}, the manifest records {v['sources'].get(source)}")
    print(f"check_validation: OK {len(train)} training rows, {len(val)} validation rows "
          f"(also loaded alone from {d}/validation) "
          f"({v['validation_conversations']} conversations) in the tail, no conversation on both sides, "
          f"int({n} * {v['train_data_ratio']}) = {train_rows}")


if __name__ == "__main__":
    main()
