#!/usr/bin/env bash
# One shot on a GPU machine with no hub access: make a random-weight image-text checkpoint with its offline
# processor (bench/make_checkpoint.py), check its inputs, then capture it (bench/gpu_capture.sh).
# Usage: bash bench/gpu_vlm.sh <llava|gemma3> [run-id]   (run-id default: <family>-<gpu>, e.g. llava-h100)
# Writes /tmp/ckpt/<family>, data/runs/<run-id> and, under $OUT, what gpu_capture.sh packs plus make_checkpoint.log.
set -euo pipefail
fam=${1:?usage: bash bench/gpu_vlm.sh <llava|gemma3> [run-id]}
params=params/$fam-local.yaml
ckpt=/tmp/ckpt/$fam
die() { echo "gpu_vlm.sh: FAILED: $*" >&2; exit 1; }
step() { echo; echo "== gpu_vlm.sh [$1] $2 ($SECONDS s)"; }
[ -f "$params" ] || die "no $params (families: llava, gemma3)"
export OUT=${OUT:-$PWD/bench/out/gpu_vlm} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
mkdir -p "$OUT"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) || die "nvidia-smi: no GPU"
tag=$(echo "$gpu" | grep -oiE 'h100|h200|a100|b200|l40s|l4' | head -1 | tr '[:upper:]' '[:lower:]')
id=${2:-$fam-${tag:-gpu}}
[ -e "data/runs/$id" ] && die "data/runs/$id exists (captures never overwrite): give another run-id"
echo "family $fam, params $params, checkpoint $ckpt, run data/runs/$id, GPU $gpu"

step 1/4 "environment (bench/gpu_env.sh)"
source bench/gpu_env.sh || die "bench/gpu_env.sh"
python3 - <<'PY' || die "torch, transformers or torchvision (see above)"
import importlib.util as u
import torch, transformers
print("torch", torch.__version__, "cuda", torch.version.cuda, "| transformers", transformers.__version__,
      "| accelerate", "yes" if u.find_spec("accelerate") else "no", end=" | torchvision ")
if u.find_spec("torchvision") is None:
    print("no (image processors: the PIL ones)")
else:  # present, transformers picks the torchvision image processors: one that does not import breaks them
    try:
        import torchvision
        print(torchvision.__version__)
    except Exception as e:
        raise SystemExit(f"installed but does not import ({type(e).__name__}: {e}); transformers would take its "
                         "image processors and fail: uninstall it or install the one built for this torch")
assert torch.cuda.is_available(), "torch sees no GPU"
PY

step 2/4 "checkpoint $ckpt (bench/make_checkpoint.py $fam)"
rm -rf "$ckpt"
python3 bench/make_checkpoint.py "$fam" "$ckpt" 2>&1 | tee "$OUT/make_checkpoint.log" || die "make_checkpoint.py $fam"
ls -la "$ckpt" | tee -a "$OUT/make_checkpoint.log"
du -sh "$ckpt"

step 3/4 "inputs from config + processor on the CPU (what capture checks first)"
python3 - "$params" <<'PY' || die "the inputs of $ckpt cannot be built (see above)"
import sys
from kernelbook import params as P
from kernelbook.capture.workload import check_inputs
d = check_inputs(P.load(sys.argv[1], consumer="capture"))
print({k: d[k] for k in ("prompt_tokens", "image_tokens_per_prompt", "inputs_built_with", "images")})
PY

step 4/4 "capture (bench/gpu_capture.sh $id $params)"
bash bench/gpu_capture.sh "$id" "$params" || die "gpu_capture.sh exit $? (see $OUT/capture.log)"
# gpu_capture.sh itself does not stop on a failed capture: the manifest says how it ended
python3 - "data/runs/$id" <<'PY' || die "capture of $id did not complete: see $OUT/capture.log"
import json, sys
m = json.load(open(f"{sys.argv[1]}/manifest.json"))
info = m.get("timeline_info", {})
print("status", m["status"], m.get("reason", ""), "| timings_s", {k: round(v, 1) for k, v in m["timings_s"].items()})
print("model", info.get("model_class"), info.get("n_params"), "params | vision forwards", info.get("vision_forwards_marked"),
      "| inputs", {k: info.get("inputs", {}).get(k) for k in ("prompt_tokens", "image_tokens_per_prompt")})
for ph, v in m.get("ncu", {}).get("phases", {}).items():
    print("ncu", ph, {k: v.get(k) for k in ("selected", "profiled", "results", "error") if k in v})
sys.exit(0 if m["status"] == "complete" else 1)
PY
echo; echo "gpu_vlm.sh: $fam captured into data/runs/$id in $SECONDS s; packed under $OUT"
