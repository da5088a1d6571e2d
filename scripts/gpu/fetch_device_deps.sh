#!/usr/bin/env bash
# Run here (with network), before a GPU run: fetch what the bare GPU image lacks into the ignored folders
# that the device call carries (carry: [".whl", ".debs", ".kernelbench"]); scripts/gpu/device_env.sh installs them there.
# The image has torch, ninja, httpx and numpy, but not pydantic, FastAPI, SQLAlchemy or bubblewrap; nvidia-ml-py
# (pynvml, for sandbox/profiling/clocks.py) is not among the packages seen there, so it is carried too.
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .whl .debs && mkdir -p .whl .debs
# With their dependencies, resolved for the image's CPython 3.12 (fastapi needs opentelemetry-api, say).
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl pydantic pydantic-settings fastapi fastapi-offline uvicorn sqlalchemy alembic jinja2 typer rich \
    pygments prometheus-client typing-extensions nvidia-ml-py
# Liger-Kernel (pure Python over Triton, which the image has): the fused-loss reference rows (issues 10, 12).
python3 -m pip download -q --no-deps --only-binary=:all: -d .whl 'liger-kernel>=0.5'
(cd .debs && apt-get download bubblewrap)
# KernelBench's own evaluation, for scripts/bench/kernelbench_side_by_side.py (not vendored: its src/ and the two level-1
# problems, exported from a clone; KERNELBENCH_GIT: a local git directory or a URL).
kernelbench=${KERNELBENCH_GIT:-https://github.com/ScalingIntelligence/KernelBench}
paths=(src/kernelbench KernelBench/level1/95_CrossEntropyLoss.py KernelBench/level1/98_KLDivLoss.py)
rm -rf .kernelbench && mkdir -p .kernelbench
if [ ! -d "$kernelbench" ]; then
    clone=$(mktemp -d) && git clone -q --depth 1 "$kernelbench" "$clone" && kernelbench=$clone/.git
fi
if git --git-dir="$kernelbench" archive HEAD "${paths[@]}" | tar -x -C .kernelbench; then
    git --git-dir="$kernelbench" rev-parse HEAD > .kernelbench/COMMIT
else
    echo "KernelBench not fetched: the side by side will not run" >&2
fi
# --- PostgreSQL on the GPU host (issue 30) ----------------------------------------------------------------------
# Two workers on one real PostgreSQL there: Debian's postgresql-15 and the libraries it loads, resolved by apt
# (`apt-cache depends --recurse`, less the C runtime and packaging machinery) and fetched with `apt-get download`
# into .debs/postgresql/ (not .debs/: scripts/gpu/device_env.sh unpacks every .debs/*.deb as bubblewrap's);
# scripts/gpu/postgres_env.sh unpacks and starts it there. The workers' driver comes as wheels.
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl 'psycopg[binary]>=3.1'
bash scripts/gpu/postgres_env.sh fetch .debs/postgresql
# --- Kernel languages (issue 29): CuTe DSL and TileLang, as pinned in pyproject's [languages] extra ------------------
# 171 MB of wheels (CuTe DSL's cu13 libraries alone are 92 MB) against a carry of 64 MiB per call: one tar of them,
# cut into parts of LANG_PART_MIB, each in its own folder .langs/N/ with the manifest. Carry one folder per call on
# the same warm machine (carry: [".langs/1"], then [".langs/2"], ...: what an earlier call carried stays there);
# scripts/gpu/device_env.sh installs them once every part in the manifest is there. The image has their other
# dependencies (cuda-bindings, cuda-pathfinder, protobuf, numpy, ml-dtypes, cloudpickle, psutil, tqdm).
rm -rf .langs && mkdir -p .langs/wheels
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .langs/wheels \
    nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1 nvidia-cutlass-dsl-libs-core==4.8.1 \
    nvidia-cutlass-dsl-libs-cu13==4.8.1 tilelang==0.1.15 apache-tvm-ffi==0.1.12 torch-c-dlpack-ext==0.1.5 \
    z3-solver==4.15.4.0
tar -cf - -C .langs/wheels . | split -b "${LANG_PART_MIB:-40}M" -d -a 1 - .langs/part-
rm -rf .langs/wheels
(cd .langs && for part in part-*; do n=$((${part#part-} + 1)); mkdir -p "$n" && mv "$part" "$n/"; done
 sha256sum */part-* > MANIFEST && for dir in */; do cp MANIFEST "$dir"; done && rm MANIFEST)
echo "kernel languages: $(ls -d .langs/*/ | wc -l) parts to carry, one per call: $(ls -d .langs/*/ | tr '\n' ' ')"
# ------------------------------------------------------------------------------------------------------------------
du -sh .whl .debs .kernelbench .langs
