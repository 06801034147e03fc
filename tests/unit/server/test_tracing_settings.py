"""Where the server's traces go: ``--otel-endpoint``, ``TAU_OTEL_ENDPOINT``, the standard
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` and ``OTEL_EXPORTER_OTLP_ENDPOINT``, in that order;
base URLs get ``/v1/traces``; none of them (or ``OTEL_SDK_DISABLED=true``): off."""

from __future__ import annotations

from pathlib import Path

import pytest

from taugrid.server.settings import ServerSettings, otel_endpoint

VARS = (
    "TAU_OTEL_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_SDK_DISABLED",
)


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in VARS:
        monkeypatch.delenv(var, raising=False)


def test_off_without_an_endpoint() -> None:
    assert otel_endpoint() is None


def test_the_standard_base_url_gets_the_traces_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    assert otel_endpoint() == "http://collector:4318/v1/traces"


def test_the_traces_url_is_taken_as_it_is_and_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://traces.example/otlp")
    assert otel_endpoint() == "https://traces.example/otlp"


def test_taugrids_own_setting_and_the_flag_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://a:4318/v1/traces")
    monkeypatch.setenv("TAU_OTEL_ENDPOINT", "http://b:4318")
    assert otel_endpoint() == "http://b:4318/v1/traces"
    assert otel_endpoint("http://c:4318/v1/traces") == "http://c:4318/v1/traces"


def test_the_sdk_switch_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert otel_endpoint() is None


def test_a_bad_url_is_refused_naming_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAU_OTEL_ENDPOINT", "collector:4318")
    with pytest.raises(ValueError, match="TAU_OTEL_ENDPOINT"):
        otel_endpoint()
    with pytest.raises(ValueError, match="--otel-endpoint"):
        otel_endpoint("http://a b")


def test_the_settings_carry_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert ServerSettings.from_env(tmp_path).otel_endpoint is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert ServerSettings.from_env(tmp_path).otel_endpoint == "http://127.0.0.1:4318/v1/traces"
    given = ServerSettings.from_env(tmp_path, otel_endpoint="http://x:1")
    assert given.otel_endpoint == "http://x:1/v1/traces"
