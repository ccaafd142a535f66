"""The one ``MetaData`` every table of the store is declared on.

A module of its own so that the tables can be declared in more than one
(tables.py, approval_tables.py) and tables.py re-export them all without an
import cycle.
"""

from __future__ import annotations

from sqlalchemy import MetaData

__all__ = ["metadata"]

metadata = MetaData()
