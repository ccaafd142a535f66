"""GET /metrics after a scripted scenario: exact values, and no tenant data.

``read_metrics`` and ``sample`` are meant for other e2e tests too (for example
the executions tests, for the takeover and fencing_rejected outcomes)::

    from tests.e2e.test_metrics import read_metrics, sample
    before = await read_metrics(server)
    ...
    after = await read_metrics(server)
    assert sample(after, "slotward_idempotency_total", outcome="takeover") == 1
"""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import Server

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

TENANT = "tenant-zeta"
WORKFLOWS = ("wf-metrics-a", "wf-metrics-b", "wf-metrics-c", "wf-metrics-d")
CLIENT_KEY = "client-key-zeta-1"


def parse_metrics(text: str) -> Samples:
    """Every sample of a Prometheus text exposition, by name and label set."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def read_metrics(server: Server) -> Samples:
    """Scrape the server's /metrics (no API key) and parse it."""
    answer = await server.anonymous().get("/metrics")
    assert answer.status == 200, answer.body
    assert answer.headers["Content-Type"].startswith("text/plain")
    return parse_metrics(answer.body.decode())


def sample(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value; a KeyError names what is missing."""
    return samples[(name, frozenset(labels.items()))]


def _hold(workflow: str, attendee: str, start: str, **extra: Any) -> dict[str, Any]:
    return {"workflow_id": workflow, "attendees": [attendee], "start": start,
            "duration_minutes": 30, **extra}  # fmt: skip


async def test_metric_values_after_a_scripted_scenario(server: Server) -> None:
    a = await server.key(tenant=TENANT, agent="agent-alpha", priority=50)
    b = await server.key(tenant=TENANT, agent="agent-beta", priority=50)
    c = await server.key(tenant=TENANT, agent="agent-gamma", priority=90)
    contested = _hold(WORKFLOWS[0], "alex@example.com", "2030-10-14T14:00:00Z")

    first = await a.create(contested)  # fresh
    again = await a.create(contested)  # replayed
    assert (first.status, again.status, again.replayed) == (201, 201, True)
    own_key = {"Idempotency-Key": CLIENT_KEY}
    bob = await a.create(_hold(WORKFLOWS[1], "bob@example.com", "2030-10-14T10:00:00Z"),
                         headers=own_key)  # fmt: skip  # fresh
    reused = await a.create(
        _hold(WORKFLOWS[1], "bob@example.com", "2030-10-14T11:00:00Z"), headers=own_key
    )  # mismatch
    assert (bob.status, reused.status, reused.json["code"]) == (201, 422, "idempotency_key_reused")
    held = await b.create({**contested, "workflow_id": WORKFLOWS[2]})  # conflict: held
    assert held.status == 409
    assert [x["kind"] for x in held.json["conflicts"]] == ["held"]
    overlapping = {**contested, "workflow_id": WORKFLOWS[3], "start": "2030-10-14T14:15:00Z"}
    winner = await c.create(overlapping)  # fresh, preempts (another intent: no same_intent)
    assert winner.status == 201
    assert (await c.create(overlapping)).replayed  # replays the preemption, preempts nothing
    committed = await c.commit(winner.json["id"], winner.json["token"])  # fresh
    assert committed.status == 200
    late = await b.create({**contested, "workflow_id": WORKFLOWS[2]})  # conflict: committed
    assert [x["kind"] for x in late.json["conflicts"]] == ["committed"]
    short = await a.create(
        _hold(WORKFLOWS[0], "carol@example.com", "2030-10-14T09:00:00Z", hold_ttl_seconds=60)
    )  # fresh
    assert short.status == 201
    server.clock.advance(600)  # `short` overdue by 540 s, `bob` by 300 s; no sweep yet
    kept = await a.create(_hold(WORKFLOWS[0], "dana@example.com", "2030-10-15T09:00:00Z"))
    dropped = await a.create(_hold(WORKFLOWS[0], "erin@example.com", "2030-10-15T10:00:00Z"))
    released = await a.release(dropped.json["id"])  # fresh
    assert (kept.status, dropped.status, released.status) == (201, 201, 200)
    read = await a.get(f"/v1/holds/{first.json['id']}")
    assert read.json["status"] == "preempted"
    assert (await server.anonymous().get("/v1/holds")).status == 401
    assert (await a.get("/no-such-path-zeta")).status == 404

    m = await read_metrics(server)

    def idem(outcome: str) -> float:
        return sample(m, "slotward_idempotency_total", outcome=outcome)

    # first, bob, winner, commit, short, kept, dropped, release.
    assert idem("fresh") == 8
    assert idem("replayed") == 2
    assert idem("mismatch") == 1
    for outcome in ("in_progress", "takeover", "fencing_rejected"):
        assert idem(outcome) == 0  # present before it ever happens
    assert sample(m, "slotward_conflicts_total", kind="held") == 1
    assert sample(m, "slotward_conflicts_total", kind="committed") == 1
    assert sample(m, "slotward_conflicts_total", kind="external") == 0
    assert sample(m, "slotward_preemptions_total") == 1
    assert sample(m, "slotward_retry_storms_total") == 0
    assert sample(m, "slotward_ledger_purged_total") == 0

    def requests(route: str, method: str, status: str) -> float:
        return sample(m, "slotward_http_requests_total", route=route, method=method, status=status)

    assert requests("/v1/holds", "POST", "201") == 8
    assert requests("/v1/holds", "POST", "409") == 2
    assert requests("/v1/holds", "POST", "422") == 1
    assert requests("/v1/holds", "GET", "401") == 1
    assert requests("/v1/holds/{hold_id}/commit", "POST", "200") == 1
    assert requests("/v1/holds/{hold_id}/release", "POST", "200") == 1
    assert requests("/v1/holds/{hold_id}", "GET", "200") == 1
    assert requests("unmatched", "GET", "404") == 1
    # Every request is counted once, and this scrape is not counted yet.
    routes = {dict(labels)["route"] for name, labels in m if name == "slotward_http_requests_total"}
    assert routes == {"/v1/holds", "/v1/holds/{hold_id}/commit", "/v1/holds/{hold_id}/release",
                      "/v1/holds/{hold_id}", "unmatched"}  # fmt: skip
    total = sum(v for (name, _), v in m.items() if name == "slotward_http_requests_total")
    assert total == 16

    def latency(part: str, route: str, method: str, **more: str) -> float:
        name = f"slotward_http_request_duration_seconds_{part}"
        return sample(m, name, route=route, method=method, **more)

    assert latency("count", "/v1/holds", "POST") == 11
    assert latency("bucket", "/v1/holds", "POST", le="+Inf") == 11
    assert 0 < latency("sum", "/v1/holds", "POST") < 60
    assert latency("count", "unmatched", "GET") == 1

    def holds(status: str) -> float:
        return sample(m, "slotward_holds", status=status)

    # first preempted; winner committed; bob and short past expiry; kept held; dropped released.
    assert [holds(s) for s in ("held", "committed", "released", "expired", "preempted")] == [
        1, 1, 1, 2, 1,
    ]  # fmt: skip
    assert sample(m, "slotward_sweeper_lag_seconds") == 540
    assert sample(m, "slotward_ledger_executing") == 0
    states = dict(server.sql("SELECT state, count(*) FROM outbox GROUP BY state"))
    # The 6 creates' events were written delivered (no subscription, no calendar:
    # nothing could want them); the preempted, committed and released ones wait
    # for a relay, and none runs here.
    assert states == {"delivered": 6, "pending": 3}
    assert sample(m, "slotward_outbox_backlog") == 3

    # No tenant data anywhere in the exposition.
    text = (await server.anonymous().get("/metrics")).body.decode()
    secrets = {TENANT, "agent-alpha", "agent-beta", "agent-gamma", CLIENT_KEY, *WORKFLOWS,
               "alex@example.com", "bob@example.com", "no-such-path-zeta"}  # fmt: skip
    for answer in (first, bob, winner, short, kept, dropped):
        secrets |= {answer.json["id"], answer.json["key"], str(answer.key)}
    for client in (a, b, c):
        secrets.add(str(client.secret))
    leaked = {s for s in secrets if s in text}
    assert not leaked


async def test_sweeping_clears_the_lag_and_moves_no_other_count(server: Server) -> None:
    agent = await server.key()
    made = await agent.create(
        _hold("wf-lag", "alex@example.com", "2030-10-14T14:00:00Z", hold_ttl_seconds=30)
    )
    assert made.status == 201
    server.clock.advance(90)
    before = await read_metrics(server)
    assert sample(before, "slotward_sweeper_lag_seconds") == 60
    assert sample(before, "slotward_holds", status="expired") == 1  # reads expired, unswept
    assert sample(before, "slotward_holds", status="held") == 0
    assert await server.sweep() == 1
    after = await read_metrics(server)
    assert sample(after, "slotward_sweeper_lag_seconds") == 0
    assert sample(after, "slotward_holds", status="expired") == 1
    # The first scrape is counted by the second, under the route template.
    assert sample(after, "slotward_http_requests_total", route="/metrics", method="GET",
                  status="200") == 1  # fmt: skip


async def test_metrics_need_no_key_and_refuse_nothing_for_a_bad_one(server: Server) -> None:
    anonymous = await server.anonymous().get("/metrics")
    assert anonymous.status == 200
    bearer = await server.anonymous().get(
        "/metrics", headers={"Authorization": "Bearer sw_not-a-key"}
    )
    assert bearer.status == 200
    assert b"slotward_http_requests_total" in bearer.body


async def test_unusual_methods_cannot_mint_label_values(server: Server) -> None:
    client = server.anonymous()
    for method in ("PROPFIND", "MKCOL", "LOCK"):  # methods aiohttp parses, then refuses
        await client.request(method, "/v1/holds")
    m = await read_metrics(server)
    methods = {dict(labels).get("method") for name, labels in m if name.startswith("slotward_http")}
    assert methods == {"other"}
    # aiohttp answers 405 before any route matches, so the path is "unmatched" too.
    assert sample(m, "slotward_http_requests_total", route="unmatched", method="other",
                  status="405") == 3  # fmt: skip


async def test_the_calls_of_a_batch_are_counted_one_by_one(server: Server) -> None:
    """A batch answers each call's refusal inside its 200: each is counted all the same."""
    a = await server.key(tenant=TENANT, agent="agent-batch-a", priority=50)
    b = await server.key(tenant=TENANT, agent="agent-batch-b", priority=50)

    def create(call_id: str, start: str) -> dict[str, Any]:
        arguments = {"attendees": ["batch@example.com"], "start": start, "duration_minutes": 30}
        return {"id": call_id, "type": "function",
                "function": {"name": "create_calendar_hold", "arguments": arguments}}  # fmt: skip

    first = {"workflow_id": "wf-batch-a", "tool_calls": [
        create("call_1", "2030-10-15T09:00:00Z"), create("call_2", "2030-10-15T10:00:00Z"),
    ]}  # fmt: skip
    answer = await a.post("/v1/tool-calls", first)
    assert answer.status == 200, answer.body
    before = await read_metrics(server)
    rival = {"workflow_id": "wf-batch-b", "tool_calls": [
        create("call_3", "2030-10-15T09:00:00Z"), create("call_4", "2030-10-15T11:00:00Z"),
    ]}  # fmt: skip
    answer = await b.post("/v1/tool-calls", rival)
    assert [r["status"] for r in answer.json["results"]] == [409, 201]
    replayed = await a.post("/v1/tool-calls", first)
    assert [r["replayed"] for r in replayed.json["results"]] == [True, True]
    after = await read_metrics(server)

    def grew(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert grew("slotward_conflicts_total", kind="held") == 1
    assert grew("slotward_idempotency_total", outcome="fresh") == 1
    assert grew("slotward_idempotency_total", outcome="replayed") == 2
