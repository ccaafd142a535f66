"""The embedded store: one SQLite file."""
