"""OpenTelemetry spans of the submit → running path, from the real engine on the fake
executor (a real store, the real admission and lifecycle), read back from the SDK's
in-memory exporter: one trace per run, ``submit`` its root and the stages (``queued``,
``admission``, ``launch``, ``starting``) its children, each from one recorded time to the
next; nothing of the run's environment in any span."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from engine_world import World

from servicecheck import require_module
from taugrid.ports.executor import LaunchRequest
from taugrid.server import tracing as tracing_module
from taugrid.server.metrics import ServerMetrics
from taugrid.server.tracing import NO_TRACING, OtelTracing, start_tracing, tracing_problem

SECRET = "hunter2-not-for-spans"
LAUNCH_S = 3.0  # the fake launch takes this long on the test's clock


@pytest.fixture
def traced(world: World, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[OtelTracing, Any]]:
    require_module("opentelemetry.sdk", "the otel extra: pip install 'taugrid[otel]'")
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    world.store.clock = world.clock  # the rows' times on the test's clock
    exporter = InMemorySpanExporter()
    tracing = OtelTracing.to_exporter(exporter, clock=world.clock)
    tracing.watch(world.engine)
    launch = world.executor.launch

    def slow_launch(req: LaunchRequest) -> None:
        world.clock.now += LAUNCH_S
        launch(req)

    monkeypatch.setattr(world.executor, "launch", slow_launch)
    yield tracing, exporter
    tracing.close()


def submit(world: World, tracing: OtelTracing, **spec: Any) -> str:
    """As POST /api/v1/runs does it: the request's span around the recorded run."""
    with tracing.submit("/api/v1/runs", "default"):
        world.clock.now += 0.25  # the request's own work before the run is recorded
        rid = world.submit(**spec)
        tracing.submitted([(world.run(rid), True)])
        world.clock.now += 0.25
    return rid


def by_name(exporter: Any) -> dict[str, Any]:
    spans = exporter.get_finished_spans()
    named = {s.name: s for s in spans}
    assert len(named) == len(spans), [s.name for s in spans]  # each stage once
    return named


def ns(seconds: float) -> int:
    return int(seconds * 1e9)


def test_a_run_gets_one_trace_from_submit_to_running(
    world: World, traced: tuple[OtelTracing, Any]
) -> None:
    tracing, exporter = traced
    t0 = world.clock.now
    rid = submit(world, tracing, resources={"gpus": 1}, env={"API_KEY": SECRET})
    created = world.run(rid)["created_at"]
    world.clock.now += 5
    world.step()  # admitted after 5 s in the queue, then launched (3 s on the clock)
    admitted = next(e["at"] for e in world.store.events(rid) if e["to_state"] == "ADMITTED")
    world.executor.start(world.key(rid))
    world.clock.now += 2
    world.step()
    assert world.state(rid) == "RUNNING"
    running = world.run(rid)["updated_at"]
    spans = by_name(exporter)
    assert set(spans) == {"submit", "queued", "admission", "launch", "starting"}
    root = spans["submit"]
    # One trace: submit is its root, every stage its child.
    assert root.parent is None
    trace_id = root.context.trace_id
    for name in ("queued", "admission", "launch", "starting"):
        assert spans[name].context.trace_id == trace_id
        assert spans[name].parent.span_id == root.context.span_id
    # The request's time, then the stages one after the other, on the rows' times.
    assert root.start_time == ns(t0) and root.end_time == ns(t0 + 0.5)
    assert spans["queued"].start_time == ns(created) == ns(t0 + 0.25)
    assert spans["queued"].end_time == spans["admission"].start_time == ns(admitted)
    assert admitted == t0 + 0.5 + 5
    assert spans["admission"].end_time == spans["launch"].start_time
    assert spans["launch"].end_time - spans["launch"].start_time == ns(LAUNCH_S)
    assert spans["launch"].end_time == spans["starting"].start_time
    assert spans["starting"].end_time == ns(running) == ns(admitted + LAUNCH_S + 2)
    # What the spans say: the route, where the run went; never its environment.
    assert root.attributes["http.route"] == "/api/v1/runs"
    assert root.attributes["http.request.method"] == "POST"
    assert root.attributes["http.response.status_code"] == 201
    assert root.attributes["taugrid.workspace"] == "default"
    assert root.attributes["taugrid.queue"] == "default"
    assert root.attributes["taugrid.run_id"] == rid
    for name in ("queued", "admission", "launch", "starting"):
        assert spans[name].attributes["taugrid.run_id"] == rid
        assert spans[name].attributes["taugrid.queue"] == "default"
    assert spans["launch"].attributes["taugrid.attempt"] == 0
    assert root.resource.attributes["service.name"] == "taugrid-server"
    dumped = "".join(s.to_json() for s in spans.values())
    assert SECRET not in dumped and "API_KEY" not in dumped
    assert all(s.status.is_ok for s in spans.values())
    assert tracing.tracked() == 0  # forgotten once running
    # Later moves of the run (its end) add nothing to the trace.
    world.executor.exit(world.key(rid), 0)
    world.step()
    assert len(exporter.get_finished_spans()) == 5


def test_a_failed_launch_ends_the_trace_with_an_error(
    world: World, traced: tuple[OtelTracing, Any]
) -> None:
    tracing, exporter = traced
    rid = submit(world, tracing)
    world.executor.refuse[rid] = f"image not found ({SECRET})"
    world.step()  # admitted; the launch fails
    world.step()  # the engine applies the failure
    assert world.state(rid) == "FAILED"
    spans = by_name(exporter)
    assert set(spans) == {"submit", "queued", "admission", "launch"}
    assert not spans["launch"].status.is_ok
    assert SECRET not in "".join(s.to_json() for s in spans.values())  # not the message
    assert tracing.tracked() == 0


def test_a_run_cancelled_before_running_ends_its_open_stage(
    world: World, traced: tuple[OtelTracing, Any]
) -> None:
    tracing, exporter = traced
    rid = submit(world, tracing)
    world.step()  # admitted and launched, not running yet
    world.clock.now += 4
    world.cancel([rid])
    world.step()
    assert world.state(rid) == "CANCELLED"
    spans = by_name(exporter)
    assert set(spans) == {"submit", "queued", "admission", "launch", "starting"}
    assert spans["starting"].attributes["taugrid.run.state"] == "cancelled"
    assert spans["starting"].end_time - spans["starting"].start_time == ns(4)
    assert tracing.tracked() == 0


def test_a_repeated_submit_is_not_traced_again(
    world: World, traced: tuple[OtelTracing, Any]
) -> None:
    tracing, exporter = traced
    rid = world.submit()
    with tracing.submit("/api/v1/runs", "default"):
        tracing.submitted([(world.run(rid), False)])  # the same idempotency key again
    world.step()
    (root,) = exporter.get_finished_spans()
    assert root.attributes["taugrid.created"] is False
    assert root.attributes["http.response.status_code"] == 200
    assert tracing.tracked() == 0


def test_a_refused_or_failed_submit_records_its_error_code_only(
    traced: tuple[OtelTracing, Any],
) -> None:
    from taugrid.errors import UsageError

    tracing, exporter = traced
    with pytest.raises(UsageError), tracing.submit("/api/v1/runs", "default"):
        raise UsageError(f"no such secret {SECRET}")
    with pytest.raises(RuntimeError), tracing.submit("/api/v1/runs", "default"):
        raise RuntimeError(f"the database is gone ({SECRET})")
    refused, failed = exporter.get_finished_spans()
    assert refused.attributes["error.type"] == UsageError.code
    assert refused.attributes["http.response.status_code"] == UsageError.http_status
    assert refused.status.is_unset  # a refusal is the client's error, not the server's
    assert failed.attributes["error.type"] == "RuntimeError"
    assert failed.attributes["http.response.status_code"] == 500
    assert not failed.status.is_ok
    assert SECRET not in refused.to_json() + failed.to_json()


def test_the_metrics_and_the_tracing_both_watch_the_engine(
    world: World, traced: tuple[OtelTracing, Any]
) -> None:
    tracing, exporter = traced
    metrics = ServerMetrics(clock=world.clock)
    calls: list[int] = []

    def broken(moves: Any) -> None:
        calls.append(len(moves))
        raise RuntimeError("an observer that fails")

    world.engine.observe_moves(broken)  # after the fixture's tracing, before the metrics
    world.engine.observe_moves(metrics.moved)
    rid = submit(world, tracing)
    world.step()
    world.executor.start(world.key(rid))
    world.step()
    assert calls  # the failing one was told, and the others still were
    assert _samples(metrics)["taugrid_submit_to_running_seconds_count"] == 1
    assert {s.name for s in exporter.get_finished_spans()} >= {"queued", "starting"}


def _samples(metrics: ServerMetrics) -> dict[str, float]:
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    text = generate_latest(metrics.registry).decode()
    return {
        s.name: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if not s.labels or s.labels == {"queue": "default"}
    }


def test_the_paths_kept_are_bounded(
    world: World, traced: tuple[OtelTracing, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    tracing, _ = traced
    monkeypatch.setattr(tracing_module, "MAX_TRACKED", 3)
    made = [submit(world, tracing) for _ in range(5)]
    assert tracing.tracked() == 3
    assert sorted(tracing._paths) == sorted(made[2:])  # the oldest dropped


def test_off_there_is_nothing_to_call_but_no_ops() -> None:
    assert start_tracing(None) is NO_TRACING
    assert tracing_problem(None) is None
    with NO_TRACING.submit("/api/v1/runs", "default"):
        NO_TRACING.submitted([])
    NO_TRACING.close()


def test_on_without_the_extra_the_start_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tracing_module, "NEEDED", ("opentelemetry.sdk", "no_such.otel.exporter"))
    problem = tracing_problem("http://127.0.0.1:4318/v1/traces")
    assert problem is not None and "pip install 'taugrid[otel]'" in problem
    assert "\n" not in problem
