#!/usr/bin/env python3
"""Render the hand-written expected adapter outputs with transformers, as goldens for tests/it/adapters.rs.

For every ``tests/fixtures/<source>/expected.jsonl``, each ``{"row", "conversation"}`` line (the normalized
conversation written by hand, never by chatshards) is converted to OpenAI chat form exactly as chatshards hands a
conversation to the template (``role``, ``content``, ``reasoning_content`` when set, ``tool_calls`` as
``[{"id"?, "type": "function", "function": {"name", "arguments": {...}}}]``, ``name`` and ``tool_call_id`` when
set) and rendered by a real transformers tokenizer with the repo's Qwen3.6 template:

    PreTrainedTokenizerFast(tokenizer_object=tokenizers.Tokenizer.from_str(<tokenizer.json>))
    tok.apply_chat_template(messages, tools=tools or None, tokenize=False, add_generation_prompt=False)

Output: ``tests/golden/adapters/<source>.jsonl``, one ``{"file"?, "row", "text"}`` line per conversation, in
``expected.jsonl`` order. The ``$join`` / ``$repeat`` macros of expected.jsonl are expanded first (see
tests/fixtures/make_fixtures.py).

Usage: python3 tests/oracle/gen_adapter_goldens.py   (deterministic)
"""
import hashlib
import json
import sys
from pathlib import Path

import tokenizers
import zstandard
from transformers import PreTrainedTokenizerFast

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests/fixtures"
OUT = ROOT / "tests/golden/adapters"
TEMPLATE = ROOT / "templates/qwen3.6/chat_template.jinja"
TEMPLATE_SHA256 = "e84f32a23fdda27689f868aa4a1a5621f41133e51a48d7f3efcbea2839574259"
TOKENIZER_ZST = ROOT / "templates/qwen3.6/tokenizer.json.zst"


def expand(value):
    if isinstance(value, dict):
        if len(value) == 1:
            (key, arg), = value.items()
            if key == "$join":
                return "".join(expand(p) for p in arg)
            if key == "$repeat":
                return expand(arg[0]) * arg[1]
        return {k: expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [expand(v) for v in value]
    return value


def openai_message(m):
    out = {"role": m["role"], "content": m["content"]}
    if "reasoning" in m:
        out["reasoning_content"] = m["reasoning"]
    if m.get("tool_calls"):
        calls = []
        for c in m["tool_calls"]:
            call = {}
            if "id" in c:
                call["id"] = c["id"]
            call["type"] = "function"
            call["function"] = {"name": c["name"], "arguments": c["arguments"]}
            calls.append(call)
        out["tool_calls"] = calls
    for key in ("name", "tool_call_id"):
        if key in m:
            out[key] = m[key]
    return out


def main():
    raw = TEMPLATE.read_bytes()
    if hashlib.sha256(raw).hexdigest() != TEMPLATE_SHA256:
        sys.exit("gen_adapter_goldens: templates/qwen3.6/chat_template.jinja is not the official template")
    tok_json = zstandard.ZstdDecompressor().decompress(TOKENIZER_ZST.read_bytes(), max_output_size=1 << 30).decode()
    tok = PreTrainedTokenizerFast(tokenizer_object=tokenizers.Tokenizer.from_str(tok_json))
    tok.chat_template = raw.decode("utf-8")
    OUT.mkdir(parents=True, exist_ok=True)
    for expected in sorted(FIXTURES.glob("*/expected.jsonl")):
        lines = []
        for line in expected.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            entry = expand(json.loads(line))
            if "conversation" not in entry:
                continue
            conversation = entry["conversation"]
            messages = [openai_message(m) for m in conversation["messages"]]
            text = tok.apply_chat_template(messages, tools=conversation.get("tools") or None, tokenize=False,
                                           add_generation_prompt=False)
            head = {"file": entry["file"]} if "file" in entry else {}
            lines.append(json.dumps({**head, "row": entry["row"], "text": text}, ensure_ascii=False))
        path = OUT / f"{expected.parent.name}.jsonl"
        path.write_text("".join(l + "\n" for l in lines), encoding="utf-8")
        print(f"{path.relative_to(ROOT)}: {len(lines)} renders")


if __name__ == "__main__":
    main()
