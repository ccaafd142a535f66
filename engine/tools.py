"""The agent tools, declared once.

Every surface that names a tool is generated from :data:`TOOLS`: the tool
routes' request shapes and the ``/v1/tool-calls`` envelope (api/http/schemas.py),
its dispatch (api/service.py ``call_tool``), the OpenAPI document and, later,
MCP and ``/v1/tools``. A test (tests/test_tool_registry.py) fails if a tool's
name is written as a string anywhere else in the package.

The flags follow MCP's ToolAnnotations: ``read_only`` changes nothing;
``idempotent`` means a repeated call with the same arguments has no further
effect (here: the key derived from the identity fields finds the first answer);
``destructive`` means the call may undo or remove something.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from slotward.engine.errors import ValidationFailed
from slotward.engine.rules.shapes import Field, Shape

__all__ = [
    "COMMIT_HOLD",
    "CREATE_HOLD",
    "FIND_FREE_SLOTS",
    "NAMES",
    "RELEASE_HOLD",
    "TOOLS",
    "Tool",
    "tool_named",
]


@dataclass(frozen=True)
class Tool:
    """One agent tool: what an LLM is told, what it may send, what runs.

    ``fields`` are the arguments in their canonical names, as the tool's own
    endpoint takes them (path parameters included); ``aliases`` pairs an
    alternative name an LLM tends to emit with the canonical one. ``usecase``
    names the engine function the call runs (a name, not a reference: the use
    cases import their tool names from here).
    """

    name: str
    description: str
    schema_name: str
    fields: tuple[Field, ...]
    identity: tuple[str, ...]
    usecase: str
    aliases: tuple[tuple[str, str], ...] = ()
    read_only: bool = False
    idempotent: bool = False
    destructive: bool = False
    # Keyed by the workflow: a call needs the envelope's workflow_id.
    needs_workflow: bool = False

    def __post_init__(self) -> None:
        declared = {f.name for f in self.fields}
        unknown = [n for n in (*self.identity, *(t for _, t in self.aliases)) if n not in declared]
        if unknown:
            raise ValueError(f"tool {self.name!r} names undeclared fields: {unknown}")
        if self.read_only and self.destructive:
            raise ValueError(f"tool {self.name!r} cannot be read-only and destructive")

    @functools.cached_property
    def arguments(self) -> Shape:
        """The arguments as a tool call may give them: the fields, then their aliases.

        A required field that has an alias is optional here: one of the two is
        required, which :meth:`canonical` checks.
        """
        targets = {target for _, target in self.aliases}
        fields = [replace(f, required=False) if f.name in targets else f for f in self.fields]
        by_name = {f.name: f for f in self.fields}
        for alias, target in self.aliases:
            original = by_name[target]
            fields.append(
                replace(original, name=alias, required=False, description=f"Alias of {target}")
            )
        return Shape(self.schema_name, tuple(fields))

    @functools.cached_property
    def parameters(self) -> dict[str, Any]:
        """The JSON Schema a model is given (``GET /v1/tools``, MCP): the canonical
        fields only, required ones required.

        The aliases are left out: a model told one name for a thing uses it (one
        sent anyway is still accepted, by :attr:`arguments`). No ``$ref``: the
        fields are scalars and arrays of scalars.
        """
        return Shape(self.schema_name, self.fields).json_schema()

    def canonical(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Validated arguments with every alias replaced by its canonical name."""
        out = dict(given)
        for alias, target in self.aliases:
            if alias in out:
                if target in out:
                    raise ValidationFailed(
                        f"give '{target}' or '{alias}', not both",
                        code="invalid_field",
                        extra={"field": f"arguments.{alias}"},
                    )
                out[target] = out.pop(alias)
        required = {f.name for f in self.fields if f.required}
        for alias, target in self.aliases:
            if target in required and target not in out:
                raise ValidationFailed(
                    f"arguments need '{target}' (or '{alias}')",
                    code="missing_field",
                    extra={"field": f"arguments.{target}"},
                )
        return out

    def annotations(self) -> dict[str, bool]:
        """MCP ToolAnnotations hints (closed world: only slotward's own store)."""
        return {
            "readOnlyHint": self.read_only,
            "destructiveHint": self.destructive,
            "idempotentHint": self.idempotent,
            "openWorldHint": False,
        }


_INSTANT = (
    "ISO-8601 with an offset or Z, e.g. 2030-10-14T14:00:00Z or 2030-10-14T16:00:00+02:00; "
    "or a local time without one, with timezone"
)
_ATTENDEES = Field(
    "attendees",
    "array",
    required=True,
    min_items=1,
    max_items=100,
    items=Field("attendee", "string", min_length=1, max_length=320),
    description="Who must attend: attendee ids or email addresses (`Name <email>` accepted); "
    "case and spaces do not matter",
)
_HOLD_ID = Field(
    "hold_id", "string", required=True, min_length=1, max_length=64,
    description="The hold's id, as create_calendar_hold answered it (`id`)",
)  # fmt: skip
_TOKEN = Field(
    "token", "integer", required=True, minimum=0,
    description="The hold's token, from the same answer (`token`): it proves the hold is "
    "still the one you placed",
)  # fmt: skip
_RETRY = (
    "Retrying is safe: the server derives the idempotency key from the call's intent, so a "
    "retried or reworded call lands once and answers with the first result."
)

CREATE_HOLD = Tool(
    name="create_calendar_hold",
    schema_name="CreateHoldArguments",
    description=(
        "Hold a time slot for the attendees: a tentative booking no other agent can take "
        "while you confirm. Use it once a slot is chosen (find_free_slots suggests free "
        "ones). Give start and one of end, duration_minutes or duration. The answer is the "
        "hold: keep its id and token, then call commit_calendar_hold to book it or "
        "release_calendar_hold to give it up; an uncommitted hold expires after "
        "hold_ttl_seconds. If the slot is taken, the call fails with code slot_conflict: "
        "conflicts say what is in the way and alternatives holds up to three free slots "
        "of the same length; pick one and call create_calendar_hold again with its start "
        "and end (or ask the user). " + _RETRY + " The key is the workflow_id, step, "
        "attendees and interval: a new title, another attendee spelling or another "
        "time-zone spelling of the same instant is the same call, and while the workflow "
        "holds that slot the call answers with that hold whatever its step. After a hold "
        "was released or expired, hold another start (find_free_slots suggests one): the "
        "same slot in the same workflow and step answers with the old hold, and booking it "
        "again needs a new step, which the runtime sends with the call. A higher priority "
        "may preempt tentative holds of a lower one."
    ),
    fields=(
        _ATTENDEES,
        Field(
            "start",
            "string",
            required=True,
            max_length=64,
            description="When the meeting starts: " + _INSTANT,
        ),
        Field(
            "end",
            "string",
            max_length=64,
            description="When it ends (exclusive), written as start is; or give "
            "duration_minutes or duration instead",
        ),
        Field(
            "duration_minutes",
            "integer",
            minimum=1,
            maximum=1440,
            description="The meeting's length in minutes, instead of end",
        ),
        Field(
            "duration",
            "string",
            max_length=32,
            description="The meeting's length as an ISO-8601 duration (PT30M), instead of end",
        ),
        Field(
            "timezone",
            "string",
            max_length=64,
            description="IANA time zone (Europe/Paris) of a start or end without an offset",
        ),
        Field(
            "title",
            "string",
            max_length=500,
            description="The meeting's title; not part of the key",
        ),
        Field(
            "description",
            "string",
            nullable=True,
            max_length=5000,
            description="The meeting's notes; not part of the key",
        ),
        Field(
            "priority",
            "integer",
            minimum=0,
            maximum=100,
            description="0-100, by default your agent's own, which you may lower, not raise",
        ),
        Field(
            "hold_ttl_seconds",
            "integer",
            minimum=10,
            maximum=3600,
            description="How long the hold stays tentative before it expires uncommitted",
        ),
    ),
    # With the workflow and step: the key is derived from the normalized
    # attendees and interval, so title or priority do not change it.
    identity=("attendees", "start", "end", "duration_minutes", "duration", "timezone"),
    usecase="slotward.engine.usecases.placing.place_hold",
    aliases=(("start_time", "start"), ("end_time", "end")),
    idempotent=True,
    # Not destructive (issue 17): a create adds a hold and never removes one of the
    # caller's own; a preemption displaces only another agent's tentative hold,
    # which that agent is told of and may re-place (MCP's hint is about the
    # caller's data). release_calendar_hold is the destructive one.
    needs_workflow=True,
)
COMMIT_HOLD = Tool(
    name="commit_calendar_hold",
    schema_name="CommitHoldArguments",
    description=(
        "Book a hold placed by create_calendar_hold: it becomes a committed calendar event. "
        "Give the hold's id and the token that create answered. Only the agent that placed "
        "the hold may commit it. A hold that expired can still be committed while its slot "
        "is free; once another booking took the slot the call fails (hold_expired, "
        "hold_preempted): find another slot and create again. Where a person must approve "
        "the booking first, the answer says approval_required: tell the user, and call this "
        "again later with the same arguments; it commits once approved. " + _RETRY
    ),
    fields=(_HOLD_ID, _TOKEN),
    identity=("hold_id",),
    usecase="slotward.engine.usecases.lifecycle.commit_hold",
    idempotent=True,
)
RELEASE_HOLD = Tool(
    name="release_calendar_hold",
    schema_name="ReleaseHoldArguments",
    description=(
        "Give up a hold, tentative or committed: its slot becomes free for others. Use it "
        "when the plan is dropped, the user declines, or a later step of your workflow "
        "failed and this booking must be undone. The agent that placed the hold, or an "
        "admin, may release it. " + _RETRY + " Releasing a hold already released, expired "
        "or preempted answers with the hold as it is and changes nothing."
    ),
    fields=(_HOLD_ID,),
    identity=("hold_id",),
    usecase="slotward.engine.usecases.lifecycle.release_hold",
    idempotent=True,
    destructive=True,
)
FIND_FREE_SLOTS = Tool(
    name="find_free_slots",
    schema_name="FindFreeSlotsArguments",
    description=(
        "Find when every attendee is free: slots of duration_minutes between from and to, "
        "with the busy intervals and free gaps around them. Read-only: it books and holds "
        "nothing, so a slot it shows may be taken before you hold it. Call it to choose a "
        "slot before create_calendar_hold, or after a slot_conflict without alternatives "
        "(over a wider window). A retry only reads again."
    ),
    fields=(
        replace(_ATTENDEES, description="Who must be free: attendee ids or email addresses"),
        Field(
            "from",
            "string",
            required=True,
            max_length=64,
            description="Start of the window to search: " + _INSTANT,
        ),
        Field(
            "to",
            "string",
            required=True,
            max_length=64,
            description="End of the window to search, written as from is",
        ),
        Field(
            "timezone",
            "string",
            max_length=64,
            description="IANA time zone (Europe/Paris) of a from or to without an offset",
        ),
        Field(
            "duration_minutes",
            "integer",
            required=True,
            minimum=1,
            maximum=1440,
            description="The length of the slots wanted, in minutes",
        ),
        Field(
            "limit",
            "integer",
            minimum=1,
            maximum=50,
            description="At most this many slots (default 5)",
        ),
    ),
    identity=(),
    usecase="slotward.engine.usecases.reads.availability",
    read_only=True,
    idempotent=True,
)

TOOLS: tuple[Tool, ...] = (CREATE_HOLD, COMMIT_HOLD, RELEASE_HOLD, FIND_FREE_SLOTS)
NAMES: tuple[str, ...] = tuple(tool.name for tool in TOOLS)
_BY_NAME: Mapping[str, Tool] = {tool.name: tool for tool in TOOLS}


def tool_named(name: str) -> Tool:
    """The tool called ``name``; an unknown name answers as the envelope's enum does."""
    found = _BY_NAME.get(name)
    if found is None:
        choices = ", ".join(repr(n) for n in NAMES)
        shown = name if len(name) <= 40 else name[:40] + "..."
        raise ValidationFailed(
            f"'tool' must be one of {choices}, got {shown!r}",
            code="invalid_field",
            extra={"field": "tool"},
        )
    return found
