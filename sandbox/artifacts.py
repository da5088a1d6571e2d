"""A built candidate as bytes that travel between hosts: packed where it was built, checked and unpacked where
it runs (the service's builder and run workers, service/artifacts).

TRUST: the bytes come from another host (a builder), which is trusted less than the process loading them. What an
artifact may do is bounded to what the candidate's own build could have done:

- Its manifest names the build key; `install` takes the key the loading host derived itself from the candidate's
  source and its own toolchain (`expected`), and refuses a manifest for any other key: an artifact cannot swap in
  another candidate's build, nor one made by another toolchain.
- Only regular files under the build directory come out: no links, no special files, no absolute path, no `..`,
  no empty or dot component, a bound on the count and on the bytes (a decompression bomb stops at the bound). Each
  file's size and sha256 are checked against the manifest.
- The source the children import (`candidate.py`, beside and inside the build directory) is always the loading
  host's own checked source, never the artifact's: `install` writes it (`compiler.start_build`, `place_source`).
- What is unpacked then goes the way of any stored build: the execution child runs it in the same sandbox as
  a build made here, and refuses a build not made for the command line it would run (sandbox/build/no_build.py).

Format (version 1): zlib of [8-byte big-endian manifest length][manifest JSON][each file's bytes in manifest
order]. A custom container rather than tar: there is nothing in it a reader could follow, so the checks above are
all there is to get right.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from reference import get_task
from sandbox.build import compiler
from sandbox.config import JudgeConfig
from sandbox.extract import ExtractionError, extract_candidate
from sandbox.pipeline import key_of

FORMAT = 1
MAX_UNPACKED_BYTES = 1 << 30
"""Bytes an artifact may unpack to: a CUDA extension's build directory is a few MB (its .so and objects); 1 GiB is
far past any honest build and bounds what a hostile builder can make a run worker write."""
MAX_FILES = 10_000
"""Files in one artifact: a build directory holds tens."""
LOG_LIMIT = compiler.LOG_LIMIT
_LENGTH_BYTES = 8


class ArtifactRefused(Exception):
    """The artifact is not used: `reason` is a short word for metrics, the message says why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Expected:
    """What the loading host derived itself: the extracted source and the key it builds under."""

    source: str
    build_key: str


def expected(task_id: str, raw_source: str, target: str, config: JudgeConfig) -> Expected | None:
    """The key this host would build the candidate under, or None when no code can be extracted from the text
    (then there is no build to load: `prepare` gives the verdict)."""
    try:
        source = extract_candidate(raw_source)
    except ExtractionError:
        return None
    _, key = key_of(get_task(task_id), source, target, config)
    return Expected(source=source, build_key=key)


def pack(build_key: str, build_dir: Path, *, log: str = "", seconds: float = 0.0) -> bytes:
    """The build directory's regular files (its own `candidate.py` left out: the loading host writes its own) and a
    manifest naming `build_key`, compressed. Raises ArtifactRefused on anything but files and directories, which
    `compiler.audit` refused at build time already."""
    files, blobs = [], []
    for path in sorted(p for p in build_dir.rglob("*")):
        info = path.lstat()
        rel = path.relative_to(build_dir).as_posix()
        if stat.S_ISDIR(info.st_mode) or rel == compiler.SOURCE_FILE:
            continue
        if not stat.S_ISREG(info.st_mode):
            raise ArtifactRefused("unpackable", f"the build directory holds a non-regular file at {rel}")
        data = path.read_bytes()
        files.append({"path": rel, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                      "executable": bool(info.st_mode & stat.S_IXUSR), "mtime_ns": info.st_mtime_ns})
        blobs.append(data)
    manifest = json.dumps({"format": FORMAT, "build_key": build_key, "files": files, "log": log[:LOG_LIMIT],
                           "seconds": seconds}).encode()
    return zlib.compress(len(manifest).to_bytes(_LENGTH_BYTES, "big") + manifest + b"".join(blobs), 6)


def _inflate(blob: bytes) -> bytes:
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(blob, MAX_UNPACKED_BYTES + (1 << 20))
    except zlib.error as exc:
        raise ArtifactRefused("corrupt", f"the artifact does not decompress: {exc}") from exc
    if inflater.unconsumed_tail:
        raise ArtifactRefused("too_large", f"the artifact unpacks to more than {MAX_UNPACKED_BYTES} bytes")
    return out


def _safe_path(rel: object) -> PurePosixPath:
    """A relative path of plain components, or ArtifactRefused."""
    if not isinstance(rel, str) or not rel or "\0" in rel or "\\" in rel:
        raise ArtifactRefused("path", f"a file with an unusable name: {rel!r}")
    path = PurePosixPath(rel)
    if path.is_absolute() or any(part in ("", ".", "..") for part in rel.split("/")):
        raise ArtifactRefused("path", f"a file outside the build directory: {rel!r}")
    if rel == compiler.SOURCE_FILE:
        raise ArtifactRefused("path", "the artifact carries its own candidate.py")
    return path


@dataclass(frozen=True)
class _File:
    path: PurePosixPath
    data: bytes
    executable: bool
    mtime_ns: int
    """As the build left it: ninja's logs compare the times of outputs and inputs, and the execution child refuses
    a build whose ninja would not be up to date (sandbox/build/no_build.py)."""


@dataclass(frozen=True)
class _Unpacked:
    files: list[_File]
    log: str
    seconds: float


def _read(blob: bytes, build_key: str) -> _Unpacked:
    """The artifact's files, each checked against its manifest, which must name `build_key`."""
    raw = _inflate(blob)
    length = int.from_bytes(raw[:_LENGTH_BYTES], "big")
    try:
        manifest = json.loads(raw[_LENGTH_BYTES:_LENGTH_BYTES + length])
        entries = list(manifest["files"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ArtifactRefused("corrupt", f"the artifact's manifest is unreadable: {exc}") from exc
    if manifest.get("format") != FORMAT:
        raise ArtifactRefused("corrupt", f"artifact format {manifest.get('format')!r}, not {FORMAT}")
    if manifest.get("build_key") != build_key:
        raise ArtifactRefused("key", f"the artifact's manifest is for build key {str(manifest.get('build_key'))[:16]}"
                              f"..., not this candidate's {build_key[:16]}... on this host")
    if len(entries) > MAX_FILES:
        raise ArtifactRefused("too_large", f"{len(entries)} files, more than {MAX_FILES}")
    files, offset, seen = [], _LENGTH_BYTES + length, set()
    for entry in entries:
        path = _safe_path(entry.get("path") if isinstance(entry, dict) else None)
        size, mtime = entry.get("size"), entry.get("mtime_ns")
        if (path in seen or not isinstance(size, int) or size < 0 or offset + size > len(raw)
                or not isinstance(mtime, int) or mtime < 0):
            raise ArtifactRefused("corrupt", f"the manifest's entry for {path} does not match the bytes")
        data = raw[offset:offset + size]
        offset += size
        if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
            raise ArtifactRefused("corrupt", f"{path}'s bytes do not match its digest in the manifest")
        seen.add(path)
        files.append(_File(path, data, bool(entry.get("executable")), mtime))
    if offset != len(raw):
        raise ArtifactRefused("corrupt", "bytes past the last file the manifest names")
    log, seconds = manifest.get("log"), manifest.get("seconds")
    return _Unpacked(files, log[:LOG_LIMIT] if isinstance(log, str) else "",
                     float(seconds) if isinstance(seconds, (int, float)) else 0.0)


def _write(build_dir: Path, files: list[_File]) -> None:
    """Write into a fresh, empty build directory: every directory made here, every file new (O_EXCL, no link
    followed), so nothing the artifact names can reach outside it; each file keeps its build-time mtime."""
    for file in files:
        target = build_dir.joinpath(*file.path.parts)
        parent = build_dir
        for part in file.path.parts[:-1]:
            parent = parent / part
            if parent.is_symlink() or (parent.exists() and not parent.is_dir()):
                raise ArtifactRefused("path", f"{file.path}: a component is not a directory")
            parent.mkdir(exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        fd = os.open(target, flags, 0o755 if file.executable else 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(file.data)
            fh.flush()
            os.utime(fh.fileno(), ns=(file.mtime_ns, file.mtime_ns))


def installed(config: JudgeConfig, build_key: str, target: str) -> bool:
    """Whether this host already stores a good build of the key (then no artifact is needed)."""
    paths = compiler.KeyPaths.of(config.build_root, build_key)
    stored = compiler.load_result(paths, compiler.accelerator_config(config, target))
    return stored is not None and stored.ok


def install(blob: bytes, want: Expected, target: str, config: JudgeConfig) -> None:
    """Check the artifact against `want` (this host's own derivation) and store it as this key's build in
    `config.build_root`, so that `prepare` finds it as a stored build. Raises ArtifactRefused; nothing is left
    behind then (the next `prepare` builds afresh). OSError: the build root could not be written."""
    unpacked = _read(blob, want.build_key)
    paths = compiler.KeyPaths.of(config.build_root, want.build_key)
    accel = compiler.accelerator_config(config, target)
    with compiler.build_lock(config.build_root, want.build_key):
        stored = compiler.load_result(paths, accel)
        if stored is not None and stored.ok:
            return
        compiler.start_build(paths, want.source)
        try:
            _write(paths.build, unpacked.files)
            refused = compiler.audit(paths.build)
            if refused:
                raise ArtifactRefused("path", f"the unpacked build holds {refused}")
            compiler.place_source(paths)
            compiler.store_result(paths, compiler.BuildResult(ok=True, build_failed=False, log=unpacked.log,
                                                              seconds=unpacked.seconds), accel)
        except BaseException:
            compiler.clear_build(paths.key_dir)
            raise
