"""What watching a run says: pending reasons, the final line, the Ctrl-C notice, the tail
of a failed run's log, the head of each queue in `tau queues`. Pure formatting."""

from __future__ import annotations

from typing import Any

from taugrid.cli.commands.queues import head_lines
from taugrid.cli.watchtext import (
    cancel_notice,
    ends_badly,
    final_line,
    full_log_hint,
    interrupt_notice,
    log_tail,
    pending_key,
    pending_text,
    shown_line,
    waiting_line,
)

PEND = {
    "cluster_queue": "gpu-a100",
    "position": 3,
    "reason": "WaitingForQuota",
    "message": "needs 2 GPUs of flavor a100; 6 of 8 in use; position 3 of 5 in queue gpu-a100",
}


def _queued(**pending: Any) -> dict[str, Any]:
    return {"id": "train-x7k2p", "state": "QUEUED", "pending": {**PEND, **pending}}


def test_pending_text_says_where_and_why_without_repeating_the_position() -> None:
    assert pending_text(PEND) == (
        "#3 in gpu-a100: WaitingForQuota (needs 2 GPUs of flavor a100; 6 of 8 in use)"
    )
    bare = {**PEND, "message": "position 1 of 1 in queue q"}  # nothing but the position
    assert pending_text(bare) == "#3 in gpu-a100: WaitingForQuota (position 1 of 1 in queue q)"
    assert pending_text({**PEND, "message": ""}) == "#3 in gpu-a100: WaitingForQuota"


def test_a_new_waiting_line_only_when_the_reason_or_its_sentence_changes() -> None:
    first = pending_key(_queued())
    assert first == ("WaitingForQuota", "needs 2 GPUs of flavor a100; 6 of 8 in use")
    moved_up = _queued(position=2, message=PEND["message"].replace("3 of 5", "2 of 4"))
    assert pending_key(moved_up) == first  # the queue drains: no new line for that
    assert pending_key(_queued(message="needs 2 GPUs; 7 of 8 in use")) != first
    assert pending_key(_queued(reason="BlockedByHead")) != first
    assert pending_key({"id": "r", "state": "QUEUED", "pending": None}) is None
    assert pending_key({"id": "r", "state": "RUNNING", "pending": PEND}) is None
    assert waiting_line(_queued()) == (
        "run train-x7k2p is waiting: #3 in gpu-a100: WaitingForQuota "
        "(needs 2 GPUs of flavor a100; 6 of 8 in use)"
    )


def test_final_line_says_state_duration_and_exit() -> None:
    run = {
        "id": "r-1",
        "state": "FAILED",
        "created_at": 100.0,
        "started_at": 101.0,
        "finished_at": 104.2,
        "exit_code": 3,
    }
    assert final_line(run, now=999) == "run r-1 FAILED after 3.2s (exit 3)"
    never_started = {**run, "state": "CANCELLED", "started_at": None, "exit_code": None}
    assert final_line(never_started, now=999) == "run r-1 CANCELLED after 4.2s (exit -)"
    assert ends_badly(run) and ends_badly(never_started)
    assert not ends_badly({**run, "state": "SUCCEEDED"})


def test_interrupt_notice_says_the_run_goes_on_and_how_to_stop_it() -> None:
    assert interrupt_notice("r-1", "RUNNING", can_confirm=True) == (
        "run r-1 keeps running; stop it with: tau cancel r-1 "
        "(press Ctrl-C again within 3s to cancel it now)"
    )
    assert interrupt_notice("r-1", "QUEUED", can_confirm=False) == (
        "run r-1 stays queued; stop it with: tau cancel r-1"
    )
    assert interrupt_notice("r-1", None, can_confirm=False).startswith("run r-1 keeps running")
    assert cancel_notice({"id": "r-1", "state": "CANCELLED"}) == "run r-1 cancelled"
    assert "being cancelled" in cancel_notice({"id": "r-1", "state": "RUNNING"})


def test_log_tail_keeps_the_last_lines_as_a_terminal_shows_them() -> None:
    text = "".join(f"line {i}\n" for i in range(1, 16))
    assert log_tail(text) == [f"line {i}" for i in range(6, 16)]
    assert log_tail(text, 0) == [] and log_tail("", 10) == []
    # A progress bar's carriage returns: what is left on screen is the last part.
    assert shown_line("step 1\rstep 2\rstep 3\r") == "step 3"
    # Escape sequences and control characters of the workload never reach our output.
    assert shown_line("\x1b[31mred\x1b[0m \x1b]0;title\x07bell\x07\x00!") == "red bell!"
    assert shown_line("a\tb") == "a\tb"


def test_full_log_hint_names_every_attempt_when_there_were_several() -> None:
    assert full_log_hint("r-1", 1) == "full log: tau logs r-1"
    assert full_log_hint("r-1", 3) == "full log: tau logs r-1 --all"


def _queue(heads: list[dict[str, Any]], pending: int) -> dict[str, Any]:
    return {"name": "gpu", "pending": pending, "heads": heads}


def test_queue_heads_are_listed_in_order_under_the_table() -> None:
    heads = [
        {"run_id": "a-1", "workspace": "a", "position": 1, "reason": "WaitingForQuota",
         "message": "needs 2 GPUs; position 1 of 5 in queue gpu"},
        {"run_id": "longer-2", "workspace": "a", "position": 3, "reason": "BlockedByHead",
         "message": ""},
    ]  # fmt: skip
    assert head_lines([_queue(heads, 5), _queue([], 0)]) == [
        "",
        "waiting in gpu:",
        "  #1   a-1       WaitingForQuota: needs 2 GPUs",
        "  #3   longer-2  BlockedByHead",
        "  ... 3 more",
    ]
    assert head_lines([_queue([], 4)]) == []  # nothing of the caller's waits there
