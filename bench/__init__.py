"""Benchmark: schedlock over HTTP against the same lock statements sent straight to Postgres (``python -m bench``)."""
