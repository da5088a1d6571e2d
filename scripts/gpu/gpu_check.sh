#!/usr/bin/env bash
# The whole GPU acceptance check, in one command, on a GPU machine with torch+CUDA installed:
#   bash scripts/gpu/gpu_check.sh [results-dir]
# Sets up what the machine lacks (bubblewrap from carried .debs in .debs/, Python wheels in .whl/),
# then measures honest fp32 error against fp64 truth and judges the CUDA corpus through the real
# sandbox. Writes tolerance.md, gpu_acceptance.md and verdicts.json to the results directory.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUTDIR=${1:-${OUT:-results}}
mkdir -p "$OUTDIR"

source scripts/gpu/device_env.sh

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm --format=csv
python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0])"
python3 -c "from sandbox.isolation import available_mechanism; print('isolation:', available_mechanism('auto'))"

if [ "${SKIP_TOLERANCE:-0}" != 1 ]; then
    python3 scripts/gpu/measure_tolerance.py --device cuda --seeds 2 | tee "$OUTDIR/tolerance.md"
fi
shift $(( $# > 0 ? 1 : 0 )) || true
python3 scripts/gpu/gpu_acceptance.py --device cuda:0 --out "$OUTDIR" "$@"
