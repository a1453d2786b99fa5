#!/usr/bin/env bash
# `dsv4-patch export STACK --check` for every stack that has a patched tree under build/.
# A stack without a tree has nothing to compare and is skipped (say so, do not hide it).
set -u
cd "$(git rev-parse --show-toplevel)"
rc=0
for series in patches/*/series; do
  stack=$(basename "$(dirname "$series")")
  if [ -d "build/$stack/.git" ]; then
    dsv4-patch export "$stack" --check || rc=1
  else
    echo "export-check: no build/$stack tree (run \`dsv4-patch apply $stack\`); skipped"
  fi
done
exit $rc
