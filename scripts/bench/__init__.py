"""Benchmarks whose figures docs/benchmarks.md cites (scripts/README.md)."""
