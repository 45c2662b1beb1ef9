"""What the speculators checks (check_speculator_format.py, check_speculators_render.py) share:
their command line, a fresh work folder, the local "model" prepare-data loads, running
speculators' own `prepare-data`, and reading a saved dataset as a multiset of rows."""
import argparse
import collections
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import datasets

ROOT = Path(__file__).resolve().parents[2]


def binary_and_work(prefix):
    """`--bin` (resolved) and `--work` (emptied, or a new temporary folder named `prefix`...)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix=prefix)).resolve()
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    return str(Path(args.bin).resolve()), work


def build(binary, pipeline):
    subprocess.run([binary, "build", "--quiet", str(pipeline)], check=True)


def local_model(work):
    """A local "model" for prepare-data's processor load (it renders nothing with it): the
    Qwen3.6 tokenizer and template of the repository."""
    model = work / "model"
    model.mkdir()
    subprocess.run(["zstd", "-q", "-d", str(ROOT / "templates/qwen3.6/tokenizer.json.zst"),
                    "-o", str(model / "tokenizer.json")], check=True)
    shutil.copy(ROOT / "templates/qwen3.6/chat_template.jinja", model / "chat_template.jinja")
    (model / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
    }))
    return model


def prepare_data(model, data, out, workers, *extra):
    """speculators' CLI `prepare-data` at sequence length 8192 (the pipelines' `max_tokens`)."""
    subprocess.run([sys.executable, "-m", "speculators", "prepare-data",
                    "--model", str(model), "--data", str(data), *extra, "--output", str(out),
                    "--seq-length", "8192", "--num-preprocessing-workers", str(workers)],
                   check=True)


def rows_of(path):
    """A saved dataset's rows as a multiset of (input_ids, loss_mask)."""
    ds = datasets.load_from_disk(str(path))
    return collections.Counter(
        (tuple(int(i) for i in r["input_ids"]), tuple(int(m) for m in r["loss_mask"])) for r in ds
    )
