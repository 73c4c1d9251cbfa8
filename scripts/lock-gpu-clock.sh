#!/usr/bin/env bash
# Lock GPU 0's SM clock to its maximum for stable profiling. For your own machine only: never on a
# shared GPU host. Needs root (or nvidia-smi permission). Undo with scripts/reset-gpu-clock.sh.
set -euo pipefail
gpu=${KERNELBOOK_GPU:-0}
max=$(nvidia-smi -i "$gpu" --query-gpu=clocks.max.sm --format=csv,noheader,nounits | head -1)
nvidia-smi -i "$gpu" -pm 1 >/dev/null
nvidia-smi -i "$gpu" -lgc "$max,$max"
echo "GPU $gpu SM clock locked at $max MHz"
