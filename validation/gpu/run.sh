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
if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "usage: bash validation/gpu/run.sh OUTDIR" >&2
    exit 2
fi
case $1 in
    /*) out=$1 ;;
    *) out=$PWD/$1 ;;
esac
cd "$(dirname "$0")/../.." || exit 2
root=$PWD
work=$(mktemp -d) || exit 2
trap 'rm -rf "$work"' EXIT
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$work/site" .whl/*.whl >/dev/null 2>&1 ||
        { echo "run.sh: installing the wheels carried in .whl failed" >&2; exit 2; }
    export PYTHONPATH="$work/site:$root"
else
    export PYTHONPATH="$root"
fi
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=ci MPLBACKEND=Agg
# Checked before OUTDIR is made: a machine that cannot run the check leaves nothing behind.
python3 -m validation.gpu.preflight || exit 2
if ! mkdir -p "$out" 2>/dev/null || ! [ -w "$out" ]; then
    echo "run.sh: cannot make or write OUTDIR $out" >&2
    exit 2
fi
began=$SECONDS

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
