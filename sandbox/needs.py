"""What judging a candidate needs of a host (a GPU, a kernel language), and what a host offers.

A candidate written for a GPU (a CUDA source for torch's extension builder, or a Triton, CuTe DSL or TileLang
kernel) cannot be judged on a host without one: there it fails for the host's reason ("CUDA_HOME environment
variable is not set", "'triton' is not installed here"), and that failure is not the candidate's verdict. A queue
of candidates can read `needs` when one arrives, keep it with its job, and hand the job only to a host whose
`Capabilities` cover it.

`needs` reads the candidate's source, as sent or as extracted; it is a static reading of untrusted text, so it
errs toward "runs anywhere": only plain signs of device code count (a `cuda_sources=` argument, a `__global__`
function, a `.cu` file, `with_cuda=True`, a CUDA header, an import of a GPU kernel language). A CUDA candidate
that hides all of them is judged where it lands, as before; a C++ candidate for the CPU is never held back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sandbox.shared import languages
from sandbox.extract import ExtractionError, extract_candidate

GPU = "gpu"
"""The name of the one device capability, as a job's needs and a worker's capabilities spell it."""
_DEVICE_CODE = re.compile(r"\bcuda_sources\s*=|__global__|\.cuh?['\"]|\bwith_cuda\s*=\s*True|#\s*include\s*[<\"]cuda"
                          r"|\bCUDAExtension\b")
"""Plain signs of CUDA code for torch's extension builder (a CPU build of torch has no nvcc or CUDA headers)."""


@dataclass(frozen=True, kw_only=True)
class Needs:
    """What judging one candidate needs of a host."""

    gpu: bool
    language: str | None = None
    """An optional kernel language (sandbox/shared/languages.py id, e.g. "triton") the candidate is written in; None:
    only torch and its extension builder, which every host has."""

    def words(self) -> list[str]:
        """As a person reads it: ["gpu", "triton"]."""
        return [GPU] * self.gpu + ([self.language] if self.language else [])


@dataclass(frozen=True, kw_only=True)
class Capabilities:
    """What a host (a worker) can judge."""

    gpu: bool
    languages: tuple[str, ...]
    """The kernel languages installed there (sandbox/shared/languages.py ids)."""

    def missing(self, needs: Needs) -> list[str]:
        """What this host lacks to judge a candidate with `needs`: [] when it can."""
        lacking = [GPU] if needs.gpu and not self.gpu else []
        if needs.language and needs.language not in self.languages:
            lacking.append(needs.language)
        return lacking

    def words(self) -> list[str]:
        return [GPU] * self.gpu + list(self.languages)

    @classmethod
    def parse(cls, text: str) -> "Capabilities":
        """From "gpu,triton,cuda" (a worker's explicit override, `Settings.worker_judges`); refuses an unknown word."""
        words = [w.strip() for w in text.split(",") if w.strip()]
        unknown = [w for w in words if w != GPU and w not in languages.IDS]
        if unknown:
            raise ValueError(f"unknown capabilities {unknown}: name {GPU!r} and languages of {list(languages.IDS)}")
        return cls(gpu=GPU in words, languages=tuple(w for w in languages.IDS if w in words))


def host_capabilities(gpu: bool) -> Capabilities:
    """This host's: `gpu` when its judge executes on a CUDA device, and the languages installed here."""
    return Capabilities(gpu=gpu, languages=tuple(language.id for language in languages.available()))


def needs(text: str) -> Needs:
    """What judging this candidate (a completion or a bare module) needs. A text with no candidate in it needs
    nothing: any host refuses it alike (compile_error, "no candidate found")."""
    try:
        source = extract_candidate(text)
    except ExtractionError:
        return Needs(gpu=False)
    language = next((language.id for language in languages.LANGUAGES if language.module is not None
                     and re.search(rf"^\s*(?:import|from)\s+{language.module}\b", source, re.M)), None)
    return Needs(gpu=language is not None or bool(_DEVICE_CODE.search(source)), language=language)
