"""Handlers of the agents' routes: ``POST /v1/tool-calls`` and ``GET /v1/tools``.

A tool call is translated to the generic envelope (api/envelopes.py), run by
the service (``service.call_tool``), and answered as the tool's own endpoint
answers, or, for a batch or with ``?reply=``, as the documents of
api/tool_results.py (docs/agents.md).
"""

from __future__ import annotations

from collections.abc import Hashable

import orjson
from aiohttp import web

from slotward.api import service
from slotward.api.bootstrap import Services
from slotward.api.envelopes import Call, Envelope, relocated, translate
from slotward.api.http.auth import authenticate
from slotward.api.http.context import SERVICES
from slotward.api.http.jsonbody import decode_body, decode_json, read_body
from slotward.api.http.problems import problem_document
from slotward.api.http.responses import (
    REPLY,
    client_key,
    json_response,
    reply_response,
    reply_status,
)
from slotward.api.http.statuses import status_of
from slotward.api.replays import tool_body_sent_as
from slotward.api.tool_formats import check_format, tool_schemas
from slotward.api.tool_results import Outcome, batch_document, check_reply, reply_for
from slotward.engine.errors import SlotwardError, ValidationFailed
from slotward.engine.model import Principal, Reply
from slotward.engine.rules.fingerprint import check_client_key
from slotward.engine.tools import TOOLS, tool_named

__all__ = ["tool_call", "tools_handler"]


async def tools_handler(request: web.Request) -> web.Response:
    """The tools this key may call, in the format asked for: a key that may not
    write (a reviewer's) is shown the read-only ones, so its model is not
    offered a tool that would answer 403."""
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys)
    writes = principal.role in service.WRITERS
    tools = [tool for tool in TOOLS if writes or tool.read_only]
    return json_response(tool_schemas(check_format(request.query.get("format")), tools))


async def tool_call(request: web.Request) -> web.Response:
    """A tool call, or an assistant message's calls, in the envelope the model emitted."""
    svc = request.app[SERVICES]
    # Counted once the body says how many calls it holds (_admit); a refused body
    # still costs one request, so a loop of broken bodies is limited too.
    principal = await authenticate(request, svc.keys, count=False)
    counted = False
    try:
        reply = check_reply(request.query.get("reply"))
        raw = await read_body(request)
        key = client_key(request)
        # A create answered as its own endpoint answers (no client key, no
        # ?reply=) is remembered under its body as sent too: a retry sent as it
        # was replays before its body is decoded, translated and validated.
        sent = None if key is not None or reply is not None else tool_body_sent_as(principal, raw)
        if sent is not None and sent in svc.known:
            counted = True
            svc.keys.limiter.admit(principal)  # one call, as _admit counts it: 429 before work
            known = await service.replay_known_create(svc, principal, sent)
            if known is not None:
                return reply_response(known)
        envelope = translate(decode_body(raw), decode=decode_json,
                             ignore=svc.policy.thought_fields)  # fmt: skip
        _check(envelope, key, needs_ids=reply is not None)
    except SlotwardError:
        if not counted:
            svc.keys.limiter.admit(principal)
        raise
    if not counted:  # a known body's single call was counted above
        _admit(svc, principal, envelope)
    if not envelope.batch and reply is None:
        return await _single(svc, principal, envelope.calls[0], key, sent)
    # One after another, in the message's order: a later call sees what an earlier one held.
    outcomes = [await _outcome(svc, principal, call, key) for call in envelope.calls]
    for outcome in outcomes if envelope.batch else ():
        # A single call's reply carries its Reply to the telemetry middleware
        # (_describe); a batch's are counted here, one by one.
        if outcome.reply is not None:
            svc.metrics.answered(outcome.reply)
    if reply is None:
        return json_response(batch_document(outcomes))
    responses = envelope.dialect == "openai-responses"
    response = json_response(reply_for(reply, outcomes, batch=envelope.batch, responses=responses))
    if not envelope.batch:
        _describe(response, outcomes[0])
    return response


def _check(envelope: Envelope, key: str | None, *, needs_ids: bool) -> None:
    """The frame's rules beyond its shape: refused whole, before any call runs."""
    if key is not None:
        # Checked here too, not only by the write: a call refused before it runs
        # (a made-up tool) must not let a broken header pass as a 200 reply.
        check_client_key(key)
    if envelope.batch and key is not None:
        raise ValidationFailed(
            "an Idempotency-Key names one call; a batch's calls each get their own derived key",
            code="invalid_field",
            extra={"field": "Idempotency-Key"},
        )
    for call in envelope.calls:
        # The frame's workflow_id, checked for every call before any runs (the
        # service checks it again for its other callers).
        if call.envelope is None or "workflow_id" in call.envelope:
            continue
        tool = tool_named(call.envelope["tool"])
        if tool.needs_workflow:
            raise ValidationFailed(
                f"{tool.name} needs the envelope's 'workflow_id', beside the call(s)",
                code="missing_field",
                extra={"field": "workflow_id"},
            )
    seen: set[str] = set()
    for call in envelope.calls:
        if call.call_id is None:
            continue
        if call.call_id in seen:  # a reply to it, or a result by its id, would be ambiguous
            raise ValidationFailed(
                f"'{call.id_at}' repeats the id of an earlier call: each call needs its own",
                code="invalid_field",
                extra={"field": call.id_at},
            )
        seen.add(call.call_id)
    for call in envelope.calls if needs_ids else ():
        if call.call_id is None:
            raise ValidationFailed(
                f"a reply references each call by its id: '{call.id_at}' is required with ?reply",
                code="missing_field",
                extra={"field": call.id_at},
            )


def _admit(svc: Services, principal: Principal, envelope: Envelope) -> None:
    """Each call of a batch counts against the agent's rate: all its tokens are
    taken in one step or none, so a refused batch spends nothing and its
    Retry-After is the wait for all its calls. A batch the bucket can never
    hold is a 422 (costing one request): waiting would not help."""
    limiter = svc.keys.limiter
    if limiter.enabled and len(envelope.calls) > limiter.burst:
        limiter.admit(principal)
        field = envelope.calls[0].id_at.split("[")[0]
        raise ValidationFailed(
            f"'{field}' holds {len(envelope.calls)} calls, more than this agent's rate "
            f"allows at once ({limiter.burst}): send them in smaller batches",
            code="invalid_field",
            extra={"field": field},
        )
    limiter.admit(principal, len(envelope.calls))


async def _single(
    svc: Services, principal: Principal, call: Call, key: str | None, sent: Hashable | None
) -> web.Response:
    """One call answered as its tool's endpoint answers (errors as problem+json);
    ``sent``: its body's name as sent (api/replays.py tool_body_sent_as)."""
    if call.envelope is None:
        assert call.refused is not None
        raise call.refused
    try:
        answer = await service.call_tool(svc, principal, call.envelope, key, sent)
    except ValidationFailed as error:
        raise relocated(error, call) from None
    return reply_response(answer) if isinstance(answer, Reply) else json_response(answer)


async def _outcome(svc: Services, principal: Principal, call: Call, key: str | None) -> Outcome:
    """One call of a batch or a reply: its answer or its problem, never raised."""
    tool = call.envelope["tool"] if call.envelope is not None else call.name
    try:
        if call.envelope is None:
            assert call.refused is not None
            raise call.refused
        answer = await service.call_tool(svc, principal, call.envelope, key)
    except SlotwardError as error:
        failed = relocated(error, call) if isinstance(error, ValidationFailed) else error
        # Answered as a result, not raised: the telemetry middleware never sees it.
        svc.metrics.refused(failed)
        known = failed.idempotency_key
        return Outcome(call.call_id, tool, status_of(failed), known,
                       None if known is None else False, problem_document(failed),
                       retry_after=failed.retry_after)  # fmt: skip
    if isinstance(answer, Reply):
        return Outcome(call.call_id, tool, reply_status(answer), answer.key, answer.replayed,
                       orjson.loads(answer.body), reply=answer)  # fmt: skip
    return Outcome(call.call_id, tool, 200, None, None, answer)


def _describe(response: web.Response, outcome: Outcome) -> None:
    """A single call's reply still says, in its headers, what the call itself answered."""
    response.headers["Slotward-Tool-Status"] = str(outcome.status)
    if outcome.key is not None:
        response.headers["Idempotency-Key"] = outcome.key
        response.headers["Idempotent-Replayed"] = "true" if outcome.replayed else "false"
    if outcome.retry_after is not None:
        response.headers["Retry-After"] = str(outcome.retry_after)
    if outcome.reply is not None:
        response[REPLY] = outcome.reply
        if outcome.reply.hold_status is not None:
            response.headers["Slotward-Hold-Status"] = outcome.reply.hold_status
