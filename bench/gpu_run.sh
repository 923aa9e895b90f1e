#!/usr/bin/env bash
# On a lent GPU, from the repository root with .gpu/ carried (../shared/gpu/prep.sh fills it):
# fairseq's wheels into .gpu/site (its rows are skipped without them), then bench/gpu_run.py with
# the image's python3 (arguments pass through). gpu_run.json, gpu_run.md and gpu_run.log land in
# $OUT (default bench/results).
set -uo pipefail
export PYTHONUNBUFFERED=1
out=${OUT:-bench/results}
mkdir -p "$out"
if ls .gpu/whl/*.whl >/dev/null 2>&1 && [ ! -d .gpu/site/fairseq ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target .gpu/site \
    .gpu/whl/*.whl >"$out/pip.log" 2>&1 || echo "gpu_run.sh: fairseq's wheels did not install ($out/pip.log)"
fi
PYTHONPATH=.gpu/site:. python3 bench/gpu_run.py --out "$out" "$@" 2>&1 | tee "$out/gpu_run.log"
