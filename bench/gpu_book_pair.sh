#!/usr/bin/env bash
# The GPU book of an earlier revision against this tree's, back to back in one lease (issue 30):
#   here:        bash bench/gpu_book_pair.sh prepare <rev>     → bench/out/old (that revision's tree, no runs)
#   GPU machine: bash bench/gpu_book_pair.sh old; bash bench/gpu_book_pair.sh new
# Each renders `python -m kernelbook book --params params/default.yaml` into a new run and writes
# $OUT/<old|new>/{book.log,wall.txt,manifest.json}. The old tree reads this tree's committed runs (symlinks) for
# the runs its parameters name. Needs the book's wheels (bash bench/gpu_wheels.sh book) carried as .whl, with
# bench/out: the working tree and what is carried must stay under the device's 64 MiB, so leave debugpy and
# jedi out of .whl (ipykernel and IPython run without them) and move the committed raw traces aside for the call.
set -u
which=${1:?prepare <rev> | old | new}
if [ "$which" = prepare ]; then
  rm -rf bench/out/old && mkdir -p bench/out/old/data/runs
  git archive "${2:?revision}" | tar -x -C bench/out/old --exclude='data/runs' --exclude='reports' --exclude='tests' --exclude='docs'
  exit
fi
if [ "$which" = old ]; then
  for r in data/runs/*; do ln -sfn "$PWD/$r" "bench/out/old/$r"; done
  cd bench/out/old; export KB_WHEELS=../../../.whl
fi
source bench/gpu_env.sh >/dev/null || exit 1
mkdir -p "$OUT/$which"
start=$(date +%s.%N)
python -m kernelbook book --params params/default.yaml --run "data/runs/gpu-$which" --out "reports/gpu-$which" > "$OUT/$which/book.log" 2>&1
rc=$?
end=$(date +%s.%N)
echo "$which rc=$rc wall_s=$(python3 -c "print(round($end - $start, 1))")" | tee "$OUT/$which/wall.txt"
cp "data/runs/gpu-$which/manifest.json" "$OUT/$which/" 2>/dev/null
grep -v "launches, " "$OUT/$which/book.log" | tail -40
