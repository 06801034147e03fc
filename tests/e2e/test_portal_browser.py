"""The web portal in a real browser (headless Chromium through Playwright) against a real
server started with the real CLI: live lists and logs, cancelling, queue positions,
roles, charts; every page visited is screenshotted into test-artifacts/portal/ and must
report no console error, uncaught exception or CSP violation.

One local server (declaring 1 GPU, so runs can be made to queue) and one browser serve
the module; the role test starts a shared server of its own."""

from __future__ import annotations

import itertools
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from portal_browser import (
    ARTIFACTS,
    DESKTOP,
    NARROW,
    WAIT_MS,
    Portal,
    launch,
    login_link,
    require_browser,
    shot,
    wait_streams,
)
from tauproc import Tau, write_spec

from servicecheck import require_bwrap

pytestmark = pytest.mark.e2e

PY = sys.executable
EXPERIMENT = "portal-sweep"
# One line every 0.3 s, each saying when it was printed.
# Ticks until the test says stop (a file appears), so a loaded machine cannot end the run
# before the page is open; at most 200 (a minute).
TICKER = (
    "import os, sys, time\n"
    "i = 0\n"
    "while not os.path.exists(sys.argv[1]) and i < 200:\n"
    "    print(f'tick {i} at {time.time():.3f}', flush=True)\n"
    "    i += 1\n"
    "    time.sleep(0.3)\n"
    "print('ticker done', flush=True)\n"
)
# Five points of `loss` through the workload SDK, and a log line for each.
TRAINER = (
    "import os, taugrid\n"
    "lr = float(os.environ['LR'])\n"
    "for step in range(5):\n"
    "    loss = 1.0 / (1.0 + 10 * lr * step)\n"
    "    taugrid.log(step, loss=loss)\n"
    "    print(f'step {step} loss {loss:.4f}', flush=True)\n"
    "print()\n"
    "print('done')\n"
)
# Where each log line's box sits in the <pre>: (top, height).
LINE_BOXES = """() => [...document.querySelectorAll("pre#log-lines .ln")].map((e) => {
  const r = e.getBoundingClientRect();
  return [r.top, r.height];
})"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = launch(p)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tau]:
    """A local server offering 1 (declared) GPU."""
    root = tmp_path_factory.mktemp("portal")
    (root / "work").mkdir()
    tau = Tau(home=root / "home", cwd=root / "work")
    try:
        tau.start_server("--gpus", "1")
        yield tau
    finally:
        tau.tear_down()


@pytest.fixture(scope="module")
def owner_state(browser: Any, local: Tau) -> dict[str, Any]:
    """The machine owner's logged-in cookies, from one `tau portal --url` link."""
    portal = Portal.log_in(browser, login_link(local))
    try:
        state: dict[str, Any] = portal.context.storage_state()
        return state
    finally:
        portal.context.close()


@pytest.fixture
def portal(browser: Any, local: Tau, owner_state: dict[str, Any]) -> Iterator[Portal]:
    p = Portal.new(browser, str(local.server_info()["url"]), storage_state=owner_state)
    try:
        yield p
    finally:
        p.context.close()


def submit(tau: Tau, name: str, *args: str, **env: str) -> str:
    return str(tau.json("run", "--name", name, *args, **env)["run"]["id"])


@pytest.fixture(scope="module")
def trained(local: Tau) -> list[str]:
    """Two finished runs of one experiment, five `loss` points each, LR apart."""
    ids = [
        submit(
            local,
            name,
            "--set",
            f"experiment.name={EXPERIMENT}",
            "--set",
            f"env.LR={lr}",
            "--",
            PY,
            "-c",
            TRAINER,
        )
        for name, lr in (("sweep-a", "0.1"), ("sweep-b", "0.3"))
    ]
    for run_id in ids:
        local.wait_state(run_id, {"SUCCEEDED"}, timeout=60)
    return ids


def test_the_runs_list_shows_a_new_run_and_its_end_without_a_reload(
    portal: Portal, local: Tau
) -> None:
    from playwright.sync_api import expect

    page = portal.open("/portal/runs")
    page.evaluate("window.__sameDocument = true")
    wait_streams(page, 1)
    run_id = submit(local, "live-list", "--", PY, "-c", "import time; time.sleep(2)")

    row = page.locator(f'#run-rows tr[data-run="{run_id}"]')
    expect(row).to_have_count(1, timeout=WAIT_MS)
    expect(row).to_have_attribute("data-state", "SUCCEEDED", timeout=WAIT_MS)
    expect(row.locator(".state")).to_have_text(re.compile(r"SUCCEEDED$"))
    expect(row.locator("a")).to_have_text("live-list")
    assert local.json("status", run_id)["state"] == "SUCCEEDED"
    assert page.evaluate("window.__sameDocument") is True  # the rows moved, not the page
    shot(page, "runs")
    portal.assert_clean()


def test_log_lines_arrive_while_the_run_runs(portal: Portal, local: Tau) -> None:
    from playwright.sync_api import expect

    stop = local.cwd / "ticker.stop"
    stop.unlink(missing_ok=True)
    run_id = submit(local, "ticker", "--", PY, "-c", TICKER, str(stop))
    local.wait_state(run_id, {"RUNNING"})
    page = portal.open(f"/portal/runs/{run_id}")
    wait_streams(page, 2)  # the run's changes and its log
    opened = time.time()

    lines = page.locator("pre#log-lines .ln")
    seen = lines.count()
    # Lines printed after the page opened arrive without a reload.
    expect(lines.nth(seen + 2)).to_be_attached(timeout=WAIT_MS)  # lines come in batches
    # Overrides being typed survive the live part's refresh when the run ends.
    page.get_by_text("Rerun…").click()
    page.get_by_label(re.compile("Overrides")).fill("env.LR=0.5")
    stop.touch()
    expect(lines.last).to_have_text("ticker done", timeout=WAIT_MS)
    texts = lines.all_inner_texts()
    ticks = texts[:-1]
    # Each line once, in order: the tail sent on connect and the followed rest join up.
    assert [int(t.split()[1]) for t in ticks] == list(range(len(ticks))), texts
    printed_later = [t for t in ticks if float(t.split()[3]) > opened]
    assert len(printed_later) >= 3, (opened, texts)
    # The attempt ends: the stream says so and the live part moves on, still no reload.
    expect(page.locator("pre#log-lines .log-end")).to_contain_text("log ended", timeout=WAIT_MS)
    expect(page.locator("#run-live .state")).to_contain_text("SUCCEEDED", timeout=WAIT_MS)
    expect(page.get_by_role("button", name="Resume from checkpoint")).to_be_visible()
    expect(page.get_by_label(re.compile("Overrides"))).to_have_value("env.LR=0.5")
    portal.assert_clean()


def test_cancel_from_the_run_page_stops_the_run(portal: Portal, local: Tau) -> None:
    from playwright.sync_api import expect

    run_id = submit(local, "cancel-me", "--", "sleep", "300")
    local.wait_state(run_id, {"RUNNING"})
    page = portal.open(f"/portal/runs/{run_id}")
    state = page.locator("#run-live .state")
    expect(state).to_contain_text("RUNNING")

    with page.expect_navigation():
        page.get_by_role("button", name="Cancel run").click()
    assert page.url == f"{portal.base}/portal/runs/{run_id}"  # post/redirect/get

    data = local.wait_state(run_id, {"CANCELLED"}, timeout=30)
    assert data["cancel_requested"] is True
    expect(state).to_contain_text("CANCELLED", timeout=WAIT_MS)
    expect(page.get_by_role("button", name="Cancel run")).to_have_count(0)
    portal.assert_clean()


def test_a_queued_run_shows_its_position_and_reason(portal: Portal, local: Tau) -> None:
    from playwright.sync_api import expect

    holder = submit(local, "gpu-holder", "--gpus", "1", "--", "sleep", "300")
    try:
        local.wait_state(holder, {"RUNNING"})
        waiter = submit(local, "gpu-waiter", "--gpus", "1", "--", "true")
        deadline = time.monotonic() + 30
        while (pending := local.json("status", waiter)["pending"]) is None:
            assert time.monotonic() < deadline, "the waiting run never got a queue position"
            time.sleep(0.1)
        assert pending["position"] == 1 and pending["reason"] == "WaitingForQuota", pending

        page = portal.open(f"/portal/runs/{waiter}")
        expect(page.locator("#run-live .state")).to_contain_text("QUEUED")
        box = page.locator("#run-live .pending-box")
        expect(box).to_contain_text(f"position #{pending['position']}")
        expect(box).to_contain_text(f"in queue {pending['cluster_queue']}")
        expect(box).to_contain_text(f"because {pending['reason']}")
        if pending.get("message"):
            expect(box).to_contain_text(pending["message"])
        wait_streams(page, 2)

        queues = portal.open("/portal/queues")
        head = queues.locator(f'ol.heads li:has(a[href="/portal/runs/{waiter}"])')
        expect(head).to_contain_text(pending["reason"])
        assert head.get_attribute("value") == str(pending["position"])
        shot(queues, "queues-waiting")
        queues.close()
        overview = portal.open("/portal/")  # the pending pressure, with its age
        expect(overview.locator("main")).to_contain_text("1 run waiting; the oldest was")
        overview.close()
    finally:
        local("cancel", holder, check=True)

    # The GPU is free: the waiting page follows the run to its end by itself.
    expect(page.locator("#run-live .pending-box")).to_have_count(0, timeout=WAIT_MS)
    expect(page.locator("#run-live .state")).to_contain_text("SUCCEEDED", timeout=WAIT_MS)
    local.wait_state(holder, {"CANCELLED"})
    portal.assert_clean()


def test_the_metric_chart_draws_the_logged_points(
    portal: Portal, local: Tau, trained: list[str]
) -> None:
    from playwright.sync_api import expect

    run_id = trained[0]
    last = local.json("status", run_id)["metrics_last"]
    assert last["step"] == 4 and last["values"] == {"loss": 0.2}, last
    page = portal.open(f"/portal/runs/{run_id}")

    fig = page.locator('figure.chart[data-metric="loss"]')
    expect(fig).to_have_count(1)
    expect(page.locator("#charts")).to_contain_text("5 points logged")
    vertices = [v.split(",") for v in fig.locator("svg polyline").get_attribute("points").split()]
    assert len(vertices) == 5, vertices
    xs, ys = [float(x) for x, _ in vertices], [float(y) for _, y in vertices]
    assert xs == sorted(set(xs)), xs  # steps 0..4, left to right
    assert ys == sorted(set(ys)), ys  # loss falls: each point lower on the chart (y grows down)
    markers = fig.locator("svg > path.chart-marker").get_attribute("d")
    assert markers.count("M") == 5, markers  # one marker per point
    desc = fig.locator("svg desc").text_content() or ""
    assert "loss: 5 points, last value 0.2 at step 4." in desc, desc
    expect(fig.locator("figcaption")).to_have_text("loss")

    lines = page.locator("pre#log-lines .ln")
    expect(page.locator("pre#log-lines .log-end")).to_have_count(1, timeout=WAIT_MS)
    want = [f"step {s} loss {1 / (1 + s):.4f}" for s in range(5)] + ["", "done"]
    assert lines.all_inner_texts() == want, lines.all_inner_texts()
    # One line under the other, each (the empty one too) one line high: no blank line
    # between them, none lost.
    boxes = page.evaluate(LINE_BOXES)
    height = boxes[0][1]
    assert height > 0 and all(abs(h - height) < 0.5 for _, h in boxes), boxes
    assert all(abs(b[0] - a[0] - height) < 0.5 for a, b in itertools.pairwise(boxes)), boxes
    shot(page, "run")
    # The top of the page down to the charts (state, logs, metrics): the README's picture.
    charts = page.locator("#charts").bounding_box()
    assert charts is not None
    top = {"x": 0, "y": 0, "width": DESKTOP["width"], "height": charts["y"] + charts["height"] + 16}
    page.screenshot(path=str(ARTIFACTS / "run-top.png"), full_page=True, clip=top, caret="initial")

    page.set_viewport_size(NARROW)
    page.reload()
    expect(page.locator('figure.chart[data-metric="loss"] svg')).to_be_visible()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= NARROW["width"], f"the run page scrolls sideways at 375 px: {width} px"
    shot(page, "run-narrow")
    portal.assert_clean()


def test_every_page_is_clean_and_starts_with_the_skip_link(
    portal: Portal, local: Tau, trained: list[str]
) -> None:
    from playwright.sync_api import expect

    a, b = trained
    pages = {
        "overview": ("/portal/", "Overview"),
        "runs-all": ("/portal/runs", "Runs"),
        "run-page": (f"/portal/runs/{a}", "sweep-a"),
        "queues": ("/portal/queues", "Queues"),
        "gpus": ("/portal/gpus", "GPUs and nodes"),
        "experiments": ("/portal/experiments", "Experiments"),
        "experiment": (f"/portal/experiments/{EXPERIMENT}", f"Experiment {EXPERIMENT}"),
        "diff": (f"/portal/diff?a={a}&b={b}", "Compare two runs"),
    }
    for name, (path, heading) in pages.items():
        page = portal.open(path)
        expect(page.locator("h1")).to_contain_text(heading)
        shot(page, name.removesuffix("-all").removesuffix("-page"))
        page.keyboard.press("Tab")
        first = page.evaluate("[document.activeElement.className, document.activeElement.text]")
        assert first == ["skip", "Skip to content"], (name, first)
        page.keyboard.press("Enter")
        assert page.evaluate("document.activeElement.id") == "main", name
        if name == "overview":
            done = page.locator('.counts a[href="/portal/runs?state=SUCCEEDED"] strong')
            assert int(done.inner_text()) >= 2
        if name == "experiments":
            row = page.locator("tr", has=page.get_by_role("link", name=EXPERIMENT))
            expect(row.locator("td").first).to_have_text("2")
        if name == "experiment":
            expect(page.locator("tbody tr")).to_have_count(2)
            fig = page.locator('figure.chart[data-metric="loss"]')
            expect(fig.locator("svg polyline")).to_have_count(2)  # both runs overlaid
        if name == "diff":
            expect(page.locator(".headline")).to_contain_text("The runs differ")
            expect(page.locator("table.changes")).to_contain_text("env.LR")
        if name == "gpus":
            gpu_rows = page.locator("main table tbody tr")  # the one declared (--gpus 1)
            expect(gpu_rows).to_have_count(1)
            expect(gpu_rows).to_contain_text("declared")
        page.close()
    portal.assert_clean()


POLICY = """\
flavors:
  - name: cpu
cluster_queues:
  - name: shared
    resources:
      - flavor: cpu
        quotas: {gpu: 0, cpu: 8, memory: 8Gi}
workspaces:
  - name: a
    local_queues: [{name: main, cluster_queue: shared}]
priority_classes:
  - {name: normal, value: 1000, default: true}
"""
MEMBERS = {"res": "researcher", "view": "viewer"}


def _ok(resp: httpx.Response) -> Any:
    assert resp.status_code < 300, (resp.status_code, resp.text)
    return resp.json() if resp.content else None


def test_a_viewer_sees_no_cancel_and_a_forged_cancel_is_refused_as_by_the_api(
    browser: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    require_bwrap()
    (tmp_path / "work").mkdir()
    tau = Tau(home=tmp_path / "home", cwd=tmp_path / "work")
    try:
        base = str(tau.start_server("--shared")["url"])
        tokens = {"admin": (tau.home / "admin-token").read_text().strip()}
        with httpx.Client(
            base_url=f"{base}/api/v1", headers={"Authorization": f"Bearer {tokens['admin']}"}
        ) as admin:
            _ok(admin.put("/admin/policy", json={"source": "policy.yaml", "text": POLICY}))
            _ok(admin.post("/admin/workspaces", json={"name": "a"}))
            for user, role in MEMBERS.items():
                _ok(admin.post("/admin/users", json={"name": user}))
                _ok(admin.put(f"/admin/workspaces/a/members/{user}", json={"role": role}))
                tokens[user] = _ok(admin.post("/admin/tokens", json={"user": user}))["token"]

        def as_user(who: str) -> dict[str, str]:
            return {"TAU_SERVER": base, "TAU_TOKEN": tokens[who]}

        spec_dir = tau.cwd / "res"
        write_spec(spec_dir, "name: theirs\ncommand: [sleep, '300']\nworkspace: a\n")
        run_id = str(
            tau.json("run", "--queue", "main", cwd=spec_dir, **as_user("res"))["run"]["id"]
        )
        tau.wait_state(run_id, {"RUNNING"})

        link = login_link(tau, f"/portal/runs/{run_id}", **as_user("view"))
        viewer = Portal.log_in(browser, link)
        try:
            assert viewer.landed == f"/portal/runs/{run_id}"
            page = viewer.open(f"/portal/runs/{run_id}")
            expect(page.locator("form.who span")).to_have_text("view")  # no "(admin)"
            expect(page.locator("#run-live .state")).to_contain_text("RUNNING")
            submitter = page.locator("#run-live dt:text-is('Submitted by') + dd")
            expect(submitter).to_have_text(re.compile(r"^res, "))  # another user's run
            expect(page.get_by_role("button", name="Cancel run")).to_have_count(0)
            expect(page.locator('form[action$="/cancel"]')).to_have_count(0)

            with httpx.Client(headers={"Authorization": f"Bearer {tokens['view']}"}) as api:
                refused = api.post(f"{base}/api/v1/runs/{run_id}/cancel")
            assert refused.status_code in (403, 404), refused.text
            error = refused.json()["error"]

            # The same cancel forged in the viewer's browser: their cookie, a valid CSRF token.
            csrf = page.locator('form.who input[name="csrf"]').get_attribute("value")
            assert csrf
            viewer.allow(rf"status of {refused.status_code}")  # the refusal page's own load
            with page.expect_response(lambda r: r.url.endswith(f"/{run_id}/cancel")) as got:
                page.evaluate(
                    """([action, csrf]) => {
                        const form = document.createElement("form");
                        form.method = "post";
                        form.action = action;
                        const field = document.createElement("input");
                        field.type = "hidden";
                        field.name = "csrf";
                        field.value = csrf;
                        form.append(field);
                        document.body.append(form);
                        form.submit();
                    }""",
                    [f"/portal/runs/{run_id}/cancel", csrf],
                )
            assert got.value.status == refused.status_code
            page.wait_for_load_state()
            expect(page.locator("h1")).to_have_text(
                f"Refused: {error['code']} (HTTP {refused.status_code})"
            )
            expect(page.locator("p.error")).to_have_text(error["message"])
            viewer.assert_clean()
        finally:
            viewer.context.close()

        status = tau.json("status", run_id)
        assert status["state"] == "RUNNING" and status["cancel_requested"] is False, status
        tau("cancel", run_id, check=True)
    finally:
        tau.tear_down()
