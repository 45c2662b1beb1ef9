#!/usr/bin/env python3
"""Independent check of a chatshards dataset's identity hashes (README "Versions").

Usage: python3 tests/oracle/check_identity.py DIR

Needs only the standard library and PyYAML (never our Rust code). Checks:
  * every file in manifest `files` has the recorded size and sha256;
  * dataset_sha256 == sha256 of the shards' hex sha256s concatenated in order, and state.json
    `_fingerprint` is its first 16 characters;
  * build_id == sha256 of the canonical JSON (sorted keys, no spaces) of the documented document,
    rebuilt from the manifest and the `pipeline.yaml` copy (without `output.dir`).
Prints one line; exits non-zero naming the first difference.
"""
import hashlib
import json
import sys
from pathlib import Path

import yaml


class CheckError(Exception):
    pass


def check(ok, message):
    if not ok:
        raise CheckError(message)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def run(d):
    manifest = json.loads((d / "manifest.json").read_text(encoding="utf-8"))
    state = json.loads((d / "state.json").read_text(encoding="utf-8"))
    for f in manifest["files"]:
        path = d / f["file"]
        check(path.stat().st_size == f["bytes"], f"{f['file']}: size differs from the manifest")
        check(sha256_file(path) == f["sha256"], f"{f['file']}: sha256 differs from the manifest")
    shard_hashes = "".join(s["sha256"] for s in manifest["shards"])
    dataset_sha256 = hashlib.sha256(shard_hashes.encode("ascii")).hexdigest()
    check(manifest["dataset_sha256"] == dataset_sha256,
          f"dataset_sha256 {manifest['dataset_sha256']} != {dataset_sha256}")
    check(state["_fingerprint"] == dataset_sha256[:16], f"_fingerprint {state['_fingerprint']!r}")

    pipeline = yaml.safe_load((d / manifest["pipeline"]["copy"]).read_bytes())
    if isinstance(pipeline.get("output"), dict):
        pipeline["output"].pop("dir", None)
    lock = manifest["pipeline"].get("lock")
    document = {
        "encoding": 1,
        "tool": {"name": manifest["tool"]["name"], "version": manifest["tool"]["version"]},
        "pipeline": pipeline,
        "lock_sha256": lock["sha256"] if lock else None,
        "template": {"sha256": manifest["inputs"]["template_sha256"],
                     "kwargs": manifest["settings"]["template_kwargs"]},
        "tokenizer": {"sha256": manifest["inputs"]["tokenizer_sha256"]},
        "inputs": [{"kind": f["kind"], "name": f["source"], "path": f["path"], "sha256": f["sha256"]}
                   for f in manifest["inputs"]["files"]],
    }
    build_id = hashlib.sha256(canonical(document).encode("utf-8")).hexdigest()
    check(manifest["build_id"] == build_id, f"build_id {manifest['build_id']} != {build_id}")
    print(f"check_identity: OK {d}: build_id {build_id[:16]}, dataset_sha256 {dataset_sha256[:16]}, "
          f"{len(manifest['files'])} files")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.splitlines()[2])
    d = Path(sys.argv[1])
    try:
        run(d)
    except (CheckError, KeyError, OSError, ValueError) as exc:
        sys.exit(f"check_identity: FAIL {d}: {exc!r}")


if __name__ == "__main__":
    main()
