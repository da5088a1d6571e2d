"""Everything that runs in a process the candidate's code shares: the execution child's harness (harness.py), its
training variant (training.py), its timing loop (timing.py), the window that keeps each call's output (window.py),
the kernel trace's recorder (recorder.py), the audit hook that guards them (audit.py), the guard that keeps it from
building (no_build.py); the build child's hooks (build/); the child ncu profiles (profiled.py).
`python -m sandbox.child` (__main__.py) is the entry point.

Code here imports only sandbox.protocol (the wire format), sandbox.shared (pure code both sides use), reference (the
task definitions), torch and the standard library, and its own room; no module outside this room imports it (the
parent starts it by name). tests/test_lint.py checks both."""
