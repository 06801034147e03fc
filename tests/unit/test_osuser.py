from __future__ import annotations

import getpass
import os

import pytest

from taugrid.osuser import current_user


@pytest.mark.parametrize("error", [KeyError("getpwuid(): uid not found"), OSError("no name")])
def test_a_uid_without_a_name_is_named_by_its_number(
    monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    def no_name() -> str:
        raise error

    monkeypatch.setattr(getpass, "getuser", no_name)
    assert current_user() == f"uid-{os.getuid()}"


def test_a_named_user_keeps_the_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGNAME", "ada")
    assert current_user() == "ada"
