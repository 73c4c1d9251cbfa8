#!/usr/bin/env bash
# GPU machine (carry .whl and .debs): the one-process nsys probe (bench/nsys_one_process_probe.py), three ways.
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh >/dev/null || exit 1
nsys=$(python3 -c 'from kernelbook.capture.nsys import find_nsys; print(find_nsys())')
p=bench/nsys_one_process_probe.py
python3 $p bare
for end in stop repeat; do
  rm -rf /tmp/probe-$end*; start=$(date +%s.%N)
  "$nsys" profile -t cuda,nvtx -s none --cpuctxsw=none --capture-range=cudaProfilerApi --capture-range-end=$end \
    -o /tmp/probe-$end --force-overwrite true python3 $p $end 2>&1 | grep -v "^Collecting\|^Generating\|^Processing" | tail -12
  echo "nsys $end: $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s; files: $(ls /tmp/probe-$end* | tr '\n' ' ')"
  for f in /tmp/probe-$end*.nsys-rep; do
    "$nsys" export --type sqlite --force-overwrite true -o "${f%.nsys-rep}.sqlite" "$f" >/dev/null 2>&1
    python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print(sys.argv[1], c.execute('select count(*) from CUPTI_ACTIVITY_KIND_KERNEL').fetchone())" "${f%.nsys-rep}.sqlite"
  done
done
# the two window reports of the repeat run: the fixture of tests/test_nsys.py's sampled reader
for f in /tmp/probe-repeat.*.sqlite; do cp "$f" "${OUT:-/tmp}/windows-h100.$(basename "$f" | cut -d. -f2).sqlite"; done
