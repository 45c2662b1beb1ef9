#!/usr/bin/env python3
"""How true the build's progress ETA is: builds synthetic rows with the demo's curation steps
(the curated build of bench.py) and compares the ETA each progress line printed with the time
the build actually took from then on.

Usage: eta_check.py CHATSHARDS [--rows N] [--turns K] [--threads T] [--workdir DIR] [--json OUT]

The progress line is forced onto a non-terminal every second (CHATSHARDS_PROGRESS_INTERVAL=1).
For the first line at or past 10, 20, ..., 90 percent it prints the phase, the ETA shown, the
actual time left (until the process exits) and the error (ETA - actual) / actual, as a
markdown table, plus each phase's start. Rows come from gen_synthetic.py (seed 0), so the same
N gives the same input wherever the same Python version runs; with --turns K every row is
one shape instead (gen_synthetic.py's linearity rows: K = 4 a short chat, more an agentic
trajectory of K turns).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench  # noqa: E402  (its pipeline: tokenizer, template, the curation steps)

LINE = re.compile(r"progress: (\d+)% (.+?): (\d+) rows, (\d+) rows/s, eta (\S+)")


def seconds(text):
    """`42s`, `3m07s`, `2h05m` → seconds; `?` → None."""
    m = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", text)
    if text == "?" or not m:
        return None
    h, mi, s = (int(g) if g else 0 for g in m.groups())
    return h * 3600 + mi * 60 + s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("chatshards", help="the binary to measure (a release build)")
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--turns", type=int, help="every row this many turns (even, >= 4)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workdir", default="/tmp/chatshards-eta")
    ap.add_argument("--json", help="also write the lines and the table here")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    shape = f"-{args.turns}turns" if args.turns else ""
    data = bench.gen(sys.executable, args.rows, work / f"synthetic-{args.rows}{shape}.jsonl",
                     args.turns)
    out = work / "out-eta"
    pipeline = work / "eta.yaml"
    pipeline.write_text(
        f"name: eta\nseed: 1\ntokenizer:\n  path: {bench.TOKENIZER}\n  backend: auto\n"
        f"template:\n  path: {bench.TEMPLATE}\n"
        f"render:\n  policy: all\nmax_tokens: 100000000\nmin_supervised_tokens: 0\n{bench.CURATION}"
        f"sources:\n  - name: synthetic\n    files: [{data}]\n    format: openai\n"
        f"output:\n  dir: {out}\n"
    )
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, CHATSHARDS_PROGRESS_INTERVAL="1")
    env.pop("CHATSHARDS_NO_PROGRESS", None)
    cmd = [args.chatshards, "build", "--threads", str(args.threads), str(pipeline)]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, bufsize=1)
    lines = []  # (seconds since start, percent, phase, rows, rate, eta seconds)
    log = []
    for raw in proc.stdout:
        t = time.monotonic() - start
        log.append(f"{t:8.2f} {raw.rstrip()}")
        m = LINE.search(raw)
        if m:
            lines.append((t, int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4)),
                          seconds(m.group(5))))
    rc = proc.wait()
    total = time.monotonic() - start
    (work / "eta.log").write_text("\n".join(log) + "\n")
    if rc != 0:
        sys.exit(f"the build failed ({rc}); see {work / 'eta.log'}")
    manifest = json.loads((out / "manifest.json").read_text())
    s = manifest["sources"]["synthetic"]
    print(f"{args.rows} rows, {args.threads} threads: {total:.1f}s, read {s['read']}, "
          f"kept {s['kept']}, {len(lines)} progress lines")
    phases = {}
    for t, _, phase, *_ in lines:
        phases.setdefault(phase.split(" ")[0], t)
    print("first line of each phase: " + ", ".join(f"{p} {t:.1f}s" for p, t in phases.items()))
    print("| shown | at | phase | ETA shown | actual left | error |")
    print("|---:|---:|---|---:|---:|---:|")
    table = []
    for target in range(10, 100, 10):
        hit = next((l for l in lines if l[1] >= target), None)
        if hit is None or hit[5] is None:
            continue
        t, percent, phase, _, _, eta = hit
        left = total - t
        error = (eta - left) / left if left > 0 else float("nan")
        table.append(dict(target=target, at=t, percent=percent, phase=phase, eta=eta,
                          left=left, error=error))
        print(f"| {percent}% | {t:.0f}s | {phase} | {eta}s | {left:.0f}s | {error:+.0%} |")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(rows=args.rows, threads=args.threads,
                                                   total=total, phases=phases, table=table,
                                                   lines=lines), indent=1))


if __name__ == "__main__":
    main()
