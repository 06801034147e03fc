"""``tau secret``: where the value comes from, and that it is never an argument or shown."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from typing import Any

import pytest
from click.testing import CliRunner, Result

from taugrid.cli.app import cli
from taugrid.cli.commands import secret as secret_cmd
from taugrid.errors import UsageError

VALUE = "hf_cli-secret-value-123"


class FakeClient:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def put_secret(self, ref: str, value: str) -> None:
        self.calls.append(("put", ref, value))

    def list_secrets(self) -> dict[str, Any]:
        self.calls.append(("list",))
        return {"secrets": [{"ref": "hf/token", "updated_at": 1_700_000_000.0}]}

    def delete_secret(self, ref: str) -> None:
        self.calls.append(("delete", ref))


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeClient:
    client = FakeClient()
    monkeypatch.setattr(secret_cmd, "connect", lambda: client)
    return client


def tau(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
    # standalone_mode=False: TauErrors come back as result.exception, as main() sees them.
    return CliRunner().invoke(
        cli, list(args), input=input, env=env, standalone_mode=False, prog_name="tau"
    )


@pytest.mark.parametrize(
    ("stdin", "stored"),
    [
        (VALUE, VALUE),
        (VALUE + "\n", VALUE),  # echo VALUE | tau secret set
        (VALUE + "\r\n", VALUE),
        ("line1\nline2\n\n", "line1\nline2\n"),  # only one trailing newline goes
        ("  spaced  ", "  spaced  "),
    ],
)
def test_set_reads_the_value_from_stdin(fake: FakeClient, stdin: str, stored: str) -> None:
    result = tau("secret", "set", "hf/token", input=stdin)
    assert result.exception is None, result.output
    assert fake.calls == [("put", "hf/token", stored)]
    assert result.output == "secret hf/token set\n"


def test_set_from_env(fake: FakeClient) -> None:
    result = tau(
        "secret", "set", "hf/token", "--from-env", "MY_TOKEN", env={"MY_TOKEN": VALUE + "\n"}
    )
    assert result.exception is None, result.output
    assert fake.calls == [("put", "hf/token", VALUE + "\n")]  # exactly as in the variable
    assert VALUE not in result.output


def test_from_env_unset_variable(fake: FakeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOPE_NOT_SET", raising=False)
    result = tau("secret", "set", "k", "--from-env", "NOPE_NOT_SET")
    assert isinstance(result.exception, UsageError)
    assert "NOPE_NOT_SET is not set" in result.exception.message
    assert fake.calls == []


@pytest.mark.parametrize(
    "args",
    [
        ["hf/token", VALUE],
        ["hf/token", VALUE, "more"],
        ["hf/token", "--from-env", "X", VALUE],
        ["hf/token", "--", VALUE],
    ],
)
def test_no_value_argument_is_accepted(fake: FakeClient, args: list[str]) -> None:
    result = tau("secret", "set", *args, input="from-stdin", env={"X": "x"})
    assert isinstance(result.exception, UsageError)
    assert "takes no value argument" in result.exception.message
    assert VALUE not in result.exception.message and VALUE not in result.output
    assert fake.calls == []


def test_name_equals_value_is_refused_without_repeating_it(fake: FakeClient) -> None:
    result = tau("secret", "set", f"hf/token={VALUE}", input="x")
    assert isinstance(result.exception, UsageError)
    assert VALUE not in result.exception.message
    assert fake.calls == []


def test_unknown_value_option_does_not_echo_the_value(fake: FakeClient) -> None:
    result = CliRunner().invoke(cli, ["secret", "set", "k", f"--value={VALUE}"], input="x")
    assert result.exit_code == 2
    assert VALUE not in result.output
    assert fake.calls == []


@pytest.mark.parametrize(("stdin", "match"), [("", "cannot be empty"), ("\n", "cannot be empty")])
def test_empty_value_is_refused(fake: FakeClient, stdin: str, match: str) -> None:
    result = tau("secret", "set", "k", input=stdin)
    assert isinstance(result.exception, UsageError)
    assert match in result.exception.message
    assert fake.calls == []


def test_invalid_ref_fails_before_reading_anything(
    fake: FakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_read(ref: str, from_env: str | None) -> str:
        raise AssertionError("read the value for an invalid ref")

    monkeypatch.setattr(secret_cmd, "read_value", no_read)
    result = tau("secret", "set", "../etc/passwd")
    assert isinstance(result.exception, UsageError)
    assert "invalid secret reference" in result.exception.message
    assert fake.calls == []


def test_tty_prompts_without_echo(monkeypatch: pytest.MonkeyPatch) -> None:
    import getpass

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    prompts: list[str] = []

    def fake_getpass(prompt: str = "") -> str:
        prompts.append(prompt)
        return VALUE

    monkeypatch.setattr(sys, "stdin", Tty("never read"))
    monkeypatch.setattr(getpass, "getpass", fake_getpass)
    assert secret_cmd.read_value("hf/token", None) == VALUE
    assert prompts == ["value of secret hf/token (not echoed): "]


def test_list_shows_names_and_times(fake: FakeClient) -> None:
    result = tau("secret", "list")
    assert result.exception is None
    lines = result.output.splitlines()
    assert lines[0].split() == ["REF", "UPDATED", "AGE"]
    assert lines[1].startswith("hf/token  ")
    result = tau("secret", "list", "-o", "json")
    assert '"ref": "hf/token"' in result.output and '"updated_at"' in result.output


def test_list_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    client = FakeClient()
    monkeypatch.setattr(client, "list_secrets", lambda: {"secrets": []})
    monkeypatch.setattr(secret_cmd, "connect", lambda: client)
    assert tau("secret", "list").output == "no secrets (set one: tau secret set REF)\n"


def test_delete(fake: FakeClient) -> None:
    result = tau("secret", "delete", "hf/token")
    assert result.exception is None
    assert fake.calls == [("delete", "hf/token")]
    assert result.output == "secret hf/token deleted\n"


def test_real_entry_point_exit_code_and_message() -> None:
    """Through ``tau`` itself: exit 2, one line, the value nowhere; no server is needed."""
    env = {**os.environ, "TAU_SERVER_URL": "http://127.0.0.1:1", "TAU_TOKEN": "x"}
    proc = subprocess.run(
        [sys.executable, "-m", "taugrid.cli.main", "secret", "set", "hf/token", VALUE],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("tau: tau secret set takes no value argument")
    assert VALUE not in proc.stdout + proc.stderr
