#!/usr/bin/env python3
"""Copy whatlang 0.18's trigram profiles and alphabets (MIT, github.com/greyblake/whatlang-rs)
into this crate's src/profiles.tsv and src/alphabets.tsv, the tables behind its inverted-index
detector.

Usage: python3 crates/langid-index/vendor_whatlang.py [PATH/TO/whatlang-0.18.0]
(default: the crate's source in Cargo's registry, found with `cargo metadata`).
Each output line: script, language (whatlang's code), then the language's 300 trigrams in rank
order as one string of 900 characters (3 per trigram; spaces are part of trigrams).
alphabets.tsv: script, language, its alphabet exactly as whatlang spells it (in its order, with
any repeated or combining characters), languages in whatlang's table order.
"""
import json
import pathlib
import re
import subprocess
import sys

# The crate's directory (the tables) and the workspace root (Cargo.lock, for `cargo metadata`).
CRATE = pathlib.Path(__file__).resolve().parent
ROOT = CRATE.parents[1]


def crate_dir() -> pathlib.Path:
    if len(sys.argv) > 1:
        return pathlib.Path(sys.argv[1])
    meta = json.loads(subprocess.check_output(
        ["cargo", "metadata", "--format-version", "1", "--locked"], cwd=ROOT))
    for pkg in meta["packages"]:
        if pkg["name"] == "whatlang":
            if pkg["version"] != "0.18.0":
                sys.exit(f"whatlang {pkg['version']} in Cargo.lock, this table is 0.18.0's")
            return pathlib.Path(pkg["manifest_path"]).parent
    sys.exit("whatlang is not in Cargo.lock")


def main() -> None:
    src = (crate_dir() / "src/trigrams/profiles.rs").read_text(encoding="utf-8")
    lines = ["# whatlang 0.18.0 trigram profiles (MIT, Copyright (c) 2017 Sergey Potapov), "
             "written by crates/langid-index/vendor_whatlang.py: script, lang, 300 trigrams"]
    blocks = re.split(r"pub static (\w+)_LANGS: LangProfileList", src)[1:]
    for script, body in zip(blocks[0::2], blocks[1::2]):
        for lang, trigrams in re.findall(r"Lang::(\w+),\s*&\[(.*?)\]", body, re.S):
            chars = re.findall(r"Trigram\('(.)', '(.)', '(.)'\)", trigrams)
            if len(chars) != 300:
                sys.exit(f"{script} {lang}: {len(chars)} trigrams, expected 300")
            joined = "".join(a + b + c for a, b, c in chars)
            if "\t" in joined or "\n" in joined:
                sys.exit(f"{script} {lang}: tab or newline in a trigram")
            lines.append(f"{script.lower()}\t{lang.lower()}\t{joined}")
    if len(lines) != 52:
        sys.exit(f"{len(lines) - 1} languages, expected 51")
    out = CRATE / "src/profiles.tsv"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out.relative_to(ROOT)}: {len(lines) - 1} languages")
    alphabets(crate_dir())


def alphabets(crate: pathlib.Path) -> None:
    lines = ["# whatlang 0.18.0 alphabets (MIT, Copyright (c) 2017 Sergey Potapov), "
             "written by crates/langid-index/vendor_whatlang.py: script, lang, alphabet"]
    for script in ["latin", "cyrillic"]:
        src = (crate / f"src/alphabets/{script}.rs").read_text(encoding="utf-8")
        consts = dict(re.findall(r'const (\w+): &str =\s*"(.*?)";', src, re.S))
        table = re.search(r"_ALPHABETS: &\[\(Lang, &str\)\] = &\[(.*?)\];", src, re.S)
        if not table:
            sys.exit(f"{script}: no alphabet table")
        for lang, const in re.findall(r"\(Lang::(\w+), (\w+)\)", table.group(1)):
            alphabet = consts[const]
            if "\t" in alphabet or "\\" in alphabet:
                sys.exit(f"{script} {lang}: tab or escape in the alphabet")
            lines.append(f"{script}\t{lang.lower()}\t{alphabet}")
    if len(lines) != 1 + 37 + 6:
        sys.exit(f"{len(lines) - 1} alphabets, expected 43")
    out = CRATE / "src/alphabets.tsv"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out.relative_to(ROOT)}: {len(lines) - 1} alphabets")


if __name__ == "__main__":
    main()
