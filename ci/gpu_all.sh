#!/usr/bin/env bash
# Every GPU-marked test of the project, on a CUDA machine (the lent H200), in one call:
#   1. for each release of each stack named (STACK@TAG; default: every release in patches/stacks.toml),
#      `dsv4-patch regress LABEL -m gpu --record gpu --hardware $GPU_NAME`: the patches' GPU-bound tests
#      on the patched tree, recorded for `status --matrix` (results name the test code they ran:
#      the matrix flags them `?hw` once that code changes);
#   2. every other test file with a `gpu` mark (tests/kernels, kernels/), one pytest per file;
#   3. one log per test file and per release (and one for collecting the step-2 files: a file that fails
#      to import there is a failed row, not a file nobody ran), and gpu-run.json: the commit, the device, and per file
#      its outcome counts and the sha256 of the file it ran.
# Everything lands in $OUT (default build/gpu-run); gpu-run.tar.gz holds the logs and the new result
# files (unpack it in the checkout: `tar -xzf gpu-run.tar.gz` puts them under patches/*/results/).
#
# Upstream archives: the tool's cache (DSV4_PATCH_CACHE) must hold the pinned sdists/wheels where the
# machine reaches no registry: copy them into "$DSV4_PATCH_CACHE/archives/" first. GPU_COMMIT names the
# commit the tree is (the device's copy has no .git); GPU_LABELS="vllm@v0.34.0 sglang" narrows step 1;
# GPU_SKIP_REGRESS=1 skips step 1 (kernel test files only: no upstream archives needed); GPU_SKIP_FILES=1
# skips step 2. Exit status: 0 when every step passed and each ran at least one
# test that passed (all skipped is not green on a GPU machine), 1 otherwise (each step still runs).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu-run}
PY=${PYTHON:-python3}
GPU_NAME=${GPU_NAME:-H200}
mkdir -p "$OUT/logs"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
commit=${GPU_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$OUT/logs/gpu.txt" 2>&1
touch "$OUT/.start"
rc=0
labels=
[ -z "${GPU_SKIP_REGRESS:-}" ] && labels=${GPU_LABELS:-$($PY - <<'EOF'
from dsv4_patch.config import load_project
print(" ".join(c.selector for c in load_project(".").targets(None, None)))  # one release each (a bare "vllm" is all)
EOF
)}
summary="$OUT/logs/summary.tsv"
: >"$summary"
for label in $labels; do
  log="$OUT/logs/regress-${label//[^A-Za-z0-9._-]/_}.log"
  echo "== regress $label -m gpu" | tee "$log"
  $PY -m tools.applypatch regress "$label" -m gpu --record gpu --hardware "$GPU_NAME" >>"$log" 2>&1
  r=$?
  [ $r -ne 0 ] && rc=1
  printf 'regress\t%s\t%s\n' "$label" "$r" >>"$summary"
  tail -n 3 "$log"
done
if [ -z "${GPU_SKIP_FILES:-}" ]; then
  # Test files with a gpu mark that no patch binds (regress ran those): the kernels' own GPU tests.
  # A file that cannot be collected here (an import that fails on this machine only) is listed by
  # nobody: its error is a row of its own (no test passed in it: exit 1), never a silent gap.
  collect_log="$OUT/logs/collect-gpu-files.log"
  $PY -m pytest -q --collect-only -m gpu -p no:cacheprovider tests/kernels kernels >"$collect_log" 2>&1
  r=$?
  if [ $r -ne 0 ] && [ $r -ne 5 ]; then
    rc=1
    printf 'collect\t%s\t%s\n' "gpu-files" "$r" >>"$summary"
    echo "collecting the GPU test files failed (exit $r): $(grep -m 3 -E '^(ERROR|E ) ' "$collect_log" | tr '\n' ' ')"
  fi
  files=$(grep '::' "$collect_log" | cut -d: -f1 | sort -u)
  for f in $files; do
    log="$OUT/logs/pytest-${f//[^A-Za-z0-9._-]/_}.log"
    DSV4_TEST_WORKERS=0 $PY -m pytest -q -m gpu -p no:cacheprovider -rs "$f" >"$log" 2>&1
    r=$?
    [ $r -ne 0 ] && [ $r -ne 5 ] && rc=1
    printf 'pytest\t%s\t%s\n' "$f" "$r" >>"$summary"
    echo "$f: exit $r: $(tail -n 1 "$log")"
  done
fi
# An all-skipped file or release is not green on a GPU machine: nothing ran there (exit 1).
$PY - "$OUT" "$commit" "$GPU_NAME" <<'EOF' || rc=1
import hashlib, json, pathlib, re, sys
out, commit, gpu = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
runs = []
for line in (out / "logs" / "summary.tsv").read_text().splitlines():
    kind, what, rc = line.split("\t")
    log = out / "logs" / (f"{kind}-" + re.sub(r"[^A-Za-z0-9._-]", "_", what) + ".log")
    text = log.read_text(errors="replace") if log.exists() else ""
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|error|errors|deselected)", text)}
    entry = {"kind": kind, "what": what, "exit": int(rc), "counts": counts, "log": log.name}
    if kind == "pytest" and pathlib.Path(what).is_file():
        entry["sha256"] = hashlib.sha256(pathlib.Path(what).read_bytes()).hexdigest()
    runs.append(entry)
device = (out / "logs" / "gpu.txt").read_text().strip().splitlines()[-1:] if (out / "logs" / "gpu.txt").exists() else []
(out / "gpu-run.json").write_text(json.dumps({"commit": commit, "hardware": gpu, "device": device, "runs": runs},
                                             indent=2) + "\n")
idle = [r["what"] for r in runs if not r["counts"].get("passed")]
for r in runs:
    print(f"{r['kind']:8} {r['what']:60} exit {r['exit']}  {r['counts']}" + ("  NOTHING PASSED" if r["what"] in idle else ""))
sys.exit(1 if idle else 0)
EOF
# New result files (newer than the start) and the logs, in one archive that comes back whole.
find patches -path '*/results/*.json' -newer "$OUT/.start" >"$OUT/new-results.txt"
tar -czf "$OUT/gpu-run.tar.gz" -T "$OUT/new-results.txt" -C "$OUT" logs gpu-run.json 2>/dev/null \
  || tar -czf "$OUT/gpu-run.tar.gz" -C "$OUT" logs gpu-run.json
exit $rc
