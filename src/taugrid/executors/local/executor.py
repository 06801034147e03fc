"""Local executor: one supervisor process per attempt, state exchanged through files.

Layout under ``$TAU_HOME/runs/<run_id>/``: ``workdir/`` (the unpacked snapshot, shared
by attempts), ``outputs/`` (TAU_OUTPUT_DIR), ``checkpoints/``, ``home/`` (a sandboxed
workload's HOME) and ``attempts/<k>/`` holding ``launch.json``, ``status.json``,
``supervisor.pid``, ``metrics.jsonl`` and ``output.log``. With a sandbox policy
(``isolation``) each workload sees only its own run's directories (docs/isolation.md).
The files, not the server's memory, are the truth about a process, which is why runs
survive a server crash.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

from taugrid.domain.outcomes import AttemptExit
from taugrid.domain.stops import StopReason, parse_stop_reason
from taugrid.errors import UsageError
from taugrid.executors.local import isolation, orphans, process, raydriver
from taugrid.executors.local.diskguard import RESERVE_FILE
from taugrid.executors.local.files import read_json
from taugrid.executors.local.launch import NodeLaunch, free_port, launch_nodes, ray_command
from taugrid.executors.local.layout import RunLayout
from taugrid.executors.local.supervisor import CANCEL_FILE
from taugrid.ports.executor import (
    AdmittedHere,
    AttemptKey,
    Capabilities,
    LaunchRequest,
    Observation,
)
from taugrid.spec.modes import LOCAL, LOCAL_WITHOUT_RAY, RAY_INSTALL
from taugrid.workdir.snapshot import unpack_snapshot

# A supervisor that has not written its pid this long after launch never started.
START_DEADLINE_S = 30.0


class LocalExecutor(AdmittedHere, RunLayout):
    """The executor port (``taugrid.ports.executor``) for one machine. Its attempts' files
    are where it and the local artifact store and log source meet (``RunLayout``)."""

    def __init__(
        self,
        runs_root: Path,
        *,
        snapshots_dir: Path | None = None,
        python: str = sys.executable,
        notify_url: str | None = None,
        token_file: Path | None = None,
        sandbox: isolation.SandboxPolicy | None = None,
    ) -> None:
        super().__init__(runs_root)
        self.snapshots_dir = snapshots_dir or runs_root.parent / "snapshots"
        self.python = python
        self.notify_url = notify_url
        self.token_file = token_file
        # None: workloads run as the server's user, like in its shell (docs/isolation.md).
        self.sandbox = sandbox
        # Leftover processes stopped per attempt whose supervisor vanished (for the final
        # message; a restarted server just says less).
        self._stopped: dict[tuple[str, int], set[int]] = {}
        # launcher: ray runs the ray CLI of the server's environment (raydriver).
        self.ray_cli = find_ray_cli(python)

    @property
    def capabilities(self) -> Capabilities:
        """Local mode's; with ``launcher: ray`` where Ray is installed beside the server."""
        return LOCAL if self.ray_cli is not None else LOCAL_WITHOUT_RAY

    def location(self, key: AttemptKey) -> str:
        return str(self.attempt_dir(key.run_id, key.attempt))

    def attempt_of(self, report: str) -> AttemptKey | None:
        """The attempt of an attempt directory of ours, as a supervisor names it in its
        status push; None for any other path."""
        parts = Path(report).parts
        # The supervisor names its directory resolved (process.start_supervisor).
        for root in {self.runs_root.parts, self.runs_root.resolve().parts}:
            if len(parts) == len(root) + 3 and parts[: len(root)] == root:
                run_id, kind, attempt = parts[len(root) :]
                if kind == "attempts" and attempt.isdigit() and run_id not in (".", ".."):
                    return AttemptKey(run_id, int(attempt))
        return None

    def launch(self, req: LaunchRequest) -> None:
        if self.is_launched(req.key):  # launched before a crash: never a second supervisor
            return
        workdir = self.workdir(req.run_id)
        if not workdir.exists():
            unpack_snapshot(self.snapshots_dir / f"{req.snapshot_digest}.tar.gz", workdir)
            if self.sandbox is None:  # a sandbox hands the workdir over at every launch
                isolation.make_private(workdir)  # the archive's 0644/0755: ours alone
        adir = self.attempt_dir(req.run_id, req.attempt)
        adir.mkdir(parents=True, exist_ok=True)
        for d in (self.output_dir(req.run_id), self.checkpoint_dir(req.run_id)):
            d.mkdir(parents=True, exist_ok=True)
        gpus = list(req.placement.gpus) if req.placement is not None else []
        setup = req.setup
        if req.launcher == "ray":  # the driver's command; setup is part of its job
            command: list[str] | str = self._ray_command(req, gpus)
            nodes = [NodeLaunch(command, {})]
            setup = None
        else:
            # Every launcher runs on this one machine (launch.py), every node too: the
            # rendezvous gets a free port.
            nodes = launch_nodes(
                req.command,
                launcher=req.launcher,
                nodes=req.nodes,
                gpu_indices=gpus,
                procs_per_node=req.resources.get("procs_per_node"),
                master_port=free_port(),
            )
            command = nodes[0].command
        # One node: its launcher's variables in the environment. Several: each node's
        # are its own, over the run's (nodegroup).
        env = {**req.env, **nodes[0].env} if len(nodes) == 1 else dict(req.env)
        sandbox = None
        if self.sandbox is not None:
            env, sandbox = self._sandbox(req, workdir, env, command)
        notify = None
        if self.notify_url and self.token_file:
            notify = {"url": self.notify_url, "token_file": str(self.token_file)}
        launch: dict[str, Any] = {
            "command": command,
            "setup": setup,
            "cwd": str(workdir),
            "env": env,
            "stop_grace_s": req.stop_grace_s,
            "timeout_s": req.timeout_s,
            "outputs": req.outputs,
            "secret_files": req.secret_refs,
            "disk_limit_bytes": req.disk_limit_bytes,
            "output_dir": str(self.output_dir(req.run_id)),
            "notify": notify,
            "launched_at": time.time(),
            "sandbox": sandbox,  # what the workload can see; None: no sandbox
        }
        if len(nodes) > 1:  # each node's command and what its launcher adds to env
            launch["nodes"] = [{"command": n.command, "env": n.env} for n in nodes]
        _write_launch_file(adir / "launch.json", launch)
        process.start_supervisor(adir, python=self.python)

    def _ray_command(self, req: LaunchRequest, gpus: list[int]) -> list[str]:
        if self.ray_cli is None:
            raise UsageError(
                f"launcher: ray needs Ray installed beside the server: {RAY_INSTALL} in "
                "the server's environment, then restart the server"
            )
        return ray_command(
            req.command,
            setup=req.setup,
            python=self.python,
            ray=self.ray_cli,
            run_id=req.run_id,
            attempt=req.attempt,
            nodes=req.nodes,
            gpu_indices=gpus,
            resources=req.resources,
            stop_grace_s=req.stop_grace_s,
            hidden_env=list(req.secret_refs),
        )

    def _sandbox(
        self, req: LaunchRequest, workdir: Path, env: dict[str, str], command: list[str] | str
    ) -> tuple[dict[str, str], dict[str, Any]]:
        """The sandboxed workload's environment and sandbox; its paths made its own.

        It may write its workdir, checkpoints, outputs, a HOME of its own and its metrics
        file (bound alone: the attempt directory beside it holds launch.json, status.json
        and the cancel file, which stay invisible); it runs with its run's uid when the
        server is root, so every one of them is chowned to that uid at each launch (a
        resumed run may find files of an earlier attempt, or a workdir unpacked again).
        """
        assert self.sandbox is not None
        home = self.home_dir(req.run_id)
        home.mkdir(mode=0o700, exist_ok=True)
        metrics = self.metrics_file(req.run_id, req.attempt)
        env = {**env, "HOME": str(home)}
        dirs = [workdir, self.checkpoint_dir(req.run_id), self.output_dir(req.run_id), home]
        desc = self.sandbox.describe(
            req.run_id, writable=[*dirs, metrics], chdir=workdir, env=env, command=command
        )
        isolation.hand_over(desc, [metrics])
        return env, desc

    def observe_many(self, keys: list[AttemptKey]) -> dict[AttemptKey, Observation]:
        out = {}
        for key in keys:
            try:
                out[key] = self.observe(key.run_id, key.attempt)
            except Exception as exc:  # the workload controls these files: never raise
                out[key] = _lost(f"the attempt's status could not be read: {exc}")
        return out

    def observe(self, run_id: str, attempt: int) -> Observation:
        adir = self.attempt_dir(run_id, attempt)
        status = process.read_status(adir)
        if status and status.get("phase") == "exited":
            # launcher: ray: what a driver killed before it could tidy left (a stat).
            raydriver.remove_stale_temp(run_id, status.get("finished_at"))
            return _exited(status)
        spid = process.read_supervisor_pid(adir)
        # Its pid may belong to another process by now (pids are reused): look closer.
        if spid is not None and not process.is_supervisor_of(spid, adir):
            # Re-read: the supervisor may have written its final status just before exiting.
            status = process.read_status(adir)
            if status and status.get("phase") == "exited":
                return _exited(status)
            return self._orphaned(run_id, attempt, status or {})
        if spid is None and not _recently_launched(adir):
            return _lost("the run's supervisor never started")
        if status and status.get("phase") == "running":
            return Observation(
                phase="running", started_at=status.get("started_at"), pid=status.get("pid")
            )
        return Observation(phase="starting")

    def _orphaned(self, run_id: str, attempt: int, status: dict[str, Any]) -> Observation:
        """The supervisor died without a result: stop what it left, then report the end.

        "stopping" while any process of the attempt is alive (the run keeps its GPUs: a
        GPU is not given out again until the process that held it is gone); then
        "exited", as ``lost``, or ``cancelled`` when a cancel was asked for meanwhile.
        """
        key = (run_id, attempt)
        pgid = status.get("pgid")
        left = orphans.stop_leftovers(run_id, attempt, pgid if isinstance(pgid, int) else None)
        if left:
            self._stopped.setdefault(key, set()).update(left)
            shown = ", ".join(map(str, left[:10])) + (" ..." if len(left) > 10 else "")
            return Observation(
                phase="stopping",
                started_at=status.get("started_at"),
                pid=status.get("pid"),
                detail=(
                    "the run's supervisor vanished without recording the result; stopping "
                    f"{_count(len(left), 'leftover process', 'leftover processes')} "
                    f"(pid {shown}) before its resources are given out again"
                ),
            )
        stopped = self._stopped.pop(key, set())
        adir = self.attempt_dir(run_id, attempt)
        (adir / RESERVE_FILE).unlink(missing_ok=True)
        detail = (
            f"{_count(len(stopped), 'leftover process was', 'leftover processes were')} stopped"
            if stopped
            else None
        )
        why = "the run's supervisor exited without recording the result"
        if (adir / CANCEL_FILE).exists():
            done = "its supervisor had vanished" + (f"; {detail}" if detail else "")
            try:
                asked = read_json(adir / CANCEL_FILE)
            except (OSError, ValueError):
                asked = None
            if not isinstance(asked, dict):
                asked = {}
            return Observation(
                phase="exited",
                started_at=status.get("started_at"),
                finished_at=time.time(),
                exit=AttemptExit(
                    outcome="cancelled",
                    exit_code=None,
                    detail=done,
                    stop_reason=parse_stop_reason(asked.get("reason")),
                ),
            )
        return Observation(
            phase="exited",
            started_at=status.get("started_at"),
            finished_at=time.time(),
            exit=AttemptExit(outcome="lost", exit_code=None, error=why, detail=detail),
        )

    def is_launched(self, key: AttemptKey) -> bool:
        return (self.attempt_dir(key.run_id, key.attempt) / "launch.json").exists()

    def stop(self, key: AttemptKey, reason: StopReason) -> bool:
        return process.request_cancel(self.attempt_dir(key.run_id, key.attempt), reason.value)


def find_ray_cli(python: str) -> str | None:
    """The ``ray`` CLI that ``launcher: ray`` drives: the one beside ``python`` (the
    interpreter supervisors and the Ray driver run with), or, for the server's own
    interpreter, its environment's scripts directory; None when Ray is not installed
    there (``pip install 'taugrid[ray]'``)."""
    candidates = [os.path.join(os.path.dirname(python), "ray")]
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        if importlib.util.find_spec("ray") is None:
            return None
        candidates.append(os.path.join(sysconfig.get_path("scripts"), "ray"))
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _write_launch_file(path: Path, data: dict[str, Any]) -> None:
    """launch.json, renamed into place (the supervisor reads all of it or nothing), but
    not fsynced: it needs to outlive the server, which the page cache does, not the
    machine. After a power loss the supervisor that read it is gone too and the attempt
    ends as lost whether the file survived or not (a file that did not survive gets the
    attempt launched again). Two fsyncs per launch were the costliest part of the pass
    that launches a burst of runs: they queue behind every other writer's on the disk."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _exited(status: dict[str, Any]) -> Observation:
    oom = status.get("oom")
    detail = status.get("detail")
    return Observation(
        phase="exited",
        started_at=status.get("started_at"),
        finished_at=status.get("finished_at"),
        pid=status.get("pid"),
        exit=AttemptExit(
            outcome=str(status.get("outcome")),
            exit_code=status.get("exit_code"),
            signal=status.get("signal"),
            error=status.get("error"),
            oom=oom if isinstance(oom, bool) else None,
            detail=detail if isinstance(detail, str) else None,
            stop_reason=parse_stop_reason(status.get("stop_reason")),
        ),
    )


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _lost(why: str) -> Observation:
    return Observation(
        phase="exited",
        finished_at=time.time(),
        exit=AttemptExit(outcome="lost", exit_code=None, error=why),
    )


def _recently_launched(adir: Path) -> bool:
    try:
        return time.time() - (adir / "launch.json").stat().st_mtime < START_DEADLINE_S
    except FileNotFoundError:
        return False
