#!/usr/bin/env bash
# An nsys run of the bundled workload and its torch twin, back to back in one lease (issue 46):
#   here:        bash bench/gpu_wheels.sh tests (→ .whl); apt-get download libdw1 libelf1 into .debs/
#   GPU machine: bash bench/gpu_nsys_pair.sh [suffix]   (carry .whl and .debs)
# Writes $OUT/runs.tar (both runs, without .ncu-rep files and raw traces) and each capture's log; the committed pair
# lives in tests/fixtures/nsys/ (the runs and their capture logs).
set -uo pipefail
cd "$(dirname "$0")/.."
suffix=${1:-}
source bench/gpu_env.sh || exit 1  # also unpacks the carried .debs (nsys's importer libraries)
nsys_id=h100-nsys-deepseek-ocr-2$suffix; torch_id=h100-nsys-twin-torch$suffix
rm -rf "data/runs/$nsys_id" "data/runs/$torch_id"
for pair in "$nsys_id:params/nsys.yaml" "$torch_id:params/nsys-twin-torch.yaml"; do
  id=${pair%%:*}; params=${pair#*:}
  start=$(date +%s.%N)
  timeout "${KB_CAPTURE_TIMEOUT:-280}" python -m kernelbook capture --params "$params" --out "data/runs/$id" > "$OUT/$id.log" 2>&1
  echo "$id rc=$? wall_s=$(python3 -c "print(round($(date +%s.%N) - $start, 1))")"
  grep -v "launches, " "$OUT/$id.log" | tail -6
done
tar --exclude='*.ncu-rep' --exclude='raw' -cf "$OUT/runs.tar" -C data/runs "$nsys_id" "$torch_id"
ls -la "$OUT"
