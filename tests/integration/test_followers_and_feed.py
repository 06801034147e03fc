"""Log followers hold no server thread while they wait, and the ordered event feed gives
every event once, in order, to whoever may see it."""

from __future__ import annotations

import sys
import threading
import time

import httpx
from tauproc import Tau

PY = sys.executable
# More followers than the server's thread pool has threads (anyio's default: 40).
FOLLOWERS = 48


def test_many_log_followers_leave_the_api_answering(tau: Tau) -> None:
    info = tau.start_server()
    tau(
        "run",
        "--name",
        "slow",
        "--detach",
        "--",
        PY,
        "-c",
        "import time\nprint('hello', flush=True)\ntime.sleep(30)",
        check=True,
    )
    tau.wait_state("slow", {"RUNNING"})
    headers = {"authorization": f"Bearer {tau.token()}"}
    got: list[bytes] = []
    stop = threading.Event()

    def follow(client: httpx.Client) -> None:
        url = "/api/v1/runs/slow/logs"
        with client.stream("GET", url, params={"follow": "true"}) as resp:
            for chunk in resp.iter_bytes():
                got.append(chunk)
                if stop.is_set():
                    return

    client = httpx.Client(
        base_url=info["url"],
        headers=headers,
        timeout=20,
        limits=httpx.Limits(max_connections=FOLLOWERS + 5),
    )
    threads = [
        threading.Thread(target=follow, args=(client,), daemon=True) for _ in range(FOLLOWERS)
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 15
    while len(got) < FOLLOWERS and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(got) == FOLLOWERS and all(b"hello" in c for c in got)
    # Every follower is now waiting for more: the API must still answer at once.
    started = time.monotonic()
    resp = client.get("/api/v1/runs/slow")
    assert resp.status_code == 200 and resp.json()["state"] == "RUNNING"
    assert time.monotonic() - started < 2.0
    stop.set()
    tau("cancel", "slow", check=True)
    for t in threads:  # the end of the attempt ends every follow
        t.join(timeout=15)
        assert not t.is_alive()
    client.close()


def test_the_event_feed_is_ordered_complete_and_scoped(tau: Tau) -> None:
    info = tau.start_server()
    client = httpx.Client(
        base_url=info["url"], headers={"authorization": f"Bearer {tau.token()}"}, timeout=20
    )
    first = client.get("/api/v1/events").json()
    assert first["events"] == [] and first["last_id"] == 0
    # A long poll: answered as soon as a run is submitted.
    answer: dict[str, object] = {}
    poll = threading.Thread(
        target=lambda: answer.update(
            client.get("/api/v1/events", params={"after": 0, "wait": 20}).json()
        )
    )
    poll.start()
    time.sleep(0.3)
    tau("run", "--name", "quick", "--", PY, "-c", "print(1)", check=True)
    poll.join(timeout=20)
    assert answer["events"], "the long poll ended without the submit's events"
    tau.wait_state("quick", {"SUCCEEDED"})
    feed = client.get("/api/v1/events", params={"limit": 1000}).json()
    ids = [e["id"] for e in feed["events"]]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    states = [e["to_state"] for e in feed["events"] if e["run_id"].startswith("quick")]
    assert states[0] == "PENDING" and states[-1] == "SUCCEEDED"
    assert {"QUEUED", "ADMITTED", "RUNNING"} <= set(states)
    # Paging by the last id seen gives the rest, nothing twice.
    page = client.get("/api/v1/events", params={"after": ids[1]}).json()
    assert [e["id"] for e in page["events"]] == ids[2:]
    client.close()
