"""Coalescing: operations that arrive together go as one statement (flights: one name; batches: many)."""
