#!/usr/bin/env python3
"""speculators' own `prepare-data` against `chatshards serve-render`, compared row for row with
`chatshards build` under `mask: {preset: speculators-0.9}`.

Usage: python3 tests/oracle/check_speculators_render.py --bin target/debug/chatshards [--work DIR]

1. The demo's OpenAI-format conversations (tests/fixtures/demo/chat.jsonl, curation.jsonl: tool
   calls, tool results, reasoning_content, tools) are built by chatshards with the
   speculators-0.9 preset and no curation.
2. The same conversations are written in the shape speculators reads (`conversations` plus
   `tools` as a JSON string; tool-call arguments as JSON strings, the OpenAI wire format, since
   Arrow cannot hold the fixtures' mix of string and object arguments in one column).
3. `chatshards serve-render PIPELINE --port 0` is started, and speculators' CLI runs
   `prepare-data --render-endpoint` against it: its own boundary derivation, mask and filters.
4. Both datasets are opened with `datasets.load_from_disk` and compared as multisets of
   (input_ids, loss_mask) rows (prepare-data shuffles with its own seed).

One deliberate difference is accounted for, not compared: speculators maps a role it does not
know (`developer`, a model name) to `assistant` (`_normalize_conversation`), so it trains on
such a message as the model's own text; chatshards rejects the conversation (`unknown_role`).
Those conversations are left out of speculators' input, and the check asserts that chatshards'
`rejects.jsonl` holds each of them with reason `unknown_role`.

Needs the speculators venv (tests/oracle/requirements-speculators.txt). Prints
`check_speculators_render: OK ...` and exits 0 when every row matches.
"""
import json
import re
import subprocess
import sys
import threading

from speculators_oracle import ROOT, binary_and_work, build, local_model, prepare_data, rows_of

INPUTS = [ROOT / "tests/fixtures/demo/chat.jsonl", ROOT / "tests/fixtures/demo/curation.jsonl"]


def read_conversations():
    rows = []
    for path in INPUTS:
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # the fixtures hold a malformed line on purpose (a reject case)
            if isinstance(row, dict) and isinstance(row.get("messages"), list):
                rows.append(row)
    return rows


# The roles speculators' `_normalize_conversation` maps to themselves; any other becomes
# `assistant` there.
KNOWN_ROLES = {"human", "user", "gpt", "assistant", "system", "tool"}


def unknown_roles(row):
    return sorted({m.get("from", m.get("role", "")) for m in row["messages"]
                   if isinstance(m, dict)} - KNOWN_ROLES)


def for_speculators(row):
    messages = []
    for m in row["messages"]:
        if not isinstance(m, dict):
            return None
        m = dict(m)
        calls = []
        for c in m.get("tool_calls") or []:
            c = json.loads(json.dumps(c))
            f = c.get("function") or {}
            if not isinstance(f.get("arguments"), str):
                f["arguments"] = json.dumps(f.get("arguments"), ensure_ascii=False)
            calls.append(c)
        if calls:
            m["tool_calls"] = calls
        messages.append(m)
    out = {"conversations": messages}
    out["tools"] = json.dumps(row["tools"], ensure_ascii=False) if row.get("tools") else ""
    return out


PIPELINE = """name: speculators-render
seed: 42
tokenizer:
  path: {root}/templates/qwen3.6/tokenizer.json.zst
template:
  path: {root}/templates/qwen3.6/chat_template.jinja
mask: {{preset: speculators-0.9}}
max_tokens: 8192
min_supervised_tokens: 1
sources:
  - name: demo
    files: [{inputs}]
    format: openai
output:
  dir: {out}
  rows_per_shard: 100000
"""


def main():
    binary, work = binary_and_work("speculators-render-")

    pipeline = work / "pipeline.yaml"
    pipeline.write_text(PIPELINE.format(
        root=ROOT, inputs=", ".join(str(p) for p in INPUTS), out=work / "chatshards"))
    build(binary, pipeline)

    rows = read_conversations()
    renamed = [r for r in rows if unknown_roles(r)]
    convs = [c for c in (for_speculators(r) for r in rows if not unknown_roles(r)) if c is not None]
    rejects = [json.loads(line) for line in
               (work / "chatshards/rejects.jsonl").read_text().splitlines()]
    unknown = [r for r in rejects if r["reason"] == "unknown_role"]
    if len(unknown) != len(renamed):
        sys.exit(f"check_speculators_render: FAIL {len(renamed)} conversations have a role "
                 f"speculators maps to assistant, chatshards rejected {len(unknown)} as unknown_role")
    print(f"{len(renamed)} conversations with roles speculators maps to assistant "
          f"({', '.join(sorted({x for r in renamed for x in unknown_roles(r)}))}): "
          f"rejected by chatshards as unknown_role, left out of speculators' input")
    data = work / "conversations.jsonl"
    data.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in convs))

    model = local_model(work)

    server = subprocess.Popen([binary, "serve-render", str(pipeline), "--port", "0"],
                              stderr=subprocess.PIPE, text=True)
    try:
        url = None
        for line in server.stderr:
            sys.stderr.write(line)
            found = re.search(r"at (http://[0-9.:]+)", line)
            if found:
                url = found.group(1)
                break
        if url is None:
            sys.exit("check_speculators_render: FAIL serve-render did not start")
        # Keep draining the server's stderr so it never blocks on a full pipe.
        threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()
        out = work / "speculators"
        prepare_data(model, data, out, 2, "--render-endpoint", url)
    finally:
        server.terminate()
        server.wait(timeout=30)

    ours = rows_of(work / "chatshards")
    theirs = rows_of(out)
    n_ours, n_theirs = sum(ours.values()), sum(theirs.values())
    print(f"chatshards build: {n_ours} rows; speculators prepare-data via serve-render: {n_theirs} rows; "
          f"{len(convs)} conversations in")
    if ours != theirs:
        only_ours = ours - theirs
        only_theirs = theirs - ours
        print(f"check_speculators_render: FAIL {sum(only_ours.values())} rows only in chatshards, "
              f"{sum(only_theirs.values())} only in speculators")
        for (ids, mask), _ in list(only_ours.items())[:2]:
            print("  only chatshards:", len(ids), "tokens,", sum(mask), "supervised")
        for (ids, mask), _ in list(only_theirs.items())[:2]:
            print("  only speculators:", len(ids), "tokens,", sum(mask), "supervised")
        sys.exit(1)
    print(f"check_speculators_render: OK {n_ours} rows identical (input_ids and loss_mask)")


if __name__ == "__main__":
    main()
