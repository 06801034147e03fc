"""CLI contexts: the config file, ``tau login``, ``tau context``, and which server is used.

A stdlib HTTP server on 127.0.0.1 stands in for a remote tau server: it answers
``/api/v1/whoami`` (200 for the known token, 401 otherwise) and ``/api/v1/runs``.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from taugrid.cli import contexts
from taugrid.cli.app import cli
from taugrid.cli.connect import connect
from taugrid.errors import AuthError, NotFound, UsageError

TOKEN = "tau_good-token-123"
WHOAMI = {
    "user": "alice",
    "kind": "user",
    "admin": False,
    "memberships": {"vision": "researcher", "nlp": "viewer"},
    "auth": "token",
}


class FakeServer:
    """Records each request's path and Authorization header."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str | None]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                auth = self.headers.get("Authorization")
                fake.requests.append((self.path, auth))
                if auth != f"Bearer {TOKEN}":
                    err = {"code": "unauthorized", "message": "invalid or expired token"}
                    self._answer(401, {"error": err})
                elif self.path == "/api/v1/whoami":
                    self._answer(200, WHOAMI)
                elif self.path.startswith("/api/v1/runs?"):
                    self._answer(200, {"runs": [], "next_cursor": None})
                else:
                    self._answer(404, {"error": {"code": "not_found", "message": "no route"}})

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def paths(self) -> list[str]:
        return [p.split("?")[0] for p, _ in self.requests]


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()
    fake.thread.start()
    yield fake
    fake.httpd.shutdown()
    fake.httpd.server_close()
    fake.thread.join(5)


@pytest.fixture
def cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An isolated config path (not yet created) and no selection from the environment."""
    for var in ("TAU_SERVER", "TAU_SERVER_URL", "TAU_TOKEN", "TAU_CONTEXT", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(var, raising=False)
    path = tmp_path / "conf" / "config.yaml"
    monkeypatch.setenv("TAU_CONFIG", str(path))
    monkeypatch.setenv("TAU_HOME", str(tmp_path / "home"))
    return path


def tau(*args: str, input: str | None = None) -> Result:
    # standalone_mode=False: TauErrors come back as result.exception, as main() sees them.
    return CliRunner().invoke(cli, list(args), input=input, standalone_mode=False, prog_name="tau")


def login(server: FakeServer, *args: str, token: str = TOKEN) -> Result:
    return tau("login", server.url, "--token-stdin", *args, input=token + "\n")


def write_config(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o600)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- tau login ---------------------------------------------------------------------------
def test_login_verifies_stores_and_makes_current(cfg: Path, server: FakeServer) -> None:
    result = login(server, "--name", "lab", "--workspace", "vision")
    assert result.exception is None, result.output
    assert result.stdout == f"logged in to {server.url} as alice (context lab)\n"
    assert server.requests == [("/api/v1/whoami", f"Bearer {TOKEN}")]
    assert TOKEN not in result.output
    assert mode(cfg) == 0o600
    assert mode(cfg.parent) == 0o700
    assert mode(contexts.cache_path(cfg)) == 0o600
    assert cfg.read_text() == (
        "current-context: lab\n"
        "contexts:\n"
        "  - name: lab\n"
        f"    server: {server.url}\n"
        f"    token: {TOKEN}\n"
        "    workspace: vision\n"
    )
    config = contexts.load()
    assert config == contexts.Config("lab", (contexts.Context("lab", server.url, TOKEN, "vision"),))
    assert sorted(p.name for p in cfg.parent.iterdir()) == [
        "config.json",
        "config.yaml",
        "config.yaml.lock",
    ]


def test_login_names_the_context_after_the_host(cfg: Path, server: FakeServer) -> None:
    result = login(server)
    assert result.exception is None, result.output
    assert result.stdout.endswith("(context 127.0.0.1)\n")
    assert contexts.load().current == "127.0.0.1"


def test_login_with_a_refused_token_writes_nothing(cfg: Path, server: FakeServer) -> None:
    result = login(server, "--name", "lab", token="tau_wrong")
    assert isinstance(result.exception, AuthError)
    assert result.exception.exit_code == 4
    assert result.exception.message == f"{server.url} refused the token: invalid or expired token"
    assert not cfg.exists() and not cfg.parent.exists()


def test_login_refused_through_the_real_entry_point(cfg: Path, server: FakeServer) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "taugrid.cli.main", "login", server.url, "--token-stdin"],
        input="tau_wrong\n",
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 4
    assert proc.stderr == f"tau: {server.url} refused the token: invalid or expired token\n"
    assert not cfg.exists()


def test_login_never_takes_the_token_as_an_argument(cfg: Path, server: FakeServer) -> None:
    result = tau("login", server.url, TOKEN)
    assert isinstance(result.exception, UsageError)
    assert "takes no token argument" in result.exception.message
    assert TOKEN not in result.exception.message + result.output
    assert server.requests == []


def test_login_token_from_env(
    cfg: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAB_TOKEN", TOKEN)
    result = tau("login", server.url + "/", "--token-env", "LAB_TOKEN", "--name", "lab")
    assert result.exception is None, result.output
    assert contexts.load().get("lab") == contexts.Context("lab", server.url, TOKEN)


def test_login_without_a_terminal_or_flag_asks_for_one(cfg: Path, server: FakeServer) -> None:
    result = tau("login", server.url, input="")
    assert isinstance(result.exception, UsageError)
    assert "--token-stdin or --token-env" in result.exception.message


@pytest.mark.parametrize(
    "url", ["gpu-box:8443", "ftp://x", "https://x/prefix", "https://u:p@x", "https://x:0"]
)
def test_login_rejects_urls_the_client_cannot_use(cfg: Path, url: str) -> None:
    result = tau("login", url, "--token-stdin", input=TOKEN)
    assert isinstance(result.exception, UsageError)
    assert "invalid server URL" in result.exception.message


def test_login_again_keeps_the_workspace_and_comments(cfg: Path, server: FakeServer) -> None:
    assert login(server, "--name", "lab", "--workspace", "vision").exception is None
    cfg.write_text("# my contexts\n" + cfg.read_text())
    assert login(server, "--name", "lab").exception is None
    text = cfg.read_text()
    assert text.startswith("# my contexts\n")
    assert text.count("name: lab") == 1 and "workspace: vision" in text


def test_login_cannot_replace_local(cfg: Path, server: FakeServer) -> None:
    result = login(server, "--name", "local")
    assert isinstance(result.exception, UsageError)
    assert server.requests == []


def test_login_warns_about_a_workspace_without_membership(cfg: Path, server: FakeServer) -> None:
    result = login(server, "--name", "lab", "--workspace", "audio")
    assert result.exception is None
    assert "not a member of workspace 'audio' (member of: nlp, vision)" in result.stderr


# -- selection ---------------------------------------------------------------------------
LAB_AND_CI = (
    "current-context: lab\n"
    "contexts:\n"
    "  - name: lab\n    server: https://lab:8443\n    token: t_lab\n    workspace: vision\n"
    "  - name: ci\n    server: https://ci:8443\n    token: t_ci\n"
)


def test_precedence(cfg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert contexts.select() == contexts.Selection(contexts.LOCAL_CONTEXT, "default")
    write_config(cfg, LAB_AND_CI)
    assert contexts.select().context.name == "lab"
    assert contexts.select().source == "current-context"
    monkeypatch.setenv("TAU_CONTEXT", "ci")
    assert contexts.select() == contexts.Selection(
        contexts.Context("ci", "https://ci:8443", "t_ci"), "TAU_CONTEXT"
    )
    assert contexts.select("local") == contexts.Selection(contexts.LOCAL_CONTEXT, "--context")
    assert contexts.select("lab").context.token == "t_lab"
    monkeypatch.setenv("TAU_SERVER_URL", "http://old:1")  # the older name still works
    assert contexts.select("lab").context.server == "http://old:1"
    monkeypatch.setenv("TAU_SERVER", "http://env:2")
    monkeypatch.setenv("TAU_TOKEN", "t_env")
    sel = contexts.select("lab")
    assert (sel.source, sel.context.server, sel.context.token) == (
        "TAU_SERVER",
        "http://env:2",
        "t_env",
    )


def test_unknown_context_names_the_known_ones(cfg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(cfg, LAB_AND_CI)
    monkeypatch.setenv("TAU_CONTEXT", "nope")
    with pytest.raises(NotFound) as err:
        contexts.select()
    assert err.value.exit_code == 5
    assert "no context 'nope' (from TAU_CONTEXT); known contexts: local, lab, ci" in str(err.value)


def test_local_needs_no_file_and_no_yaml(cfg: Path) -> None:
    code = (
        "import sys\n"
        "from taugrid.cli import contexts\n"
        "assert contexts.select().context.is_local\n"
        "assert contexts.select('local').context.is_local\n"
        "assert 'ruamel' not in sys.modules and 'ruamel.yaml' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)


def test_hand_edits_are_seen_and_the_cache_refreshed(cfg: Path) -> None:
    write_config(cfg, LAB_AND_CI)
    assert contexts.load().current == "lab"
    cache = contexts.cache_path(cfg)
    assert json.loads(cache.read_text())["current"] == "lab"
    cfg.write_text(LAB_AND_CI.replace("current-context: lab", "current-context: ci"))
    assert contexts.load().current == "ci"
    assert json.loads(cache.read_text())["current"] == "ci"
    cfg.write_text("contexts: []\n")
    assert contexts.load() == contexts.Config()


def test_a_fresh_cache_is_read_without_yaml(cfg: Path) -> None:
    write_config(cfg, LAB_AND_CI)
    contexts.load()  # writes the cache
    code = (
        "import sys\n"
        "from taugrid.cli import contexts\n"
        "assert contexts.select().context.token == 't_lab'\n"
        "assert not [m for m in sys.modules if m.startswith('ruamel')]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("contexts: [\n", "config.yaml:2:1: invalid YAML"),
        ("current: lab\n", "config.yaml:1:1: unknown key 'current'"),
        ("contexts:\n  - name: lab\n    server: https://x\n    workpace: v\n", ":4:5: unknown key"),
        ("contexts:\n  - name: lab\n", "config.yaml:2:5: context 'lab' has no server"),
        ("contexts:\n  - name: local\n    server: https://x\n", "'local' is built in"),
        ("current-context: gone\n", "current-context 'gone' is not a context here"),
        ("contexts:\n  - {name: a b, server: https://x}\n", "invalid context name 'a b'"),
    ],
)
def test_invalid_config_is_reported_with_its_position(cfg: Path, text: str, message: str) -> None:
    write_config(cfg, text)
    with pytest.raises(contexts.ConfigError) as err:
        contexts.load()
    assert message in err.value.message
    assert err.value.exit_code == 2


def test_a_config_open_to_others_is_warned_about(
    cfg: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_config(cfg, LAB_AND_CI)
    contexts.load()
    assert capsys.readouterr().err == ""
    cfg.chmod(0o644)
    contexts.load()
    assert capsys.readouterr().err == (
        f"tau: warning: {cfg} holds API tokens and is open to other users (mode 0644); "
        f"run: chmod 600 {cfg}\n"
    )
    contexts.save_context(contexts.Context("new", "https://new:1"))  # writing makes it 0600
    assert mode(cfg) == 0o600


def test_xdg_config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TAU_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert contexts.config_path() == tmp_path / "xdg" / "tau" / "config.yaml"
    contexts.save_context(contexts.Context("lab", "https://lab:8443", "t"))
    assert mode(tmp_path / "xdg" / "tau") == 0o700
    assert mode(tmp_path / "xdg" / "tau" / "config.yaml") == 0o600


# -- commands against the selected server --------------------------------------------------
def test_status_with_tau_context_uses_the_stored_token(
    cfg: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert login(server, "--name", "lab", "--workspace", "vision").exception is None
    assert tau("context", "use", "local").exception is None
    server.requests.clear()
    monkeypatch.setenv("TAU_CONTEXT", "lab")
    result = tau("status")
    assert result.exception is None, result.output
    assert result.stdout == "No runs yet. Submit one with: tau run -- python train.py\n"
    assert server.requests == [("/api/v1/runs?limit=20", f"Bearer {TOKEN}")]


def test_status_with_the_context_option(cfg: Path, server: FakeServer) -> None:
    assert login(server, "--name", "lab").exception is None
    assert tau("context", "use", "local").exception is None
    server.requests.clear()
    result = tau("--context", "lab", "status", "-o", "json")
    assert result.exception is None, result.output
    assert json.loads(result.stdout) == {"runs": []}
    assert server.paths() == ["/api/v1/runs"]
    result = tau("--context", "nope", "status")
    assert isinstance(result.exception, NotFound)
    assert "known contexts: local, lab" in result.exception.message


def test_status_through_the_real_entry_point_without_yaml(
    cfg: Path, server: FakeServer, tmp_path: Path
) -> None:
    """``tau status`` in a context: the stored token is sent, and ruamel is not imported."""
    assert login(server, "--name", "lab").exception is None
    server.requests.clear()
    dump = tmp_path / "modules.json"
    code = (
        "import atexit, json, sys\n"
        f"atexit.register(lambda: open({str(dump)!r}, 'w').write(json.dumps(list(sys.modules))))\n"
        "sys.argv = ['tau', 'status']\n"
        "from taugrid.cli.main import main\n"
        "main()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert server.requests == [("/api/v1/runs?limit=20", f"Bearer {TOKEN}")]
    assert not [m for m in json.loads(dump.read_text()) if m.startswith(("ruamel", "yaml"))]


def test_default_workspace(cfg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from taugrid.cli.connect import default_workspace

    assert default_workspace() is None
    write_config(cfg, LAB_AND_CI)
    assert default_workspace() == "vision"
    monkeypatch.setenv("TAU_CONTEXT", "ci")
    assert default_workspace() is None


def test_connect_outside_a_command_uses_the_selection(cfg: Path) -> None:
    write_config(cfg, LAB_AND_CI)
    client = connect()
    assert (client.base_url, client.token) == ("https://lab:8443", "t_lab")


# -- tau context ---------------------------------------------------------------------------
def test_context_list(cfg: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(cfg, LAB_AND_CI)
    result = tau("context", "list")
    assert result.exception is None, result.output
    home = os.environ["TAU_HOME"]
    assert result.stdout.splitlines() == [
        "CURRENT  NAME   SERVER" + " " * (len(f"local server in {home}") - 6) + "  WORKSPACE",
        f"         local  local server in {home}  -",
        "*        lab    https://lab:8443" + " " * (len(home) + 16 - 16) + "  vision",
        "         ci     https://ci:8443" + " " * (len(home) + 16 - 15) + "  -",
    ]
    assert "t_lab" not in result.output
    data = json.loads(tau("--context", "ci", "context", "list", "-o", "json").stdout)
    assert data == {
        "current": "ci",
        "contexts": [
            {"name": "local", "server": None, "workspace": None, "current": False},
            {"name": "lab", "server": "https://lab:8443", "workspace": "vision", "current": False},
            {"name": "ci", "server": "https://ci:8443", "workspace": None, "current": True},
        ],
    }
    monkeypatch.setenv("TAU_SERVER", "http://env:1")
    result = tau("context", "list", "-o", "json")
    assert json.loads(result.stdout)["current"] is None
    assert "TAU_SERVER is set" in result.stderr


def test_context_list_without_a_file(cfg: Path) -> None:
    data = json.loads(tau("context", "list", "-o", "json").stdout)
    assert data == {
        "current": "local",
        "contexts": [{"name": "local", "server": None, "workspace": None, "current": True}],
    }
    assert not cfg.exists()


def test_context_use(cfg: Path) -> None:
    write_config(cfg, LAB_AND_CI + "# kept\n")
    result = tau("context", "use", "ci")
    assert result.exception is None
    assert result.stdout == "switched to context ci\n"
    assert contexts.load().current == "ci"
    assert cfg.read_text().endswith("# kept\n")
    result = tau("context", "use", "nope")
    assert isinstance(result.exception, NotFound)
    assert result.exception.exit_code == 5
    assert "no context 'nope'; known contexts: local, lab, ci" in result.exception.message
    assert tau("context", "use", "local").exception is None
    assert contexts.select().context.is_local


def test_context_use_local_creates_no_file(cfg: Path) -> None:
    assert tau("context", "use", "local").exception is None
    assert not cfg.exists()


def test_context_show_remote(cfg: Path, server: FakeServer) -> None:
    assert login(server, "--name", "lab", "--workspace", "vision").exception is None
    result = tau("context", "show")
    assert result.exception is None, result.output
    assert result.stdout.splitlines() == [
        f"Context:     lab (current in {cfg})",
        f"Server:      {server.url}",
        "Workspace:   vision",
        "User:        alice (user)",
        "Auth:        token",
        "Memberships: vision=researcher, nlp=viewer",
    ]
    data = json.loads(tau("context", "show", "-o", "json").stdout)
    assert data == {
        "name": "lab",
        "server": server.url,
        "workspace": "vision",
        "selected_by": "current-context",
        "identity": WHOAMI,
    }
    assert TOKEN not in result.output


def test_context_show_with_a_revoked_token(cfg: Path, server: FakeServer) -> None:
    assert login(server, "--name", "lab").exception is None
    text = cfg.read_text().replace(TOKEN, "tau_revoked")
    cfg.write_text(text)
    result = tau("context", "show", "-o", "json")
    assert isinstance(result.exception, AuthError)
    data = json.loads(result.stdout)
    assert data["identity"] is None and data["error"]["code"] == "unauthorized"
    assert "tau_revoked" not in result.output


def test_context_show_local(cfg: Path, server: FakeServer) -> None:
    result = tau("context", "show")
    assert result.exception is None, result.output
    home = os.environ["TAU_HOME"]
    assert result.stdout.splitlines() == [
        "Context:     local (the default)",
        f"Server:      local server in {home} (not running)",
        "Workspace:   -",
    ]
    assert server.requests == []


def test_context_delete(cfg: Path) -> None:
    write_config(cfg, LAB_AND_CI)
    result = tau("context", "delete", "ci")
    assert result.exception is None
    assert result.stdout == "deleted context ci\n"
    result = tau("context", "delete", "lab")
    assert result.stdout == "deleted context lab; the current context is now local\n"
    assert contexts.load() == contexts.Config()
    assert "t_lab" not in cfg.read_text()
    assert "t_lab" not in contexts.cache_path(cfg).read_text()
    assert isinstance(tau("context", "delete", "lab").exception, NotFound)
    assert isinstance(tau("context", "delete", "local").exception, UsageError)
