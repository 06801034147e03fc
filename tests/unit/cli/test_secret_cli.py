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
    """Records what the commands send; the real routes are tested in
    tests/integration/test_secret_api.py and test_secret_workspaces.py."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.listed: list[dict[str, Any]] = [
            {"ref": "hf/token", "scope": "personal", "owner": "ann", "updated_at": 1.7e9},
            {"ref": "hf/token", "scope": "workspace", "owner": None, "updated_at": 1.7e9},
        ]

    def put_secret(
        self, ref: str, value: str, *, workspace: str | None = None, personal: bool = False
    ) -> None:
        self.calls.append(("put", ref, value, workspace, personal))

    def list_secrets(self, *, workspace: str | None = None) -> dict[str, Any]:
        self.calls.append(("list", workspace))
        return {"workspace": workspace, "secrets": self.listed}

    def delete_secret(
        self, ref: str, *, workspace: str | None = None, personal: bool = False
    ) -> None:
        self.calls.append(("delete", ref, workspace, personal))


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeClient:
    client = FakeClient()
    monkeypatch.setattr(secret_cmd, "connect", lambda: client)
    monkeypatch.setattr(secret_cmd, "default_workspace", lambda: None)
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
    assert fake.calls == [("put", "hf/token", stored, "default", False)]
    assert result.output == "secret hf/token set in workspace default\n"


def test_set_from_env(fake: FakeClient) -> None:
    result = tau(
        "secret", "set", "hf/token", "--from-env", "MY_TOKEN", env={"MY_TOKEN": VALUE + "\n"}
    )
    assert result.exception is None, result.output
    assert fake.calls == [("put", "hf/token", VALUE + "\n", "default", False)]  # exactly
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


def test_list_shows_names_scopes_owners_and_times(fake: FakeClient) -> None:
    result = tau("secret", "list", "--workspace", "vision")
    assert result.exception is None
    assert fake.calls == [("list", "vision")]
    lines = result.output.splitlines()
    assert lines[0].split() == ["REF", "SCOPE", "OWNER", "UPDATED", "AGE"]
    assert lines[1].split()[:3] == ["hf/token", "personal", "ann"]
    assert lines[2].split()[:3] == ["hf/token", "workspace", "-"]
    result = tau("secret", "list", "-o", "json")
    assert '"ref": "hf/token"' in result.output and '"scope": "workspace"' in result.output


def test_list_empty(fake: FakeClient) -> None:
    fake.listed = []
    assert tau("secret", "list").output == (
        "no secrets in workspace default (set one: tau secret set REF --workspace default)\n"
    )


def test_delete(fake: FakeClient) -> None:
    result = tau("secret", "delete", "hf/token")
    assert result.exception is None
    assert fake.calls == [("delete", "hf/token", "default", False)]
    assert result.output == "secret hf/token deleted in workspace default\n"


def test_workspace_and_personal_reach_the_client(fake: FakeClient) -> None:
    result = tau("secret", "set", "hf/token", "--workspace", "vision", "--personal", input="v")
    assert result.output == "secret hf/token set (personal) in workspace vision\n"
    result = tau("secret", "delete", "hf/token", "--personal", "--workspace", "vision")
    assert result.output == "secret hf/token deleted (personal) in workspace vision\n"
    assert fake.calls == [
        ("put", "hf/token", "v", "vision", True),
        ("delete", "hf/token", "vision", True),
    ]


def test_the_context_workspace_is_the_default(
    fake: FakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(secret_cmd, "default_workspace", lambda: "lab")
    tau("secret", "set", "k", input="v")
    tau("secret", "list")
    tau("secret", "set", "k", "--workspace", "other", input="v")
    assert fake.calls == [
        ("put", "k", "v", "lab", False),
        ("list", "lab"),
        ("put", "k", "v", "other", False),
    ]


@pytest.mark.parametrize("ws", ["Vision", "../x", "a b"])
def test_bad_workspace_is_refused_before_anything(fake: FakeClient, ws: str) -> None:
    result = tau("secret", "set", "k", "--workspace", ws, input="v")
    assert isinstance(result.exception, UsageError)
    assert result.exception.message.startswith("invalid workspace name")
    assert fake.calls == []


def test_a_token_given_as_the_ref_is_refused_without_echo(fake: FakeClient) -> None:
    token = "hf_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3f"
    result = tau("secret", "set", token, input="v")
    assert isinstance(result.exception, UsageError)
    assert "not a name" in result.exception.message
    assert token not in result.exception.message and token not in result.output
    assert fake.calls == []


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
