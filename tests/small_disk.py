"""A real small filesystem for full-disk tests: a tmpfs of a given size mounted (as root) at a directory, filled to
the last block on request, unmounted at the end.

A tmpfs is used rather than a loop device because it needs no image file and no mkfs, and it fails a write with the
same ENOSPC ("No space left on device") a full ext4 or XFS does. Tests that use it are skipped where the process may
not mount (not root, or no CAP_SYS_ADMIN)."""

from __future__ import annotations

import errno
import os
import pwd
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

FILLER = ".filler"


@contextmanager
def small_disk(where: Path, size_bytes: int, owner: str | None = None) -> Iterator[Path]:
    """A tmpfs of `size_bytes` mounted at `where` (created) for the block's length; `owner`: the user its root
    belongs to (mode 0700, as PostgreSQL wants a tablespace's directory), else root's, mode 0755."""
    where.mkdir(parents=True, exist_ok=True)
    options = f"size={size_bytes}"
    if owner is not None:
        user = pwd.getpwnam(owner)
        options += f",mode=0700,uid={user.pw_uid},gid={user.pw_gid}"
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        # Lazily: a process the test started (a sandboxed child) may still hold a file there for an instant.
        subprocess.run(["umount", "-l", str(where)], check=True)


def fill(disk: Path, leave_bytes: int = 0) -> Path:
    """Write one file on `disk` until the filesystem refuses (ENOSPC), then give back `leave_bytes` (rounded down
    to the tmpfs's pages): what a build finds on a disk that is full or all but full. Returns the file, whose
    removal frees the space."""
    path = disk / FILLER
    chunk = b"\0" * (1 << 20)
    with open(path, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(chunk)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
        while True:  # the last pages, less than a chunk
            try:
                fh.write(b"\0" * 4096)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
        size = fh.seek(0, os.SEEK_END)
        if leave_bytes:
            os.ftruncate(fh.fileno(), max(0, size - leave_bytes))
    return path


def free_bytes(disk: Path) -> int:
    stat = os.statvfs(disk)
    return stat.f_bavail * stat.f_frsize
