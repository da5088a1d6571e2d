"""Observability: worker statistics, Prometheus metrics at /metrics, structured (JSON) logs."""
