"""Request and response shapes, declared once (tool arguments too: engine/tools.py).

A :class:`Shape` is a named JSON object made of :class:`Field` s. The same
declaration validates decoded request bodies (:meth:`Shape.validate`) and
produces the JSON Schemas of the OpenAPI 3.1 document
(:meth:`Shape.json_schema`, :func:`collect_components`), so the published
contract and the enforced one cannot drift apart.

Validation follows JSON's data model, not Python's: an ``integer`` is an
``int`` that is not a ``bool`` (``3.0`` and ``"3"`` are refused), a ``number``
is an ``int`` or finite ``float`` that is not a ``bool``, and ``null`` is
accepted only where a field is ``nullable``; strings never hold NUL. The first
rule broken raises ``ValidationFailed`` with ``extra={"field": "dotted.path"}``.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any, Literal, NoReturn

from slotward.engine.errors import ValidationFailed

__all__ = ["Field", "FieldType", "Shape", "collect_components"]

FieldType = Literal["string", "integer", "number", "boolean", "object", "array", "any"]
"""The JSON types a :class:`Field` may declare (``any``: any JSON value, null too)."""


def _is_number(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int) and not isinstance(value, bool)


_TYPE_CHECKS: dict[str, Callable[[object], bool]] = {
    "string": lambda value: isinstance(value, str),
    "integer": lambda value: isinstance(value, int) and not isinstance(value, bool),
    "number": _is_number,
    "boolean": lambda value: isinstance(value, bool),
    "object": lambda value: isinstance(value, dict),
    "array": lambda value: isinstance(value, list),
    "any": lambda value: True,
}
_NOUNS = {name: f"an {name}" if name[0] in "aio" else f"a {name}" for name in _TYPE_CHECKS}


@dataclass(frozen=True)
class Field:
    """One member of a :class:`Shape` (or the item type of an array).

    ``enum`` and ``pattern`` apply to strings (``pattern`` is searched, not
    anchored, as in JSON Schema; keep to the syntax Python and ECMA-262 share).
    ``min_length``/``max_length`` count code points, ``minimum``/``maximum``
    are inclusive, ``min_items``/``max_items`` bound arrays. ``items`` types
    the elements of an array (the ``name`` of an item field is unused);
    ``shape`` gives an object's members (``None`` accepts any JSON object).
    ``example`` (when not ``None``) is published in the schema only.
    """

    name: str
    type: FieldType
    _: KW_ONLY
    required: bool = False
    nullable: bool = False
    description: str = ""
    enum: tuple[str, ...] | None = None
    pattern: str | None = None
    min_length: int | None = None
    max_length: int | None = None
    minimum: int | float | None = None
    maximum: int | float | None = None
    min_items: int | None = None
    max_items: int | None = None
    items: Field | Shape | None = None
    shape: Shape | None = None
    example: object = None
    # The problem code a value outside this field's rules answers with.
    code: str = "invalid_field"

    def __post_init__(self) -> None:
        if self.type not in _TYPE_CHECKS:
            raise ValueError(f"field {self.name!r}: unknown type {self.type!r}")
        if self.items is not None and self.type != "array":
            raise ValueError(f"field {self.name!r}: items is only for arrays")
        if self.shape is not None and self.type != "object":
            raise ValueError(f"field {self.name!r}: shape is only for objects")
        if (self.enum is not None or self.pattern is not None) and self.type != "string":
            raise ValueError(f"field {self.name!r}: enum and pattern are only for strings")
        if self.pattern is not None:
            _compiled(self.pattern)  # fail at declaration, not at the first request

    def json_schema(self) -> dict[str, Any]:
        """Return this field's JSON Schema (2020-12, as OpenAPI 3.1 uses)."""
        schema = _type_schema(self)
        schema.update(_constraint_schema(self))
        if self.example is not None:
            schema["examples"] = [self.example]
        return schema


@dataclass(frozen=True)
class Shape:
    """A named JSON object: its fields and whether other members are allowed.

    ``name`` is the OpenAPI component name; nested shapes are published once
    under their name and referenced with ``$ref``.
    """

    name: str
    fields: tuple[Field, ...]
    description: str = ""
    additional: bool = False

    def __post_init__(self) -> None:
        names = [field.name for field in self.fields]
        if len(set(names)) != len(names):
            raise ValueError(f"shape {self.name!r} declares a field twice: {names}")

    def validate(self, data: object, *, ignore: Collection[str] = ()) -> dict[str, Any]:
        """Check a decoded request body against this shape; return its members.

        Top-level keys in ``ignore`` are dropped first, whether declared or
        not (for free text such as ``agent_thought``). The result is a new
        dict holding only the members present (declared ones in declaration
        order, then any additional ones); nested shapes are validated too.

        Raises:
            ValidationFailed: code ``invalid_body`` (not a JSON object),
                ``unknown_field``, ``missing_field`` or ``invalid_field``.
        """
        if not isinstance(data, dict):
            raise ValidationFailed(
                f"request body must be a JSON object, got {_json_type(data)}",
                code="invalid_body",
            )
        kept = {key: value for key, value in data.items() if key not in ignore}
        return self._validate_members(kept, prefix="")

    def json_schema(self) -> dict[str, Any]:
        """Return this shape's JSON Schema; nested shapes appear as ``$ref``."""
        schema: dict[str, Any] = {"type": "object"}
        if self.description:
            schema["description"] = self.description
        schema["properties"] = {field.name: field.json_schema() for field in self.fields}
        required = [field.name for field in self.fields if field.required]
        if required:
            schema["required"] = required
        schema["additionalProperties"] = self.additional
        return schema

    def _validate_members(self, data: Mapping[str, object], prefix: str) -> dict[str, Any]:
        self._reject_unknown(data, prefix)
        result: dict[str, Any] = {}
        for field in self.fields:
            path = prefix + field.name
            if field.name in data:
                result[field.name] = _validate_field(field, data[field.name], path)
            elif field.required:
                raise ValidationFailed(
                    f"missing required field '{path}'",
                    code="missing_field",
                    extra={"field": path},
                )
        if self.additional:
            declared = {field.name for field in self.fields}
            result.update((k, v) for k, v in data.items() if k not in declared)
        return result

    def _reject_unknown(self, data: Mapping[str, object], prefix: str) -> None:
        if self.additional:
            return
        allowed = [field.name for field in self.fields]
        for key in data:
            if key not in allowed:
                path = prefix + str(key)
                raise ValidationFailed(
                    f"unknown field '{path}'; allowed fields: {', '.join(allowed) or 'none'}",
                    code="unknown_field",
                    extra={"field": path, "allowed": allowed},
                )

    def _validate_nested(self, value: object, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            _invalid(path, "an object", _json_type(value))
        return self._validate_members(value, prefix=path + ".")


def collect_components(shapes: Iterable[Shape]) -> dict[str, dict[str, Any]]:
    """Return the JSON Schema of every shape reachable from ``shapes``, by name.

    This is the ``components.schemas`` member of the OpenAPI document, sorted
    by name. Raises ``ValueError`` if two different shapes share a name.
    """
    found: dict[str, Shape] = {}
    pending = list(shapes)
    while pending:
        shape = pending.pop()
        known = found.get(shape.name)
        if known is None:
            found[shape.name] = shape
            pending.extend(_nested_shapes(shape))
        elif known is not shape and known != shape:
            raise ValueError(f"two different shapes are named {shape.name!r}")
    return {name: found[name].json_schema() for name in sorted(found)}


def _nested_shapes(shape: Shape) -> Iterator[Shape]:
    for field in shape.fields:
        yield from _field_shapes(field)


def _field_shapes(field: Field) -> Iterator[Shape]:
    if field.shape is not None:
        yield field.shape
    if isinstance(field.items, Shape):
        yield field.items
    elif isinstance(field.items, Field):
        yield from _field_shapes(field.items)


# -- validation ---------------------------------------------------------------


def _validate_field(field: Field, value: object, path: str) -> object:
    if value is None and field.nullable:
        return None
    if not _TYPE_CHECKS[field.type](value):
        _invalid(path, _expectation(field), _json_type(value), field.code)
    if isinstance(value, str):
        _check_string(field, value, path)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _check_number(field, value, path)
    elif isinstance(value, list):
        return _validate_array(field, value, path)
    elif isinstance(value, dict):
        return field.shape._validate_nested(value, path) if field.shape else dict(value)
    return value


def _check_string(field: Field, value: str, path: str) -> None:
    if "\x00" in value:  # valid JSON, but no text column can store it (PostgreSQL)
        _invalid(
            path, _expectation(field) + " without NUL characters", "a NUL character", field.code
        )
    if field.enum is not None and value not in field.enum:
        _invalid(path, _expectation(field), _quote(value), field.code)
    too_short = field.min_length is not None and len(value) < field.min_length
    too_long = field.max_length is not None and len(value) > field.max_length
    if too_short or too_long:
        _invalid(path, _expectation(field), _count(len(value), "character"), field.code)
    if field.pattern is not None and not _compiled(field.pattern).search(value):
        _invalid(path, _expectation(field), _quote(value), field.code)


def _check_number(field: Field, value: float, path: str) -> None:
    too_small = field.minimum is not None and value < field.minimum
    too_big = field.maximum is not None and value > field.maximum
    if too_small or too_big:
        _invalid(path, _expectation(field), repr(value), field.code)


def _validate_array(field: Field, value: list[Any], path: str) -> list[Any]:
    too_few = field.min_items is not None and len(value) < field.min_items
    too_many = field.max_items is not None and len(value) > field.max_items
    if too_few or too_many:
        _invalid(path, _expectation(field), _count(len(value), "item"), field.code)
    if field.items is None:
        return list(value)
    items = field.items
    if isinstance(items, Shape):
        return [items._validate_nested(item, f"{path}[{i}]") for i, item in enumerate(value)]
    return [_validate_field(items, item, f"{path}[{i}]") for i, item in enumerate(value)]


def _invalid(path: str, expected: str, got: str, code: str = "invalid_field") -> NoReturn:
    raise ValidationFailed(
        f"'{path}' must be {expected}, got {got}",
        code=code,
        extra={"field": path},
    )


def _expectation(field: Field) -> str:
    """Describe what ``field`` accepts, e.g. ``an integer >= 0 or null``."""
    if field.enum is not None:
        text = "one of " + ", ".join(_quote(choice) for choice in field.enum)
    else:
        text = _NOUNS[field.type] + _bounds_phrase(field)
        if field.pattern is not None:
            text += f" matching /{field.pattern}/"
    return text + (" or null" if field.nullable else "")


def _bounds_phrase(field: Field) -> str:
    if field.type == "string":
        return _size_phrase(field.min_length, field.max_length, "characters")
    if field.type == "array":
        return _size_phrase(field.min_items, field.max_items, "items")
    if field.type in ("integer", "number"):
        return _range_phrase(field.minimum, field.maximum)
    return ""


def _size_phrase(low: int | None, high: int | None, unit: str) -> str:
    if low is not None and high is not None:
        return f" of {low} to {high} {unit}"
    if low is not None:
        return f" of at least {low} {unit}"
    return "" if high is None else f" of at most {high} {unit}"


def _range_phrase(low: float | None, high: float | None) -> str:
    if low is not None and high is not None:
        return f" from {low} to {high}"
    if low is not None:
        return f" >= {low}"
    return "" if high is None else f" <= {high}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _quote(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    for name in ("boolean", "integer", "number", "string", "array", "object"):
        if _TYPE_CHECKS[name](value):
            return name
    return "non-finite number" if isinstance(value, float) else type(value).__name__


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


# -- schema generation ----------------------------------------------------------


def _ref(shape: Shape) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{shape.name}"}


def _type_schema(field: Field) -> dict[str, Any]:
    if field.shape is not None:
        if field.nullable:
            return {"anyOf": [_ref(field.shape), {"type": "null"}]}
        return _ref(field.shape)
    if field.type == "any":
        return {}
    if field.nullable:
        return {"type": [field.type, "null"]}
    return {"type": field.type}


def _constraint_schema(field: Field) -> dict[str, Any]:
    schema: dict[str, Any] = {}
    if field.description:
        schema["description"] = field.description
    if field.enum is not None:
        # JSON Schema checks enum on its own, so null must be listed to pass.
        schema["enum"] = [*field.enum, None] if field.nullable else list(field.enum)
    keywords = {
        "pattern": field.pattern,
        "minLength": field.min_length,
        "maxLength": field.max_length,
        "minimum": field.minimum,
        "maximum": field.maximum,
        "minItems": field.min_items,
        "maxItems": field.max_items,
    }
    schema.update((key, value) for key, value in keywords.items() if value is not None)
    if isinstance(field.items, Shape):
        schema["items"] = _ref(field.items)
    elif isinstance(field.items, Field):
        schema["items"] = field.items.json_schema()
    return schema
