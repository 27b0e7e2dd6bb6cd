"""schedlock: ShedLock's lock semantics over HTTP, on one Postgres table, using the database clock."""

__version__ = "0.1.0"
