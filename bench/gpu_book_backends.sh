#!/usr/bin/env bash
# The bundled workload's GPU book with each timeline backend, back to back in one lease (issue 46's target: the book
# with nsys no slower than with the torch profiler):
#   here:        bash bench/gpu_wheels.sh tests (→ .whl); apt-get download libdw1 libelf1 into .debs/; move the
#                committed raw traces (data/runs/*/raw/trace.json.gz) aside for the call (the 64 MiB limit)
#   GPU machine: bash bench/gpu_book_backends.sh   (carry .whl and .debs)
# Each renders `python -m kernelbook book --params params/<nsys|nsys-twin-torch>.yaml` into a new run; writes
# $OUT/book-<backend>.log and $OUT/book_backends.json (each book's wall seconds and its stages').
# KB_BOOK_ORDER=nsys-first: the nsys book first, and the torch one only where it succeeded.
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh >/dev/null || exit 1
# both books start with warm file caches: the imports, and the CUDA libraries a first GEMM, convolution and
# attention load
python3 -c "
import torch, transformers, kernelbook.capture.torch_backend
x = torch.randn(1, 64, 32, 32, device='cuda', dtype=torch.bfloat16)
torch.nn.functional.conv2d(x, torch.randn(64, 64, 3, 3, device='cuda', dtype=torch.bfloat16))
q = torch.randn(1, 8, 128, 64, device='cuda', dtype=torch.bfloat16)
torch.nn.functional.scaled_dot_product_attention(q, q, q)
(x.flatten(0, 2) @ x.flatten(0, 2).T).sum().item()"
pairs=("torch:params/nsys-twin-torch.yaml" "nsys:params/nsys.yaml")
[ "${KB_BOOK_ORDER:-}" = nsys-first ] && pairs=("nsys:params/nsys.yaml" "torch:params/nsys-twin-torch.yaml")
for pair in "${pairs[@]}"; do
  b=${pair%%:*}; params=${pair#*:}
  rm -rf "data/runs/book-$b" "reports/book-$b"
  start=$(date +%s.%N)
  timeout "${KB_BOOK_TIMEOUT:-290}" python -m kernelbook book --params "$params" --run "data/runs/book-$b" \
    --out "reports/book-$b" > "$OUT/book-$b.log" 2>&1
  rc=$?
  echo "$b rc=$rc wall_s=$(python3 -c "print(round($(date +%s.%N) - $start, 1))")" | tee -a "$OUT/walls.txt"
  grep -v "launches, " "$OUT/book-$b.log" | grep -v "^\s" | tail -14
  [ $rc -ne 0 ] && [ "${KB_BOOK_ORDER:-}" = nsys-first ] && { tail -40 "$OUT/book-$b.log"; break; }
done
python3 - "$OUT" <<'PY'
import json, re, sys
out = sys.argv[1]
walls = dict(re.match(r"(\w+) rc=(\d+) wall_s=([\d.]+)", l).group(1, 3) for l in open(f"{out}/walls.txt"))
res = {b: {"wall_s": float(w), "stages_s": json.load(open(f"data/runs/book-{b}/manifest.json")).get("timings_s")}
       for b, w in walls.items()}
json.dump(res, open(f"{out}/book_backends.json", "w"), indent=1)
print(json.dumps(res, indent=1))
PY
