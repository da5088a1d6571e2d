"""The execution stage, on the device, the parent's side: a candidate's phases in an isolated child (phases.py, run.py;
a training step's in training.py), the timing plan and summary (timing.py; the calls are timed in the child,
sandbox/child/timing.py) and the bounds on what the child claims (plausibility.py, cputime.py), the reference timings
(baseline.py, measured by measure_baselines.py) and pre-started children (warm.py, device_gate.py, start_slots.py,
bytecode.py)."""
