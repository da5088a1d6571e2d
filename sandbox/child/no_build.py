"""Inside the execution child: torch's extension builder may only find its work done, never do it.

Every extension a candidate loads is built by the build stage (sandbox/pipeline.py `prepare`, a GPU-less child
that imports the candidate once); the execution child holds the device, so a compile there would hold the GPU
for the length of a build (a minute for a fresh CUDA build; issue 24 saw 301 s). `install` replaces torch's
ninja run (`torch.utils.cpp_extension._run_ninja_build`, which `load`, `load_inline` and the object-only
builds all go through) by a dry run: when ninja has nothing to do, the extension is loaded as usual; when it
would run any step, `NotBuilt` is raised instead, naming the extension and what ninja would have rebuilt
(likewise for a lock file a killed build left, which torch would wait on forever: `FileBaton.wait`), and the
refusal is remembered (`refusals`) so that a candidate catching the exception cannot turn it into a different
failure. The parent turns it into `compile_error` (protocol.FailureKind.NOT_BUILT).

Why an extension is found not built: its name, sources, flags or build directory are computed at run time
(a random or time-stamped name, a temporary `build_directory`, flags that read the GPU), so the second
import asks for a different build than the first; or the build stage never reached it (the candidate builds
it lazily in forward(), or its import failed there before the call).

TRUST. This runs in the untrusted child: candidate code can put torch's own function back and build anyway.
That only costs the candidate its own time, which the load step's limit bounds (JudgeConfig.load_timeout_s),
and the replaced function is watched by the child's integrity check, so putting it back is reported as
tampering.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.protocol import FailureKind

DRY_RUN_TIMEOUT_S = 30.0
"""ninja's dry run reads build.ninja and the build log and stats every file: milliseconds for an extension."""
SHOWN_STEPS = 3
"""How many of ninja's reasons a diagnosis quotes."""
_NAMED = re.compile(r"extension '([^']+)'")
_EXPLAIN = re.compile(r"^ninja explain: (.*)$", re.M)
_STAMPS = re.compile(r" \(\d+ vs \d+\)")
_STEP = re.compile(r"^\[\d+/\d+\] ", re.M)


class NotBuilt(RuntimeError):
    """An extension the build stage did not build: loading it would compile under the device hold."""

    kind = FailureKind.NOT_BUILT

    def __init__(self, name: str, reasons: list[str]) -> None:
        self.name = name
        self.reasons = reasons
        why = "; ".join(reasons[:SHOWN_STEPS]) or "ninja has steps to run"
        super().__init__(
            f"the extension {name!r} was not built by the build stage, and the device stage never compiles "
            f"(ninja: {why}). Its name, sources, flags or build directory differ from the build's: computed at "
            "run time (a random or time-based name, a temporary build_directory, flags that depend on the GPU)? "
            "Or it is built lazily in forward(), or the candidate's import failed in the build stage before it "
            "was reached (the build log says how that import went). Build every extension at import, in the "
            "module or in ModelNew.__init__, from constant names, sources and flags.")


@dataclass
class Guard:
    """The installed dry-run check and what it refused."""

    refusals: list[NotBuilt] = field(default_factory=list)

    def run_ninja_build(self, build_directory: str, verbose: bool, error_prefix: str) -> None:
        """torch's `_run_ninja_build(build_directory, verbose, error_prefix)`, built-or-refuse."""
        reasons = pending_steps(Path(build_directory))
        if reasons is None:
            return
        named = _NAMED.search(error_prefix)
        refusal = NotBuilt(named.group(1) if named else Path(build_directory).name, reasons)
        self.refusals.append(refusal)
        raise refusal

    def wait_for_lock(self, baton: object) -> None:
        """torch's `FileBaton.wait`: in this child nothing else builds, so a lock file in an extension's directory
        is one a build-stage child left when it was killed mid-build; torch would wait for it forever."""
        directory = Path(getattr(baton, "lock_file_path", "lock")).parent
        refusal = NotBuilt(directory.name, ["the build stage's build of it was cut off (its lock file is still there)"])
        self.refusals.append(refusal)
        raise refusal

    def raise_if_refused(self) -> None:
        """Raise the first refusal, whatever the candidate did with it."""
        if self.refusals:
            raise self.refusals[0]


def pending_steps(directory: Path) -> list[str] | None:
    """None when ninja has nothing to do in `directory`; otherwise why it would run (its `-d explain` lines,
    with the build directory left out), or the error that stopped the dry run."""
    try:
        done = subprocess.run(["ninja", "-n", "-d", "explain"], cwd=directory, capture_output=True, text=True,
                              timeout=DRY_RUN_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"the dry run failed: {exc}"]
    output = done.stdout + done.stderr
    if done.returncode != 0:
        errors = [line for line in output.splitlines() if line.startswith("ninja: error")]
        return [(errors[0] if errors else f"the dry run exited with {done.returncode}").replace(f"{directory}/", "")]
    if not _STEP.search(done.stdout):
        return None
    # "X is dirty" follows each reason; the modification times say nothing to a person.
    reasons = [_STAMPS.sub("", reason).replace(f"{directory}/", "") for reason in _EXPLAIN.findall(output)
               if not reason.endswith(" is dirty")]
    return list(dict.fromkeys(reasons)) or [f"{len(_STEP.findall(done.stdout))} step(s) to run"]


def install() -> Guard:
    """Replace torch's ninja run in this process by the guard's (see the module docstring)."""
    import torch.utils.cpp_extension as ext  # torch's extension builder: loaded where the guard is installed
    from torch.utils.file_baton import FileBaton  # (with it, its lock)

    guard = Guard()
    ext._run_ninja_build = guard.run_ninja_build
    def wait(baton: FileBaton) -> None:  # a plain function, so that the class binds it to each baton
        guard.wait_for_lock(baton)

    FileBaton.wait = wait
    return guard
