"""Batch scoring: many samples uploaded at once, judged by the ordinary queue, summarised the way papers do.

- `schemas`: the bodies of /v1/batches and /v1/rewards.
- `parse`: an upload (JSONL or JSON) into validated samples and per-line errors.
- `dedup`: which samples of a batch are the same code (judged once, verdict shared).
- `fairness`: the claim order that keeps interactive submissions and small batches from waiting behind big ones.
- `store`: the database side (admission, views, results pages, cancel); every function takes the caller's Session.
- `metrics`: pure functions: compile/correct rates, fast_p, geometric-mean speedup, pass@k, best-of-k.
- `rewards`: the pure reward function for RL trainers.
"""
