#!/usr/bin/env python3
"""`make test-repeat N=10 LOAD=2`: `make test` N times in a row on a fresh clone of HEAD, with
LOAD busy loops beside it for the whole run (what CI and a developer's machine look like), and a
table of run, result, time and the first failing test. Exits non-zero unless every run passed.

The clone is made once (the first run pays for the venv and the builds, as CI does); each run
is the README's command as it is. The busy loops are this script's children, ended by PID."""
from __future__ import annotations

import argparse
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# What names a failure, most specific first: pytest's summary, the C tiers' own list
# (plugin/tests/run_checks.sh), a fuzz harness, then make's own last word.
FAILURE_PATTERNS = (
    re.compile(r"^FAILED (\S+)", re.MULTILINE),
    re.compile(r"^ERROR (\S+)", re.MULTILINE),
    re.compile(r"^C tests \(\w+\) that failed:\n\s+(.+)$", re.MULTILINE),
    re.compile(r"^==\d+==ERROR: libFuzzer: (.+)$", re.MULTILINE),
    re.compile(r"^make(?:\[\d+\])?: \*\*\* (.+)$", re.MULTILINE),
)


def first_failure(log: str) -> str:
    for pattern in FAILURE_PATTERNS:
        found = pattern.search(log)
        if found:
            return found.group(1).strip()[:110]
    return "(no failing test named in the log)"


def burners(count: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(count)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--load", type=int, default=2, help="busy loops beside the runs")
    ap.add_argument("--keep", action="store_true", help="keep the clone and the logs")
    args = ap.parse_args()
    if args.runs < 1 or args.load < 0:
        ap.error("--runs must be at least 1 and --load at least 0")
    work = Path(tempfile.mkdtemp(prefix="lg-test-repeat-"))
    work.chmod(0o755)  # as a clone anywhere else: tests that drop to uid 65534 import from it
    clone = work / "linkguard"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    head = subprocess.run(["git", "-C", str(clone), "rev-parse", "--short", "HEAD"],
                          check=True, capture_output=True, text=True).stdout.strip()
    print(f"make test x{args.runs} on a fresh clone of {head} ({clone}), "
          f"{args.load} busy loop(s) beside it; logs in {work}", flush=True)
    loops = burners(args.load)
    rows: list[tuple[int, str, float, str]] = []
    try:
        for run in range(1, args.runs + 1):
            log_path = work / f"run-{run}.log"
            t0 = time.monotonic()
            with log_path.open("wb") as log:
                rc = subprocess.run(["make", "test"], cwd=clone, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    check=False).returncode
            took = time.monotonic() - t0
            failure = "" if rc == 0 else first_failure(log_path.read_text(errors="replace"))
            rows.append((run, "pass" if rc == 0 else f"FAIL ({rc})", took, failure))
            print(f"run {run}: {rows[-1][1]} in {took / 60:.1f} min {failure}", flush=True)
    finally:
        for p in loops:
            p.send_signal(signal.SIGTERM)
            p.wait()
    print("\n| run | result | time (min) | first failing test |\n|---:|---|---:|---|")
    for run, result, took, failure in rows:
        print(f"| {run} | {result} | {took / 60:.1f} | {failure or '-'} |")
    passed = sum(1 for r in rows if r[1] == "pass")
    print(f"\n{passed} of {len(rows)} runs green (load {args.load}, {head})")
    if not args.keep and passed == len(rows):
        shutil.rmtree(work, ignore_errors=True)
    return 0 if passed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
