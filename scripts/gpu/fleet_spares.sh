#!/usr/bin/env bash
# Issue 30 on a two-GPU host: two workers, a GPU each, sharing one PostgreSQL on the host (scripts/gpu/postgres_env.sh),
# judging the `multi` batch (tests/corpus/cuda and hostile/cuda less hang.py, one extra copy of each honest file)
# with 3 pre-started spares per GPU against 6; claims take the longest expected job first (JUDGE_CLAIM_WINDOW's
# default). One GPU with one worker first, on the same database, as the reference the two-worker runs are compared
# with (the issue asks two workers <= 55% of one GPU's device time). Then `bench_multi_device.py compare`.
#
#   source scripts/gpu/device_env.sh && bash scripts/gpu/fleet_spares.sh OUT
#   (or as a stage: bash scripts/gpu/gpu_session.sh start fleet, then collect)
#
# FLEET_REPLICAS: extra copies of each honest file in the batch (default 1, as the multi stage).
# FLEET_RUNS picks and orders the runs (default "one spares3 spares6 two"; "two": one worker with both GPUs); "fifo" adds two workers with 3 spares and
# the plain fair order (JUDGE_CLAIM_WINDOW=0), the claim order's own contrast. The build cache is filled once first
# (--mode compile-only: candidates compiled, not run), so the measured runs are not fed by cold compiles. Each run
# writes run.json, timeline.svg and the service's logs under OUT/<run>; OUT/compare.txt has the table.
set -uo pipefail
out=${1:?usage: fleet_spares.sh OUT}
cd "$(dirname "$0")/../.." || exit 1
mkdir -p "$out"
source scripts/gpu/postgres_env.sh > "$out/postgres.log" 2>&1 || { cat "$out/postgres.log" >&2; exit 1; }
runs=" ${FLEET_RUNS:-one spares3 spares6 two} "
batch=(--replicas "${FLEET_REPLICAS:-1}" --exclude hang.py --warm --database-url "$JUDGE_PG_URL" --fresh-db --timeout 480)
bench() { python3 scripts/bench/bench_multi_device.py run "$@"; }
[ -e "$out/build/run.json" ] || bench --devices cuda:0,cuda:1 --mode compile-only "${batch[@]}" --out "$out/build"
done_runs=()
for name in $runs; do
    case $name in
        one) bench --devices cuda:0 "${batch[@]}" --env JUDGE_WARM_SPARES=3 --out "$out/one" ;;
        spares3|spares6) bench --devices cuda:0,cuda:1 --workers 2 "${batch[@]}" --env "JUDGE_WARM_SPARES=${name#spares}" \
                             --out "$out/$name" ;;
        two) bench --devices cuda:0,cuda:1 "${batch[@]}" --env JUDGE_WARM_SPARES=3 --out "$out/two" ;;
        fifo) bench --devices cuda:0,cuda:1 --workers 2 "${batch[@]}" --env JUDGE_WARM_SPARES=3 JUDGE_CLAIM_WINDOW=0 \
                  --out "$out/fifo" ;;
        *) echo "fleet_spares: unknown run $name" >&2; continue ;;
    esac
    [ -e "$out/$name/run.json" ] && done_runs+=("$out/$name")
done
[ ${#done_runs[@]} -gt 0 ] && python3 scripts/bench/bench_multi_device.py compare "${done_runs[@]}" > "$out/compare.txt" 2>&1
bash scripts/gpu/postgres_env.sh stop >> "$out/postgres.log" 2>&1
cat "$out/compare.txt" 2>/dev/null
