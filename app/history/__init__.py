"""The run history: runs and skipped attempts (docs/history.md), their retention, and the chores that write them."""
