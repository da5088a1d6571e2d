# The judge service with CUDA: API, workers and the sandbox in one image.
#   docker build -t kernel-judge .
#   docker run --gpus all -p 8000:8000 -v judge-data:/data --security-opt seccomp=unconfined \
#       --security-opt apparmor=unconfined --cap-add SYS_ADMIN kernel-judge
# bubblewrap needs to create namespaces inside the container: that is what the two security options
# and SYS_ADMIN allow (see docs/threat-model.md, "Inside Docker"). Without them the judge falls back to
# the weaker "unshare" or "none" mechanism and says so in every verdict's environment.isolation.
ARG BASE=nvidia/cuda:13.0.0-devel-ubuntu24.04
FROM ${BASE}

ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-dev g++ ninja-build bubblewrap \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
RUN python3 -m venv /venv \
 && /venv/bin/pip install torch --index-url https://download.pytorch.org/whl/cu130
COPY pyproject.toml README.md ./
COPY reference reference
COPY sandbox sandbox
COPY service service
RUN /venv/bin/pip install .

ENV PATH=/venv/bin:$PATH \
    JUDGE_DATA_DIR=/data \
    JUDGE_BUILD_ROOT=/data/builds \
    JUDGE_CACHE_ROOT=/data/cache \
    TORCH_CUDA_ARCH_LIST=9.0
VOLUME /data
EXPOSE 8000
CMD ["kernel-judge", "serve", "--host", "0.0.0.0", "--port", "8000"]
