#!/usr/bin/env bash
# Capture a run on a GPU machine and pack what comes back: bash bench/gpu_capture.sh <run-id> [params]
# Writes the run under data/runs/<run-id>, then $OUT/run.tar (run without .ncu-rep files and raw traces),
# the raw traces (*.json.gz) and the logs.
set -uo pipefail
id=${1:?run id}; params=${2:-params/default.yaml}
source bench/gpu_env.sh || exit 1  # the carried wheels (bench/gpu_wheels.sh): ncu-report, orjson
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
ncu --version | tail -1 | tee -a "$OUT/gpu.txt"
# KB_CAPTURE_TIMEOUT: the capture itself gets SIGTERM then, lands partial with its reason, and is still packed
/usr/bin/time -v timeout "${KB_CAPTURE_TIMEOUT:-86400}" python -m kernelbook capture --params "$params" --out "data/runs/$id" 2>&1 | tee "$OUT/capture.log"
# the raw traces travel beside the tar (each file that comes back must stay under 16 MiB)
tar --exclude='*.ncu-rep' --exclude='raw' -cf "$OUT/run.tar" -C data/runs "$id"
cp "data/runs/$id"/raw/*.gz "$OUT/" 2>/dev/null
ls -la "data/runs/$id" "data/runs/$id"/* | tee -a "$OUT/capture.log" >/dev/null
