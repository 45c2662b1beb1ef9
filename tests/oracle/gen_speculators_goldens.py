#!/usr/bin/env python3
"""Goldens from vllm-project/speculators' own preprocessing, for the `speculators-0.7` preset.

Runs speculators 0.7.0.2's ``speculators.data_generation.preprocessing.build_eagle3_dataset`` (what
``scripts/prepare_data.py`` of the release-0.7.0 branch calls: ``_normalize_conversation``, its
auto-detected assistant regex, offsets from the fast tokenizer, "any overlap" masks) with a local
tokenizer (templates/qwen3.6/tokenizer.json.zst as a ``PreTrainedTokenizerFast``, chat template
templates/qwen3.6/chat_template.jinja) on:

- every case of tests/oracle/cases.jsonl that renders without a generation prompt and without a
  guard error (trailing non-assistant turns dropped, as the pipeline does);
- 60 synthetic conversations from tests/bench/gen_synthetic.py (seed 28), written beside the goldens
  as ``synthetic-inputs.jsonl`` so the Rust test reads the same rows.

Each conversation is its own one-row ``datasets.Dataset`` (``conversations`` + ``tools`` as a JSON
string, as speculators' loaders hand them over), so no Arrow struct union pads one row's messages with
another's keys. A row is kept only when speculators' text (its ids decoded) equals transformers'
``apply_chat_template`` of the same messages: a row whose messages Arrow padded with null keys would
otherwise be compared with a conversation it never rendered (those are listed in ``skipped``).

Output (deterministic): ``tests/golden/speculators/speculators-0.7.jsonl`` (``{"name", "input_ids",
"loss_mask"}``, mask as 0/1 from speculators' bool tensor), ``versions.json`` (the packages used).

Needs speculators==0.7.0.2 and its requirements (torch CPU, transformers<5.15, datasets<=5.0.1): not
the oracle venv; ``make speculators-goldens`` runs it where they are installed.
Usage: python3 tests/oracle/gen_speculators_goldens.py [--out DIR]
"""
import copy
import hashlib
import importlib.metadata
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import datasets
import tokenizers
import torch
import transformers
import zstandard
from transformers import PreTrainedTokenizerFast

from speculators.data_generation import preprocessing

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(sys.argv[sys.argv.index("--out") + 1]) if "--out" in sys.argv else ROOT / "tests/golden/speculators"
TEMPLATE = ROOT / "templates/qwen3.6/chat_template.jinja"
TEMPLATE_SHA256 = "e84f32a23fdda27689f868aa4a1a5621f41133e51a48d7f3efcbea2839574259"
TOKENIZER_ZST = ROOT / "templates/qwen3.6/tokenizer.json.zst"
SYNTHETIC_ROWS, SYNTHETIC_SEED = 60, 28


def fail(msg):
    sys.exit(f"gen_speculators_goldens: FAIL: {msg}")


def trimmed(messages):
    end = len(messages)
    while end > 0 and messages[end - 1].get("role") != "assistant":
        end -= 1
    return messages[:end]


def speculators_row(tok, messages, tools):
    ds = datasets.Dataset.from_list([{"conversations": messages, "tools": json.dumps(tools) if tools else ""}])
    out = preprocessing.build_eagle3_dataset(ds, tok, max_length=1 << 20, num_proc=1)
    if len(out) != 1:
        return None
    row = out[0]
    return [int(i) for i in row["input_ids"].tolist()], [int(m) for m in row["loss_mask"].tolist()]


def main():
    raw = TEMPLATE.read_bytes()
    if hashlib.sha256(raw).hexdigest() != TEMPLATE_SHA256:
        fail("templates/qwen3.6/chat_template.jinja is not the official template")
    version = importlib.metadata.version("speculators")
    if version != "0.7.0.2":
        fail(f"speculators {version}, expected 0.7.0.2")
    tok_json = zstandard.ZstdDecompressor().decompress(TOKENIZER_ZST.read_bytes(), max_output_size=1 << 30).decode()
    tok = PreTrainedTokenizerFast(tokenizer_object=tokenizers.Tokenizer.from_str(tok_json))
    tok.chat_template = raw.decode("utf-8")
    datasets.disable_progress_bars()
    OUT.mkdir(parents=True, exist_ok=True)

    inputs = []
    for line in (ROOT / "tests/oracle/cases.jsonl").read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        if case.get("add_generation_prompt") or case.get("kwargs"):
            continue  # speculators renders with the template's defaults and no generation prompt
        inputs.append((case["name"], trimmed(case["messages"]), case.get("tools") or []))
    with tempfile.TemporaryDirectory() as tmp:
        synth = Path(tmp) / "synthetic.jsonl"
        subprocess.run(
            [sys.executable, str(ROOT / "tests/bench/gen_synthetic.py"), str(SYNTHETIC_ROWS), str(synth), str(SYNTHETIC_SEED)],
            check=True, stdout=subprocess.DEVNULL,
        )
        synthetic = [json.loads(l) for l in synth.read_text(encoding="utf-8").splitlines()]
    with open(OUT / "synthetic-inputs.jsonl", "w", encoding="utf-8", newline="\n") as f:
        for i, row in enumerate(synthetic):
            f.write(json.dumps({"name": f"synthetic_{i}", **row}, ensure_ascii=False) + "\n")
            inputs.append((f"synthetic_{i}", trimmed(row["messages"]), row.get("tools") or []))

    rows, skipped = [], []
    for name, messages, tools in inputs:
        if not messages:
            continue
        try:
            want = tok.apply_chat_template(copy.deepcopy(messages), tools=tools or None, tokenize=False)
        except Exception:  # noqa: BLE001 - a guard error: nothing to compare
            continue
        try:
            got = speculators_row(tok, messages, tools)
        except (ValueError, TypeError, OverflowError) as e:  # pyarrow cannot type the row
            skipped.append({"name": name, "why": f"datasets cannot hold the row: {type(e).__name__}"})
            continue
        if got is None:
            skipped.append({"name": name, "why": "speculators dropped the row"})
            continue
        ids, mask = got
        if tok.decode(ids) != want:
            skipped.append({"name": name, "why": "speculators rendered other messages (Arrow padding)"})
            continue
        rows.append({"name": name, "input_ids": ids, "loss_mask": mask})
    with open(OUT / "speculators-0.7.jsonl", "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    versions = {
        "speculators": version,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "datasets": datasets.__version__,
        "torch": torch.__version__.split("+")[0],
        "skipped": skipped,
    }
    (OUT / "versions.json").write_text(json.dumps(versions, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(rows)} rows ({len(skipped)} skipped) to {OUT}")


if __name__ == "__main__":
    main()
