"""The real supervisor with ``secret_files``: the workload gets the value, no file does."""

from __future__ import annotations

import hashlib
import http.server
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from test_exec_supervisor import ENV, run  # same directory: the supervisor tests' launcher

from taugrid.executors.local.secrets import LocalSecretStore, SecretScope, secret_files

WS = SecretScope("default")
VALUE = "hf_9ZxQ-very-secret-value\n"  # a trailing newline must survive too
# Prints a hash of the secret (never the secret) and whether it has other env too.
HASH_IT = [
    sys.executable,
    "-c",
    "import hashlib, os; "
    "print(hashlib.sha256(os.environb[b'HF_TOKEN']).hexdigest(), os.environ['LC_ALL'])",
]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def files_holding(root: Path, needle: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


@pytest.fixture
def store(tmp_path: Path) -> LocalSecretStore:
    return LocalSecretStore(tmp_path / "home" / "secrets")


class _Recorder(http.server.BaseHTTPRequestHandler):
    bodies: list[bytes] = []

    def do_POST(self) -> None:
        self.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.mark.parametrize("setup", [None, "true"])
def test_workload_gets_the_secret_and_no_file_holds_it(
    tmp_path: Path, store: LocalSecretStore, setup: str | None
) -> None:
    store.set(WS, "hf/token", VALUE)
    files = secret_files(store, "default", None, {"HF_TOKEN": "hf/token"})
    _Recorder.bodies = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    token = tmp_path / "token"
    token.write_text("t\n")
    url = f"http://127.0.0.1:{server.server_address[1]}/notify"
    try:
        status, attempt = run(
            tmp_path,
            HASH_IT,
            setup=setup,
            secret_files=files,
            notify={"url": url, "token_file": str(token)},
        )
        end = time.monotonic() + 5
        while len(_Recorder.bodies) < 2 and time.monotonic() < end:
            time.sleep(0.01)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert status["outcome"] == "succeeded", (attempt / "output.log").read_text()
    assert (attempt / "output.log").read_text() == f"{sha(VALUE.encode())} C\n"
    # Only the store holds the value: not launch.json, status.json, output.log,
    # supervisor.log, the workdir or outputs, nor what was sent to the server.
    needle = VALUE.strip().encode()
    assert files_holding(tmp_path, needle) == [store.path_of(WS, "hf/token")]
    assert (attempt / "supervisor.log").exists()
    assert len(_Recorder.bodies) == 2
    assert not [b for b in _Recorder.bodies if needle in b]
    launch = json.loads((attempt / "launch.json").read_text())
    assert "HF_TOKEN" not in launch["env"]
    assert launch["secret_files"] == files
    assert store.path_of(WS, "hf/token").read_text() == VALUE  # read, not consumed


def test_shell_command_sees_the_secret(tmp_path: Path, store: LocalSecretStore) -> None:
    store.set(WS, "k", "s3cr3t-shell-value")
    status, attempt = run(
        tmp_path,
        'test "$TOKEN" = "$(cat "$SECRET_COPY")" && echo same',
        env={**ENV, "SECRET_COPY": str(store.path_of(WS, "k"))},
        secret_files=secret_files(store, "default", None, {"TOKEN": "k"}),
    )
    assert status["outcome"] == "succeeded"
    assert (attempt / "output.log").read_text() == "same\n"


def test_secret_overrides_nothing_else_and_bytes_survive(
    tmp_path: Path, store: LocalSecretStore
) -> None:
    raw = b"\xff\xfe not utf-8 \xc3"
    path = tmp_path / "raw-secret"
    path.write_bytes(raw)
    status, attempt = run(tmp_path, HASH_IT, secret_files={"HF_TOKEN": str(path)})
    assert status["outcome"] == "succeeded"
    assert (attempt / "output.log").read_text() == f"{sha(raw)} C\n"


def test_missing_secret_file_fails_like_a_command_that_cannot_start(
    tmp_path: Path, store: LocalSecretStore
) -> None:
    store.set(WS, "hf/token", VALUE)
    files = secret_files(store, "default", None, {"HF_TOKEN": "hf/token"})
    store.delete(WS, "hf/token")  # deleted between submit and start
    status, attempt = run(tmp_path, ["sh", "-c", "touch ran"], secret_files=files)
    assert (status["outcome"], status["exit_code"], status["pid"]) == ("failed", 127, None)
    why = "No such file or directory"
    assert status["error"] == (
        f"cannot start the workload: secret HF_TOKEN: cannot read {files['HF_TOKEN']}: {why}"
    )
    assert f"taugrid: {status['error']}\n" == (attempt / "output.log").read_text()
    assert not (tmp_path / "work" / "ran").exists()


def test_unreadable_secret_fails_without_showing_any_value(
    tmp_path: Path, store: LocalSecretStore
) -> None:
    # A directory cannot be read as a file, even by root.
    (tmp_path / "a-dir").mkdir()
    store.set(WS, "other", VALUE)
    files = {
        "OTHER": str(store.path_of(WS, "other")),
        "HF_TOKEN": str(tmp_path / "a-dir"),
    }
    status, _ = run(tmp_path, ["sh", "-c", "touch ran"], secret_files=files)
    assert (status["outcome"], status["exit_code"]) == ("failed", 127)
    assert "secret HF_TOKEN" in status["error"] and str(tmp_path / "a-dir") in status["error"]
    assert not (tmp_path / "work" / "ran").exists()
    assert files_holding(tmp_path, VALUE.strip().encode()) == [store.path_of(WS, "other")]


def test_nul_byte_in_a_secret_file(tmp_path: Path) -> None:
    path = tmp_path / "nul"
    path.write_bytes(b"abc\0def")
    status, _ = run(tmp_path, ["true"], secret_files={"K": str(path)})
    assert (status["outcome"], status["exit_code"]) == ("failed", 127)
    assert "secret K" in status["error"] and "NUL" in status["error"]
    assert "abc" not in status["error"]


@pytest.mark.parametrize(
    "bad",
    [{"K": "relative/path"}, {"K": 3}, ["K"], {"": "/x"}, {"A=B": "/x"}, {"A\0": "/x"}],
)
def test_malformed_secret_files_are_rejected(tmp_path: Path, bad: object) -> None:
    status, _ = run(tmp_path, ["true"], secret_files=bad)
    assert status["outcome"] == "failed"
    assert status["error"] == "secret_files must map environment variable names to absolute paths"


def test_launch_without_secret_files_is_unchanged(tmp_path: Path) -> None:
    status, attempt = run(tmp_path, ["env"], secret_files=None)
    assert status["outcome"] == "succeeded"
    assert sorted((attempt / "output.log").read_text().splitlines()) == sorted(
        f"{k}={v}" for k, v in ENV.items()
    )
