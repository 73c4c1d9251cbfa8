#!/usr/bin/env bash
# The bundled run by the book, then variants, on one machine in one call (GPU machine), so that chapter 07
# sets plain timings taken on the same host against each other (plain generate is host-bound: one H100 lease
# ran the baseline's plain generate in 1.49 s, another in 1.10 s).
#   bash bench/gpu_book_variants.sh <suffix> [variant-name ...]     (variant names: params/variant-<name>.yaml)
# Writes data/runs/h100-book-<suffix> and data/runs/h100-variant-<name>-<suffix>; to $OUT: book/ (run.tar,
# the raw trace, book.log, book_wall.json), <name>/run.tar for each variant, and capture.log (every step).
set -uo pipefail
suffix=${1:?suffix}; shift
root=$OUT
mkdir -p "$root/book"
OUT=$root/book bash bench/gpu_book.sh "h100-book-$suffix" >"$root/capture.log" 2>&1
rm -f "$root/book/report.tar" "$root/book/gpu.txt"
grep -v "launches, \|^==PROF==" "$root/capture.log" | tail -14
for name in "$@"; do
  mkdir -p "$root/$name"
  t=$(date +%s)
  OUT=$root/$name bash bench/gpu_capture.sh "h100-variant-$name-$suffix" "params/variant-$name.yaml" \
    2>&1 | grep -v "launches, \|^==PROF==" >>"$root/capture.log"
  rm -f "$root/$name"/*.gz "$root/$name/gpu.txt" "$root/$name/capture.log"
  echo "variant $name: $(( $(date +%s) - t )) s, $(ls "$root/$name")"
done
