"""Optional OpenTelemetry tracing of the submit → running path (docs/observability.md).

Off (no endpoint set), the server holds :data:`NO_TRACING`: every call is a no-op and
nothing of OpenTelemetry is imported. On (``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``TAU_OTEL_ENDPOINT`` or ``--otel-endpoint``; the
``otel`` extra), each run submitted by ``POST /api/v1/runs`` gets one trace:

- ``submit``: the request (route, workspace, queue, run id; never the spec, an env value,
  a secret or a token), the trace's root;
- then the run's stages, children of ``submit``, each from one recorded time to the next:
  ``queued`` (submitted or requeued → admitted), ``admission`` (admitted → its launch
  begins on the starter's thread), ``launch`` (the resume point, the launch request, the
  executor's ``launch`` until it returned), ``starting`` (→ the ``RUNNING`` transition).

The stages happen on other threads long after the request: the engine's committed
transitions (``RunEngine.observe_moves``, with the rows' times) and the starter's launches
(``AttemptStarter.on_launched``) close them, and each span is emitted with explicit start
and end times. What a run's trace needs (the submit span's context, the open stage) is kept
in memory from the submit until ``RUNNING`` or an end, at most ``MAX_TRACKED`` runs (the
oldest are dropped: a run cancelled while queued is never seen by the engine).
"""

from __future__ import annotations

import contextvars
import importlib.util
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

from taugrid import __version__
from taugrid.domain.states import TERMINAL, RunState
from taugrid.ports.executor import AttemptKey
from taugrid.store.runs import Move, Row

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer

    from taugrid.server.engine import RunEngine

log = logging.getLogger("taugrid.server")
S = RunState
SERVICE_NAME = "taugrid-server"
MAX_TRACKED = 10_000  # runs whose path is traced at once; the oldest are dropped beyond
CLOSE_S = 2.0  # the longest the server's stop waits for the last spans to be sent
INSTALL = "pip install 'taugrid[otel]'"
# The modules tracing needs: the SDK and the OTLP/HTTP exporter (the SDK alone may be
# there, pulled by another package such as Ray).
NEEDED = ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter")


class NoSubmitSpan:
    """The ``submit`` span when tracing is off: a context manager doing nothing."""

    def __enter__(self) -> NoSubmitSpan:
        return self

    def __exit__(
        self,
        typ: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


_NO_SUBMIT = NoSubmitSpan()


class NoTracing:
    """Tracing off: the interface the call sites use, every method a no-op."""

    enabled = False

    def submit(self, route: str, workspace: str | None) -> NoSubmitSpan:
        """The request's span, around the handler: ``with tracing.submit(...):``."""
        return _NO_SUBMIT

    def submitted(self, results: Sequence[tuple[Row, bool]]) -> None:
        """The runs the current request recorded (RunService.submit_many), before the
        engine is woken: each created one's path is traced from here."""

    def watch(self, engine: RunEngine) -> None:
        """Observe the engine's committed transitions and its starter's launches."""

    def close(self) -> None:
        """Send what is buffered and stop (the server's shutdown)."""


NO_TRACING = NoTracing()


def tracing_problem(endpoint: str | None) -> str | None:
    """Why tracing cannot start (one line for the server's start-up), or None."""
    if endpoint is None:
        return None
    for name in NEEDED:
        try:
            found = importlib.util.find_spec(name) is not None
        except ImportError:  # a parent package is missing
            found = False
        if not found:
            return (
                "tracing is on (an OTLP endpoint is set) but OpenTelemetry is not installed: "
                f"{INSTALL} (or unset OTEL_EXPORTER_OTLP_ENDPOINT, "
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT and TAU_OTEL_ENDPOINT)"
            )
    return None


def start_tracing(endpoint: str | None) -> NoTracing:
    """:data:`NO_TRACING` without an endpoint; else spans sent to ``endpoint`` (the full
    OTLP/HTTP traces URL) in batches (``OTEL_BSP_*`` tune them)."""
    if endpoint is None:
        return NO_TRACING
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    return OtelTracing(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


# The submit span of the request this thread handles, for RunService.submit_many.
_CURRENT: contextvars.ContextVar[SubmitSpan | None] = contextvars.ContextVar(
    "taugrid_submit_span", default=None
)


class SubmitSpan(NoSubmitSpan):
    """The ``submit`` span of one request (tracing on)."""

    def __init__(self, tracing: OtelTracing, route: str, workspace: str | None) -> None:
        self.tracing = tracing
        self.attributes: dict[str, str | bool | int] = {
            "http.request.method": "POST",
            "http.route": route,
        }
        if workspace is not None:
            self.attributes["taugrid.workspace"] = workspace
        self.span: Span | None = None
        self.created = False
        self._token: contextvars.Token[SubmitSpan | None] | None = None

    def __enter__(self) -> SubmitSpan:
        from opentelemetry.context import Context
        from opentelemetry.trace import SpanKind

        self.span = self.tracing.tracer.start_span(
            "submit",
            context=Context(),  # a root: one trace per run, whatever the thread held
            kind=SpanKind.SERVER,
            attributes=self.attributes,
            start_time=_ns(self.tracing.clock()),
        )
        self._token = _CURRENT.set(self)
        return self

    def __exit__(
        self,
        typ: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        from opentelemetry.trace import Status, StatusCode

        if self._token is not None:
            _CURRENT.reset(self._token)
        span = self.span
        if span is None:
            return None
        if exc is None:
            span.set_attribute("http.response.status_code", 201 if self.created else 200)
        else:  # the error's code only: its message may quote the request
            span.set_attribute("error.type", str(getattr(exc, "code", type(exc).__name__)))
            status = getattr(exc, "http_status", 500)
            status = status if isinstance(status, int) else 500
            span.set_attribute("http.response.status_code", status)
            if status >= 500:  # a refusal (4xx) is the client's, not the server's error
                span.set_status(Status(StatusCode.ERROR))
        span.end(end_time=_ns(self.tracing.clock()))
        return None

    def recorded(self, results: Sequence[tuple[Row, bool]]) -> None:
        from opentelemetry.trace import NonRecordingSpan, set_span_in_context

        if self.span is None:
            return
        if len(results) == 1:
            run, created = results[0]
            self.created = created
            self.span.set_attributes(
                {
                    "taugrid.run_id": str(run["id"]),
                    "taugrid.workspace": str(run["workspace"]),
                    "taugrid.queue": str(run["queue"]),
                    "taugrid.created": created,
                }
            )
        parent = set_span_in_context(NonRecordingSpan(self.span.get_span_context()))
        for run, created in results:
            if created:
                self.tracing.track(run, parent)


@dataclass
class _Path:
    """Where one run is on its way to running: its trace and the stage open now."""

    parent: Context  # the submit span's context: the stages are its children
    attributes: dict[str, str | int]
    stage: str | None  # "queued", "admission", "starting"; None: nothing open
    since: float  # when the open stage began (a row's time)
    launched: bool = False  # this attempt's launch returned (a cluster's: while queued)
    extra: dict[str, str | int] = field(default_factory=dict)


class OtelTracing(NoTracing):
    """Tracing on: spans through ``processor`` (a batch processor to the OTLP exporter;
    tests pass a simple processor on an in-memory exporter). ``clock``: the rows' clock
    (the store's), for the submit span's times."""

    enabled = True

    def __init__(self, processor: Any, *, clock: Callable[[], float] = time.time) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider

        resource = Resource.create(
            {
                "service.name": os.environ.get("OTEL_SERVICE_NAME") or SERVICE_NAME,
                "service.version": __version__,
            }
        )
        # Not the global provider: tests run several apps in one process.
        self.provider: TracerProvider = TracerProvider(resource=resource, shutdown_on_exit=False)
        self.provider.add_span_processor(processor)
        self.tracer: Tracer = self.provider.get_tracer("taugrid.server", __version__)
        self.clock = clock
        self._lock = threading.Lock()
        self._paths: OrderedDict[str, _Path] = OrderedDict()

    @classmethod
    def to_exporter(
        cls, exporter: SpanExporter, *, clock: Callable[[], float] = time.time
    ) -> OtelTracing:
        """Every span handed to ``exporter`` as it ends (tests)."""
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor

        return cls(SimpleSpanProcessor(exporter), clock=clock)

    # -- the interface -------------------------------------------------------------------
    def submit(self, route: str, workspace: str | None) -> SubmitSpan:
        return SubmitSpan(self, route, workspace)

    def submitted(self, results: Sequence[tuple[Row, bool]]) -> None:
        current = _CURRENT.get()
        if current is not None and current.tracing is self:
            current.recorded(results)

    def watch(self, engine: RunEngine) -> None:
        engine.observe_moves(self.moved)
        engine.starter.on_launched = self.launched

    def close(self) -> None:
        """Send what the batch processor holds, waiting at most ``CLOSE_S``: a collector
        that is down (the exporter retries for seconds) must not hold up the stop."""
        done = threading.Thread(target=self.provider.shutdown, name="tau-otel-close", daemon=True)
        done.start()
        done.join(CLOSE_S)
        if done.is_alive():
            log.warning("tracing: the collector did not take the last spans in %.0f s", CLOSE_S)

    # -- the paths -----------------------------------------------------------------------
    def tracked(self) -> int:
        with self._lock:
            return len(self._paths)

    def track(self, run: Row, parent: Context) -> None:
        """Trace ``run``'s path from its submit (queued since it was created)."""
        attributes: dict[str, str | int] = {
            "taugrid.run_id": str(run["id"]),
            "taugrid.workspace": str(run["workspace"]),
            "taugrid.queue": str(run["queue"]),
        }
        path = _Path(parent, attributes, "queued", float(run["created_at"]))
        with self._lock:
            self._paths[str(run["id"])] = path
            while len(self._paths) > MAX_TRACKED:
                self._paths.popitem(last=False)

    def moved(self, moves: Iterable[tuple[Move, Row]]) -> None:
        """The engine's committed transitions (after each batch, on its thread)."""
        with self._lock:
            if not self._paths:
                return
            for move, row in moves:
                path = self._paths.get(row["id"])
                if path is not None:
                    self._moved(row["id"], path, move.step.to, float(row["updated_at"]), row)

    def _moved(self, run_id: str, path: _Path, to: RunState, at: float, row: Row) -> None:
        if to == S.ADMITTED:
            if path.stage == "queued":
                self._emit(path, "queued", path.since, at)
            path.extra = {"taugrid.attempt": int(row["attempt_count"]) - 1}
            if row.get("flavor"):
                path.extra["taugrid.flavor"] = str(row["flavor"])
            path.stage, path.since = ("starting" if path.launched else "admission"), at
        elif to == S.RUNNING:
            if path.stage is not None:
                self._emit(path, path.stage, path.since, at)
            del self._paths[run_id]
        elif to == S.QUEUED:  # back in the queue before it ever ran (preempted, restarting)
            if path.stage not in (None, "queued"):
                self._emit(path, path.stage, path.since, at, ended=to)
            if path.stage != "queued":
                path.stage, path.since, path.launched = "queued", at, False
        elif to in TERMINAL:  # ended before running: the open stage ends with it
            if path.stage is not None:
                self._emit(path, path.stage, path.since, at, ended=to)
            del self._paths[run_id]

    def launched(self, key: AttemptKey, began: float, ended: float, ok: bool) -> None:
        """An attempt's launch returned (``ok``) or failed, on the starter's thread."""
        with self._lock:
            path = self._paths.get(key.run_id)
            if path is None:
                return
            if path.stage == "admission":
                self._emit(path, "admission", path.since, began)
            self._emit(path, "launch", began, ended, attempt=key.attempt, failed=not ok)
            if path.stage == "queued":  # a cluster's: launched ahead of its admission
                path.launched = ok
            elif ok:
                path.stage, path.since, path.launched = "starting", ended, True
            else:  # the engine fails the run next; nothing more to time
                path.stage = None

    def _emit(
        self,
        path: _Path,
        name: str,
        start: float,
        end: float,
        *,
        ended: RunState | None = None,
        attempt: int | None = None,
        failed: bool = False,
    ) -> None:
        from opentelemetry.trace import Status, StatusCode

        attributes: dict[str, str | int] = {**path.attributes}
        if name != "queued":
            attributes.update(path.extra)
        if attempt is not None:
            attributes["taugrid.attempt"] = attempt
        if ended is not None:  # the stage did not end as it does on the way to running
            attributes["taugrid.run.state"] = ended.value.lower()
            failed = failed or ended == S.FAILED
        span = self.tracer.start_span(
            name, context=path.parent, attributes=attributes, start_time=_ns(start)
        )
        if failed:
            span.set_status(Status(StatusCode.ERROR))
        span.end(end_time=_ns(max(start, end)))
