#!/usr/bin/env bash
# Issue 30 on a two-GPU host: two workers, a GPU each, sharing one PostgreSQL on the host (scripts/gpu/postgres_env.sh),
# judging the `multi` batch (tests/corpus/cuda and hostile/cuda less hang.py, FLEET_REPLICAS extra copies of each
# honest file); claims take the longest expected job first (JUDGE_CLAIM_WINDOW's default). One GPU with one worker as
# the reference the two-GPU runs are compared with (the issue asks two workers <= 55% and one worker with two GPUs
# <= 52% of one GPU's device time). Then `bench_multi_device.py compare` (the first run is the base).
#
#   source scripts/gpu/device_env.sh && bash scripts/gpu/fleet_spares.sh OUT
#   (or as a stage: bash scripts/gpu/gpu_session.sh start fleet, then collect)
#
# FLEET_REPLICAS: extra copies of each honest file in the batch (default 1, as the multi stage).
# FLEET_RUNS picks and orders the runs (default "one-standby standby two-standby"):
#   the pools as the worker keeps them by default (sandbox/execution/warm.py: GPU_SPARES ready and GPU_STANDBY
#   host-started children per GPU, CPU-only starts capped host-wide by JUDGE_SPARE_START_SLOTS):
#     one-standby   one worker, cuda:0
#     standby       two workers, a GPU each
#     two-standby   one worker with both GPUs
#   ready spares only, no standby, starts not capped (the scheduling the first fleet run measured, less the device
#   gate's changes): one (cuda:0, 3 spares), spares3 / spares6 (two workers, 3 or 6 per GPU), two (one worker, both
#   GPUs, 3 spares), fifo (two workers, 3 spares, the plain fair order JUDGE_CLAIM_WINDOW=0: the claim order's own
#   contrast).
# FLEET_ENV: NAME=VALUE words added to every run's service (e.g. "JUDGE_WARM_STANDBY=6 JUDGE_SPARE_START_SLOTS=4").
# The build cache is filled once first (--mode compile-only: candidates compiled, not run), so the measured runs are
# not fed by cold compiles. Each run writes run.json, timeline.svg and the service's logs under OUT/<run>;
# OUT/compare.txt has the table.
set -uo pipefail
out=${1:?usage: fleet_spares.sh OUT}
cd "$(dirname "$0")/../.." || exit 1
mkdir -p "$out"
source scripts/gpu/postgres_env.sh > "$out/postgres.log" 2>&1 || { cat "$out/postgres.log" >&2; exit 1; }
runs=" ${FLEET_RUNS:-one-standby standby two-standby} "
batch=(--replicas "${FLEET_REPLICAS:-1}" --exclude hang.py --warm --database-url "$JUDGE_PG_URL" --fresh-db --timeout 480)
read -r -a extra <<< "${FLEET_ENV:-}"
bench() { python3 scripts/bench/bench_multi_device.py run "$@"; }
ready_only=(JUDGE_WARM_STANDBY=0 JUDGE_SPARE_START_SLOTS=1000)
[ -e "$out/build/run.json" ] || bench --devices cuda:0,cuda:1 --mode compile-only "${batch[@]}" --out "$out/build"
done_runs=()
for name in $runs; do
    case $name in
        one-standby) bench --devices cuda:0 "${batch[@]}" --env "${extra[@]}" --out "$out/$name" ;;
        standby) bench --devices cuda:0,cuda:1 --workers 2 "${batch[@]}" --env "${extra[@]}" --out "$out/$name" ;;
        two-standby) bench --devices cuda:0,cuda:1 "${batch[@]}" --env "${extra[@]}" --out "$out/$name" ;;
        one) bench --devices cuda:0 "${batch[@]}" --env JUDGE_WARM_SPARES=3 "${ready_only[@]}" "${extra[@]}" \
                 --out "$out/one" ;;
        spares3|spares6) bench --devices cuda:0,cuda:1 --workers 2 "${batch[@]}" --env "JUDGE_WARM_SPARES=${name#spares}" \
                             "${ready_only[@]}" "${extra[@]}" --out "$out/$name" ;;
        two) bench --devices cuda:0,cuda:1 "${batch[@]}" --env JUDGE_WARM_SPARES=3 "${ready_only[@]}" "${extra[@]}" \
                 --out "$out/two" ;;
        fifo) bench --devices cuda:0,cuda:1 --workers 2 "${batch[@]}" --env JUDGE_WARM_SPARES=3 JUDGE_CLAIM_WINDOW=0 \
                  "${ready_only[@]}" "${extra[@]}" --out "$out/fifo" ;;
        *) echo "fleet_spares: unknown run $name" >&2; continue ;;
    esac
    [ -e "$out/$name/run.json" ] && done_runs+=("$out/$name")
done
[ ${#done_runs[@]} -gt 0 ] && python3 scripts/bench/bench_multi_device.py compare "${done_runs[@]}" > "$out/compare.txt" 2>&1
bash scripts/gpu/postgres_env.sh stop >> "$out/postgres.log" 2>&1
cat "$out/compare.txt" 2>/dev/null
