#!/usr/bin/env python3
"""open_time.py PAGE.html [--runs N] [--chromium PATH]: how long `cordon report`'s page takes to
open in headless Chromium.

Prints, as medians over N runs (each with a fresh profile):
  rendered  the page's own time, from navigation start until its script has built every view and
            the browser has laid them out, as the page measures it (performance.now()) and writes
            into <html data-rendered-ms>; data-render-phases splits it by view;
  chromium  Chromium's whole run (--dump-dom), start-up and shutdown included;
  empty     the same run on an empty page: Chromium's own floor, so chromium - empty is what
            the page costs on top of it.
Asserts nothing; exits 1 only when Chromium fails or the page writes no time."""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

EMPTY = "<!DOCTYPE html><html><head><meta charset=\"utf-8\"></head><body></body></html>\n"


def dump_dom(chromium, url, timeout):
    """One headless run: (seconds of wall time, the DOM Chromium dumped)."""
    with tempfile.TemporaryDirectory(prefix="cordon-open-time.") as profile:
        argv = [chromium, "--headless", "--disable-gpu", "--user-data-dir=" + profile,
                "--dump-dom", url]
        if os.geteuid() == 0:
            argv.insert(1, "--no-sandbox")  # Chromium refuses to run as root otherwise
        t0 = time.monotonic()
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
        wall = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit("chromium failed (%d): %s" % (r.returncode, r.stderr.decode(errors="replace")[-2000:]))
    return wall, r.stdout.decode(errors="replace")


def html_attr(dom, name):
    m = re.search(r"<html\b[^>]*\s" + re.escape(name) + r"=\"([^\"]*)\"", dom)
    return m.group(1) if m else None


def spread(xs):
    return "median %.0f ms (min %.0f, max %.0f, n=%d)" % (
        statistics.median(xs), min(xs), max(xs), len(xs))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("page")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per Chromium run")
    a = ap.parse_args()
    runs = max(1, min(a.runs, 100))
    page = os.path.realpath(a.page)
    rendered, wall, empty, phases = [], [], [], {}
    with tempfile.TemporaryDirectory(prefix="cordon-open-time.") as tmp:
        blank = os.path.join(tmp, "empty.html")
        with open(blank, "w") as f:
            f.write(EMPTY)
        # Alternated, so a load change on the machine hits both series alike.
        for _ in range(runs):
            t, dom = dump_dom(a.chromium, "file://" + page, a.timeout)
            ms = html_attr(dom, "data-rendered-ms")
            if ms is None:
                sys.exit("the page wrote no data-rendered-ms on <html>: did its script run?")
            wall.append(t * 1000)
            rendered.append(float(ms))
            for part in (html_attr(dom, "data-render-phases") or "").split():
                name, _, v = part.partition(":")
                phases.setdefault(name, []).append(float(v))
            t, _ = dump_dom(a.chromium, "file://" + blank, a.timeout)
            empty.append(t * 1000)
    print("page:     %s (%d bytes)" % (page, os.path.getsize(page)))
    print("rendered: " + spread(rendered) + "  <- the page's own time")
    if phases:
        print("  phases: " + " ".join("%s %.0f" % (k, statistics.median(v)) for k, v in phases.items())
              + " (ms, medians)")
    print("chromium: " + spread(wall) + "  (whole run)")
    print("empty:    " + spread(empty) + "  (Chromium's floor)")
    print("chromium - empty: %.0f ms" % (statistics.median(wall) - statistics.median(empty)))


if __name__ == "__main__":
    main()
