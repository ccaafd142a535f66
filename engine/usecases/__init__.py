"""The use cases: each runs inside one unit of work, the only place transactions begin."""
