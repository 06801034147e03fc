"""A workload that swaps a directory of its outputs for a symlink while its artifacts are
being downloaded never gets the server to serve a file from outside the run. Before the
fix the server checked the resolved path, then opened the path again later, so a swap in
between served whatever the link named (on a shared server: the server's own token)."""

from __future__ import annotations

import sys
import time

import httpx
from tauproc import Tau, write_spec

SWAPPER = r"""
import os, sys, time
out = os.environ["TAU_OUTPUT_DIR"]
real, link, d = out + "/real", out + "/link", out + "/d"
os.makedirs(real, exist_ok=True)
open(real + "/token", "w").write("inside")
os.symlink(os.environ["OUTSIDE"], link)
os.rename(real, d)
open(out + "/ready", "w").close()
end = time.time() + 15
while time.time() < end:  # d is a directory, then a link out, then a directory again
    time.sleep(0.001)
    os.rename(d, real); os.rename(link, d)
    time.sleep(0.001)
    os.rename(d, link); os.rename(real, d)
"""


def test_artifact_downloads_never_follow_a_swapped_link(tau: Tau) -> None:
    info = tau.start_server()
    outside = tau.cwd.parent / "outside"
    outside.mkdir()
    (outside / "token").write_text("SERVER-SECRET")
    (tau.cwd / "swap.py").write_text(SWAPPER)
    write_spec(
        tau.cwd,
        f"name: swap\ncommand: [{sys.executable!r}, swap.py]\nenv: {{OUTSIDE: {str(outside)!r}}}\n",
    )
    rid = tau.json("run")["run"]["id"]
    tau.wait_state(rid, {"RUNNING"})
    url = f"{info['url']}/api/v1/runs/{rid}/artifacts/d/token"
    seen: dict[int, int] = {}
    with httpx.Client(headers={"Authorization": f"Bearer {tau.token()}"}, timeout=10) as http:
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            resp = http.get(url)
            assert resp.text != "SERVER-SECRET", "served a file from outside the run"
            seen[resp.status_code] = seen.get(resp.status_code, 0) + 1
    assert set(seen) <= {200, 404}
    assert seen.get(200, 0) > 0  # the race was really run: the real directory was served
    tau("cancel", rid)
