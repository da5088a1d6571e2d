"""The execution stage, on the device: a candidate's phases in an isolated child (phases.py, run.py; a training
step's in training.py), its timing (timing.py, window.py) and the bounds on what it claims (plausibility.py,
cputime.py), the reference timings (baseline.py, measured by measure_baselines.py) and pre-started children
(warm.py, device_gate.py, start_slots.py, bytecode.py)."""
