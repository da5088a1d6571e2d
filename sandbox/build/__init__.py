"""The build stage, CPU only, the parent's side: compile a candidate's extensions in an isolated child (compiler.py),
with the judge's accelerators (a precompiled torch header, accel.py; nvcc's front ends side by side, nvcc_split.py);
the build child installs them with its hooks (sandbox/child/build/); compile errors placed in the candidate's text
(errors.py), advice for a slow build (advice.py)."""
