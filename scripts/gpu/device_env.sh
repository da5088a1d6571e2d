# Sourced by the GPU scripts: give a bare GPU machine what the judge needs (bubblewrap from the carried
# Debian .debs in .debs/, Python packages from the carried wheels in .whl/) and the environment to use them.
if ! command -v bwrap >/dev/null && [ -z "${JUDGE_BWRAP:-}" ] && ls .debs/bubblewrap_*.deb >/dev/null 2>&1; then
    mkdir -p /opt/judge-bwrap
    for deb in .debs/*.deb; do dpkg -x "$deb" /opt/judge-bwrap; done
    export JUDGE_BWRAP=/opt/judge-bwrap/usr/bin/bwrap
fi
# The carried set comes from scripts/gpu/fetch_device_deps.sh; fastapi imports opentelemetry at import time.
if ls .whl/*.whl >/dev/null 2>&1 && ! python3 -c "import pydantic_settings, fastapi, fastapi_offline, sqlalchemy, alembic, uvicorn, opentelemetry, typer, rich, pygments, prometheus_client, pynvml" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /opt/judge-site .whl/*.whl 2>/dev/null
    export PYTHONPATH=/opt/judge-site${PYTHONPATH:+:$PYTHONPATH}
fi
# The kernel languages (CuTe DSL, TileLang), carried in parts (.langs/N/, scripts/gpu/fetch_device_deps.sh): installed
# once every part named in the manifest is here and intact; until then the judge refuses their candidates as
# unsupported. CuTe DSL's `cutlass` package lives in nvidia_cutlass_dsl/dsl_packages, which its .pth adds to a
# site directory's path; a --target folder reads no .pth, so the folder goes on PYTHONPATH (the children get it too).
manifest=$(ls .langs/*/MANIFEST 2>/dev/null | head -n 1 || true)  # none carried: no languages (callers may run under set -e -o pipefail)
if [ -n "$manifest" ] && [ ! -e /opt/judge-langs/.installed ]; then
    if (cd .langs && sha256sum --quiet -c "${manifest#.langs/}" >/dev/null 2>&1); then
        mkdir -p /tmp/judge-lang-wheels && cat $(awk '{print ".langs/" $2}' "$manifest") | tar -x -C /tmp/judge-lang-wheels
        python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /opt/judge-langs \
            /tmp/judge-lang-wheels/*.whl && touch /opt/judge-langs/.installed
        rm -rf /tmp/judge-lang-wheels
    else
        echo "kernel languages: $(ls -d .langs/*/ | wc -l) of $(wc -l < "$manifest") parts here, not installed yet" >&2
    fi
fi
if [ -e /opt/judge-langs/.installed ]; then
    export PYTHONPATH=/opt/judge-langs:/opt/judge-langs/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
export JUDGE_BUILD_ROOT=${JUDGE_BUILD_ROOT:-/tmp/judge/builds} JUDGE_CACHE_ROOT=${JUDGE_CACHE_ROOT:-/tmp/judge/cache}
# The judge's children run `python -B` under a read-only root, so they never write bytecode caches; this image
# ships none (sandbox/execution/bytecode.py), which made every spare's start 2.5x slower (7.5 s against 2.9 s). Compiled once
# per machine, where the modules are installed (compileall skips modules whose caches are current).
if [ ! -e /tmp/judge-bytecode-compiled ]; then
    python3 -m compileall -q -j 0 $(python3 -c "import site; print(*site.getsitepackages())") \
        ${PYTHONPATH//:/ } > /dev/null 2>&1
    touch /tmp/judge-bytecode-compiled
fi
