"""Scripts around the judge (index: scripts/README.md). A package so that `python3 -m scripts.gpu.burst` and the
tests import them by module name; it is not installed (pyproject's packages are reference, sandbox, service)."""
