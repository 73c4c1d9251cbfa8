#!/usr/bin/env bash
# Tensor parallelism on a 2-GPU machine (nvidia-h200-x2): make DeepSeek-OCR-2's decoder as a checkpoint
# (bench/make_checkpoint.py deepseek-ocr2-decoder), then capture it on 1 GPU and with tensor_parallel: 2, at
# batch 1 and batch 8 (params/tp{1,2}-deepseek-decoder-b{1,8}.yaml): TP=2 at batch 1 with ncu per rank on the
# top-10 decode and prefill kernels, the others timeline only. Packs each run (no raw traces, no .ncu-rep) as
# $OUT/<run-id>.tar and the log as $OUT/gpu_tp.log.
# Usage: bash bench/gpu_tp.sh [gpu tag, default: from nvidia-smi] [runs, default "tp1-b1 tp2-b1 tp1-b8 tp2-b8"]
# (a run tp<N>-b<B>-nsys reads params/tp<N>-deepseek-decoder-b<B>-nsys.yaml: its timeline under Nsight Systems)
set -uo pipefail
export OUT=${OUT:-$PWD/bench/out/gpu_tp} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_tp.log") 2>&1
source bench/gpu_env.sh || exit 1
tag=${1:-}; tag=${tag:-$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -oiE 'h100|h200|a100|b200' | tr '[:upper:]' '[:lower:]')}
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.max.sm --format=csv
nvidia-smi topo -m | head -4
echo "== checkpoint ($SECONDS s)"
python3 bench/make_checkpoint.py deepseek-ocr2-decoder /tmp/ckpt/deepseek-ocr2-decoder || exit 1
for which in ${2:-tp1-b1 tp2-b1 tp1-b8 tp2-b8}; do
  tp=${which%%-*}; tp=${tp#tp}; rest=${which#tp$tp-}  # tp2-b1 → 2, b1; tp2-b1-nsys → 2, b1-nsys
  {
    id=$tag-deepseek-decoder-tp$tp-$rest
    echo "== capture $id ($SECONDS s)"
    python -m kernelbook capture --params params/tp$tp-deepseek-decoder-$rest.yaml --out data/runs/$id
    echo "exit $? ($SECONDS s)"
    [ -d data/runs/$id ] && tar --exclude='raw' --exclude='*.ncu-rep' -cf "$OUT/$id.tar" -C data/runs "$id"
    python3 -c "import json,sys; m=json.load(open('data/runs/$id/manifest.json')); t=m.get('timeline_info',{}); print('$id', m['status'], m.get('reason',''), {k: round(v,1) for k,v in m['timings_s'].items()}, 'plain', t.get('plain_phases',{}).get('decode')); [print('ncu rank', r, {p: (v['selected'], v['profiled'], v['results'], v['error']) for p, v in n.get('phases', {}).items()}, round(n.get('wall_s', 0), 1)) for r, n in m.get('ncu', {}).get('ranks', {}).items()]" 2>&1 | cut -c1-900
  }
done
echo "== done ($SECONDS s)"
