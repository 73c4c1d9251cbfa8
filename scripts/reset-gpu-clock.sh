#!/usr/bin/env bash
# Undo scripts/lock-gpu-clock.sh: let GPU 0's clocks float again.
set -euo pipefail
gpu=${KERNELBOOK_GPU:-0}
nvidia-smi -i "$gpu" -rgc
echo "GPU $gpu clocks reset"
