"""Scheduler programs the integration tests run as separate processes (tests/system/integrations/), one module per
scheduler, configured by the NODE_* environment variables that tests/support/schedulers.py sets."""
