#!/usr/bin/env bash
# Nsight Systems on a GPU machine (issue 46): whether nsys_works() finds nsys and its importer's libraries, before and
# after the carried libdw1/libelf1 .debs are unpacked (here: apt-get download libdw1 libelf1 into .debs/, carried as
# .debs), then a tiny real capture (a CUDA matmul loop with NVTX prefill/decode ranges) exported to sqlite and read
# by the project's reader. Writes $OUT/tiny.sqlite and $OUT/nsys_check.log.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bench/out/nsys}; mkdir -p "$out"
export PYTHONPATH=$PWD/lib${PYTHONPATH:+:$PYTHONPATH}
works='from kernelbook.capture.nsys import nsys_works; print(nsys_works())'
{
echo "without the .debs: $(python3 -c "$works")"
mkdir -p /tmp/kb-debs && for f in .debs/*.deb; do dpkg -x "$f" /tmp/kb-debs; done
export LD_LIBRARY_PATH=/tmp/kb-debs/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
echo "with the .debs: $(python3 -c "$works")"
nsys=$(python3 -c 'from kernelbook.capture.nsys import find_nsys; print(find_nsys())')
cat > /tmp/kb-tiny.py <<'PY'
import torch
a = torch.randn(1024, 1024, device="cuda")
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
torch.cuda.nvtx.range_push("prefill"); b = a @ a; torch.cuda.nvtx.range_pop()
for _ in range(3):
    torch.cuda.nvtx.range_push("decode"); c = (a @ b).relu(); d = c[:1].cpu(); torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
PY
start=$(date +%s.%N)
"$nsys" profile -t cuda,nvtx -s none --cpuctxsw=none --capture-range=cudaProfilerApi --capture-range-end=stop \
  -o /tmp/kb-tiny --force-overwrite true python3 /tmp/kb-tiny.py
echo "nsys profile exit $? in $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s"
"$nsys" export --type sqlite --force-overwrite true -o "$out/tiny.sqlite" /tmp/kb-tiny.nsys-rep
echo "nsys export exit $?"
python3 - "$out/tiny.sqlite" <<'PY'
import sys
from kernelbook.capture.nsys import read_nsys_sqlite
tl, phases = read_nsys_sqlite(sys.argv[1])
print(tl.groupby("kind").size().to_dict())
cols = [c for c in ("name", "kind", "duration_ns", "phase", "step") if c in tl]
print(tl[cols].to_string())
print(phases.to_string())
PY
ls -la "$out"
} 2>&1 | tee "$out/nsys_check.log"
