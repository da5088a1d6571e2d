"""How a child turns the judged source into the candidate's model: one way for the execution child
(sandbox/child/harness.py: its load and its build-only import) and the profiled child (sandbox/child/profiled.py),
so that what is profiled is loaded exactly as what was judged.

UNTRUSTED from the first line of `import_candidate` on: the candidate's module runs in this process.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import torch

CANDIDATE_MODULE = "candidate"
"""The name the candidate's module is imported under (and registered in sys.modules as, so that its own
imports of itself, dataclasses and pickling find it)."""


def import_candidate(source_path: str) -> ModuleType:
    """Run the candidate's module from `source_path`."""
    spec = importlib.util.spec_from_file_location(CANDIDATE_MODULE, source_path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import the candidate from {source_path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[CANDIDATE_MODULE] = module
    spec.loader.exec_module(module)
    return module


def model_class(module: ModuleType) -> type[torch.nn.Module]:
    """The module's `ModelNew`, refused unless it is a torch.nn.Module subclass."""
    model_cls = getattr(module, "ModelNew", None)
    if not isinstance(model_cls, type) or not issubclass(model_cls, torch.nn.Module):
        raise TypeError("ModelNew is not a subclass of torch.nn.Module")
    return model_cls


def load_model(source_path: str, device: torch.device) -> torch.nn.Module:
    """Import the candidate and construct its model on `device`."""
    return model_class(import_candidate(source_path))().to(device)
