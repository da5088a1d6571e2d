"""docker-compose.yml says what it needs: with only the two secrets of docker/env.example set, every image the
stack runs is pulled from a registry or built by the stack from a registry's base (a GPU host reaching Docker Hub
needs no POSTGRES_IMAGE); with env.example's no-registry lines, PostgreSQL is built from the base that
docker/make-base.sh makes. Read with PyYAML and Compose's interpolation rules (`${VAR:-default}`, `${VAR:?error}`):
no Docker is needed."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
VARIABLE = re.compile(r"\$\{(\w+)(?::([-?])([^}]*))?\}")
LOCAL = "kernel-judge"
"""Images named so exist on no registry: made by this repository (the compose file, make-base.sh)."""
SECRETS = {"POSTGRES_PASSWORD": "pw", "JUDGE_ADMIN_KEY": "admin"}


def interpolate(value: object, env: dict[str, str]) -> object:
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match) -> str:
        name, kind, rest = match.groups()
        if env.get(name):
            return env[name]
        assert kind != "?", f"{name} is required: {rest}"
        return rest if kind == "-" else ""

    return VARIABLE.sub(one, value)


def stack(env: dict[str, str]) -> dict:
    return interpolate(yaml.safe_load((ROOT / "docker-compose.yml").read_text()), env)["services"]


def bases(dockerfile: Path, args: dict[str, str]) -> set[str]:
    """The images a Dockerfile's stages start from (not its own stages, not `scratch`), its ARGs resolved."""
    values, stages, found = {}, set(), set()
    for line in dockerfile.read_text().splitlines():
        if m := re.match(r"ARG (\w+)=(\S*)", line):
            values.setdefault(m[1], args.get(m[1], m[2]))
        elif m := re.match(r"FROM (\S+)(?: AS (\w+))?", line):
            image = re.sub(r"\$\{(\w+)\}", lambda v: values[v[1]], m[1])
            if image not in stages and image != "scratch":
                found.add(image)
            stages.add(m[2])
    return found


def built(services: dict) -> dict[str, set[str]]:
    """Image -> the bases the stack builds it from."""
    out = {}
    for service in services.values():
        build = service.get("build")
        if build:
            out[service["image"]] = bases(ROOT / build["context"] / "Dockerfile", build.get("args", {}))
    return out


def env_example() -> dict[str, str]:
    """env.example's settings, its commented `# NAME=value` lines included (they are what a reader would set)."""
    lines = (ROOT / "docker" / "env.example").read_text().splitlines()
    return {m[1]: m[2] for line in lines if (m := re.match(r"#? ?([A-Z_]+)=(\S+)", line))}


def test_a_host_reaching_docker_hub_needs_only_the_two_secrets():
    services = stack(SECRETS)
    made = built(services)
    for name, service in services.items():
        image = service["image"]
        if image.startswith(LOCAL):
            assert image in made, f"{name} runs {image}, which nothing in the stack builds"
    for image, froms in made.items():
        local = {base for base in froms if base.startswith(LOCAL)}
        assert not local, f"{image} is built from {local}, which exist only after docker/make-base.sh"
    assert services["db"]["image"] == "kernel-judge-postgres:15"  # the default: PostgreSQL 15's volume stays
    assert made["kernel-judge-postgres:15"] == {"debian:bookworm"}


def test_env_example_names_the_no_registry_settings_and_they_build_from_make_base():
    settings = env_example()
    assert settings["JUDGE_BASE"] == "kernel-judge-base:bookworm" and settings["JUDGE_IMAGE"] in (
        "kernel-judge:cuda", "kernel-judge:cpu")
    make_base = (ROOT / "docker" / "make-base.sh").read_text()
    assert "BASE_TAG=${BASE_TAG:-kernel-judge-base:$SUITE}" in make_base and "SUITE=${SUITE:-bookworm}" in make_base
    offline = stack({**SECRETS, "JUDGE_BASE": settings["JUDGE_BASE"], "JUDGE_IMAGE": "kernel-judge:cpu"})
    assert built(offline)["kernel-judge-postgres:15"] == {"kernel-judge-base:bookworm"}
    header = (ROOT / "docker-compose.yml").read_text().split("\n\n", 1)[0]
    assert "JUDGE_BASE=kernel-judge-base:bookworm" in header and "nothing else set" in header


def test_the_builder_builds_for_the_gpu_worker_without_a_gpu_and_with_its_own_cache():
    from service.core.config import Settings

    services = stack(SECRETS)
    builder, gpu = services["builder"], services["worker-gpu"]
    assert "deploy" not in builder and builder["profiles"] == ["builders"]  # no device reservation
    assert builder["command"][-2:] == ["--role", "build"] and builder["environment"]["JUDGE_ROLE"] == "build"
    Settings(role=builder["environment"]["JUDGE_ROLE"], build_target=builder["environment"]["JUDGE_BUILD_TARGET"])
    # The build key holds the architectures: the builder's must be the GPU worker's.
    assert builder["environment"]["TORCH_CUDA_ARCH_LIST"] == gpu["environment"]["TORCH_CUDA_ARCH_LIST"]
    assert builder["volumes"] == ["/data"] and "judge-cache:/data" in gpu["volumes"]  # nothing shared on disk
