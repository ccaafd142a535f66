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


_INSTANT = "ISO-8601 with an offset or Z, or a local time with `timezone`"
_ATTENDEES = Field(
    "attendees",
    "array",
    required=True,
    min_items=1,
    max_items=100,
    items=Field("attendee", "string", min_length=1, max_length=320),
    description="Attendee ids or emails (`Name <email>` accepted)",
)
_HOLD_ID = Field("hold_id", "string", required=True, min_length=1, max_length=64)
_TOKEN = Field("token", "integer", required=True, minimum=0)

CREATE_HOLD = Tool(
    name="create_calendar_hold",
    schema_name="CreateHoldArguments",
    description=(
        "Place a tentative hold on a time slot for the attendees, so that no other agent "
        "can book it while you confirm. Call it once you have chosen a slot (find_free_slots "
        "suggests some); then commit_calendar_hold books it and release_calendar_hold gives "
        "it up. An uncommitted hold expires after hold_ttl_seconds. A retry is safe: the "
        "same workflow, step, attendees and times land once and answer with the first "
        "result; to book the same slot again on purpose, use a new step. A taken slot "
        "answers slot_conflict with up to three free alternatives; a higher priority may "
        "preempt holds of a lower one."
    ),
    fields=(
        _ATTENDEES,
        Field("start", "string", required=True, max_length=64, description=_INSTANT),
        Field("end", "string", max_length=64, description="Exclusive end; or a duration"),
        Field("duration_minutes", "integer", minimum=1, maximum=1440),
        Field("duration", "string", max_length=32, description="ISO-8601 duration, e.g. PT30M"),
        Field("timezone", "string", max_length=64, description="IANA name for local times"),
        Field("title", "string", max_length=500),
        Field("description", "string", nullable=True, max_length=5000),
        Field("priority", "integer", minimum=0, maximum=100, description="May lower, not raise"),
        Field("hold_ttl_seconds", "integer", minimum=10, maximum=3600),
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
        "Book a hold placed by create_calendar_hold: it becomes a committed event. Give the "
        "hold's id and the token its placement answered. Only the agent that placed the "
        "hold may commit it; an expired hold can still be committed while its slot is free. "
        "A retry is safe: a repeated commit answers with the first commit's result."
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
        "Release a hold, the compensating action when a plan is dropped or a later step "
        "failed: its slot becomes free for others. The agent that placed the hold, or an "
        "admin, may release it. A retry is safe: releasing a hold already released, expired "
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
        "Find slots of duration_minutes when every attendee is free between from and to, "
        "and the busy intervals and free gaps around them. Read-only: it books nothing, so "
        "call it before create_calendar_hold to choose a slot; a retry only reads again."
    ),
    fields=(
        replace(_ATTENDEES, description=""),
        Field("from", "string", required=True, max_length=64, description=_INSTANT),
        Field("to", "string", required=True, max_length=64, description=_INSTANT),
        Field("timezone", "string", max_length=64),
        Field("duration_minutes", "integer", required=True, minimum=1, maximum=1440),
        Field("limit", "integer", minimum=1, maximum=50),
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
