"""The build stage, CPU only: compile a candidate's extensions in an isolated child (compiler.py), with the judge's
accelerators (a precompiled torch header, accel.py; slim headers, slim_headers.py; nvcc's front ends side by
side, nvcc_split.py) installed in that child by hooks.py; compile errors placed in the candidate's text
(errors.py), advice for a slow build (advice.py), and the guard that keeps the execution child from
building (no_build.py)."""
