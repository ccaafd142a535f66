"""The envelopes agents send to ``POST /v1/tool-calls``, translated to the generic one.

An agent hands on what its model emitted: slotward's own envelope
(``{"tool", "arguments"}``), an OpenAI tool call (``{"type": "function",
"function": {"name", "arguments": "<JSON text>"}}``), an Anthropic ``tool_use``
block (``{"type": "tool_use", "id", "name", "input"}``), a ``function_call``
item of OpenAI's Responses API, each with ``workflow_id`` and ``step`` beside
it, or an assistant message's whole list of calls (OpenAI ``tool_calls``,
Anthropic ``content``, a Responses API ``output``). :func:`translate` turns
any of them into :class:`Call` s holding the generic envelope that
``service.call_tool`` runs, so the fingerprint sees the same intent whichever
way it came: the call's id (``call_...``, ``toolu_...``) is kept beside the
envelope for the reply and never enters it.

Two kinds of bad input, told apart on purpose. The envelope's frame (its
members, their types, ``workflow_id``, ``step``, the batch's size) is the agent
framework's: a broken one refuses the whole request (422, nothing runs). The
tool's name and arguments are what the model wrote: in a batch, a bad one
fails that call only, as a result the model can read and correct. Every error
names its field by its path in the body (``tool_calls[2].function.arguments``).

No aiohttp here: the strict JSON decoder for string arguments is passed in.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, NoReturn

from slotward.api.envelope_shapes import (
    ANTHROPIC_MESSAGE,
    ANTHROPIC_SINGLE,
    ANTHROPIC_USE,
    FUNCTION_CALL,
    FUNCTION_CALL_SINGLE,
    GENERIC,
    MAX_CALLS,
    OPENAI_MESSAGE,
    OPENAI_SINGLE,
    RESPONSE_OUTPUT,
)
from slotward.engine.errors import InvalidRequest, ValidationFailed
from slotward.engine.tools import tool_named

__all__ = [
    "Call",
    "Dialect",
    "Envelope",
    "relocated",
    "translate",
]


# openai-responses: OpenAI's Responses API (function_call items); openai: Chat Completions.
Dialect = Literal["generic", "openai", "openai-responses", "anthropic"]
Decoder = Callable[[bytes], object]

_SKIPPED = frozenset({"text", "thinking", "redacted_thinking"})
_SKIPPED_ITEMS = frozenset({"reasoning", "message"})


@dataclass(frozen=True)
class Call:
    """One tool call of an envelope, ready to run or already refused.

    ``envelope`` is the generic one (``tool``, ``arguments``, ``workflow_id``,
    ``step``) for ``service.call_tool``; ``refused`` is set instead when the
    model's part (the tool's name, its arguments) is broken. ``name_at`` and
    ``arguments_at`` are where those were in the body, for errors raised later.
    """

    envelope: Mapping[str, Any] | None
    refused: ValidationFailed | None
    call_id: str | None
    name: str  # the tool's name as the model gave it
    id_at: str
    name_at: str
    arguments_at: str


@dataclass(frozen=True)
class Envelope:
    """What a body asked for: its calls, in order, and whether it was a batch."""

    dialect: Dialect
    batch: bool
    calls: tuple[Call, ...]


def translate(body: object, *, decode: Decoder, ignore: Collection[str] = ()) -> Envelope:
    """Recognise ``body``'s envelope and translate each call to the generic one.

    ``decode`` reads a string ``arguments`` as strictly as a request body
    (api/http/jsonbody.py ``decode_json``); ``ignore`` names free-text members
    dropped beside the call (``agent_thought``).

    Raises:
        ValidationFailed: the envelope's frame is broken (nothing may run).
    """
    if not isinstance(body, dict):
        return _not_a_body(body)
    kept = {k: v for k, v in body.items() if k not in ignore}
    if "tool_calls" in kept:
        return _openai_message(OPENAI_MESSAGE.validate(kept), decode)
    if isinstance(kept.get("content"), list):
        return _anthropic_message(ANTHROPIC_MESSAGE.validate(kept))
    if "output" in kept:
        return _response_output(RESPONSE_OUTPUT.validate(kept), decode)
    kind = kept.get("type")
    if kind == "function" or (kind is None and "function" in kept):
        fields = OPENAI_SINGLE.validate(kept)
        return Envelope("openai", False, (_openai_call(fields, "", _beside(fields), decode),))
    if kind == "function_call":
        fields = FUNCTION_CALL_SINGLE.validate(kept)
        call = _function_call(fields, "", _beside(fields), decode)
        return Envelope("openai-responses", False, (call,))
    if kind == "tool_use" or (kind is None and "input" in kept):
        fields = ANTHROPIC_SINGLE.validate(kept)
        return Envelope("anthropic", False, (_anthropic_call(fields, "", _beside(fields)),))
    if kind is not None:
        raise ValidationFailed(
            "'type' must be 'function' (an OpenAI tool call), 'function_call' (an OpenAI "
            "Responses item) or 'tool_use' (an Anthropic block); slotward's own envelope "
            "has no type",
            code="invalid_field",
            extra={"field": "type"},
        )
    fields = GENERIC.validate(kept)
    generic = {"tool": fields["tool"], "arguments": fields["arguments"], **_beside(fields)}
    # Argument errors keep naming the argument ('start'), as the tool's endpoint does.
    call = Call(generic, None, fields.get("id"), fields["tool"], "id", "tool", "")
    return Envelope("generic", False, (call,))


def _not_a_body(body: object) -> NoReturn:
    GENERIC.validate(body)  # invalid_body, worded as every route words it
    raise AssertionError("unreachable: only an object validates")


def _beside(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The workflow and step given beside the call(s)."""
    return {k: fields[k] for k in ("workflow_id", "step") if k in fields}


def _openai_message(fields: Mapping[str, Any], decode: Decoder) -> Envelope:
    beside = _beside(fields)
    calls = tuple(
        _openai_call(call, f"tool_calls[{i}].", beside, decode)
        for i, call in enumerate(fields["tool_calls"])
    )
    return Envelope("openai", True, calls)


def _anthropic_message(fields: Mapping[str, Any]) -> Envelope:
    beside = _beside(fields)
    calls: list[Call] = []
    for i, block in enumerate(fields["content"]):
        kind = block.get("type")
        if isinstance(kind, str) and kind in _SKIPPED:  # a dict is no member: never hash one
            continue
        at = f"content[{i}]."
        if kind != "tool_use":
            raise ValidationFailed(
                f"'{at}type' must be 'tool_use', 'text', 'thinking' or 'redacted_thinking', "
                f"got {_shown(kind)}",
                code="invalid_field",
                extra={"field": f"{at}type"},
            )
        with _under(at):
            use = ANTHROPIC_USE.validate(block)
        calls.append(_anthropic_call(use, at, beside))
    _bounded(calls, "content", "tool_use blocks")
    return Envelope("anthropic", True, tuple(calls))


def _bounded(calls: list[Call], field: str, what: str) -> None:
    if not calls:
        raise ValidationFailed(
            f"'{field}' holds no {what}: there is nothing to run",
            code="invalid_field",
            extra={"field": field},
        )
    if len(calls) > MAX_CALLS:
        raise ValidationFailed(
            f"'{field}' holds {len(calls)} {what}; a batch runs at most {MAX_CALLS}",
            code="invalid_field",
            extra={"field": field},
        )


def _response_output(fields: Mapping[str, Any], decode: Decoder) -> Envelope:
    beside = _beside(fields)
    calls: list[Call] = []
    for i, item in enumerate(fields["output"]):
        kind, at = item.get("type"), f"output[{i}]."
        if isinstance(kind, str) and kind in _SKIPPED_ITEMS:
            continue
        if kind != "function_call":
            raise ValidationFailed(
                f"'{at}type' must be 'function_call', 'reasoning' or 'message', got {_shown(kind)}",
                code="invalid_field",
                extra={"field": f"{at}type"},
            )
        with _under(at):
            item_fields = FUNCTION_CALL.validate(item)
        calls.append(_function_call(item_fields, at, beside, decode))
    _bounded(calls, "output", "function_call items")
    return Envelope("openai-responses", True, tuple(calls))


def _function_call(
    fields: Mapping[str, Any], at: str, beside: Mapping[str, Any], decode: Decoder
) -> Call:
    name, name_at, arguments_at = fields["name"], f"{at}name", f"{at}arguments"
    try:
        envelope = _generic(name, _arguments(fields["arguments"], arguments_at, decode), beside)
    except ValidationFailed as error:
        return _refused(error, fields["call_id"], name, at, name_at, arguments_at, "call_id")
    return Call(envelope, None, fields["call_id"], name, f"{at}call_id", name_at, arguments_at)


def _openai_call(
    fields: Mapping[str, Any], at: str, beside: Mapping[str, Any], decode: Decoder
) -> Call:
    name_at, arguments_at = f"{at}function.name", f"{at}function.arguments"
    function = fields["function"]
    try:
        arguments = _arguments(function["arguments"], arguments_at, decode)
        envelope = _generic(function["name"], arguments, beside)
    except ValidationFailed as error:
        return _refused(error, fields.get("id"), function["name"], at, name_at, arguments_at)
    return Call(envelope, None, fields.get("id"), function["name"], f"{at}id", name_at,
                arguments_at)  # fmt: skip


def _anthropic_call(fields: Mapping[str, Any], at: str, beside: Mapping[str, Any]) -> Call:
    name_at, input_at = f"{at}name", f"{at}input"
    given = fields["input"]
    try:
        if not isinstance(given, dict):
            raise _not_an_object(input_at, given, text=False)
        envelope = _generic(fields["name"], given, beside)
    except ValidationFailed as error:
        return _refused(error, fields.get("id"), fields["name"], at, name_at, input_at)
    return Call(envelope, None, fields.get("id"), fields["name"], f"{at}id", name_at, input_at)


def _refused(
    error: ValidationFailed,
    call_id: str | None,
    name: str,
    at: str,
    name_at: str,
    arguments_at: str,
    id_member: str = "id",
) -> Call:
    """A call whose name or arguments the model got wrong: it fails, the others run."""
    id_at = f"{at}{id_member}"
    call = Call(None, None, call_id, name, id_at, name_at, arguments_at)
    return Call(None, relocated(error, call), call_id, name, id_at, name_at, arguments_at)


def _generic(name: str, arguments: dict[str, Any], beside: Mapping[str, Any]) -> dict[str, Any]:
    tool_named(name)  # an unknown name is refused as 'tool', moved to where it was
    return {"tool": name, "arguments": arguments, **beside}


_JSON_WHITESPACE = " \t\n\r"


def _arguments(given: object, at: str, decode: Decoder) -> dict[str, Any]:
    """An OpenAI call's arguments: an object, or the JSON text of one (hostile input)."""
    if isinstance(given, str):
        if not given.strip(_JSON_WHITESPACE):
            # What OpenAI sends for a call without arguments. Only JSON's own
            # whitespace: str.strip() would take NBSP or U+2028 for nothing too.
            return {}
        # surrogatepass: a lone surrogate becomes bytes the decoder refuses as invalid UTF-8
        try:
            given = decode(given.encode("utf-8", "surrogatepass"))
        except InvalidRequest as error:
            raise ValidationFailed(
                f"'{at}' is not a valid JSON text: {error.detail}",
                code="invalid_field",
                extra={"field": at, "reason": error.code},
            ) from None
    if not isinstance(given, dict):
        raise _not_an_object(at, given)
    return given


def _not_an_object(at: str, given: object, *, text: bool = True) -> ValidationFailed:
    """An OpenAI call's arguments may be the JSON text of an object; an
    Anthropic block's input is an object (a string is refused, and not told
    otherwise)."""
    kind = "a string" if isinstance(given, str) else _kind(given)
    also = " (or the JSON text of one)" if text else ""
    return ValidationFailed(
        f"'{at}' must be a JSON object{also}, got {kind}",
        code="invalid_field",
        extra={"field": at},
    )


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, dict):
        return "an object"
    return "an array" if isinstance(value, list) else "a string"


def _shown(value: object) -> str:
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:40] + "...")
    return _kind(value)


# -- where an error is -----------------------------------------------------------------

_QUOTED = re.compile(r"'([^']*)'")


def relocated(error: ValidationFailed, call: Call) -> ValidationFailed:
    """``error`` with its field named where the call's parts were in the body.

    ``tool`` becomes where the name was (``function.name``); a field that is one
    of the tool's arguments, or under one, or ``arguments...`` as an alias
    error names it, is put under where the arguments were
    (``tool_calls[1].function.arguments.start``). The envelope's own members
    (``workflow_id``, ``step``) stay as they are, and so does an error that
    names no field.
    """
    field = error.extra.get("field")
    if not isinstance(field, str):
        return error
    if field == "tool":
        return _with_field(error, field, call.name_at)
    if not call.arguments_at:
        return error
    if field == "arguments" or field.startswith(("arguments.", "arguments[")):
        moved = call.arguments_at + field.removeprefix("arguments")
        # An alias error quotes the argument by its own name ('start'): that moves too.
        bare = field.removeprefix("arguments.")
        return _with_field(_with_field(error, field, moved), bare, moved)
    head = re.split(r"[.\[]", field, maxsplit=1)[0]
    if call.envelope is None:
        return error
    tool = tool_named(call.envelope["tool"])
    # Only the arguments' validation answers unknown_field here (the frame's
    # members were checked by its shape): 'foo', or a 'step' given as an argument.
    if head in _argument_names(tool.name) or error.code == "unknown_field":
        sent = call.envelope["arguments"]
        shown = field
        for alias, target in tool.aliases:
            if head == target and alias in sent and target not in sent:
                shown = alias + field[len(target) :]  # the name the caller used
        return _with_field(error, field, f"{call.arguments_at}.{shown}")
    return error


def _argument_names(name: str) -> frozenset[str]:
    return frozenset(f.name for f in tool_named(name).arguments.fields)


@contextmanager
def _under(prefix: str) -> Iterator[None]:
    """Name the fields of errors raised inside as under ``prefix`` (``content[2].``)."""
    try:
        yield
    except ValidationFailed as error:
        field = error.extra.get("field")
        if not isinstance(field, str):
            raise
        raise _with_field(error, field, prefix + field) from None


def _with_field(error: ValidationFailed, field: str, moved: str) -> ValidationFailed:
    """The same error, its field (and the detail's quotes of it) named ``moved``."""
    detail = _QUOTED.sub(lambda m: f"'{moved}'" if m.group(1) == field else m.group(0),
                         error.detail)  # fmt: skip
    again = ValidationFailed(
        detail, code=error.code, retryable=error.retryable,
        extra={**error.extra, "field": moved}, retry_after=error.retry_after,
    )  # fmt: skip
    # A refusal found once the key was known still answers with it (start_in_past).
    again.idempotency_key = error.idempotency_key
    return again
