"""The GPU acceptance kit: readying a bare GPU machine and judging the corpus on it (scripts/README.md)."""
