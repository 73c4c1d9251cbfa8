#!/usr/bin/env bash
# Run a study on a GPU machine and pack what comes back: bash bench/gpu_study.sh <study-id> [study yaml] [args...]
# (further args go to `kernelbook study`, e.g. --gpus 0,1 or --point 2). The study lands under
# data/studies/<study-id>; $OUT/study.tar.xz holds it without .ncu-rep files and raw traces; $OUT/study.log its
# output. A rerun of the same command resumes: bring the packed study back first (tar -xJf into data/studies).
set -uo pipefail
id=${1:?study id}; spec=${2:-params/study-serving.yaml}; shift $(( $# >= 2 ? 2 : $# ))
source bench/gpu_env.sh || exit 1
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
/usr/bin/time -v timeout "${KB_STUDY_TIMEOUT:-86400}" python -m kernelbook study --params "$spec" --out "data/studies/$id" "$@" 2>&1 | tee "$OUT/study.log"
tar --exclude='*.ncu-rep' --exclude='raw' -cJf "$OUT/study.tar.xz" -C data/studies "$id"
ls -la "$OUT"
