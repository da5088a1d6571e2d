"""sandbox/artifacts.py: a build directory packed on one host and unpacked on another, and the artifacts it refuses.

Hostile artifacts are written byte by byte here, as a builder that lies would write them: a path out of the build
directory, an absolute one, the candidate's own source, a manifest for another key, a file whose bytes differ from
its digest, bytes past the last file, a decompression bomb. Each is refused and leaves nothing in the build root.
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from pathlib import Path

import pytest

from sandbox import artifacts
from sandbox.artifacts import ArtifactRefused, Expected
from sandbox.build import compiler
from sandbox.config import JudgeConfig

KEY = "a" * 64
SOURCE = "import torch\n"


def config(tmp_path: Path) -> JudgeConfig:
    return JudgeConfig(build_root=tmp_path / "builds", cache_root=tmp_path / "cache")


def forge(entries: list[dict], blobs: list[bytes], key: str = KEY, tail: bytes = b"") -> bytes:
    """An artifact with exactly this manifest and these bytes (format 1)."""
    manifest = json.dumps({"format": artifacts.FORMAT, "build_key": key, "files": entries, "log": "",
                           "seconds": 1.0}).encode()
    return zlib.compress(len(manifest).to_bytes(8, "big") + manifest + b"".join(blobs) + tail)


def entry(path: str, data: bytes) -> dict:
    return {"path": path, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "executable": False,
            "mtime_ns": 1_700_000_000_000_000_000}


def test_a_build_directory_round_trips_with_its_times_and_the_loading_hosts_own_source(tmp_path):
    built = tmp_path / "built"
    (built / "ext" / "k").mkdir(parents=True)
    (built / "ext" / "k" / "k.so").write_bytes(b"\x7fELF...")
    (built / "ext" / "k" / "build.ninja").write_text("rule cxx\n")
    (built / "candidate.py").write_text("the builder's copy, never used\n")
    os.utime(built / "ext" / "k" / "k.so", ns=(1_600_000_000_123_456_789, 1_600_000_000_123_456_789))
    blob = artifacts.pack(KEY, built, log="g++ ok", seconds=12.5)
    cfg = config(tmp_path)
    assert not artifacts.installed(cfg, KEY, "cpu")
    artifacts.install(blob, Expected(source=SOURCE, build_key=KEY), "cpu", cfg)
    paths = compiler.KeyPaths.of(cfg.build_root, KEY)
    assert (paths.build / "ext" / "k" / "k.so").read_bytes() == b"\x7fELF..."
    assert (paths.build / "ext" / "k" / "k.so").stat().st_mtime_ns == 1_600_000_000_123_456_789  # ninja reads it
    assert (paths.build / "candidate.py").read_text() == SOURCE and paths.source.read_text() == SOURCE
    stored = compiler.load_result(paths, compiler.accelerator_config(cfg, "cpu"))
    assert stored.ok and stored.log == "g++ ok" and stored.seconds == 12.5
    assert artifacts.installed(cfg, KEY, "cpu")


@pytest.mark.parametrize(("entries", "blobs", "reason"), [
    ([entry("../escape.so", b"x")], [b"x"], "path"),
    ([entry("/etc/cron.d/x", b"x")], [b"x"], "path"),
    ([entry("ext/./k.so", b"x")], [b"x"], "path"),
    ([entry("candidate.py", b"import os")], [b"import os"], "path"),
    ([{**entry("k.so", b"x"), "sha256": "0" * 64}], [b"x"], "corrupt"),
    ([{**entry("k.so", b"xx"), "size": 5}], [b"xx"], "corrupt"),
    ([entry("k.so", b"x"), entry("k.so", b"x")], [b"x", b"x"], "corrupt"),
    ([{**entry("k.so", b"x"), "mtime_ns": "yesterday"}], [b"x"], "corrupt"),
])
def test_a_hostile_manifest_is_refused_and_leaves_nothing(tmp_path, entries, blobs, reason):
    cfg = config(tmp_path)
    with pytest.raises(ArtifactRefused) as refused:
        artifacts.install(forge(entries, blobs), Expected(source=SOURCE, build_key=KEY), "cpu", cfg)
    assert refused.value.reason == reason
    assert not (cfg.build_root / KEY).exists() and not (tmp_path / "escape.so").exists()


def test_a_manifest_for_another_key_bytes_past_the_files_and_garbage_are_refused(tmp_path):
    cfg, want = config(tmp_path), Expected(source=SOURCE, build_key=KEY)
    cases = {"key": forge([entry("k.so", b"x")], [b"x"], key="b" * 64),
             "corrupt": forge([entry("k.so", b"x")], [b"x"], tail=b"smuggled")}
    for reason, blob in cases.items():
        with pytest.raises(ArtifactRefused) as refused:
            artifacts.install(blob, want, "cpu", cfg)
        assert refused.value.reason == reason
    with pytest.raises(ArtifactRefused) as refused:
        artifacts.install(b"not zlib at all", want, "cpu", cfg)
    assert refused.value.reason == "corrupt"
    assert not (cfg.build_root / KEY).exists()


def test_a_decompression_bomb_stops_at_the_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(artifacts, "MAX_UNPACKED_BYTES", 1 << 20)
    bomb = zlib.compress(b"\0" * (8 << 20), 9)  # 8 MiB of zeros in a few KB
    with pytest.raises(ArtifactRefused) as refused:
        artifacts.install(bomb, Expected(source=SOURCE, build_key=KEY), "cpu", config(tmp_path))
    assert refused.value.reason == "too_large"


def test_a_build_directory_holding_a_link_is_not_packed(tmp_path):
    built = tmp_path / "built"
    built.mkdir()
    (built / "link.so").symlink_to("/etc/passwd")
    with pytest.raises(ArtifactRefused) as refused:
        artifacts.pack(KEY, built)
    assert refused.value.reason == "unpackable"


def test_a_stored_build_of_the_key_is_kept(tmp_path):
    """A host that built the key itself keeps its own build: an artifact never replaces it."""
    cfg = config(tmp_path)
    first, second = tmp_path / "one", tmp_path / "two"
    for where, data in ((first, b"mine"), (second, b"theirs")):
        where.mkdir()
        (where / "k.so").write_bytes(data)
    want = Expected(source=SOURCE, build_key=KEY)
    artifacts.install(artifacts.pack(KEY, first), want, "cpu", cfg)
    artifacts.install(artifacts.pack(KEY, second), want, "cpu", cfg)
    assert (compiler.KeyPaths.of(cfg.build_root, KEY).build / "k.so").read_bytes() == b"mine"
