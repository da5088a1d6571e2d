"""Thin adapters from RL trainers' reward interfaces to the judge's reward call (`POST /v1/rewards`).

One module per trainer, each over `scoring.KernelScorer` (batching, a concurrency limit, retries on 503 and
connection errors, a client-side timeout, the reward formula's parameters, and infrastructure failures kept
apart from the kernel's own): `trl` (reward functions), `verl` (`compute_score` and its batched and async
forms), `verifiers` (a taskset whose rubric is the judge; needs the `verifiers` package), `openenv`
(`reset`/`step` with the verdict as the observation) and `nemo_gym` (a resources server whose `verify` is the
judge). `docs/integrations.md` shows each in use.
Importing this package imports neither torch nor any trainer.
"""

from service.integrations.scoring import INFRA_FAILURES, KernelScorer, Outcome, Score, completion_text

__all__ = ["INFRA_FAILURES", "KernelScorer", "Outcome", "Score", "completion_text"]
