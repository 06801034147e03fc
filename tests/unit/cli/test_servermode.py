"""cli/servermode.py: the server's capabilities as the CLI learns them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from taugrid.cli import servermode
from taugrid.errors import NotFound
from taugrid.spec.modes import CLUSTER, LOCAL


class Answers:
    """A client whose ``GET /server`` answers ``data``, or raises it."""

    def __init__(self, data: Any) -> None:
        self.data = data
        self.asked: list[tuple[str, str]] = []

    def call(self, method: str, path: str, **kw: Any) -> Any:
        self.asked.append((method, path))
        if isinstance(self.data, Exception):
            raise self.data
        return self.data


def test_ask_reads_the_route_and_an_older_server_is_local() -> None:
    cluster = Answers({"mode": "cluster", "capabilities": CLUSTER.to_dict(), "version": "9"})
    assert servermode.ask(cluster) == CLUSTER  # type: ignore[arg-type]
    assert cluster.asked == [("GET", "/server")]
    assert servermode.ask(Answers(NotFound("not found"))) == LOCAL  # type: ignore[arg-type]
    assert servermode.ask(Answers(None)) == LOCAL  # type: ignore[arg-type]


def test_the_check_answer_carries_them_or_means_local() -> None:
    base = {"workspace": "w", "queue": "q", "cluster_queue": "q", "priority": "normal"}
    assert servermode.from_check(base) == LOCAL
    assert servermode.from_check({**base, "capabilities": CLUSTER.to_dict()}) == CLUSTER


def test_validate_never_starts_a_local_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TAU_HOME", str(tmp_path))
    monkeypatch.setenv("TAU_CONFIG", str(tmp_path / "config.yaml"))
    for name in ("TAU_SERVER", "TAU_SERVER_URL", "TAU_TOKEN", "TAU_CONTEXT"):
        monkeypatch.delenv(name, raising=False)
    assert servermode.for_validate() == servermode.Mode(LOCAL)
    assert not (tmp_path / "server.json").exists()
