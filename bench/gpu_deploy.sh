#!/usr/bin/env bash
# Deployment-shaped captures on a GPU machine (issue 27), each packed by bench/gpu_capture.sh into $OUT/<name>/:
#   bash bench/gpu_deploy.sh <suffix> <name>:<params.yaml>[:max_new_tokens] ...
# e.g. static:params/variant-static-graphs.yaml  long256:params/long-generation.yaml:256
# A run id is h100-<name>-<suffix>; with a third field the params file is copied with that max_new_tokens.
# Each capture gets SIGTERM after KB_CAPTURE_TIMEOUT s (default 560): it lands partial and is still packed.
set -uo pipefail
suffix=${1:?suffix}; shift
root=$OUT
for spec in "$@"; do
  IFS=: read -r name params tokens <<<"$spec"
  mkdir -p "$root/$name"
  if [ -n "${tokens:-}" ]; then
    sed "s/^max_new_tokens: .*/max_new_tokens: $tokens/" "$params" > "/tmp/$name.yaml"; params=/tmp/$name.yaml
  fi
  t=$(date +%s)
  OUT=$root/$name KB_CAPTURE_TIMEOUT=${KB_CAPTURE_TIMEOUT:-560} bash bench/gpu_capture.sh "h100-$name-$suffix" "$params" \
    2>&1 | grep -v "launches, \|^==PROF==" > "$root/$name/capture.log"
  rm -f "$root/$name"/*.gz
  echo "$name: $(( $(date +%s) - t )) s; $(grep -E 'Maximum resident|capture complete|stopped|Error' "$root/$name/capture.log" | head -3)"
done
