"""The `kernel-judge` command line: `main.py` assembles the commands of the modules beside it."""
