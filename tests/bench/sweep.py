#!/usr/bin/env python3
"""Thread sweep of `chatshards build`, beside the Python reference, from a folder that holds
only a release binary and this kit (no repository, no Rust, no network): `make bench-kit`.

Usage: sweep.py [--bin PATH] [--threads 1,2,4,8,16] [--rows 100000] [--memory-rows 913000]
                [--parts 4] [--python-procs 2,16] [--skip-python] [--workdir DIR]
                [--json FILE] [--repeat R]

For each thread count it builds N synthetic rows (gen_synthetic.py) twice, plain and with the
demo's curation steps, and reports wall seconds, rows/s, tokens/s, cores busy (the child's user
+ system CPU over wall, from getrusage), the build's own wall by phase (`--timings`), and peak
RSS (the child's ru_maxrss). Then it checks that every build wrote the same bytes (the
manifests' `dataset_sha256` and every output file's sha256), runs `--parts` parts in parallel
plus `merge` and compares those bytes too, builds --memory-rows rows at the largest thread
count (plain and curated), and runs py_reference.py at each --python-procs. It prints one
markdown table and writes everything to --json (default sweep.json in the work dir).

Files it needs beside it (the kit): chatshards (or --bin), gen_synthetic.py, py_reference.py,
tokenizer.json.zst (or tokenizer.json), chat_template.jinja, HumanEval.jsonl. The Python
reference needs `datasets` and `transformers` (the kit's wheels/: `pip install --no-index
--find-links wheels -r requirements.txt`); with --skip-python nothing beyond Python 3.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def find(name, *candidates):
    """The first of `candidates` (relative to this script) that exists."""
    for c in candidates:
        p = (HERE / c).resolve()
        if p.exists():
            return p
    sys.exit(f"sweep.py: cannot find {name} (looked for {', '.join(candidates)} beside {HERE})")


def timed(cmd, env=None, cwd=None):
    """Runs cmd; returns (wall s, CPU s of the child, peak RSS MiB of the child, output); the
    child's system CPU seconds are left in LAST_SYSTEM_S."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            cwd=cwd)
    out = proc.stdout.read().decode("utf-8", "replace")
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"sweep.py: `{' '.join(map(str, cmd))}` failed:\n{out[-3000:]}")
    LAST_SYSTEM_S[0] = usage.ru_stime
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out


LAST_SYSTEM_S = [0.0]


def phases(out):
    """`--timings`' wall time by phase: {"start-up": s, "rows": s, "shards": s}."""
    m = re.search(r"^wall time by phase: (.*)$", out, re.M)
    if not m:
        return {}
    return {k: float(v) for k, v in re.findall(r"([\w-]+) ([\d.]+) s", m.group(1))}


def phase_rss(out):
    """`--timings`' peak RSS at the end of each phase: {"start-up": MiB, "rows": MiB, ...}."""
    m = re.search(r"^peak memory \(RSS\) at the end of each phase: (.*)$", out, re.M)
    if not m:
        return {}
    return {k: int(v) for k, v in re.findall(r"([\w-]+) (\d+) MiB", m.group(1))}


def curation(humaneval):
    """The demo's curation steps (pipelines/demo.yaml) on the synthetic rows."""
    return (
        "dedup: true\nfilters:\n"
        "  - regex: {name: refusals, exclude: [\"(?i)as an ai language model\"], scope: assistant}\n"
        "  - language: {keep: [en], scope: user}\n"
        "  - repetition: {}\n"
        "near_dup: {scope: all}\n"
        f"decontaminate:\n  benchmarks:\n    - name: humaneval\n      files: [{humaneval}]\n"
        "      columns: {id: task_id, text: [prompt, canonical_solution]}\n"
    )


def pipeline(work, name, data, kit, curated):
    path = work / f"{name}.yaml"
    path.write_text(
        f"name: sweep\nseed: 1\ntokenizer:\n  path: {kit['tokenizer']}\n"
        f"template:\n  path: {kit['template']}\n"
        "render:\n  policy: all\nmax_tokens: 100000000\nmin_supervised_tokens: 0\n"
        + (curation(kit["humaneval"]) if curated else "dedup: false\n")
        + f"sources:\n  - name: synthetic\n    files: [{data}]\n    format: openai\n"
        f"output:\n  dir: {work / ('out-' + name)}\n"
    )
    return path, work / f"out-{name}"


def output_hashes(out):
    """sha256 of every file of an output directory but the manifest and report (which name the
    build's own paths and times), and the manifest's dataset_sha256."""
    manifest = json.loads((out / "manifest.json").read_text())
    files = {}
    for p in sorted(out.iterdir()):
        if p.is_file() and p.name not in ("manifest.json", "report.html"):
            # Streamed: a child's peak RSS (wait4) counts what this process held when it
            # forked, so reading a shard whole here would show in the next build's figure.
            with p.open("rb") as f:
                files[p.name] = hashlib.file_digest(f, "sha256").hexdigest()
    return manifest, files


def build(binary, pipe, out, threads, extra=()):
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, CHATSHARDS_NO_PROGRESS="1")
    wall, cpu, rss, log = timed([binary, "build", "--timings", "--fresh", "--threads",
                                 str(threads), pipe, *extra], env=env)
    manifest, files = output_hashes(out)
    return {
        "threads": threads, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
        "system_s": round(LAST_SYSTEM_S[0], 3),
        "cores_busy": round(cpu / wall, 2), "rows": manifest["rows"],
        "tokens": manifest["tokens"], "rows_per_s": round(manifest["rows"] / wall),
        "m_tokens_per_s": round(manifest["tokens"] / wall / 1e6, 2),
        "phases_s": phases(log), "phase_rss_mib": phase_rss(log),
        "peak_rss_mib": round(rss), "dataset_sha256":
        manifest["dataset_sha256"], "files": files,
    }


def best(runs):
    """The fastest of repeated runs (RSS: the largest seen)."""
    fastest = dict(min(runs, key=lambda r: r["wall_s"]))
    fastest["peak_rss_mib"] = max(r["peak_rss_mib"] for r in runs)
    return fastest


def parts_and_merge(binary, pipe, out, parts, threads):
    """`parts` parts at threads/parts each, in parallel, then `merge` at `threads`."""
    per_part = max(1, threads // parts)
    shutil.rmtree(out, ignore_errors=True)
    parts_dir = out.with_name(out.name + ".parts")
    shutil.rmtree(parts_dir, ignore_errors=True)
    env = dict(os.environ, CHATSHARDS_NO_PROGRESS="1")
    start = time.perf_counter()
    procs = [subprocess.Popen([binary, "build", "--part", f"{i}/{parts}", "--threads",
                               str(per_part), pipe], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, env=env) for i in range(parts)]
    cpu = 0.0
    for p in procs:
        log = p.stdout.read().decode("utf-8", "replace")
        _, status, usage = os.wait4(p.pid, 0)
        cpu += usage.ru_utime + usage.ru_stime
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"sweep.py: a part failed:\n{log[-3000:]}")
    parts_wall = time.perf_counter() - start
    wall, mcpu, rss, log = timed([binary, "merge", "--timings", "--parts", str(parts),
                                  "--threads", str(threads), pipe], env=env)
    manifest, files = output_hashes(out)
    return {
        "parts": parts, "threads_per_part": per_part, "parts_wall_s": round(parts_wall, 3),
        "parts_cores_busy": round(cpu / parts_wall, 2), "merge_wall_s": round(wall, 3),
        "merge_cores_busy": round(mcpu / wall, 2), "merge_phases_s": phases(log),
        "merge_peak_rss_mib": round(rss), "dataset_sha256": manifest["dataset_sha256"],
        "files": files,
    }


def python_reference(python, kit, data, work, procs):
    tokenizer_json = work / "tokenizer.json"
    if not tokenizer_json.exists():
        if kit["tokenizer"].suffix == ".zst":
            import zstandard  # in the kit's requirements
            tokenizer_json.write_bytes(zstandard.ZstdDecompressor().decompress(
                kit["tokenizer"].read_bytes(), max_output_size=1 << 30))
        else:
            shutil.copy(kit["tokenizer"], tokenizer_json)
    out = work / "out-python"
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    wall, cpu, rss, log = timed([python, kit["reference"], data, out, tokenizer_json,
                                 kit["template"], str(procs)], env=env)
    m = re.search(r"rows (\d+) tokens (\d+)", log)
    rows, tokens = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    # Peak RSS of the largest single process (num_proc workers are separate processes).
    return {"procs": procs, "wall_s": round(wall, 3), "cores_busy": round(cpu / wall, 2),
            "rows": rows, "tokens": tokens, "rows_per_s": round(rows / wall) if rows else 0,
            "peak_rss_mib": round(rss)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", help="the chatshards binary (default: ./chatshards beside this "
                    "script, else the repository's target/release/chatshards)")
    ap.add_argument("--threads", default="1,2,4,8,16")
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--memory-rows", type=int, default=0,
                    help="also build this many rows at the largest thread count")
    ap.add_argument("--parts", type=int, default=4, help="0: no parts + merge run")
    ap.add_argument("--python-procs", default="2,16")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--skip-python", action="store_true")
    ap.add_argument("--repeat", type=int, default=1, help="builds: best of this many")
    ap.add_argument("--workdir")
    ap.add_argument("--json", help="where to write the results (default: WORKDIR/sweep.json)")
    args = ap.parse_args()

    binary = Path(args.bin).resolve() if args.bin else find(
        "the chatshards binary (--bin)", "chatshards", "../../target/release/chatshards")
    kit = {
        "generator": find("gen_synthetic.py", "gen_synthetic.py"),
        "reference": find("py_reference.py", "py_reference.py"),
        "tokenizer": find("the tokenizer", "tokenizer.json.zst", "tokenizer.json",
                          "../../templates/qwen3.6/tokenizer.json.zst"),
        "template": find("the chat template", "chat_template.jinja",
                         "../../templates/qwen3.6/chat_template.jinja"),
        "humaneval": find("HumanEval.jsonl", "HumanEval.jsonl",
                          "../fixtures/benchmarks/HumanEval.jsonl"),
    }
    threads = [int(t) for t in args.threads.split(",")]
    work = Path(args.workdir or tempfile.mkdtemp(prefix="chatshards-sweep-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    need = args.rows * 35_000 + args.memory_rows * 17_000
    free = shutil.disk_usage(work).free
    if free < need:
        sys.exit(f"sweep.py: {work} has {free / 1e9:.1f} GB free; this run needs about "
                 f"{need / 1e9:.1f} GB (--workdir elsewhere, or fewer rows)")

    def gen(rows):
        path = work / f"synthetic-{rows}.jsonl"
        if not path.exists():
            subprocess.run([sys.executable, kit["generator"], str(rows), path], check=True)
        return path

    data = gen(args.rows)
    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
    results = {"binary": str(binary), "version": version, "cpus": os.cpu_count(),
               "rows": args.rows, "builds": {}, "python": [], "parts": None, "memory": {}}
    for kind in ("plain", "curated"):
        pipe, out = pipeline(work, kind, data, kit, kind == "curated")
        runs = []
        for t in threads:
            r = best([build(binary, pipe, out, t) for _ in range(args.repeat)])
            print(f"{kind} {t} threads: {r['wall_s']:.2f} s, {r['cores_busy']} cores busy, "
                  f"{r['phases_s']}", file=sys.stderr)
            runs.append(r)
        results["builds"][kind] = runs
    # Byte-identical at every thread count: every output file, per kind.
    identical = {kind: all(r["files"] == runs[0]["files"] for r in runs)
                 for kind, runs in results["builds"].items()}
    if args.parts:
        pipe, out = pipeline(work, "plain", data, kit, False)
        results["parts"] = parts_and_merge(binary, pipe, out, args.parts, max(threads))
        identical["parts+merge"] = (results["parts"]["files"]
                                    == results["builds"]["plain"][0]["files"])
    results["identical"] = identical
    if args.memory_rows:
        big = gen(args.memory_rows)
        for kind in ("plain", "curated"):
            pipe, out = pipeline(work, f"memory-{kind}", big, kit, kind == "curated")
            results["memory"][kind] = build(binary, pipe, out, max(threads))
    if not args.skip_python:
        for procs in (int(p) for p in args.python_procs.split(",")):
            results["python"].append(python_reference(args.python, kit, data, work, procs))

    print(report(results))
    path = Path(args.json) if args.json else work / "sweep.json"
    for runs in results["builds"].values():
        for r in runs:
            r.pop("files")
    if results["parts"]:
        results["parts"].pop("files")
    for r in results["memory"].values():
        r.pop("files")
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nresults: {path}; work dir: {work}")


def report(results):
    """The results as markdown."""
    lines = [f"`{results['version']}`, {results['cpus']} CPUs, {results['rows']:,} synthetic "
             "rows", "",
             "| build | threads | wall s | rows/s | M tokens/s | cores busy | start-up s | "
             "rows s | shards s | peak RSS MiB | vs 1 thread |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for kind, runs in results["builds"].items():
        base = next((r["wall_s"] for r in runs if r["threads"] == 1), None)
        for r in runs:
            p = r["phases_s"]
            speedup = f"{base / r['wall_s']:.2f}x" if base else "-"
            lines.append(
                f"| {kind} | {r['threads']} | {r['wall_s']:.2f} | {r['rows_per_s']:,} | "
                f"{r['m_tokens_per_s']:.2f} | {r['cores_busy']:.1f} | "
                f"{p.get('start-up', 0):.2f} | {p.get('rows', 0):.2f} | "
                f"{p.get('shards', 0):.2f} | {r['peak_rss_mib']} | {speedup} |")
    for kind, r in results["memory"].items():
        p = r["phases_s"]
        lines.append(
            f"| {kind}, {r['rows']:,} rows | {r['threads']} | {r['wall_s']:.2f} | "
            f"{r['rows_per_s']:,} | {r['m_tokens_per_s']:.2f} | {r['cores_busy']:.1f} | "
            f"{p.get('start-up', 0):.2f} | {p.get('rows', 0):.2f} | {p.get('shards', 0):.2f} | "
            f"{r['peak_rss_mib']} | - |")
    if results["parts"]:
        r = results["parts"]
        p = r["merge_phases_s"]
        lines += ["", f"{r['parts']} parts of {r['threads_per_part']} threads in parallel: "
                  f"{r['parts_wall_s']:.2f} s ({r['parts_cores_busy']:.1f} cores busy); merge: "
                  f"{r['merge_wall_s']:.2f} s ({r['merge_cores_busy']:.1f} cores busy, phases "
                  f"{p}), peak RSS {r['merge_peak_rss_mib']} MiB"]
    if results["python"]:
        lines += ["", "| Python reference | procs | wall s | rows/s | cores busy | "
                  "plain at that many threads / Python | curated / Python |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for py in results["python"]:
            def ratio(kind):
                r = next((r for r in results["builds"][kind] if r["threads"] == py["procs"]),
                         None)
                return f"{py['wall_s'] / r['wall_s']:.1f}x" if r else "-"
            lines.append(f"| py_reference.py | {py['procs']} | {py['wall_s']:.1f} | "
                         f"{py['rows_per_s']:,} | {py['cores_busy']:.1f} | {ratio('plain')} | "
                         f"{ratio('curated')} |")
    lines += ["", "byte-identical outputs: " + ", ".join(
        f"{k} {'yes' if v else 'NO'}" for k, v in results["identical"].items())]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
