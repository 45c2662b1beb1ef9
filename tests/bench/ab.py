#!/usr/bin/env python3
"""Like-for-like A/B of `chatshards build`: variants (binaries and environment switches) built
in alternating rounds on the same synthetic rows, from the same kit folder as sweep.py.

Usage: ab.py [--parquet | --array] WORKDIR ROWS THREADS ROUNDS NAME:BINARY:plain|curated|merge[:VAR=VALUE,...] ...

BINARY is relative to this script's folder (or absolute). Each build is `build --timings
--fresh --threads THREADS`; each prints its wall and CPU seconds, cores busy, system CPU,
peak RSS (the child's ru_maxrss), the build's phases and RSS at the end of each (`--timings`)
and the start of its `dataset_sha256`, which must be the same for every variant of a kind
(the script fails otherwise). With `--parquet` the rows are read from a Parquet file that
pyarrow writes from them (its default row groups), with `--array` from one JSON array, not
from JSON lines. The kind `merge` is the plain build as 4 parts of THREADS/4
threads each, in parallel, then `merge` at THREADS: it prints the merge's figures and the
parts' wall. With $OUT set, the results also go to $OUT/ab-ROWS-THREADS.json. Example, 913K
rows, two rounds, the default against a switch:

    python3 ab.py /scratch/ab 913000 16 2 now:chatshards:plain \\
        batches16:chatshards:plain:CHATSHARDS_SHARD_BATCHES=16
"""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import sweep  # noqa: E402  (beside this script in the kit)


def main():
    parquet, array = "--parquet" in sys.argv, "--array" in sys.argv
    argv = [a for a in sys.argv if a not in ("--parquet", "--array")]
    if len(argv) < 6:
        sys.exit(__doc__)
    work, rows, threads, rounds = (Path(argv[1]), int(argv[2]), int(argv[3]), int(argv[4]))
    work.mkdir(parents=True, exist_ok=True)
    data = work / f"synthetic-{rows}.jsonl"
    if not data.exists():
        start = time.time()
        subprocess.run([sys.executable, str(HERE / "gen_synthetic.py"), str(rows), str(data)],
                       check=True)
        print(f"generated {rows} rows in {time.time() - start:.1f} s", flush=True)
    if parquet:
        jsonl, data = data, data.with_suffix(".parquet")
        if not data.exists():
            # In a child: a build's peak RSS (wait4) counts what this process holds when it
            # forks, and the table is gigabytes.
            start = time.time()
            subprocess.run([sys.executable, "-c", (
                "import sys, pyarrow.json as j, pyarrow.parquet as p; "
                "p.write_table(j.read_json(sys.argv[1]), sys.argv[2])"), str(jsonl), str(data)],
                check=True)
            print(f"wrote {data.name} in {time.time() - start:.1f} s", flush=True)
    if array:
        jsonl, data = data, data.with_suffix(".json")
        if not data.exists():
            with open(jsonl, "rb") as lines, open(data, "wb") as out:
                out.write(b"[\n")
                for i, line in enumerate(lines):
                    out.write((b",\n" if i else b"") + line.rstrip(b"\n"))
                out.write(b"\n]\n")
    kit = {
        "tokenizer": sweep.find("tokenizer.json.zst", "tokenizer.json.zst", "tokenizer.json"),
        "template": sweep.find("chat_template.jinja", "chat_template.jinja"),
        "humaneval": sweep.find("HumanEval.jsonl", "HumanEval.jsonl"),
    }
    variants = []
    for spec in argv[5:]:
        name, binary, kind, *switches = spec.split(":")
        if kind not in ("plain", "curated", "merge"):
            sys.exit(f"ab.py: `{spec}`: the kind is plain, curated or merge, not `{kind}`")
        env = dict(e.split("=", 1) for e in (switches[0].split(",") if switches else []))
        pipe, out = sweep.pipeline(work, name, data, kit, kind == "curated")
        variants.append((name, kind, str((HERE / binary).resolve()), pipe, out, env))
    base = dict(os.environ)
    results = []
    for _ in range(rounds):
        for name, kind, binary, pipe, out, env in variants:
            os.environ.clear()
            os.environ.update(base)
            os.environ.update(env)
            if kind == "merge":
                r = sweep.parts_and_merge(binary, pipe, out, 4, threads)
                line = (f"parts {r['parts_wall_s']:6.2f} s  merge wall {r['merge_wall_s']:7.2f} s"
                        f"  busy {r['merge_cores_busy']:5.2f}  rss {r['merge_peak_rss_mib']:6} MiB"
                        f"  phases {r['merge_phases_s']}")
                shutil.rmtree(out.with_name(out.name + ".parts"), ignore_errors=True)
            else:
                r = sweep.build(binary, pipe, out, threads)
                line = (f"wall {r['wall_s']:7.2f} s  cpu {r['cpu_s']:7.1f} s  busy "
                        f"{r['cores_busy']:5.2f}  system {r['system_s']:6.2f} s  rss "
                        f"{r['peak_rss_mib']:6} MiB  phases {r['phases_s']}  rss by phase "
                        f"{r['phase_rss_mib']}")
            r["name"], r["kind"], r["env"] = name, kind, env
            results.append(r)
            print(f"{name:14} {line}  sha {r['dataset_sha256'][:12]}", flush=True)
            shutil.rmtree(out, ignore_errors=True)
    os.environ.clear()
    os.environ.update(base)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], f"ab-{rows}-{threads}.json").write_text(
            json.dumps(results, indent=1))
    # A merge of parts writes the plain build's dataset.
    for kinds in (("plain", "merge"), ("curated",)):
        if len({r["dataset_sha256"] for r in results if r["kind"] in kinds}) > 1:
            sys.exit(f"ab.py: the {' and '.join(kinds)} builds wrote different datasets")


if __name__ == "__main__":
    main()
