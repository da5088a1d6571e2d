# kernel-judge: the API, workers and the sandbox (bubblewrap, g++, ninja, torch) in one image.
# Needs BuildKit (DOCKER_BUILDKIT=1 or buildx) for the cache, bind and secret mounts. docs/docker.md has it all.
#
# GPU hosts (the default base; torch's CUDA build from the PyTorch index, nvcc from the same CUDA 13.0):
#   DOCKER_BUILDKIT=1 docker build -t kernel-judge:cuda .
# Hosts that reach no registry, CPU only (base and wheel image from `bash docker/make-base.sh`):
#   DOCKER_BUILDKIT=1 docker build -t kernel-judge:cpu --build-arg BASE=kernel-judge-base:bookworm \
#       --build-arg WHEELS=kernel-judge-wheels:local --build-arg TORCH=torch==2.13.0+cpu --build-arg TORCH_INDEX= \
#       --secret id=pip_cert,src=/etc/ssl/certs/ca-certificates.crt .
# Targets: `runtime` (the default, last) and `test` (adds pytest and tests/: runs the suite in a container).
#
# Run it with the options the sandbox needs (why: docs/docker.md, "Why these container options"):
#   docker run --security-opt seccomp=unconfined --security-opt systempaths=unconfined \
#       [--security-opt apparmor=unconfined] [--gpus all] kernel-judge:cuda kernel-judge worker
# No capability is added and the judge runs as the unprivileged user `judge`: bubblewrap makes its
# sandbox in an unprivileged user namespace.

ARG BASE=nvidia/cuda:13.0.2-devel-ubuntu24.04
# An image whose top directory holds wheels to prefer (the CPU torch wheel here); "scratch": none.
ARG WHEELS=scratch

FROM ${WHEELS} AS wheels

FROM ${BASE} AS system
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-dev g++ ninja-build bubblewrap \
        ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --create-home --home-dir /home/judge --shell /usr/sbin/nologin judge \
 && mkdir -p /data /app \
 && chown judge:judge /data

# Python packages: torch first (the big, rarely changing layer), then the service's dependencies read from
# pyproject.toml (so editing the code does not reinstall them). The host's CA bundle, where a proxy needs
# one, comes in as a build secret and stays out of every layer.
FROM system AS deps
ARG TORCH=torch
ARG TORCH_INDEX=https://download.pytorch.org/whl/cu130
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180
RUN --mount=type=bind,from=wheels,target=/wheels \
    --mount=type=secret,id=pip_cert \
    --mount=type=cache,target=/root/.cache/pip \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi \
 && python3 -m venv /venv \
 && /venv/bin/pip install --find-links /wheels ${TORCH_INDEX:+--index-url "$TORCH_INDEX"} "$TORCH"
COPY pyproject.toml /app/
RUN --mount=type=secret,id=pip_cert \
    --mount=type=cache,target=/root/.cache/pip \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi \
 && /venv/bin/python -c "import tomllib; deps = tomllib.load(open('/app/pyproject.toml', 'rb'))['project']; \
print('\n'.join(d for d in deps['dependencies'] if not d.startswith('torch')))" > /tmp/requirements.txt \
 && /venv/bin/pip install "setuptools>=68" -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt

FROM deps AS service
WORKDIR /app
COPY reference /app/reference
COPY sandbox /app/sandbox
COPY service /app/service
RUN /venv/bin/pip install --no-deps --no-build-isolation /app \
 && rm -rf /app/build /app/*.egg-info
ENV PATH=/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    JUDGE_DATA_DIR=/data \
    JUDGE_BUILD_ROOT=/data/builds \
    JUDGE_CACHE_ROOT=/data/cache \
    JUDGE_ISOLATION=bwrap \
    HOME=/home/judge
# The architectures CUDA candidates are built for: 9.0 = H100/H200. Override per host (compose: env).
ENV TORCH_CUDA_ARCH_LIST=9.0

# The test suite in a container: `--target test`, then `docker run ... kernel-judge:test` (see docs/docker.md).
FROM service AS test
ARG DEBIAN_FRONTEND=noninteractive
RUN --mount=type=secret,id=pip_cert \
    --mount=type=cache,target=/root/.cache/pip \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi \
 && /venv/bin/python -c "import tomllib; deps = tomllib.load(open('/app/pyproject.toml', 'rb'))['project']; \
print('\n'.join(deps['optional-dependencies']['test']))" > /tmp/requirements.txt \
 && /venv/bin/pip install -r /tmp/requirements.txt && rm /tmp/requirements.txt
COPY tests /app/tests
RUN chown -R judge:judge /app/tests
USER judge
CMD ["python", "-m", "pytest", "tests/sandbox/test_isolation.py"]

FROM service AS runtime
USER judge
VOLUME /data
EXPOSE 8000
CMD ["kernel-judge", "serve", "--host", "0.0.0.0", "--port", "8000"]
