"""The judging service: HTTP API, database, durable job queue, workers and CLI around `sandbox`."""
