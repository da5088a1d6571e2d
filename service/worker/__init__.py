"""Worker processes: claim jobs, compile in a pool, execute one job at a time per device, record verdicts."""
