#!/usr/bin/env bash
# The GPU test suite (tests/gpu, issue 45) on a GPU machine with Nsight Compute:
#   here:        bash bench/gpu_wheels.sh tests              → .whl/wheels.tar.xz (carried as .whl)
#   GPU machine: bash bench/gpu_tests.sh [name] [pytest args]
# Runs `python -m pytest -m gpu tests/gpu` and writes to $OUT (bench/out/gpu-tests elsewhere): <name>.xml (junit),
# <name>.log (pytest's output) and <name>.json (each test's outcome, the captures' wall times, the whole run's wall
# time, the GPU). `KB_GPU_TEST_BREAK=graph-node bash bench/gpu_tests.sh broken -k graph` breaks the graph path on
# purpose (tests/gpu/conftest.py): the suite must then fail.
set -uo pipefail
cd "$(dirname "$0")/.."
name=${1:-gpu-tests}; shift || true
out=${OUT:-bench/out/gpu-tests}; mkdir -p "$out"
source bench/gpu_env.sh || exit 1
device=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)
ncu_version=$(ncu --version | tail -1)
export KB_GPU_TESTS_RECORD=/tmp/$name.captures.jsonl
rm -f "$KB_GPU_TESTS_RECORD"
# an interrupt (timeout -s INT, Ctrl-C) stops pytest, which still writes its junit file; the summary follows
trap 'echo "$name: interrupted"' INT
start=$(date +%s.%N)
python -m pytest -m gpu tests/gpu -p no:cacheprovider -o junit_family=xunit1 -rA --junitxml "$out/$name.xml" "$@" 2>&1 | tee "$out/$name.log"
rc=${PIPESTATUS[0]}
end=$(date +%s.%N)
python3 - "$out/$name.xml" "$KB_GPU_TESTS_RECORD" "$rc" "$start" "$end" "$device" "$ncu_version" "$*" \
  > "$out/$name.json" <<'EOF'
import json, sys, xml.etree.ElementTree as ET
from pathlib import Path

xml, captures, rc, start, end, device, ncu, args = sys.argv[1:]
tests = []
for case in ET.parse(xml).getroot().iter("testcase"):
    outcome, message = "passed", None
    for tag in ("failure", "error", "skipped"):
        el = case.find(tag)
        if el is not None:
            kind = el.get("type") or ""
            outcome = {"failure": "failed", "error": "error"}.get(tag, "xfailed" if "xfail" in kind else "skipped")
            message = (el.get("message") or "")[:300]
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    tests.append({"test": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome,
                  "time_s": round(float(case.get("time") or 0), 1), **({"message": message} if message else {}),
                  **({"measured": props} if props else {})})
counts = {}
for t in tests:
    counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
p = Path(captures)
print(json.dumps({"command": f"python -m pytest -m gpu tests/gpu {args}".strip(), "exit_code": int(rc),
                  "wall_s": round(float(end) - float(start), 1), "device": device, "ncu": ncu,
                  "outcomes": counts, "tests": tests,
                  "captures": [json.loads(l) for l in p.read_text().splitlines()] if p.exists() else []}, indent=1))
EOF
echo "$name: exit $rc, $(python3 -c "print(round($end - $start, 1))") s on $device; summary in $out/$name.json"
exit "$rc"
