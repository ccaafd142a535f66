"""quick_init: a frozen dataclass's constructor, cheaper, and otherwise the dataclass's own."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import FrozenInstanceError, InitVar, dataclass, field
from typing import Any

import pytest

from slotward.engine.quick_init import quick_init

SHARED = (7, 8)


def _init(cls: type) -> Any:
    return vars(cls)["__init__"]


def _twins(**options: Any) -> tuple[type, type]:
    """The same class made twice: a plain frozen dataclass, and the same with quick_init."""

    def make() -> type:
        class Value:
            a: int
            b: str = "b"
            c: list[int] = field(default_factory=list)
            d: tuple[int, ...] = SHARED  # one object, for every instance that does not give one
            e: int = field(default=5, init=False)
            f: list[int] = field(default_factory=lambda: [1], init=False)
            g: int = field(default=0, kw_only=True)
            checked: list[str] = field(default_factory=list, init=False, compare=False)

            def __post_init__(self) -> None:
                self.checked.append("post")  # runs once the fields are in
                if self.a < 0:
                    raise ValueError("a must not be negative")

        return dataclass(frozen=True, **options)(Value)

    return make(), quick_init(make())


@pytest.mark.parametrize("options", [{}, {"slots": True}, {"kw_only": True}, {"eq": False}])
def test_an_instance_is_what_the_dataclass_own_constructor_builds(options: dict[str, Any]) -> None:
    plain, quick = _twins(**options)
    calls: list[dict[str, Any]] = [
        {"a": 1},
        {"a": 2, "b": "x", "c": [3], "g": 4},
        {"a": 0, "d": (9,)},
    ]
    for kwargs in calls:
        expected, got = plain(**kwargs), quick(**kwargs)
        assert repr(got) == repr(expected)
        assert dataclasses.asdict(got) == dataclasses.asdict(expected)
        assert got.checked == ["post"]
    if not options.get("kw_only"):
        assert repr(quick(1, "y", [2], (3,), g=1)) == repr(plain(1, "y", [2], (3,), g=1))
    assert inspect.signature(_init(quick)).parameters.keys() == (
        inspect.signature(_init(plain)).parameters.keys()
    )


def test_the_signature_is_the_dataclass_own() -> None:
    plain, quick = _twins()
    ours, theirs = inspect.signature(_init(quick)), inspect.signature(_init(plain))
    assert [(p.name, p.kind, p.default) for p in ours.parameters.values()] == [
        (p.name, p.kind, p.default) for p in theirs.parameters.values()
    ]
    assert getattr(_init(quick), "__quick_init__", False) is True
    assert _init(quick).__qualname__.endswith("Value.__init__")


def test_it_stays_frozen_hashable_and_replaceable() -> None:
    _, quick = _twins()
    value = quick(a=1, b="x")
    with pytest.raises(FrozenInstanceError):
        value.a = 2
    with pytest.raises(FrozenInstanceError):
        del value.b
    assert value == quick(a=1, b="x")
    assert value != quick(a=1, b="y")
    changed = dataclasses.replace(value, b="z")
    assert (changed.a, changed.b, changed.checked) == (1, "z", ["post"])


def test_hashing_is_the_dataclass_own() -> None:
    @quick_init
    @dataclass(frozen=True)
    class Point:
        x: int
        y: int = 0

    assert hash(Point(1, 2)) == hash(Point(1, 2)) == hash((1, 2))
    assert {Point(1), Point(1, 0)} == {Point(1)}


def test_each_instance_gets_its_own_factory_value_and_the_default_as_given() -> None:
    _, quick = _twins()
    one, two = quick(a=1), quick(a=2)
    assert one.c == []
    assert one.c is not two.c
    assert one.f == [1]
    assert one.f is not two.f
    assert one.d is SHARED  # a plain default is the object given, as the dataclass's
    given: list[int] = []
    assert quick(a=1, c=given).c is given


def test_post_init_refusals_still_refuse() -> None:
    _, quick = _twins()
    with pytest.raises(ValueError, match="negative"):
        quick(a=-1)


def test_missing_and_unknown_arguments_are_refused_as_by_the_dataclass() -> None:
    _, quick = _twins()
    with pytest.raises(TypeError):
        quick()
    with pytest.raises(TypeError):
        quick(a=1, e=3)  # not an argument (init=False)
    with pytest.raises(TypeError):
        quick(1, "b", [], (), 4)  # g is keyword-only


def test_what_it_cannot_match_is_refused_when_decorated() -> None:
    class NotData:
        a: int

    with pytest.raises(TypeError, match="frozen dataclass"):
        quick_init(NotData)

    @dataclass
    class Mutable:
        a: int

    with pytest.raises(TypeError, match="frozen dataclass"):
        quick_init(Mutable)

    @dataclass(frozen=True)
    class WithInitVar:
        a: int
        seed: InitVar[int] = 0

        def __post_init__(self, seed: int) -> None:
            pass

    with pytest.raises(TypeError, match="InitVar"):
        quick_init(WithInitVar)


def test_a_class_without_fields() -> None:
    @quick_init
    @dataclass(frozen=True)
    class Empty:
        pass

    assert Empty() == Empty()
    with pytest.raises(TypeError):
        Empty(1)  # type: ignore[call-arg]
