#!/usr/bin/env bash
# The book captures and renders in one command on a GPU machine: bash bench/gpu_book.sh <run-id> [params]
# Needs the book's wheels (bash bench/gpu_wheels.sh book, carried as .whl). Writes data/runs/<run-id> and
# reports/<run-id>, then to $OUT: run.tar (the run without .ncu-rep files and raw traces), report.tar (the
# rendered HTML), the timed pass's raw trace, book.log and the wall time of the whole command.
set -uo pipefail
id=${1:?run id}; params=${2:-params/default.yaml}
source bench/gpu_env.sh || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
start=$(date +%s.%N)
python -m kernelbook book --params "$params" --run "data/runs/$id" --out "reports/$id" 2>&1 | tee "$OUT/book.log"
rc=${PIPESTATUS[0]}
end=$(date +%s.%N)
echo "{\"command\": \"python -m kernelbook book --params $params --run data/runs/$id --out reports/$id\", \"rc\": $rc, \"wall_s\": $(python3 -c "print(round($end - $start, 1))")}" | tee "$OUT/book_wall.json"
tar --exclude='*.ncu-rep' --exclude='raw' -cf "$OUT/run.tar" -C data/runs "$id"
cp "data/runs/$id/raw/trace.json.gz" "$OUT/" 2>/dev/null
tar -cf "$OUT/report.tar" -C reports "$id" 2>/dev/null || tar -cf "$OUT/report.tar" -C reports "$id.failed"
