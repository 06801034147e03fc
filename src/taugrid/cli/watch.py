"""Watching a run until it ends: ``tau run --wait``, ``--follow``, ``tau logs -f`` and
``tau cancel``.

A :class:`Watch` remembers what it last saw of the run, so that the reason a queued run
waits is printed when it changes (not on every poll), and so that Ctrl-C can say where
the run stands: leaving the watch never stops the run (:meth:`Watch.interrupted`).
The words are in :mod:`taugrid.cli.watchtext`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import click

from taugrid.cli.client import Client
from taugrid.cli.output import clock, human_seconds
from taugrid.cli.watchtext import (
    CONFIRM_S,
    TAIL_LINES,
    TERMINAL,
    WAITING,
    cancel_notice,
    ends_badly,
    final_line,
    full_log_hint,
    interrupt_notice,
    log_tail,
    pending_key,
    pending_text,
    waiting_line,
)
from taugrid.errors import TauError

__all__ = ["TERMINAL", "Watch", "exit_code_of", "stream_attempts", "wait_for"]

POLL_S = 0.2
INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a job stopped by Ctrl-C


def exit_code_of(run: dict[str, Any]) -> int:
    """The run's own exit code when it has one, so CI sees what the workload said."""
    if run["state"] == "SUCCEEDED":
        return 0
    code = run.get("exit_code")
    return code if isinstance(code, int) and 0 < code < 256 else 1


def _say(text: str) -> None:
    click.echo(text, err=True)


class Watch:
    """One run being watched from this terminal (or script)."""

    def __init__(self, client: Client, run_id: str, *, show: bool = True) -> None:
        self.client = client
        self.run_id = run_id
        self.show = show  # False with -o json: stderr stays quiet, stdout is the answer
        self.last: dict[str, Any] | None = None
        self._pending: tuple[str, str] | None = None

    def get(self) -> dict[str, Any]:
        run = self.client.get_run(self.run_id)
        self.last = run
        return run

    def pending_changed(self, run: dict[str, Any]) -> bool:
        """Whether the run waits for another reason than when last asked (a run that
        left the queue and came back waits anew)."""
        key = pending_key(run)
        changed = key is not None and key != self._pending
        self._pending = key
        return changed

    # -- --wait -----------------------------------------------------------------------
    def wait(self, *, timeout: float | None = None, since: float | None = None) -> dict[str, Any]:
        """Poll until the run is terminal, printing each transition as it happens (only
        those at or after ``since``, when given: a resumed run's history is not news) and
        why it waits while queued; on a terminal, one live line as well. A run that
        failed ends with the last lines of its log."""
        seen = 0
        if since is not None:
            seen = sum(1 for e in self.get()["events"] if e["at"] < since)
        deadline = None if timeout is None else time.monotonic() + timeout
        live = _Live() if self.show and sys.stderr.isatty() else None
        try:
            while True:
                run = self.get()
                if self.show:
                    for e in run["events"][seen:]:
                        _print(
                            live, _line(e["at"], e["to_state"], f"{e['reason']}: {e['message']}")
                        )
                    seen = len(run["events"])
                    if self.pending_changed(run):
                        _print(live, _line(time.time(), run["state"], pending_text(run["pending"])))
                if live:
                    live.update(self._live_line(run))
                if run["state"] in TERMINAL:
                    break
                if deadline is not None and time.monotonic() > deadline:
                    break
                time.sleep(POLL_S)
        finally:
            if live:
                live.stop()
        if self.show and run["state"] in TERMINAL:
            _say(final_line(run, time.time()))
            if ends_badly(run):
                self._print_log_tail(run)
        return run

    def _live_line(self, run: dict[str, Any]) -> tuple[str, str]:
        """The live line's text and its dimmed detail: why it waits, or its latest log
        line."""
        now = time.time()
        if run["state"] in WAITING and run.get("pending"):
            # Since it last entered the queue: a preempted run waits anew.
            queued = [e["at"] for e in run["events"] if e["to_state"] == "QUEUED"]
            waited = human_seconds(now - (queued[-1] if queued else run["created_at"]))
            return f"{run['id']}  {run['state']}  {waited}  ", pending_text(run["pending"])
        started = run.get("started_at")
        elapsed = human_seconds(now - started) if started else "-"
        line = self._last_log_line() if run["attempts"] else ""
        return f"{run['id']}  {run['state']}  {elapsed}  ", line

    def _last_log_line(self) -> str:
        text = b"".join(self.client.stream(f"/runs/{self.run_id}/logs", {"tail": 1}))
        lines = log_tail(text.decode(errors="replace"), 1)
        return lines[0] if lines else ""

    def _print_log_tail(self, run: dict[str, Any]) -> None:
        """The last lines of the run's latest log, and where to read the rest."""
        if not run.get("attempts"):
            return  # it never started: there is no log
        try:
            text = b"".join(self.client.stream(f"/runs/{run['id']}/logs", {"tail": TAIL_LINES}))
        except TauError:
            return  # the final line is said; a log that cannot be read adds nothing
        colour = _dim_on_stderr()
        for line in log_tail(text.decode(errors="replace")):
            _say(click.style(f"  {line}", dim=True) if colour else f"  {line}")
        _say(full_log_hint(run["id"], int(run["attempts"])))

    # -- --follow ---------------------------------------------------------------------
    def follow(self, *, since: float | None = None) -> dict[str, Any]:
        """Stream the logs of every attempt (those begun at or after ``since``) until the
        run ends, saying on stderr why it waits while queued; then the final line."""
        detail = self.get()
        first = 0
        if since is not None:
            first = sum(1 for a in detail["attempt_list"] if a["created_at"] < since)
        stream_attempts(
            self.client,
            detail,
            first,
            headers=False,
            tail=None,
            follow=True,
            on_poll=self._note_waiting if self.show else self._remember,
        )
        run = self.get()
        if self.show:
            _say(final_line(run, time.time()))
        return run

    def _remember(self, run: dict[str, Any]) -> None:
        self.last = run

    def _note_waiting(self, run: dict[str, Any]) -> None:
        self.last = run
        if self.pending_changed(run):
            _say(waiting_line(run))

    # -- Ctrl-C -----------------------------------------------------------------------
    def interrupted(self, *, confirm_s: float = CONFIRM_S) -> int:
        """After a Ctrl-C: the run goes on, and this says how to stop it. On a terminal a
        second Ctrl-C within ``confirm_s`` cancels it; the exit code is 130 either way."""
        state = self.last["state"] if self.last else None
        if state in TERMINAL:
            return INTERRUPTED
        can_confirm = sys.stderr.isatty() and sys.stdin.isatty()
        if sys.stderr.isatty():
            _say("")  # the terminal echoed ^C where the output stood
        _say(interrupt_notice(self.run_id, state, can_confirm=can_confirm))
        if not can_confirm:
            return INTERRUPTED
        try:
            time.sleep(confirm_s)
        except KeyboardInterrupt:
            try:
                _say(cancel_notice(self.client.cancel(self.run_id)))
            except TauError as exc:  # e.g. it ended meanwhile (conflict)
                _say(f"tau: {exc.message}")
        return INTERRUPTED


def wait_for(
    client: Client,
    run_id: str,
    *,
    show: bool = True,
    timeout: float | None = None,
    since: float | None = None,
) -> dict[str, Any]:
    """Poll until the run is terminal (see :meth:`Watch.wait`)."""
    return Watch(client, run_id, show=show).wait(timeout=timeout, since=since)


def stream_attempts(
    client: Client,
    detail: dict[str, Any],
    first: int,
    *,
    headers: bool,
    tail: int | None,
    follow: bool,
    on_poll: Callable[[dict[str, Any]], None] | None = None,
    rank: int | None = None,
) -> None:
    """Write the logs of attempts ``first``, ``first + 1``, ... to stdout, each under a
    header from the second on (from the first when ``headers``). With ``follow`` each
    attempt is streamed until it ends and the next is waited for until the run is over;
    ``on_poll`` sees the run each time it is looked at (to say why it waits).
    ``tail`` applies to the first attempt streamed."""
    rid = detail["id"]
    k = first
    while True:
        if on_poll is not None:
            on_poll(detail)
        atts = detail["attempt_list"]
        if k < len(atts):
            if headers:
                _header(atts[k])
            stream_log(client, rid, k, tail if k == first else None, follow, rank)
            k += 1
            headers = True  # from the second attempt on, say where each one starts
        elif not follow or detail["state"] in TERMINAL:
            return
        else:
            time.sleep(POLL_S)
        detail = client.get_run(rid)


def stream_log(
    client: Client,
    run: str,
    attempt: int | None,
    tail: int | None,
    follow: bool,
    rank: int | None = None,
) -> None:
    """One attempt's log (the latest when ``attempt`` is None) to stdout, as it comes."""
    out = sys.stdout.buffer
    params = {"follow": follow, "tail": tail, "attempt": attempt, "rank": rank}
    for chunk in client.stream(f"/runs/{run}/logs", params):
        out.write(chunk)
        out.flush()


def _header(att: dict[str, Any]) -> None:
    bits = []
    if att.get("resumed_from"):
        bits.append(f"resumed from step {att['resumed_from']['step']}")
    if att.get("reason"):
        code = att.get("exit_code")
        bits.append(att["reason"] + (f", exit {code}" if code is not None else ""))
    detail = f" ({'; '.join(bits)})" if bits else ""
    click.echo(f"==> attempt {att['attempt']}{detail} <==")


def _dim_on_stderr() -> bool:
    """Dim text on a terminal, unless NO_COLOR (https://no-color.org) or TERM=dumb."""
    env = os.environ
    return not env.get("NO_COLOR") and env.get("TERM") != "dumb" and sys.stderr.isatty()


def _line(at: float, state: str, text: str) -> str:
    """A line of the ``--wait`` transcript: time, state, what happened."""
    return f"  {clock(at)}  {state:<9}  {text}"


def _print(live: _Live | None, line: str) -> None:
    if live:
        live.print(line)
    else:
        _say(line)


class _Live:
    """One status line on a terminal: run, state, elapsed time and, dimmed, why it waits
    or its latest log line. rich is imported only here, when there is a terminal."""

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console(stderr=True)
        self.status = self.console.status("")
        self.status.start()

    def print(self, line: str) -> None:
        from rich.text import Text

        self.console.print(Text(line), highlight=False)

    def update(self, parts: tuple[str, str]) -> None:
        from rich.text import Text

        text = Text.assemble(parts[0], (parts[1], "dim"))
        text.truncate(max(self.console.width - 2, 20), overflow="ellipsis")  # one line
        self.status.update(text)

    def stop(self) -> None:
        self.status.stop()
