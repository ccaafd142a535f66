"""The scale-out store: PostgreSQL, for several server processes."""
