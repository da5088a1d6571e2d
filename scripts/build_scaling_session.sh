#!/usr/bin/env bash
# On the GPU machine: fresh CUDA builds through the judge (scripts/bench_build.py, $N builds, $P at once, in each
# of $MODES), then the steps of one of those builds rerun outside the sandbox, 1 and more copies at once
# (scripts/measure_build_scaling.py: whether g++ read the precompiled header, and how a step's time grows with
# copies). Prints to stdout and to $OUT/build-scaling/. Knobs: N, P, MODES, MAIN_COPIES, CU_COPIES (empty: skip).
#   N=8 P=8 MAIN_COPIES=1 CU_COPIES= bash scripts/build_scaling_session.sh
set -uo pipefail
source scripts/device_env.sh
out=${OUT:-/tmp}/build-scaling
root=/tmp/bench-build
mkdir -p "$out"
{
    echo "== host"; nproc; lscpu | grep -E "Model name|^CPU\(s\)|Thread|Core|Socket"; free -g | head -2
    echo "CXX=${CXX:-unset}"; c++ --version | head -1; ${CXX:-c++} --version | head -1
    echo "== fresh builds: ${N:-1} of kl_div_fast, ${P:-1} at once, modes ${MODES:-slim,slim-full-main}"
    python3 scripts/bench_build.py --target cuda -n "${N:-1}" -p "${P:-1}" --jobs 2 --modes "${MODES:-slim,slim-full-main}" \
        --root "$root" --json "$out/bench.json"
    build=$(dirname "$(ls $root/builds-slim/*/ext/*/build.ninja | head -1)")
    variant=$(dirname "$(ls $root/cache/build-accel/*/flags.json | head -1)")
    echo "== the steps of $build rerun outside the sandbox"
    if [ -n "${MAIN_COPIES-1,8}" ]; then
        python3 scripts/measure_build_scaling.py "$build" --step main.o --cpath "$variant/main-subset" \
            --copies "${MAIN_COPIES-1,8}" --json "$out/main-subset.json"
        python3 scripts/measure_build_scaling.py "$build" --step main.o --cpath "$variant" \
            --copies "${MAIN_COPIES-1,8}" --json "$out/main-full.json"
    fi
    if [ -n "${CU_COPIES-1,8}" ]; then
        python3 scripts/measure_build_scaling.py "$build" --step cuda.cuda.o --slim \
            --copies "${CU_COPIES-1,8}" --json "$out/cu-slim.json"
    fi
} 2>&1 | tee "$out/log"
