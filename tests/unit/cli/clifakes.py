"""A stand-in for :class:`taugrid.cli.client.Client`, for command tests without a server."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result

from taugrid.cli.app import cli
from taugrid.errors import NotFound


class FakeClient:
    """Answers from dicts; records what was submitted and asked."""

    def __init__(self, runs: dict[str, dict[str, Any]] | None = None) -> None:
        self.runs = runs or {}
        self.submitted: list[tuple[dict[str, Any], str]] = []
        self.list_params: list[dict[str, Any]] = []
        self.checkpoint_listing: dict[str, Any] | None = None
        self.files: dict[tuple[int, str], bytes] = {}
        self.series: list[dict[str, Any]] = []
        self.gpu: list[dict[str, Any]] = []  # the server's GPU use samples of the run
        self.metrics_asked: list[int | None] = []
        self.resumed: list[str] = []

    def get_run(self, ref: str) -> dict[str, Any]:
        if ref not in self.runs:
            raise NotFound(f"no run matches {ref!r}")
        return copy.deepcopy(self.runs[ref])

    def list_runs(self, **params: Any) -> dict[str, Any]:
        self.list_params.append(params)
        return {"runs": [copy.deepcopy(r) for r in self.runs.values()], "next_cursor": None}

    def submit(self, payload: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
        self.submitted.append((payload, idempotency_key))
        run = {"id": "new-run01", "state": "QUEUED", "name": payload["resolved"]["name"]}
        return {"run": run, "created": True}

    def checkpoints(self, ref: str) -> dict[str, Any]:
        assert self.checkpoint_listing is not None
        return copy.deepcopy(self.checkpoint_listing)

    def checkpoint_file(self, ref: str, step: int, path: str) -> Iterator[bytes]:
        if (step, path) not in self.files:
            raise NotFound(f"no file {path}")
        data = self.files[(step, path)]
        yield data[: len(data) // 2]
        yield data[len(data) // 2 :]

    def metrics(self, ref: str, attempt: int | None = None) -> dict[str, Any]:
        self.metrics_asked.append(attempt)
        series = [p for p in self.series if attempt is None or p["attempt"] == attempt]
        return {"run_id": ref, "series": copy.deepcopy(series), "gpu": list(self.gpu)}

    def resume(self, ref: str) -> dict[str, Any]:
        self.resumed.append(ref)
        run = self.get_run(ref)
        run["state"] = "QUEUED"
        return run


def invoke(monkeypatch: pytest.MonkeyPatch, module: str, fake: FakeClient, *args: str) -> Result:
    """Run ``tau ARGS`` in-process with ``connect()`` of that command module answering fake."""
    import importlib

    mod = importlib.import_module(f"taugrid.cli.commands.{module}")
    monkeypatch.setattr(mod, "connect", lambda: fake)
    return CliRunner().invoke(cli, list(args), prog_name="tau", catch_exceptions=True)
