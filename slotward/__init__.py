"""slotward: a coordination service for AI agents that book time.

The code lives in the root folders ``engine/``, ``adapters/`` and ``api/``; this
package only maps them (through relative symlinks) to ``slotward.engine``,
``slotward.adapters`` and ``slotward.api``.
"""

__version__ = "0.1.0"
