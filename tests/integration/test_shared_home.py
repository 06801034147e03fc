"""A shared server's home is never served by a plain local server afterwards: its queued
runs were submitted by other people to run in a sandbox, and the CLI's auto-start (or a
plain `tau server start`) would run them as the server's own user."""

from __future__ import annotations

from tauproc import Tau, write_spec

from servicecheck import require_bwrap


def test_a_shared_home_refuses_a_local_server(tau: Tau) -> None:
    require_bwrap()
    tau.start_server("--shared")
    write_spec(tau.cwd, "name: queued\ncommand: [sleep, '1']\n")
    tau.stop_server()

    auto = tau("status")  # the CLI's auto-start
    assert auto.returncode == 3, auto.stderr
    assert "is the home of a shared server" in auto.stderr
    assert "tau server start --shared" in auto.stderr
    plain = tau("server", "start")
    assert plain.returncode != 0 and "home of a shared server" in plain.stderr
    assert not (tau.home / "server.json").exists()

    tau.start_server("--shared")  # the way it was meant to run still works
    assert tau.server_info()["shared"] is True
