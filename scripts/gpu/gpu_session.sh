#!/usr/bin/env bash
# Measurement stages on a GPU machine, run as one job that outlives each device call.
#
# A device call may run 10 minutes, the machine stays warm only 30 s after it (the next `collect` must follow at
# once: a later call gets a fresh machine and the running stages are lost), and a fresh machine spends minutes
# building the corpus. So the measurements run as one background job in its own process session (which the
# device tool leaves running between calls), and each call only starts it or waits on it and brings back what it
# has written so far. On the GPU machine, from the repository root (carry: [".whl", ".debs", ".kernelbench"]):
#
#   bash scripts/gpu/gpu_session.sh start [STAGE...]   # copy the tree to /tmp/session/repo, start the stages, collect
#   bash scripts/gpu/gpu_session.sh collect SECONDS    # wait up to SECONDS for the stages to end; pack them into $OUT
#
# Stages, in order of what matters most (default: all but recheck): burst (issue 24: 64 mixed candidates POSTed
# at once to a fresh serve, scripts/gpu/burst.py), recheck (the files in $RECHECK only, judged
# afresh; its verdicts join those of an earlier acceptance carried in .session/out/acceptance/), acceptance (the whole CUDA corpus on pre-started
# children, the 10-job repeat study, the training table), batch (60 samples through the CLI), judge (GPU seconds
# per candidate, warm and cold), acceptance-lite (the fast, training and training-hostile files and the repeat
# study), e2e (the service end to end, each fast kernel submitted three times: resubmissions of an identical source), judge-one (warm, one spare), judge-ctx (warm, the spares' context created at their start), independent (do_bench and Liger beside the judge's medians), kernelbench
# (KernelBench's own evaluation of the same files), tolerance (the gradient tolerance), build (fresh CUDA builds: the judge's default, then with
# main.cpp on the full PCH only), build-split (with nvcc split in two lanes), build-plain (torch's own build),
# spares (a spare's start and end, and what they perturb beside a timed kernel: scripts/experiments/measure_spare_overlap.py),
# judge-nolead (the correct fast kernels without the timing lead), spare-start (where a spare's CPU-only start
# goes: scripts/experiments/measure_spare_start.py; scripts/gpu/device_env.sh has compiled the bytecode caches by then),
# slim-coverage (which corpus .cu files build against the slim torch headers, and whether their device code equals
# that of the full headers: scripts/experiments/slim_header_coverage.py).
# multi (issue 13, on a two-GPU kind): the same batch on one GPU, two GPUs in one worker, two workers with one GPU each;
# then, here: scripts/bench/bench_multi_device.py compare on the three run folders.
# fleet (issue 30, a two-GPU kind): scripts/gpu/fleet_spares.sh: one GPU, then two workers with a GPU each on one
# PostgreSQL started on the host from the carried .debs (scripts/gpu/postgres_env.sh); FLEET_RUNS and FLEET_ENV pick the pools.
# profiles (issue 28): scripts/gpu/profile_capture.py --honest, each honest forward kernel under ncu in its sandbox;
# profiles-judged: the same, each judged first and profiled under the wall limit its verdict gives.
# trace (issue 28): scripts/gpu/trace_overhead.py (what each recorder costs a short call), then scripts/gpu/trace_check.py
# (ranked medians with the trace on and off in alternating rounds; the hostile corpus with the trace on);
# trace-hostile: the hostile part alone.
# corpus (issues 28, 29): the whole CUDA corpus, languages included, on pre-started children, no repeat study. The
# kernel languages come in parts over several calls (scripts/gpu/fetch_device_deps.sh): the stage installs them once
# the last part is in the working tree the calls bring (LANGS_WAIT_S, default 900 s), else judges without them.
# ab (issues 39, 44): scripts/gpu/ab_judges.sh, the judge before issue 39 (AB_OLD) against this one, AB_ROUNDS rounds.
# timing-full (after ab, on its new judge's builds): the two fast kernels with the precision stop off, every planned
# batch timed, so that a stop rule can be weighed on whole timings (repeats.json keeps each batch's figures).
# registry (issue 39): hostile class 14 (the registry attacks) and their honest twins (HIDE = False) on pre-started children
# (REGISTRY_FILES narrows it to the names given).
# serve-burst (issues 39, 40): scripts/gpu/burst.py on the CUDA corpus and hostile classes 12-14 at serve's defaults.
# builders (issue 43): scripts/gpu/builders_burst.py, the single worker, then N = 8, 2, 4 builders (each keeps its headers), 64 forward kernels.
# device-baselines (a two-GPU kind): scripts/gpu/check_device_baselines.py, bandwidth and eager time measured on each card.
# What each stage printed is in /tmp/session/out/<stage>/; the packed copy comes back as $OUT/session.tgz.
set -uo pipefail
SESSION=/tmp/session
ALL_STAGES=(acceptance batch judge independent kernelbench tolerance build)
HONEST=(tests/corpus/cuda/kl_div_fast.py tests/corpus/cuda/kl_div_fused.py tests/corpus/cuda/kl_div_naive.py
        tests/corpus/cuda/kl_div_triton.py tests/corpus/cuda/cross_entropy_fast.py
        tests/corpus/cuda/cross_entropy_online.py tests/corpus/cuda/cross_entropy_naive.py
        tests/corpus/cuda/cross_entropy_triton.py)
# KernelBench's evaluation of honest, broken and hostile files (hang.py left out: it would only show its timeout).
# RECHECK and SIDE_BY_SIDE_FILES come as space-separated strings (a bash array cannot be exported to the job).
read -r -a RECHECK_FILES <<< "${RECHECK:-tests/corpus/cuda/cross_entropy_fast.py tests/corpus/cuda/kl_div_fast.py}"
SIDE_BY_SIDE=("${HONEST[@]}" tests/corpus/cuda/kl_div_wrong_direction.py tests/corpus/cuda/cross_entropy_wrong_target.py
              tests/corpus/cuda/compile_error.py tests/corpus/cuda/illegal_address.py
              tests/corpus/hostile/cuda/c1_torch_only.py tests/corpus/hostile/cuda/c2_constant_lse.py
              tests/corpus/hostile/cuda/c2_prefix_rows.py tests/corpus/hostile/cuda/c2_recognise_official_then_sixty_fourth.py
              tests/corpus/hostile/cuda/c3_fingerprint_cache_kl.py tests/corpus/hostile/cuda/c3_fingerprint_cache_ce.py
              tests/corpus/hostile/cuda/c4_side_stream.py tests/corpus/hostile/cuda/c5_patch_event.py
              tests/corpus/hostile/cuda/c6_empty.py tests/corpus/hostile/cuda/c7_mutate_inputs.py)

stage() {  # name, then the command; its output goes to out/<name>/log, its times to out/stages.txt
    local name=$1; shift
    mkdir -p "$SESSION/out/$name"
    local t0; t0=$(date +%s)
    echo "$(date -u +%FT%TZ) start $name" >> "$SESSION/out/stages.txt"
    PYTHONUNBUFFERED=1 "$@" > "$SESSION/out/$name/log" 2>&1
    local rc=$?
    echo "$(date -u +%FT%TZ) end $name rc=$rc $(( $(date +%s) - t0 )) s" >> "$SESSION/out/stages.txt"
}

merge_verdicts() {  # merge_verdicts INTO FROM: FROM's verdicts (a gpu_acceptance verdicts.json) over INTO's
    [ -e "$2" ] || return 0
    python3 -c 'import json, sys; a = json.load(open(sys.argv[1])); a.update(json.load(open(sys.argv[2])));
json.dump(a, open(sys.argv[1], "w"))' "$1" "$2"
}

run_stages() {
    cd "$SESSION/repo" || exit 1
    source scripts/gpu/device_env.sh
    local out=$SESSION/out
    # What the independent and KernelBench stages compare with: the verdicts of a carried acceptance run, with
    # this run's acceptance and recheck verdicts merged over them as those stages end.
    local ours=$out/ours.json
    echo '{}' > "$ours"
    [ -e .session/out/acceptance/verdicts.json ] && merge_verdicts "$ours" .session/out/acceptance/verdicts.json
    [ -n "${SIDE_BY_SIDE_FILES:-}" ] && read -r -a SIDE_BY_SIDE <<< "$SIDE_BY_SIDE_FILES"
    { nvidia-smi; python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'; nproc; } \
        > "$out/environment.txt" 2>&1
    # CPU-only builds for the later stages, niced behind the acceptance's own builds; only when those stages run
    # (they would load the host under the build and spares stages' measurements).
    if [[ " $* " == *" kernelbench "* ]]; then
        nice -n 19 python3 scripts/bench/kernelbench_side_by_side.py --build-only --work "$SESSION/kb" "${SIDE_BY_SIDE[@]}" \
            > "$out/prebuild-kernelbench.log" 2>&1 &
    fi
    if [[ " $* " == *" independent "* && " $* " != *" spare-start "* && -z "${NO_PREBUILD:-}" ]]; then  # (not beside measurements)
        nice -n 19 python3 scripts/bench/independent_timing.py --build-only "${HONEST[@]}" > "$out/prebuild-independent.log" 2>&1 &
    fi
    for name in "$@"; do
        case $name in
            acceptance)
                stage acceptance python3 scripts/gpu/gpu_acceptance.py --device cuda:0 --warm --repeat 10 --out "$out/acceptance"
                python3 scripts/gpu/training_report.py "$out/acceptance/verdicts.json" > "$out/acceptance/training.md" 2>&1
                merge_verdicts "$ours" "$out/acceptance/verdicts.json" ;;
            burst)  # issue 24: a fresh `kernel-judge serve` (fresh data, builds, PCH and baselines), 64 mixed CUDA
                    # candidates POSTed at once; every verdict as declared, device holds (hang.py left out: its hold
                    # is the per-call limit by design)
                stage burst python3 scripts/gpu/burst.py --count 64 --exclude hang.py --out "$out/burst" ;;
            serve-burst)  # issues 39 and 40: a fresh `serve` at its defaults, the CUDA corpus and the registry attacks
                          # (hostile classes 12-14) POSTed at once; every verdict as declared, no honest kernel refused
                stage serve-burst python3 scripts/gpu/burst.py --count 55 --corpus tests/corpus/cuda tests/corpus/hostile/cuda \
                    --exclude hang.py 'c[1-9]_*' 'c1[01]_*' 't[0-9]_*' 'control_*' --timeout 420 --out "$out/serve-burst" ;;
            ab)  # issues 39 and 44: the judge before issue 39 (AB_OLD, default ab_old: `git archive ad24a53` unpacked in
                 # the tree, carried) against this one on the same card, alternating; ranked medians and device holds
                stage ab bash scripts/gpu/ab_judges.sh "${AB_OLD:-ab_old}" "$out/ab" "${AB_ROUNDS:-2}" --warm --repeat 3 \
                    --repeat-files kl_div_fast.py cross_entropy_fast.py --corpus tests/corpus/cuda \
                    --only kl_div_fast.py cross_entropy_fast.py ;;
            registry)  # issue 39: hostile class 14 (the registry attacks) on pre-started children beside their honest
                       # twins (the same file with HIDE = False): each attack non-scoring, or ranked no faster than its
                       # twin. REGISTRY_FILES (names, space-separated) narrows it; the twins live in the session's copy
                       # of the tree (the acceptance names files relative to it)
                local twins=.registry-twins names
                read -r -a names <<< "${REGISTRY_FILES:-$(cd tests/corpus/hostile/cuda && echo c14_*.py)}"
                mkdir -p "$twins"
                for name in "${names[@]}"; do
                    sed -e 's/^HIDE = True/HIDE = False/' -e 's/^expect: .*/expect: correct/' -e '/^diagnosis: /d' \
                        "tests/corpus/hostile/cuda/$name" > "$twins/${name%.py}_twin.py"
                done
                stage registry python3 scripts/gpu/gpu_acceptance.py --device cuda:0 --warm --repeat 0 --out "$out/registry" \
                    --corpus tests/corpus/hostile/cuda "$twins" --only "${names[@]}" $(cd "$twins" && ls) ;;
            timing-full)  # TIMING_PRECISION = 0 (sandbox/execution/timed_phase.py): no batch count is precise enough
                stage timing-full env JUDGE_BUILD_ROOT=/tmp/ab/new/builds JUDGE_CACHE_ROOT=/tmp/ab/new/cache python3 -c '
import runpy, sys
import sandbox.execution.timed_phase as timed_phase
timed_phase.TIMING_PRECISION = 0.0
sys.argv = ["gpu_acceptance", *sys.argv[1:]]
runpy.run_module("scripts.gpu.gpu_acceptance", run_name="__main__")' --warm --repeat "${FULL_REPEATS:-5}" \
                    --repeat-files kl_div_fast.py cross_entropy_fast.py --corpus tests/corpus/cuda \
                    --only kl_div_fast.py cross_entropy_fast.py --out "$out/timing-full" ;;
            builders)  # issue 43: one GPU worker and N builders with their own caches against today's single worker,
                       # 64 distinct forward kernels (the training files hold the GPU 6-13 s each: they would measure it)
                stage builders python3 -m scripts.gpu.builders_burst --baseline --builders 8 2 4 --keep-builder-headers --count 64 \
                    --exclude '*_train_*' --out "$out/builders" ;;
            honest)  # issue 44: the honest CUDA corpus on pre-started children, no repeat study: verdicts and ranked
                     # medians beside the last acceptance (docs/results/integrity-v4-h200-2026-11-28.md)
                stage honest python3 scripts/gpu/gpu_acceptance.py --device cuda:0 --warm --repeat 0 --out "$out/honest" \
                    --corpus tests/corpus/cuda --only kl_div_fast.py kl_div_fast_split.py kl_div_fused.py kl_div_naive.py \
                    kl_div_triton.py model_kl_div_dispatch.py kl_div_train_function.py kl_div_train_fused.py \
                    cross_entropy_fast.py cross_entropy_fast_split.py cross_entropy_online.py cross_entropy_naive.py \
                    cross_entropy_triton.py model_cross_entropy_pybind.py cross_entropy_train_function.py \
                    cross_entropy_train_fused.py kl_div_wrong_direction.py cross_entropy_wrong_target.py ;;
            acceptance-lite)  # the fast kernels, the training corpus (honest and hostile), the repeat study
                stage acceptance-lite python3 scripts/gpu/gpu_acceptance.py --device cuda:0 --warm --repeat 10 \
                    --out "$out/acceptance-lite" --only kl_div_fast.py cross_entropy_fast.py kl_div_wrong_direction.py \
                    cross_entropy_wrong_target.py kl_div_train_function.py kl_div_train_fused.py \
                    cross_entropy_train_function.py cross_entropy_train_fused.py t1_reference_backward.py \
                    t1_zero_gradient.py t2_subsample_rows.py t3_cached_gradient.py c4_side_stream.py
                python3 scripts/gpu/training_report.py "$out/acceptance-lite/verdicts.json" \
                    > "$out/acceptance-lite/training.md" 2>&1 ;;
            recheck)
                stage recheck python3 scripts/gpu/gpu_acceptance.py --device cuda:0 --warm --repeat 0 --out "$out/recheck" \
                    --only "${RECHECK_FILES[@]##*/}"
                merge_verdicts "$ours" "$out/recheck/verdicts.json" ;;
            batch) stage batch python3 scripts/bench/gpu_batch.py --out "$out/batch" ;;
            e2e)  # the service as the README starts it; each fast kernel three times: the 2nd and 3rd are resubmissions
                stage e2e python3 scripts/bench/gpu_service_e2e.py --out "$out/e2e" --candidates \
                    kl_div:tests/corpus/cuda/kl_div_fast.py kl_div:tests/corpus/cuda/kl_div_fast.py \
                    kl_div:tests/corpus/cuda/kl_div_fast.py cross_entropy:tests/corpus/cuda/cross_entropy_fast.py \
                    cross_entropy:tests/corpus/cuda/cross_entropy_fast.py cross_entropy:tests/corpus/cuda/cross_entropy_fast.py ;;
            judge)
                stage judge python3 scripts/bench/bench_judge.py --device cuda:0 -n 10 --modes warm --build-root /tmp/judge \
                    --json "$out/judge/bench-judge-warm.json"
                stage judge-cold python3 scripts/bench/bench_judge.py --device cuda:0 -n 2 --modes cold --build-root /tmp/judge \
                    --json "$out/judge-cold/bench-judge-cold.json" ;;
            judge-one)  # the same warm runs with one spare: fewer CPU-only starts beside each timed phase
                stage judge-one python3 scripts/bench/bench_judge.py --device cuda:0 -n 10 --modes warm --spares 1 \
                    --build-root /tmp/judge --json "$out/judge-one/bench-judge-warm-one-spare.json" ;;
            judge-nolead)  # the correct fast kernels, warm, without the timing lead (sandbox/execution/timing.py LEAD_MS)
                stage judge-nolead env JUDGE_TIMING_LEAD_MS=0 python3 scripts/bench/bench_judge.py --device cuda:0 -n 6 \
                    --modes warm --build-root /tmp/judge --json "$out/judge-nolead/bench-judge-warm-nolead.json" \
                    tests/corpus/cuda/kl_div_fast.py tests/corpus/cuda/cross_entropy_fast.py ;;
            timeline)  # the service judging the CUDA corpus on one GPU with every build waiting: the GPU-busy timeline
                stage timeline-build python3 scripts/bench/bench_multi_device.py run --devices cuda:0 --mode compile-only \
                    --replicas 0 --min-candidates 30 --exclude hang.py --warm --out "$out/timeline-build"
                stage timeline python3 scripts/bench/bench_multi_device.py run --devices cuda:0 --replicas 0 --min-candidates 30 --exclude hang.py \
                    --warm --timeout 900 --out "$out/timeline" ;;
            fleet)  # issue 30 (a two-GPU kind): two workers on one PostgreSQL on this host; FLEET_RUNS picks the pools
                stage fleet bash scripts/gpu/fleet_spares.sh "$out/fleet" ;;
            multi)  # issue 13: one batch (honest, broken, hostile; hang.py left out) on one GPU, on two GPUs in one
                    # worker, and on two worker processes with one GPU each; the build cache is filled first, once
                local batch=(--replicas 1 --exclude hang.py --warm)
                stage multi-build python3 scripts/bench/bench_multi_device.py run --devices cuda:0,cuda:1 --mode compile-only \
                    "${batch[@]}" --out "$out/multi-build"
                local runs=" ${MULTI_RUNS:-one two two-workers} "  # MULTI_RUNS: which of the three (a repeat)
                [[ $runs == *" one "* ]] && stage multi-one python3 scripts/bench/bench_multi_device.py run --devices cuda:0 \
                    "${batch[@]}" --timeout 480 --out "$out/multi-one"
                [[ $runs == *" two "* ]] && stage multi-two python3 scripts/bench/bench_multi_device.py run \
                    --devices cuda:0,cuda:1 "${batch[@]}" --timeout 480 --out "$out/multi-two"
                [[ $runs == *" two-workers "* ]] && stage multi-two-workers python3 scripts/bench/bench_multi_device.py run \
                    --devices cuda:0,cuda:1 --workers 2 "${batch[@]}" --timeout 480 --out "$out/multi-two-workers" ;;
            profiles)  # issue 28: every honest forward kernel of the corpus under the judge's profiler (ncu)
                stage profiles python3 scripts/gpu/profile_capture.py --honest --out "$out/profiles" ;;
            profiles-judged)
                stage profiles-judged python3 scripts/gpu/profile_capture.py --honest --judged --out "$out/profiles-judged" ;;
            trace)
                stage trace-overhead python3 scripts/gpu/trace_overhead.py --rounds 1 --out "$out/trace-overhead"
                stage trace python3 scripts/gpu/trace_check.py --out "$out/trace" ;;
            trace-hostile)  # the hostile corpus alone with the trace on (after `corpus` has installed the languages)
                stage trace-hostile python3 scripts/gpu/trace_check.py --skip-honest --out "$out/trace-hostile" ;;
            corpus)
                local waited=0 live; live=$(cat "$SESSION/live")
                while [ ! -e /opt/judge-langs/.installed ] && [ "$waited" -lt "${LANGS_WAIT_S:-900}" ]; do
                    (cd "$live" && source scripts/gpu/device_env.sh > /dev/null 2>&1)  # installs once every part is there
                    [ -e /opt/judge-langs/.installed ] || { sleep 10; waited=$(( waited + 10 )); }
                done
                [ -e /opt/judge-langs/.installed ] && \
                    export PYTHONPATH=/opt/judge-langs:/opt/judge-langs/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH
                stage corpus python3 scripts/gpu/gpu_acceptance.py --device cuda:0 --warm --repeat 0 --out "$out/corpus" ;;
            device-baselines)  # the trusted baseline process on every visible GPU: the cards must agree (issue 13's
                               # two-GPU run found cuda:1's measured on cuda:0's stream)
                stage device-baselines python3 scripts/gpu/check_device_baselines.py ;;
            spare-start)  # where a spare's CPU-only start goes (bytecode caches, sandbox, imports, contention)
                stage spare-start python3 scripts/experiments/measure_spare_start.py --device cuda:0 --alone 2 --together 3 6 \
                    --json "$out/spare-start/spare-start.json" ;;
            judge-ctx)  # the same warm runs with the spares' device context created at their start
                stage judge-ctx env JUDGE_SPARE_CONTEXT_AT_START=1 python3 scripts/bench/bench_judge.py --device cuda:0 -n 10 \
                    --modes warm --build-root /tmp/judge --json "$out/judge-ctx/bench-judge-warm-ctx.json" ;;
            independent)
                wait  # the prebuilds
                stage independent python3 scripts/bench/independent_timing.py --ours "$ours" \
                    --out "$out/independent" "${HONEST[@]}" ;;
            kernelbench)
                wait
                stage kernelbench python3 scripts/bench/kernelbench_side_by_side.py --work "$SESSION/kb" \
                    --ours "$ours" --out "$out/kernelbench" "${SIDE_BY_SIDE[@]}" ;;
            spares) stage spares python3 scripts/experiments/measure_spare_overlap.py --device cuda:0 \
                        --json "$out/spares/spare-overlap.json" ;;
            tolerance) stage tolerance python3 scripts/gpu/measure_tolerance.py --device cuda --gradient --seeds 2 ;;
            build)  # fresh CUDA builds, 8 at once: the judge's default (PCH with main.cpp's subset first, slim .cu
                    # headers), then the same with the full PCH only (JUDGE_PCH_SUBSET=0), on one machine;
                    # one build root, so the PCH is built once
                stage build-slim python3 scripts/bench/bench_build.py --target cuda -n 16 -p 8 --jobs 2 --modes slim \
                    --root /tmp/bench-build --json "$out/build-slim/bench_build_cuda_slim.json"
                # g++'s own word that it read the PCHs (an 'x' line: rejected), and main.cpp's time alone
                stage build-pch-check bash -c 'b=$(dirname "$(ls /tmp/bench-build/builds-slim/*/ext/*/build.ninja | head -1)");
                    v=$(dirname "$(ls /tmp/bench-build/cache/build-accel/*/flags.json | head -1)");
                    python3 scripts/experiments/measure_build_scaling.py "$b" --step main.o --cpath "$v/main-subset" --copies 1,8 &&
                    python3 scripts/experiments/measure_build_scaling.py "$b" --step main.o --cpath "$v" --copies 1'
                stage build-slim-ce python3 scripts/bench/bench_build.py --target cuda -n 8 -p 8 --jobs 2 --modes slim \
                    --root /tmp/bench-build --candidate tests/corpus/cuda/cross_entropy_fast.py \
                    --json "$out/build-slim-ce/bench_build_cuda_slim_ce.json"
                stage build-full-main python3 scripts/bench/bench_build.py --target cuda -n 16 -p 8 --jobs 2 \
                    --modes slim-full-main --root /tmp/bench-build \
                    --json "$out/build-full-main/bench_build_cuda_slim_full_main.json" ;;
            build-split)  # nvcc's front ends side by side (JUDGE_SPLIT_NVCC), 8 at once
                stage build-split python3 scripts/bench/bench_build.py --target cuda -n 16 -p 8 --jobs 2 --modes split \
                    --root /tmp/bench-build --json "$out/build-split/bench_build_cuda_split.json" ;;
            build-plain)  # torch's own load_inline build, 8 at once
                stage build-plain python3 scripts/bench/bench_build.py --target cuda -n 8 -p 8 --jobs 2 --modes without \
                    --json "$out/build-plain/bench_build_cuda_without.json" ;;
            slim-coverage)  # which corpus .cu files build against the slim headers, and equal device code
                stage slim-coverage python3 scripts/experiments/slim_header_coverage.py tests/corpus/cuda tests/corpus/hostile/cuda \
                    -j 8 --full-on-failure --ptx --json "$out/slim-coverage/coverage.json" ;;
            *) echo "unknown stage $name" >> "$out/stages.txt" ;;
        esac
    done
    wait
    touch "$SESSION/finished"
}

collect() {  # wait up to $1 s for the stages to end, then pack what they wrote
    if [ ! -d "$SESSION/out" ]; then  # a fresh machine: the session died with the one before; waiting is waste
        echo "no session on this machine (it was handed back and the stages with it): start again" >&2
        return 3
    fi
    local deadline=$(( $(date +%s) + $1 ))
    while [ ! -e "$SESSION/finished" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
    cat "$SESSION/out/stages.txt" 2>/dev/null
    for log in "$SESSION"/out/*/log; do echo "== $log"; tail -n 4 "$log"; done
    [ -n "${OUT:-}" ] && tar -czf "$OUT/session.tgz" -C "$SESSION" --exclude='*.so' --exclude='*.o' out \
        && ls -la "$OUT"
    [ -e "$SESSION/finished" ] && echo "SESSION FINISHED" || echo "session still running"
}

case ${1:-} in
    start)
        shift
        [ $# -gt 0 ] || set -- "${ALL_STAGES[@]}"
        rm -rf "$SESSION" && mkdir -p "$SESSION/out" "$SESSION/repo"
        # A copy of its own: the next device call may rewrite the working tree under a running stage.
        tar -C . --exclude=.git --exclude=.langs -cf - . | tar -C "$SESSION/repo" -xf -
        echo "$PWD" > "$SESSION/live"  # where later calls bring what the stages wait for (the language parts)
        setsid nohup bash "$SESSION/repo/scripts/gpu/gpu_session.sh" run "$@" > "$SESSION/session.log" 2>&1 < /dev/null &
        collect "${COLLECT_S:-570}" ;;
    run) shift; run_stages "$@" ;;
    collect) collect "${2:-570}" ;;
    *) echo "usage: $0 start [STAGE...] | collect SECONDS" >&2; exit 2 ;;
esac
