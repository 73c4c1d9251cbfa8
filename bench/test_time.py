"""Wall time of the README's test command's pytest, per test file and per test (where the minutes go).

Runs `python -m pytest -q tests` (extra arguments are passed on) with a JUnit XML report, then sums the
time of each file's tests (setup, call and teardown; a session fixture's time lands on the test that first
asks for it). Writes bench/out/test_time<-label>.json and prints the files by time and the slowest tests.

Usage: python bench/test_time.py [--label before] [pytest args...]   (target: ≤ 8 min on the 2-core CI machine)
"""
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

from _common import ROOT, save_json


def main(argv: list[str]) -> None:
    label = ""
    if "--label" in argv:
        i = argv.index("--label")
        label, argv = argv[i + 1], argv[:i] + argv[i + 2:]
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        t = time.perf_counter()
        rc = subprocess.call([sys.executable, "-m", "pytest", "-q", "tests", f"--junitxml={xml}", *argv], cwd=ROOT)
        wall = time.perf_counter() - t
        cases = ET.parse(xml).getroot().iter("testcase")
        tests = [{"file": c.get("classname", "").split(".")[-1] + ".py", "test": c.get("name"),
                  "seconds": float(c.get("time", 0)),
                  "outcome": "skipped" if c.find("skipped") is not None else
                  "failed" if c.find("failure") is not None or c.find("error") is not None else "passed"}
                 for c in cases]
    files = defaultdict(float)
    for r in tests:
        files[r["file"]] += r["seconds"]
    by_file = sorted(({"file": f, "seconds": round(s, 1)} for f, s in files.items()), key=lambda r: -r["seconds"])
    outcomes = {k: sum(r["outcome"] == k for r in tests) for k in ("passed", "failed", "skipped")}
    path = save_json("test_time" + (f"-{label}" if label else ""),
                     {"wall_s": round(wall, 1), "exit_code": rc, **outcomes, "files": by_file,
                      "slowest": sorted(tests, key=lambda r: -r["seconds"])[:30]})
    for r in by_file:
        print(f"{r['seconds']:8.1f} s  {r['file']}")
    print(f"pytest wall {wall:.1f} s (target ≤ 480 s); {outcomes}; exit {rc} → {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
