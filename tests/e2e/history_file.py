"""A recorded history in a JSON file: what a crash run's verdict was computed from.

``save`` writes a :class:`Recording` (every call, the store's final state, the
instant it was read, the outbox rows) and ``load`` reads back an equal one, so
``python -m tests.e2e.recheck FILE`` reaches the same verdict offline. Values
are written field by field from the dataclasses and read back by their type
hints, so a field added to ``Call`` or ``Hold`` is carried without a change
here; a field the file has and the class lacks is an error, not dropped.
"""

from __future__ import annotations

import base64
import enum
import json
import types
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

from slotward.testing.recorded import Call, Snapshot

__all__ = ["OutboxRow", "Recording", "load", "save"]

FORMAT = "slotward-crash-history/1"


@dataclass(frozen=True)
class OutboxRow:
    tenant: str
    type: str
    hold_id: str | None


@dataclass(frozen=True)
class Recording:
    """A history and the state it is checked against.

    ``now`` is the instant the snapshot was read (the checker's ``now``);
    ``run`` says how to run it again (seed, store, kill points): not needed to
    re-check it.
    """

    calls: tuple[Call, ...]
    snapshot: Snapshot
    now: datetime
    outbox: tuple[OutboxRow, ...] = ()
    run: Mapping[str, Any] = field(default_factory=dict)


def save(path: Path, recording: Recording) -> Path:
    document = {"format": FORMAT, **_encode(recording)}
    path.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
    return path


def load(path: Path) -> Recording:
    document = json.loads(path.read_text())
    if document.pop("format", None) != FORMAT:
        raise ValueError(f"{path} is not a {FORMAT} file")
    decoded: Recording = _decode(Recording, document)
    return decoded


def _encode(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _encode(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, bytes):
        try:
            return value.decode()  # the answers are JSON: readable in the file
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(value).decode()}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): _encode(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_encode(v) for v in value]
    return value


def _decode(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        (inner,) = [a for a in args if a is not type(None)]
        return _decode(inner, value)
    if origin is tuple:
        return tuple(_decode(args[0], v) for v in value)  # tuple[X, ...]
    if isinstance(hint, type) and is_dataclass(hint):
        hints = get_type_hints(hint)
        known = {f.name for f in fields(hint)}
        if unknown := set(value) - known:
            raise ValueError(f"{hint.__name__} has no fields {sorted(unknown)}")
        return hint(**{name: _decode(hints[name], v) for name, v in value.items()})
    if hint is bytes:
        return value.encode() if isinstance(value, str) else base64.b64decode(value["base64"])
    if hint is datetime:
        return datetime.fromisoformat(value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    return value  # str, int, float, a Literal, a JSON mapping
