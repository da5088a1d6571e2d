"""Profiles on request (issue 28): a submission sent with `profile: true` gets, after its verdict, its kernels
run under Nsight Compute by the worker that judged it (sandbox.profiling), stored beside the verdict.

- `store`: the `profiles` rows: asked for at submission, found pending by the worker, recorded, read;
- the worker runs it (service/worker/runner.py `_profile`), the API serves it (GET /v1/submissions/{id}/profile),
  the CLI prints it (`kernel-judge profile ID`), the submission page shows it, and `kernel-judge generate
  --profile` feeds its text to the model in the next turn.
"""
