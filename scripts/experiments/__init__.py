"""Measurements that decided a design, kept to rerun when the question reopens (scripts/README.md)."""
