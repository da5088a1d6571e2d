#!/usr/bin/env bash
# Two judges on the same card, alternating (old, new, old, new, ...): whether a change to the judge moved its
# times or its device hold, told apart from the card's drift over the minutes of the run.
#
#   bash scripts/gpu/ab_judges.sh OLD_TREE OUT ROUNDS [gpu_acceptance arguments...]
#
# OLD_TREE: the old judge unpacked inside the repository (`git archive REV | tar -x -C ab_old`), carried to the
# device. Each judge keeps its own build and cache roots, so neither reuses the other's builds or baselines. The
# old tree runs its own acceptance script (scripts/gpu_acceptance.py before the scripts moved into rooms).
# Afterwards: python3 -m scripts.gpu.ab_summary OUT
set -euo pipefail
old=$1 out=$2 rounds=$3
shift 3
source scripts/gpu/device_env.sh
mkdir -p "$out"
new_path=$PYTHONPATH
for round in $(seq 1 "$rounds"); do
    for judge in old new; do
        dir=$out/$round-$judge
        mkdir -p "$dir"
        if [ "$judge" = old ]; then
            script=$old/scripts/gpu/gpu_acceptance.py
            [ -e "$script" ] || script=$old/scripts/gpu_acceptance.py
            (cd "$old" && PYTHONPATH=$PWD:$new_path JUDGE_BUILD_ROOT=/tmp/ab/old/builds JUDGE_CACHE_ROOT=/tmp/ab/old/cache \
                python3 "${script#"$old"/}" --out "$dir" "$@" > "$dir/log.txt" 2>&1) || echo "old round $round failed"
        else
            JUDGE_BUILD_ROOT=/tmp/ab/new/builds JUDGE_CACHE_ROOT=/tmp/ab/new/cache \
                python3 -m scripts.gpu.gpu_acceptance --out "$dir" "$@" > "$dir/log.txt" 2>&1 || echo "new round $round failed"
        fi
        echo "round $round $judge done at $(date -u +%H:%M:%S)"
    done
done
python3 -m scripts.gpu.ab_summary "$out" | tee "$out/summary.md"
