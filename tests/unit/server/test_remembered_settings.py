"""What a server remembers for its next start (the declared GPUs), and what it publishes
for `tau server status`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from taugrid.server.settings import (
    SETTINGS_FILE,
    ServerSettings,
    declared_gpus,
    parse_gpus,
    published_facts,
    read_remembered,
    remember_gpus,
)


@pytest.fixture(autouse=True)
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TAU_LOCAL_GPUS", raising=False)


def test_a_declared_count_is_remembered_until_auto_forgets_it(tmp_path: Path) -> None:
    assert declared_gpus(tmp_path, None) is None  # nothing remembered: detect
    assert declared_gpus(tmp_path, "4") == 4
    remember_gpus(tmp_path, "4")
    assert (tmp_path / SETTINGS_FILE).stat().st_mode & 0o777 == 0o600
    assert declared_gpus(tmp_path, None) == 4  # a later start without --gpus
    remember_gpus(tmp_path, None)  # no flag: nothing changes
    assert read_remembered(tmp_path) == {"gpus": 4}
    assert declared_gpus(tmp_path, "auto") is None
    remember_gpus(tmp_path, "auto")
    assert read_remembered(tmp_path) == {} and declared_gpus(tmp_path, None) is None


def test_tau_local_gpus_decides_one_start_and_the_flag_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    remember_gpus(tmp_path, "2")
    monkeypatch.setenv("TAU_LOCAL_GPUS", "8")
    assert declared_gpus(tmp_path, None) == 8
    assert declared_gpus(tmp_path, "auto") is None and declared_gpus(tmp_path, "1") == 1
    monkeypatch.setenv("TAU_LOCAL_GPUS", "auto")
    assert declared_gpus(tmp_path, None) is None
    assert read_remembered(tmp_path) == {"gpus": 2}  # the environment never changes it


def test_bad_counts_are_refused_and_a_bad_file_means_detect(tmp_path: Path) -> None:
    for text in ("-1", "two", "1.5", ""):
        with pytest.raises(ValueError, match="number of GPUs"):
            parse_gpus(text)
    for junk in ("{not json", "[1]", json.dumps({"gpus": -3}), json.dumps({"gpus": "x"})):
        (tmp_path / SETTINGS_FILE).write_text(junk)
        assert declared_gpus(tmp_path, None) is None


def test_published_facts_never_carry_the_database_password(tmp_path: Path) -> None:
    url = "postgresql+psycopg://tau:s3cret-pw@db.lab:5432/tau"
    settings = ServerSettings.from_env(tmp_path, db_url=url, gpus=2)
    facts = published_facts(settings, 2)
    assert "s3cret-pw" not in json.dumps(facts)
    assert facts == {
        "gpus": 2,
        "gpus_declared": True,
        "isolation": "none",
        "shared": False,
        "database": "postgresql+psycopg://tau:***@db.lab:5432/tau",
    }
    detected = published_facts(ServerSettings.from_env(tmp_path), 0)
    assert (detected["gpus_declared"], detected["database"]) == (
        False,
        f"sqlite:///{tmp_path}/tau.db",
    )
