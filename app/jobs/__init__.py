"""Jobs (docs/jobs.md): lock names with an expected schedule, and the state of each expected tick, decided from the
run history (app.history) on the database's clock. Knows no HTTP."""
