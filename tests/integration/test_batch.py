"""Batch requests: many runs submitted or cancelled in one request and one commit."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from tauproc import Tau


def _api(tau: Tau) -> httpx.Client:
    info = tau.server_info()
    return httpx.Client(
        base_url=f"{info['url']}/api/v1",
        headers={"Authorization": f"Bearer {tau.token()}"},
        timeout=30,
    )


def _item(detail: dict[str, Any], name: str, **resolved: Any) -> dict[str, Any]:
    spec = detail["spec"]
    return {
        "spec_source": spec["source"],
        "file_text": spec["file_text"],
        "overrides": spec["overrides"],
        "resolved": {**spec["resolved"], "name": name, **resolved},
        # No spec_hash: `resolved` is changed here, and the server hashes it itself.
        "snapshot_digest": spec["snapshot_digest"],
        "submitter": "tester",
        "idempotency_key": str(uuid.uuid4()),
    }


def test_batch_submit_is_all_or_nothing_and_cancel_takes_many(tau: Tau) -> None:
    tau.start_server("--gpus", "0")
    first = tau.json("run", "--name", "first", "--", "sleep", "60")["run"]
    detail = tau.json("status", first["id"])
    with _api(tau) as api:
        bad = [_item(detail, "a"), _item(detail, "b", resources={"gpus": -1})]
        resp = api.post("/runs/batch", json={"runs": bad})
        assert resp.status_code == 422, resp.text
        assert "runs[1].resources.gpus" in resp.text
        assert len(tau.json("list")["runs"]) == 1  # nothing of the bad batch was recorded

        items = [_item(detail, n) for n in ("a", "b", "c")]
        resp = api.post("/runs/batch", json={"runs": items})
        assert resp.status_code == 200, resp.text
        results = resp.json()["results"]
        assert [r["created"] for r in results] == [True, True, True]
        ids = [r["run"]["id"] for r in results]
        assert [i.split("-")[0] for i in ids] == ["a", "b", "c"]
        # The same keys again: the recorded runs come back, nothing is added.
        again = api.post("/runs/batch", json={"runs": items}).json()["results"]
        assert [(r["run"]["id"], r["created"]) for r in again] == [(i, False) for i in ids]
        assert len(tau.json("list")["runs"]) == 4

    tau.wait_state(first["id"], {"RUNNING"})
    out = tau.json("cancel", "--timeout", "30", first["id"], *ids)
    assert {r["id"]: r["state"] for r in out["runs"]} == {
        i: "CANCELLED" for i in [first["id"], *ids]
    }
    events = tau.json("status", first["id"])["events"]
    assert [e["to_state"] for e in events][-1] == "CANCELLED"

    # Cancelling finished and unknown runs: one line each, the conflict's exit code.
    proc = tau("cancel", ids[0], "nosuch-zzzzz")
    assert proc.returncode == 7, proc.stderr  # the first failure (a conflict) decides
    assert f"tau: {ids[0]}: run {ids[0]} already CANCELLED" in proc.stderr
    assert "tau: nosuch-zzzzz: no run matches 'nosuch-zzzzz'" in proc.stderr
    assert "Traceback" not in proc.stderr
