#!/usr/bin/env bash
# The prepared GPU check (issue 33), for the first GPU at hand: an H100 or H200, one chip.
#
#   bash validation/gpu/run.sh OUTDIR
#
# In at most 7 minutes (so it can be rerun once in a 15-minute window), each step bounded:
#   1. the CUDA tests (pytest -m cuda: every schedule through NCCL-free CUDA paths and green-
#      context lanes, gradients equal to unpipelined);
#   2. the partitioned validation quick suite (pipesim validate --suite quick --backend
#      cuda-partitioned: one GPU cut into 4 green-context lanes; K = 1, 2, 4; GPipe, 1F1B,
#      interleaved 1F1B, ZB-H1; M = 4, 8), its measurements kept as they finish;
#   3. the layer timing of 2104.04473's Table 1 blocks (python -m validation.layer_timing).
# It writes under OUTDIR, in the formats --reuse and --report read (at most 8 files, the
# device tool's limit):
#   OUTDIR/partitioned/measured-<case>.json   pipesim validate --reuse --out OUTDIR/partitioned
#   OUTDIR/layers.json                        python -m validation.layer_timing --report
#   OUTDIR/cuda-tests.log, OUTDIR/summary.txt
# and prints the summary table. Wheels carried in .whl (validation/gpu/fetch_wheels.sh) are
# installed first; a missing package or no CUDA device is refused in one line, exit 2.
set -uo pipefail
out=${1:-}
if [ -z "$out" ]; then
    echo "usage: bash validation/gpu/run.sh OUTDIR" >&2
    exit 2
fi
out=$(mkdir -p "$out" && cd "$out" && pwd) || { echo "run.sh: cannot make OUTDIR $1" >&2; exit 2; }
cd "$(dirname "$0")/../.."
root=$PWD
site=/tmp/pipesim-gpu-site
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" .whl/*.whl >/dev/null || { echo "run.sh: installing .whl failed" >&2; exit 2; }
    export PYTHONPATH="$site:$root"
else
    export PYTHONPATH="$root"
fi
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=ci MPLBACKEND=Agg
python3 -m validation.gpu.preflight || exit 2
began=$SECONDS
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== 1/3 CUDA tests (at most 90 s)"
timeout -s INT 90 python3 -m pytest -q -m cuda -p no:cacheprovider -o addopts="" \
    tests/executor/test_cuda.py tests/executor/test_concurrent.py tests/validation/test_layer_timing.py \
    >"$out/cuda-tests.log" 2>&1
echo "tests exit $?: $(tail -n 1 "$out/cuda-tests.log")"

echo "== 2/3 partitioned validation, quick suite (at most 210 s)"
timeout -s INT 210 python3 -m cli validate --suite quick --backend cuda-partitioned \
    --out "$work/partitioned" >"$work/validate.log" 2>&1
echo "validate exit $?: $(tail -n 1 "$work/validate.log")"
mkdir -p "$out/partitioned"
cp "$work"/partitioned/measured-*.json "$out/partitioned/" 2>/dev/null

echo "== 3/3 layer timing, Table 1 blocks (at most 100 s)"
timeout -s INT 100 python3 -m validation.layer_timing --cases table-1 --repeats 5 \
    --out "$out/layers.json" >"$work/layers.log" 2>&1
echo "layer timing exit $?: $(tail -n 1 "$work/layers.log")"

python3 -m validation.gpu.summary "$out" | tee "$out/summary.txt"
echo "run.sh: done in $((SECONDS - began)) s; records in $out"
