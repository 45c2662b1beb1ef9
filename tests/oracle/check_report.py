#!/usr/bin/env python3
"""Opens a dataset's report.html in headless Chromium and checks what a reader sees.

Usage: python3 tests/oracle/check_report.py DIR [--screenshot OUT.png]

Needs Debian's `chromium` (/usr/bin/chromium, or $CHROMIUM); installs nothing. Without it, prints a
SKIP line naming the package and exits 0. Checks:
  * the page is self-contained: no <script>, src=, <link>, url(), outside link, @import or @font-face;
  * Chromium renders it with no console message or uncaught error (its log on stderr; checked first to
    catch one on a probe page, so the check can fail);
  * the screenshot is not blank (many distinct pixel values over the page);
  * the numbers in the rendered DOM equal manifest.json: totals, and every per-source accounting cell
    (read, kept, rejected, filtered, deduplicated, rows, tokens, supervised_tokens, and any other count
    the manifest has per source), and the percentiles equal stats.json.
Standard library only. Prints one line; exits non-zero on failure.
"""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from html.parser import HTMLParser
from pathlib import Path

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--enable-logging=stderr", "--log-level=0",
]
# With --log-level=0 Chromium logs every console message (and uncaught error) as `:CONSOLE`.
CONSOLE = re.compile(r":CONSOLE[:(]|Uncaught")


def fail(msg):
    print(f"check_report: FAIL: {msg}")
    sys.exit(1)


class Cells(HTMLParser):
    """Text of elements with an id, and of <td data-key> cells inside <tr data-source>."""

    def __init__(self):
        super().__init__()
        self.by_id, self.cells, self.stats = {}, {}, {}
        self.stack = []  # (tag, attrs, text parts)
        self.source = None
        self.stat = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr":
            self.source = a.get("data-source")
            self.stat = a.get("data-stat")
            self.stat_cells = []
        self.stack.append((tag, a, []))

    def handle_endtag(self, tag):
        while self.stack:
            t, a, text = self.stack.pop()
            s = "".join(text).strip()
            if self.stack:
                self.stack[-1][2].append(s)
            if "id" in a:
                self.by_id[a["id"]] = s
            if t == "td" and self.source is not None and "data-key" in a:
                self.cells[(self.source, a["data-key"])] = s
            if t == "td" and self.stat is not None:
                self.stat_cells.append(s)
            if t == "tr" and self.stat is not None:
                self.stats[self.stat] = self.stat_cells
                self.stat = None
            if t == tag:
                break

    def handle_data(self, data):
        if self.stack:
            self.stack[-1][2].append(data)


def number(text):
    return int(text.replace("\u202f", "").replace(",", ""))


def png_distinct_pixels(path):
    data = Path(path).read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail("screenshot is not a PNG")
    at, idat, width = 8, b"", 0
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            channels = {2: 3, 6: 4}.get(color, 1)
        elif kind == b"IDAT":
            idat += body
        at += 12 + length
    raw = zlib.decompress(idat)
    stride = 1 + width * channels * (depth // 8)
    # Distinct scanline contents (filter bytes included) and distinct bytes: a blank page has one
    # kind of row.
    rows = {raw[i:i + stride] for i in range(0, len(raw), stride)}
    return len(rows), width


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--screenshot")
    args = ap.parse_args()
    out = Path(args.dir).resolve()
    page = out / "report.html"
    html = page.read_text(encoding="utf-8")
    manifest = json.loads((out / "manifest.json").read_text())
    stats = json.loads((out / "stats.json").read_text())
    if re.search(r"<script|@import|@font-face", html, re.I):
        fail("the page has a script, an @import or a web font")
    if re.search(r"""\ssrc\s*=|<link|url\(|(href)\s*=\s*["']?\s*(https?:)?//""", html, re.I):
        fail("the page loads something (src=, <link>, url() or an outside link)")

    chromium = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    if not Path(chromium).exists():
        print("check_report: SKIP: no /usr/bin/chromium (apt-get install -y chromium); static checks passed")
        return
    with tempfile.TemporaryDirectory() as tmp:
        profile = ["--user-data-dir=" + str(Path(tmp) / "profile")]

        def dump_dom(url):
            run = subprocess.run(
                [chromium, *FLAGS, *profile, "--dump-dom", url],
                capture_output=True, text=True, timeout=120,
            )
            if run.returncode != 0:
                fail(f"chromium --dump-dom exited {run.returncode}: {run.stderr[-2000:]}")
            return run.stdout, [line for line in run.stderr.splitlines() if CONSOLE.search(line)]

        # The console check must be able to fail: a page with an error is seen to have one.
        probe = Path(tmp) / "probe.html"
        probe.write_text('<p>x</p><script>console.error("probe")</script>')
        if not dump_dom(probe.as_uri())[1]:
            fail("this Chromium does not log console messages with --log-level=0: the check cannot see errors")
        dom, errors = dump_dom(page.as_uri())
        if errors:
            fail("console errors: " + " | ".join(errors[:5]))
        shot = args.screenshot or str(Path(tmp) / "shot.png")
        subprocess.run(
            [chromium, *FLAGS, *profile, "--window-size=1400,2400", f"--screenshot={shot}", page.as_uri()],
            capture_output=True, text=True, timeout=120, check=True,
        )
        distinct_rows, width = png_distinct_pixels(shot)
    if distinct_rows < 100:
        fail(f"the screenshot looks blank ({distinct_rows} distinct rows of pixels)")

    cells = Cells()
    cells.feed(dom)
    for ident, key in [("total-rows", "rows"), ("total-tokens", "tokens"), ("total-supervised", "supervised_tokens")]:
        if number(cells.by_id.get(ident, "-1")) != manifest[key]:
            fail(f"#{ident} shows {cells.by_id.get(ident)!r}, manifest {key} is {manifest[key]}")
    if number(cells.by_id["total-shards"]) != len(manifest["shards"]):
        fail("shard count differs")
    if "build_id" in manifest and cells.by_id.get("build-id") != manifest["build_id"]:
        fail("build id differs")
    checked = 0
    for name, s in manifest["sources"].items():
        for key, value in s.items():
            if isinstance(value, dict) and key in ("rejected", "filtered"):
                value = sum(value.values())
            if not isinstance(value, int) or key in ("encoder_checked_rows", "renderer_checked_rows"):
                continue
            shown = cells.cells.get((name, key))
            if shown is None:
                fail(f"source {name}: {key} = {value} is not shown")
            if number(shown) != value:
                fail(f"source {name}: {key} shows {shown}, manifest has {value}")
            checked += 1
    for name, s in [("all sources", stats["total"]), *stats["sources"].items()]:
        for stat in ("seq_len", "supervised_per_row"):
            row = cells.stats.get(f"{name}/{stat}")
            h = s[stat]
            want = [h["count"], h["min"], h["p50"], h["p90"], h["p99"], h["max"]]
            if row is None or [number(x) for x in row[1:7]] != want:
                fail(f"{name} {stat}: page shows {row}, stats.json has {want}")
            checked += 1
    print(f"check_report: OK: rendered in Chromium with no console error, {distinct_rows} distinct pixel rows "
          f"at width {width}, {checked} numbers equal manifest.json / stats.json")


if __name__ == "__main__":
    main()
