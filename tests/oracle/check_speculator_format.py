#!/usr/bin/env python3
"""`format: speculator` against speculators' own pass-through of the same rows.

Usage: python3 tests/oracle/check_speculator_format.py --bin target/debug/chatshards [--work DIR]

1. chatshards builds tests/fixtures/speculator/regenerated.jsonl (rows written by speculators'
   own regeneration code, see gen_speculator_rows.py) as a `format: speculator` source, with
   `dedup: false` and `min_supervised_tokens: 1` (speculators' prepare-data neither
   deduplicates nor asks more than one supervised token by default).
2. speculators' CLI runs `prepare-data` on the same file: speculator-format rows pass through
   its `_passthrough_pretokenized` (no render endpoint).
3. Both datasets are opened with `datasets.load_from_disk` and compared as multisets of
   (input_ids, loss_mask) rows, and with the input file's rows.

Needs the speculators venv (tests/oracle/requirements-speculators.txt). Prints
`check_speculator_format: OK ...` and exits 0 when every row matches.
"""
import collections
import json
import sys

from speculators_oracle import ROOT, binary_and_work, build, local_model, prepare_data, rows_of

FIXTURE = ROOT / "tests/fixtures/speculator/regenerated.jsonl"

PIPELINE = """name: speculator-format-check
seed: 7
tokenizer: {{path: {root}/templates/qwen3.6/tokenizer.json.zst}}
template: {{path: {root}/templates/qwen3.6/chat_template.jinja}}
max_tokens: 8192
min_supervised_tokens: 1
dedup: false
sources:
  - name: regenerated
    files: [{fixture}]
    format: speculator
output:
  dir: {out}
"""


def main():
    binary, work = binary_and_work("speculator-format-")

    pipeline = work / "pipeline.yaml"
    pipeline.write_text(PIPELINE.format(root=ROOT, fixture=FIXTURE, out=work / "chatshards"))
    build(binary, pipeline)

    out = work / "speculators"
    prepare_data(local_model(work), FIXTURE, out, 1)

    ours, theirs = rows_of(work / "chatshards"), rows_of(out)
    given = collections.Counter()
    for line in FIXTURE.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        given[(tuple(row["input_ids"]), tuple(int(m) for m in row["loss_mask"]))] += 1
    n = sum(ours.values())
    print(f"chatshards: {n} rows; speculators prepare-data: {sum(theirs.values())} rows; "
          f"input: {sum(given.values())} rows")
    if not (ours == theirs == given):
        print("check_speculator_format: FAIL the rows differ")
        sys.exit(1)
    print(f"check_speculator_format: OK {n} rows identical (input_ids and loss_mask) in chatshards, "
          "speculators prepare-data and the input")


if __name__ == "__main__":
    main()
