"""Run in its own process by tests/sandbox/test_harness_reach.py: the judge's audit hook cannot be removed once
added, so every scenario gets a fresh interpreter.

argv: a module file playing the candidate (outside every directory the hook trusts) that defines `run(harness)`.
The harness here stands for what the child seals before the import: a CPU `DeviceClock` and an object with a
method and two attributes, and tripwires on aten::kl_div. Prints one JSON object: what `run` returned, the hook's
findings and tripwire hits after it, and the hook registries found changed (all of them, and the quick ones).
"""

import importlib.util
import json
import sys

import torch

from sandbox.child import audit, hook_registries
from sandbox.child.harness import Tripwires
from sandbox.child.timing import DeviceClock


class Harness:
    def step(self) -> str:
        return "the harness's own method"


audit.install()
baseline = hook_registries.HookBaseline.capture()
harness = Harness()
harness.clock = DeviceClock(torch.device("cpu"))
harness.level = 1
harness.tripwires = Tripwires(frozenset({"aten::kl_div"}))
audit.seal("the harness", harness, ("clock", "level", "tripwires"))
audit.seal("the timing clock", harness.clock)

spec = importlib.util.spec_from_file_location("candidate", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules["candidate"] = module
spec.loader.exec_module(module)
try:
    result = module.run(harness)
except Exception as exc:  # noqa: BLE001 - reported to the test, which expects some refusals
    result = f"raised {type(exc).__name__}: {exc}"
found, hits = audit.findings()
print(json.dumps({"result": result if isinstance(result, (str, int, float, list, dict)) else repr(result)[:300],
                  "findings": found, "hits": hits, "hooks": hook_registries.active_hooks(baseline),
                  "quick": hook_registries.active_hooks(baseline, quick=True)}))
