"""A cheaper constructor for the frozen dataclasses the hot path builds (issue 16).

A frozen dataclass's generated ``__init__`` stores each field through
``object.__setattr__`` (its own ``__setattr__`` refuses every change), some
0.1-0.15 us a field; a hold create builds some 125 fields of values (its
request, hold, record, audit entries, event, answer). :func:`quick_init` gives
such a class an ``__init__`` that stores the fields straight into the
instance: its ``__dict__``, or its slots' descriptors. Its signature, defaults,
default factories and ``__post_init__`` are the dataclass's own: the new
signature is compared with the generated one when the class is decorated, and
a class it cannot match (an ``InitVar``, say) is refused at import. Everything
else stays the dataclass's: equality, hashing, ``repr``, the refusal to change
a field afterwards, ``dataclasses.replace``.

Decorate on top of the dataclass, so type checkers see a plain dataclass::

    @quick_init
    @dataclass(frozen=True)
    class Hold: ...
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, TypeVar

__all__ = ["quick_init"]

T = TypeVar("T")


def quick_init(cls: type[T]) -> type[T]:
    """``cls``, a frozen dataclass, with an ``__init__`` that stores its fields directly."""
    if not dataclasses.is_dataclass(cls) or not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise TypeError(f"{cls.__name__}: quick_init takes a frozen dataclass")
    fields = dataclasses.fields(cls)
    if len(fields) != len(cls.__dataclass_fields__):
        raise TypeError(f"{cls.__name__}: an InitVar or ClassVar field is not supported")
    generated = inspect.signature(cls.__init__)
    slotted = "__slots__" in cls.__dict__
    names: dict[str, Any] = {}
    params: list[str] = []
    keyword_only: list[str] = []
    body: list[str] = []
    for f in fields:
        value = f.name
        if f.init:
            param = f.name
            default = generated.parameters[f.name].default
            if default is not inspect.Parameter.empty:
                # The dataclass's own default: the value, or its "<factory>" marker.
                names[f"_default_{f.name}"] = default
                param = f"{f.name}=_default_{f.name}"
            if f.default_factory is not dataclasses.MISSING:
                names[f"_factory_{f.name}"] = f.default_factory
                value = f"_factory_{f.name}() if {f.name} is _default_{f.name} else {f.name}"
            (keyword_only if f.kw_only else params).append(param)
        elif f.default_factory is not dataclasses.MISSING:
            names[f"_factory_{f.name}"] = f.default_factory
            value = f"_factory_{f.name}()"
        elif slotted and f.default is not dataclasses.MISSING:
            names[f"_default_{f.name}"] = f.default  # slots leave no class attribute to read
            value = f"_default_{f.name}"
        else:
            continue  # not set by __init__: read from the class attribute, its default
        if slotted:
            names[f"_set_{f.name}"] = cls.__dict__[f.name].__set__
            body.append(f"    _set_{f.name}(self, {value})")
        else:
            body.append(f"    _quick_dict[{f.name!r}] = {value}")
    if body and not slotted:
        body.insert(0, "    _quick_dict = self.__dict__")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    signature = ", ".join(["self", *params, *(["*", *keyword_only] if keyword_only else [])])
    source = f"def __init__({signature}):\n" + ("\n".join(body) or "    pass") + "\n"
    exec(source, names)  # built from the class's own field names only
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__quick_init__ = True  # for tests/e2e/test_quick_values.py
    if _shape(inspect.signature(init)) != _shape(generated):
        raise TypeError(f"{cls.__name__}: quick_init would change the signature of __init__")
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


def _shape(signature: inspect.Signature) -> list[tuple[str, Any, Any]]:
    """What a caller sees of a signature: its parameters' names, kinds and defaults."""
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]
