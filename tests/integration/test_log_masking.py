"""A run's secret values are masked in its logs, as CI systems do (issue 9).

The workload prints its secret whole, split across two writes with a flush and a pause
between, and on stderr; `tau logs` shows ``***`` each time and the value is in no file
under TAU_HOME but its secret file.
"""

from __future__ import annotations

import sys

from tauproc import Tau, write_spec

SECRET = "hf_sk-MASKME-41c9e0d2"
SCRIPT = (
    "import os, sys, time\n"
    "v = os.environ['HF_TOKEN']\n"
    "print('whole:', v, flush=True)\n"
    "sys.stdout.write('split: ' + v[:7]); sys.stdout.flush(); time.sleep(0.5)\n"
    "sys.stdout.write(v[7:] + ' (end)\\n'); sys.stdout.flush()\n"
    "print('stderr:', v, file=sys.stderr, flush=True)\n"
    "print('short values stay: abc', flush=True)\n"
)


def test_secret_values_never_reach_the_log(tau: Tau) -> None:
    tau.start_server()
    assert tau("secret", "set", "hf/token", input_text=SECRET).returncode == 0
    (tau.cwd / "show.py").write_text(SCRIPT)
    write_spec(
        tau.cwd,
        f"name: masked\ncommand: [{sys.executable!r}, show.py]\nsecrets: {{HF_TOKEN: hf/token}}\n",
    )
    rid = tau.json("run")["run"]["id"]
    done = tau.wait_state(rid, {"SUCCEEDED", "FAILED"})
    assert done["state"] == "SUCCEEDED", done["events"]
    logs = tau("logs", rid, check=True).stdout
    assert "whole: ***\n" in logs
    assert "split: *** (end)\n" in logs
    assert "stderr: ***\n" in logs
    assert "short values stay: abc\n" in logs
    assert SECRET not in logs
    holding = [
        p.relative_to(tau.home)
        for p in tau.home.rglob("*")
        if p.is_file() and SECRET.encode() in p.read_bytes()
    ]
    assert len(holding) == 1 and holding[0].parts[0] == "secrets", holding
