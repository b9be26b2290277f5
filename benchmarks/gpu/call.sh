#!/usr/bin/env bash
# The prepared GPU call, as the GPU machine runs it from the repository root with the
# wheels from wheels.sh in .whl/: install them beside the image's packages, then run the
# suite with every table, the job's report and the log written under $OUT (the only
# folder whose files come back).  SECTIONS, VARIANTS and BUDGET override the defaults;
# the defaults fit in 5 minutes on a 16-core GPU host, so that a rerun fits too.  WHEELS
# names another folder of wheels (the rehearsal in make test brings its own).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:?set OUT to the folder whose files come back}"
site="${SITE:-/tmp/site}"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$site" "${WHEELS:-.whl}"/*.whl || exit
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu \
    --format=csv 2>&1 || true
  python3 benchmarks/gpu/suite.py --out "$out" --budget "${BUDGET:-280}" \
    --sections "${SECTIONS:-walk,job,throughput,e2e}" --variants "${VARIANTS:-fused}" "$@"
} 2>&1 | tee "$out/gpu_log.txt"
