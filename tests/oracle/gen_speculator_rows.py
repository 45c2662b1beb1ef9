#!/usr/bin/env python3
"""Speculator-format rows written by speculators' own regeneration code, for `format: speculator`.

Usage: python3 tests/oracle/gen_speculator_rows.py [--out tests/fixtures/speculator/regenerated.jsonl]

Needs the speculators 0.9 venv (tests/oracle/requirements-speculators.txt). Each row is what
`speculators regenerate` writes for one target generation: its `_sample_from_response` turns a
chat-completion answer (`prompt_token_ids` + the choice's `token_ids`, as vLLM returns them with
`return_token_ids`) into `{id, primary_id, input_ids, loss_mask, text, metadata}`, and its worker
writes `json.dumps(sample, ensure_ascii=False)` lines. The answers are made up here (no server):
the prompt ids are Qwen3.6's chat template rendered by transformers and encoded by the
repository's tokenizer, the completion ids that tokenizer's encoding of a reply.

Rows: c1 (two generations: an answer, then a follow-up), c2, c3 (the same generation as c1's
first: identical ids and mask, a duplicate), c4 (a reply of two tokens: under a
`min_supervised_tokens` of 3).
"""
import argparse
import json
import subprocess
from pathlib import Path

from speculators.cli.regenerate_responses import _sample_from_response
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

ROOT = Path(__file__).resolve().parents[2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "tests/fixtures/speculator/regenerated.jsonl"))
    args = ap.parse_args()
    raw = subprocess.run(
        ["zstd", "-dc", str(ROOT / "templates/qwen3.6/tokenizer.json.zst")],
        check=True, capture_output=True,
    ).stdout
    tok = Tokenizer.from_str(raw.decode())
    fast = PreTrainedTokenizerFast(tokenizer_object=tok)
    template = (ROOT / "templates/qwen3.6/chat_template.jinja").read_text()

    def encode(text):
        return tok.encode(text, add_special_tokens=False).ids

    def detokenize(ids):
        return fast.decode(ids, skip_special_tokens=False)

    def response(messages, reply):
        prompt = fast.apply_chat_template(
            messages, chat_template=template, add_generation_prompt=True, tokenize=False
        )
        completion = encode(reply + "<|im_end|>")
        return {
            "prompt_token_ids": encode(prompt),
            "choices": [{
                "message": {"role": "assistant", "content": reply},
                "token_ids": completion,
                "finish_reason": "stop",
            }],
            "usage": {"prompt_tokens": len(encode(prompt)), "completion_tokens": len(completion)},
        }

    q1 = [{"role": "user", "content": "What is the capital of France?"}]
    a1 = "The capital of France is Paris."
    q2 = q1 + [{"role": "assistant", "content": a1},
               {"role": "user", "content": "And its population?"}]
    a2 = "About 2.1 million people live in Paris proper."
    q3 = [{"role": "system", "content": "You are terse."},
          {"role": "user", "content": "Name a prime number above 10."}]
    a3 = "Eleven is a prime number above ten."
    q4 = [{"role": "user", "content": "Say yes."}]
    a4 = "Yes"
    gens = [("c1", 0, q1, a1), ("c1", 1, q2, a2), ("c2", 0, q3, a3), ("c3", 0, q1, a1), ("c4", 0, q4, a4)]
    sampling = {"temperature": 0.0, "max_tokens": 256}
    lines = []
    for idx, (conv, n, messages, reply) in enumerate(gens):
        sample, _, _ = _sample_from_response(
            response(messages, reply), detokenize=detokenize, conv_id=conv, sample_index=n,
            idx=idx, endpoint="http://127.0.0.1:8000/v1", sampling_params=sampling,
        )
        lines.append(json.dumps(sample, ensure_ascii=False) + "\n")
    Path(args.out).write_text("".join(lines), encoding="utf-8")
    for line in lines:
        row = json.loads(line)
        print(row["id"], len(row["input_ids"]), sum(row["loss_mask"]))


if __name__ == "__main__":
    main()
