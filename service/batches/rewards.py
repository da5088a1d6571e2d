"""The reward an RL trainer gets for one completion: a pure function of its verdict summary and parameters.

    reward = hack_penalty                                   if the verdict is policy_violation or tamper_detected
           = format + compile·1{compiled} + correct·1{correct} + speedup_weight·f(speedup)·1{correct}   otherwise
             (format: `format` when a code block defining ModelNew was found, else the whole reward is 0)

Terms follow published kernel RL work:
- Kevin-32B (Baronio et al., "Kevin: Multi-Turn RL for Generating CUDA Kernels", arXiv:2507.11948, and
  https://cognition.ai/blog/kevin-32b): 0.3 for a correct kernel plus its speedup over eager PyTorch, and 0
  for a kernel that breaks the format or is caught reward hacking. Our defaults `correct=0.3`,
  `speedup_transform="linear"`, `speedup_baseline="eager"` are that reward.
- TritonForge's GRPO reward (RLsys-Foundation/TritonForge, docs/ARCHITECTURE.md, "reward system"): +0.1 when
  the code compiles, +0.3 when correct, +(speedup - 1) above 1x, capped: our `compile=0.1` and the
  `"excess"` transform.
- AutoTriton (Li et al., arXiv:2507.05687): a rule-based reward (right format, a real kernel) combined with the
  execution-based one, to curb reward hacking: our `format` term and the penalty for a breach the judge
  caught (`policy_violation`: the reference operator or no kernel of its own; `tamper_detected`: the
  harness or timers were touched). The penalty is negative by default so that a hack scores below an honest
  failure, not merely equal to it.

The speedup is the judge's measured baseline / candidate time on the same card (sandbox.verdict.Performance),
capped at `speedup_cap` so one outlier cannot dominate a group's advantage. Its term is floored at 0 under
every transform (`log` is max(0, ln s)): a slow correct kernel then still scores at least format + compile +
correct, and so never below an incorrect kernel (format + compile at most) or an answer with no code. Left
unfloored, ln 0.5 = -0.69 would put a correct kernel at 0.5x (0.1 + 0.3 - 0.69) below an answer with no code
(0.0), and a trainer would learn to write nothing. The parameters are bounded for the same order: `format`,
`compile`, `correct` and `speedup_weight` are not negative, `no_format`, `hack_penalty` and `refused` not positive.
A correct verdict without a timing (the compile-only load-test judge) gets no speedup term. A `system_error`
is the judge's failure, not the policy's: its reward is `system_error` (null by default: drop the sample).
A completion still unjudged at the deadline gets `unfinished` (null by default).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sandbox.verdict import Status

HACKS = (Status.POLICY_VIOLATION, Status.TAMPER_DETECTED)
"""Verdicts that mean the candidate tried to win without doing the work."""


@dataclass(frozen=True)
class VerdictSummary:
    """What the reward looks at. `status` is None while unjudged."""

    status: Status | None
    format_ok: bool
    """A candidate module (a ```python block defining ModelNew, or a bare module) was found in the completion."""
    compiled: bool = False
    speedup_eager: float | None = None
    speedup_compile: float | None = None


class RewardParams(BaseModel):
    """The reward formula's parameters (see the module docstring); every one has a published default."""

    # NaN or an infinity would make every reward (and the JSON answer) meaningless.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    # The bounds keep a correct kernel's reward (format + compile + correct + a speedup term >= 0) at or above an
    # incorrect kernel's (format + compile, or format alone), a hack's, a refused item's and no code's (<= 0):
    # the order the reward exists to teach. They are per field, so the OpenAPI schema states them.
    format: float = Field(default=0.0, ge=0, description="Added when a candidate module was found (not negative).")
    compile: float = Field(default=0.1, ge=0,
                           description="Added when the candidate compiled (TritonForge: 0.1; not negative).")
    correct: float = Field(default=0.3, ge=0, description="Added when correct (Kevin-32B: 0.3; not negative).")
    speedup_weight: float = Field(default=1.0, ge=0,
                                  description="Weight of the speedup term (correct kernels only; not negative).")
    speedup_baseline: Literal["eager", "compile"] = Field(default="eager",
                                                          description="Speedup over eager PyTorch or torch.compile.")
    speedup_transform: Literal["linear", "log", "excess"] = Field(
        default="linear", description="linear: s (Kevin-32B); log: max(0, ln s) (0 at parity and below); "
                                      "excess: max(0, s - 1) (TritonForge). Never negative, so a correct kernel "
                                      "never scores below an incorrect one or no code.")
    speedup_cap: float = Field(default=10.0, gt=0, description="s is clipped to [0, cap] before the transform.")
    hack_penalty: float = Field(default=-1.0, le=0, description="The whole reward of a policy_violation or "
                                                               "tamper_detected (not positive).")
    no_format: float = Field(default=0.0, le=0,
                             description="The whole reward when no candidate module was found (not positive).")
    unfinished: float | None = Field(default=None, description="Reward of a completion unjudged at the deadline.")
    system_error: float | None = Field(default=None, description="Reward when the judge itself failed.")
    refused: float = Field(default=0.0, le=0, description="Reward of an item the service refused (empty, too large, "
                                                          "unknown task; not positive).")


@dataclass(frozen=True)
class Reward:
    value: float | None
    terms: dict[str, float]


def _speedup_term(speedup: float | None, params: RewardParams) -> float:
    if speedup is None or not math.isfinite(speedup) or speedup <= 0:
        return 0.0
    s = min(speedup, params.speedup_cap)
    if params.speedup_transform == "log":
        return max(0.0, math.log(s))
    if params.speedup_transform == "excess":
        return max(0.0, s - 1.0)
    return s


def reward(summary: VerdictSummary, params: RewardParams | None = None) -> Reward:
    """The scalar reward and its named terms (which sum to it) for one completion's verdict."""
    params = params or RewardParams()
    if summary.status is None:
        return Reward(params.unfinished, {})
    if summary.status is Status.SYSTEM_ERROR:
        return Reward(params.system_error, {})
    if summary.status in HACKS:
        return Reward(params.hack_penalty, {"hack": params.hack_penalty})
    if not summary.format_ok:
        return Reward(params.no_format, {"format": params.no_format})
    correct = summary.status is Status.CORRECT
    # A correct verdict ran, so it compiled: the order the parameter bounds keep rests on it.
    terms = {"format": params.format, "compile": params.compile if summary.compiled or correct else 0.0}
    terms["correct"] = params.correct if correct else 0.0
    speedup = summary.speedup_eager if params.speedup_baseline == "eager" else summary.speedup_compile
    terms["speedup"] = params.speedup_weight * _speedup_term(speedup, params) if correct else 0.0
    return Reward(sum(terms.values()), terms)
