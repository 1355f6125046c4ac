"""``mlms ui``: the real app on loopback, driven in Debian's headless chromium and over HTTP.

The app runs in this process (uvicorn on a socket bound to port 0) over the embedded platform
and the session's store; evaluations are real CPU runs of digits_cnn. The auth tests put the
UI in front of a real ``mlms server`` that demands tokens. Every wait is on a condition with a
timeout. ``MLMS_UI_SCREENSHOTS=docs`` also saves the pages the browser tests open there (the
README's pictures).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests
import uvicorn
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Frame, Page, sync_playwright

from mlms.client import EmbeddedClient
from mlms.evaluation.record import EvaluationRecord, EvaluationRequest
from mlms.registry.factory import registry_from_url
from mlms.security.tokens import Tokens
from mlms.server.process import Server, ServerConfig
from mlms.store.local import LocalStore
from mlms.ui import pages
from mlms.ui.app import create_app
from mlms.ui.command import bind
from mlms.ui.config import UiConfig, jaeger_from_otlp
from mlms.ui.connections import COOKIE
from tests.processes import wait_for
from tests.test_report import ALL_PLOTS, CHROMIUM, CHROMIUM_ARGS, _colours

#: The first evaluation of digits_cnn in a session trains its asset (a minute on 2 cores).
EVALUATION_S = 600
PLOTS_DRAWN = (
    f"() => ({ALL_PLOTS})().length > 0 && ({ALL_PLOTS})().every(p => p.drawn && p.traces > 0)"
)


@dataclass
class RunningUi:
    url: str
    server: uvicorn.Server
    thread: threading.Thread

    def get(self, path: str, **kwargs: object) -> requests.Response:
        return requests.get(self.url + path, timeout=120, allow_redirects=False, **kwargs)  # type: ignore[arg-type]

    def post(self, path: str, **kwargs: object) -> requests.Response:
        return requests.post(self.url + path, timeout=120, allow_redirects=False, **kwargs)  # type: ignore[arg-type]


@contextlib.contextmanager
def serving(config: UiConfig) -> Iterator[RunningUi]:
    """The app on a free loopback port until the block ends."""
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(create_app(config), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 30, "uvicorn to start")
        yield RunningUi(f"http://127.0.0.1:{sock.getsockname()[1]}", server, thread)
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


@pytest.fixture(scope="module")
def ui(store) -> Iterator[RunningUi]:
    """The UI of the embedded platform over the session's store."""
    with serving(UiConfig()) as running:
        yield running


def _evaluate(store, level: str) -> EvaluationRecord:
    request = EvaluationRequest(
        model="digits_cnn",
        framework="torch",
        batch_sizes=[1, 2],
        iterations=5,
        warmup=1,
        min_seconds=0,
        trace_level=level,
    )
    return EmbeddedClient(store).evaluate(request)


@pytest.fixture(scope="module")
def two_records(store) -> list[EvaluationRecord]:
    """Two stored evaluations to compare: one traced at the framework level, one untraced."""
    return [_evaluate(store, "framework"), _evaluate(store, "no_trace")]


def _listed(ui: RunningUi, records: list[EvaluationRecord]) -> None:
    """Wait until the UI lists ``records`` (stored beside it, through the evaluation index
    that the UI queries)."""

    def listed() -> bool:
        answer = ui.get("/api/evaluations", params={"limit": "1000"}).json()
        return {r.id for r in records} <= {e["id"] for e in answer["evaluations"]}

    wait_for(listed, 30, "the UI to list the evaluations stored beside it", every=0.2)


# --- in a real browser ----------------------------------------------------------------------


@dataclass
class Watched:
    """A page whose console errors, uncaught exceptions and requests off the app are kept."""

    page: Page
    errors: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)

    def clean(self) -> None:
        assert self.errors == []
        assert self.foreign == []


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.skip(f"no chromium at {CHROMIUM}: the UI is not opened in a browser")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def watched(browser, ui) -> Iterator[Watched]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    seen = Watched(page)
    page.on("console", lambda m: seen.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: seen.errors.append(str(exc)))
    # Anything not served by the app is refused and remembered: no CDN, no fonts, nothing.
    page.route(
        "**/*",
        lambda route: (
            route.continue_()
            if route.request.url.startswith(ui.url + "/")
            else (seen.foreign.append(route.request.url), route.abort())
        ),
    )
    yield seen
    context.close()


def _report_frame(page: Page) -> Frame:
    """The embedded report, once every plot in it has drawn."""
    page.wait_for_selector("iframe#report")
    frame = wait_for(
        lambda: next(
            (f for f in page.frames if f.url.endswith("/report") or "/report?" in f.url), None
        ),
        60,
        "the report's frame",
    )
    frame.wait_for_load_state("load", timeout=120_000)
    with contextlib.suppress(PlaywrightError):  # the assertions say which plot did not draw
        frame.wait_for_function(PLOTS_DRAWN, timeout=60_000)
    return frame


def _plots(frame: Frame) -> dict[str, dict]:
    plots = {p["id"]: p for p in frame.evaluate(ALL_PLOTS)}
    undrawn = [p for p in plots.values() if not (p["drawn"] and p["traces"] > 0)]
    assert plots and undrawn == []
    return plots


def _shot(page: Page, name: str) -> bytes:
    shot = page.screenshot()
    assert _colours(shot) > 50  # not blank
    if folder := os.environ.get("MLMS_UI_SCREENSHOTS"):
        Path(folder, f"ui-{name}.png").write_bytes(shot)
    return shot


def test_run_from_the_form_watch_it_finish_and_open_it(watched: Watched, ui: RunningUi) -> None:
    page = watched.page
    page.goto(ui.url + "/run")
    page.select_option("#model", "digits_cnn")
    page.select_option("#framework", "torch")
    page.fill("#batch_sizes", "1,4")
    page.select_option("#trace_level", "framework")
    page.fill("#iterations", "5")
    page.fill("#warmup", "1")
    page.fill("#min_seconds", "0")
    _shot(page, "run")
    page.click("#start")
    page.wait_for_url(re.compile(r"/runs/[0-9a-f]+$"))
    # The live region follows the run: its state changes while the page stays put.
    page.wait_for_selector("#state[data-done]", timeout=EVALUATION_S * 1000)
    state = page.inner_text("#state")
    assert state.startswith("finished: evaluation "), state
    page.click("text=open the evaluation")
    page.wait_for_url(re.compile(r"/evaluations/[0-9a-f]{32}$"))
    evaluation_id = page.url.rsplit("/", 1)[1]
    assert "digits_cnn 1.0.0" in page.inner_text("#facts")
    assert page.locator("#results tbody tr").count() == 2  # batch sizes 1 and 4
    frame = _report_frame(page)
    plots = _plots(frame)
    assert {"latency-0", "overheads-0", "layer-latency-0"} <= set(plots)
    page.set_viewport_size({"width": 1400, "height": 1400})
    _shot(page, "evaluation")
    watched.clean()

    # The Chrome trace the page links to is the evaluation's spans.
    with page.expect_download() as download:
        page.click("#chrome-trace")
    trace = Path(download.value.path()).read_text()
    assert '"traceEvents"' in trace and '"name":"batch_size=4"' in trace
    listed = ui.get("/api/evaluations", params={"q": evaluation_id[:12]}).json()
    assert [e["id"] for e in listed["evaluations"]] == [evaluation_id]


def test_a_table_wider_than_the_window_scrolls_in_its_own_box(
    watched: Watched, ui: RunningUi, two_records
) -> None:
    """The evaluations table wider than the window (here a narrow window; at 1400 pixels, long
    model and GPU names) scrolls sideways in its own box: the page keeps the window's width
    and the last column is brought into view by scrolling the table, not the page."""
    _listed(ui, two_records)
    page = watched.page
    page.set_viewport_size({"width": 900, "height": 800})
    page.goto(ui.url + "/evaluations")
    page.wait_for_selector("table#evaluations tbody tr")
    widths = page.evaluate(
        """() => ({page: document.documentElement.scrollWidth, window: window.innerWidth,
                   table: document.querySelector('table#evaluations').scrollWidth})"""
    )
    assert widths["table"] > widths["window"], widths  # else the check below proves nothing
    assert widths["page"] <= widths["window"], widths
    last = page.locator("table#evaluations thead th").last
    last.scroll_into_view_if_needed()
    box = last.bounding_box()
    assert box is not None and box["x"] + box["width"] <= widths["window"]
    assert page.evaluate("window.scrollX") == 0
    watched.clean()


def test_compare_two_evaluations(watched: Watched, ui: RunningUi, two_records) -> None:
    _listed(ui, two_records)
    page = watched.page
    page.goto(ui.url + "/evaluations?model=digits_cnn")
    for record in two_records:
        page.check(f'#evaluations input[value="{record.id}"]')
    _shot(page, "evaluations")
    page.click("#compare")
    page.wait_for_url(re.compile(r"/compare\?"))
    assert page.locator("#results tbody tr").count() == 4  # 2 evaluations x 2 batch sizes
    frame = _report_frame(page)
    plots = _plots(frame)
    assert {"latency-0", "latency-1", "across-latency"} <= set(plots)
    assert "no trace was recorded (trace level no_trace)" in frame.inner_text("body")
    _shot(page, "compare")
    watched.clean()


def test_fleet_refreshes_itself_and_the_zoo_lists_models(watched: Watched, ui: RunningUi) -> None:
    page = watched.page
    page.goto(ui.url + "/fleet")
    assert "embedded" in page.inner_text("#machines")
    with page.expect_response(lambda r: r.url.endswith("/fleet/live"), timeout=10_000) as live:
        pass
    assert live.value.status == 200
    assert page.locator("#machines").count() == 1  # the refreshed table replaced the first
    _shot(page, "fleet")
    page.goto(ui.url + "/zoo")
    names = page.locator("#models tbody tr td:first-child").all_inner_texts()
    assert "digits_cnn" in names and "resnet50" in names
    page.click('#models a[href="/run?model=resnet50"]')
    assert page.input_value("#model") == "resnet50"
    watched.clean()


# --- the JSON API and bad input ---------------------------------------------------------------

BAD_QUERIES = [
    ("/api/evaluations?since=yesterday", 400, "bad since date 'yesterday': expected YYYY-MM-DD"),
    ("/api/evaluations?until=2026-13-01", 400, "bad until date '2026-13-01'"),
    ("/api/evaluations?colour=red", 400, "unknown search parameter 'colour'"),
    ("/api/evaluations?limit=-3", 400, "bad limit '-3': expected a whole number"),
    ("/api/evaluations/not-hex", 400, "evaluation id 'not-hex': expected hex digits"),
    ("/api/evaluations/0123456789abcdef", 404, "no evaluation with id '0123456789abcdef'"),
    ("/api/compare?id=abc", 400, "compare needs 2 to 8 different evaluations, got 1"),
    ("/api/runs/nope", 404, "no evaluation started here with run id 'nope'"),
]


@pytest.mark.parametrize(("path", "status", "text"), BAD_QUERIES)
def test_bad_queries_are_one_clear_4xx(ui: RunningUi, path: str, status: int, text: str) -> None:
    answer = ui.get(path)
    assert answer.status_code == status
    assert text in answer.json()["error"]


BAD_RUNS = [
    ({"model": "no_such_model"}, 404, "unknown model 'no_such_model': expected one of the zoo's"),
    ({}, 404, "no model given"),
    ({"model": "digits_cnn", "framework": "caffe"}, 400, "unknown framework 'caffe'"),
    ({"model": "digits_cnn", "batch_sizes": "1,x"}, 400, "bad batch size 'x' in '1,x'"),
    ({"model": "digits_cnn", "batch_sizes": [0]}, 400, "bad batch size '0'"),
    ({"model": "digits_cnn", "iterations": "many"}, 400, "bad iterations 'many'"),
    ({"model": "digits_cnn", "iterations": 0}, 400, "bad value for iterations"),
    ({"model": "digits_cnn", "trace_level": "deep"}, 400, "'deep'"),
    ({"model": "digits_cnn", "colour": "red"}, 400, "unknown field 'colour'"),
    ({"model": "digits_cnn", "hw": {"a": 1}}, 400, "bad hw"),
]


@pytest.mark.parametrize(("body", "status", "text"), BAD_RUNS)
def test_bad_runs_are_refused_before_starting(
    ui: RunningUi, body: dict, status: int, text: str
) -> None:
    answer = ui.post("/api/evaluations", json=body)
    assert answer.status_code == status, answer.text
    assert text in answer.json()["error"]


def test_bad_bodies_and_the_form_say_what_was_expected(ui: RunningUi) -> None:
    not_json = ui.post("/api/evaluations", data="{", headers={"Content-Type": "application/json"})
    assert not_json.status_code == 400 and "the body is not JSON" in not_json.json()["error"]
    form = ui.post("/api/evaluations", data={"model": "digits_cnn"})
    assert form.status_code == 400 and "expected a JSON body" in form.json()["error"]
    listed = ui.post("/api/evaluations", json=[1])
    assert (
        listed.status_code == 400 and "expected a JSON object, got list" in listed.json()["error"]
    )
    # The form comes back with what was typed and the reason, as a page.
    page = ui.post("/run", data={"model": "digits_cnn", "batch_sizes": "2,-1"})
    assert page.status_code == 400
    assert "bad batch size &#x27;-1&#x27; in &#x27;2,-1&#x27;" in page.text
    assert 'value="2,-1"' in page.text
    missing = ui.get("/no/such/page")
    assert missing.status_code == 404 and "no page at /no/such/page" in missing.text


def test_evaluations_filter_and_download(ui: RunningUi, two_records) -> None:
    traced, untraced = two_records
    _listed(ui, two_records)
    listed = ui.get("/api/evaluations", params={"model": "digits_cnn", "framework": "torch"})
    ids = [e["id"] for e in listed.json()["evaluations"]]
    assert {traced.id, untraced.id} <= set(ids)
    # The session's store holds other tests' evaluations too: a filter is judged by what it
    # keeps out and by every evaluation it lets through.
    other = ui.get("/api/evaluations", params={"framework": "mxnet"}).json()["evaluations"]
    assert all(e["framework"] == "mxnet" for e in other)
    assert not {traced.id, untraced.id} & {e["id"] for e in other}
    h100 = ui.get("/api/evaluations", params={"hardware": "h100"}).json()["evaluations"]
    assert all("h100" in e["hardware"].lower() for e in h100)
    assert not {traced.id, untraced.id} & {e["id"] for e in h100}
    day = traced.created_at.date().isoformat()
    dated = ui.get("/api/evaluations", params={"since": day, "until": day}).json()
    assert traced.id in [e["id"] for e in dated["evaluations"]]
    assert ui.get("/api/evaluations", params={"until": "2000-01-01"}).json()["matched"] == 0
    words = ui.get("/api/evaluations", params={"q": f"no_trace {untraced.id[:10]}"}).json()
    assert [e["id"] for e in words["evaluations"]] == [untraced.id]

    trace = ui.get(f"/api/evaluations/{traced.id}/trace.json")
    assert trace.status_code == 200
    assert f"trace-{traced.id[:12]}.json" in trace.headers["content-disposition"]
    assert trace.json()["traceEvents"]
    none = ui.get(f"/api/evaluations/{untraced.id}/trace.json")
    assert none.status_code == 400 and "has no trace" in none.json()["error"]
    record = ui.get(f"/api/evaluations/{traced.id[:10]}").json()
    assert record["id"] == traced.id
    compared = ui.get("/api/compare", params=[("id", traced.id), ("id", untraced.id)]).json()
    assert [r["id"] for r in compared["evaluations"]] == [traced.id, untraced.id]


def test_every_page_is_served_here_with_its_headers(ui: RunningUi, two_records) -> None:
    record = two_records[0]
    for path in ("/fleet", "/zoo", "/evaluations", "/run", f"/evaluations/{record.id}"):
        answer = ui.get(path)
        assert answer.status_code == 200, path
        assert answer.headers["content-security-policy"].startswith("default-src 'self'")
        assert re.findall(r"""(?:src|href)=["'](?:https?:)?//""", answer.text) == [], path
    for asset in ("/static/ui.css", "/static/ui.js", "/static/favicon.svg"):
        assert ui.get(asset).status_code == 200
    report = ui.get(f"/evaluations/{record.id}/report")
    assert (
        report.status_code == 200
        and "frame-ancestors 'self'" in report.headers["content-security-policy"]
    )


def test_jaeger_link_only_when_configured(two_records) -> None:
    record = two_records[0]
    assert jaeger_from_otlp("http://jaeger:4317") == "http://jaeger:16686"
    assert jaeger_from_otlp("[::1]:4317") == "http://[::1]:16686"
    assert jaeger_from_otlp(None) is None
    linked = pages.evaluation(record, "http://jaeger:16686")
    assert f'href="http://jaeger:16686/trace/{record.trace_id}"' in linked
    assert 'id="jaeger"' not in pages.evaluation(record, None)


# --- tokens: a real server that demands them ---------------------------------------------------


@dataclass
class Guarded:
    ui: RunningUi
    tokens: Tokens


@pytest.fixture(scope="module")
def guarded(tmp_path_factory) -> Iterator[Guarded]:
    """The UI of a server on loopback that wants a token on every call."""
    store = LocalStore(tmp_path_factory.mktemp("guarded") / "store")
    registry = registry_from_url("memory://")
    server = Server(ServerConfig(store=str(store.root), auth=True), registry=registry).start()
    try:
        with serving(UiConfig(server=f"127.0.0.1:{server.port}")) as running:
            yield Guarded(running, Tokens(store))
    finally:
        server.stop(0)
        registry.close()


def test_no_data_without_a_token(guarded: Guarded) -> None:
    ui = guarded.ui
    answer = ui.get("/api/evaluations")
    assert answer.status_code == 401 and "needs a token" in answer.json()["error"]
    for path in ("/evaluations", "/fleet", "/zoo", "/run", "/api/models"):
        again = ui.get(path)
        assert again.status_code in (303, 401), path
        if again.status_code == 303:
            assert again.headers["location"] == f"/login?next={path}"
    login = ui.get("/login?next=/zoo")
    assert login.status_code == 200 and 'name="token"' in login.text
    forged = ui.post("/login", data={"token": "mlms_000000000000_" + "A" * 43, "next": "/zoo"})
    assert forged.status_code == 401 and "the server refused this token" in forged.text
    assert COOKIE not in forged.cookies
    empty = ui.post("/api/session", json={"token": " "})
    assert empty.status_code == 401 and "no token given" in empty.json()["error"]
    assert ui.post("/api/session", json={"token": 5}).status_code == 400


def test_a_token_opens_a_session_that_ends_with_it(guarded: Guarded) -> None:
    ui = guarded.ui
    entry, token = guarded.tokens.create("ui-tester", ["read"])
    login = ui.post("/login", data={"token": token, "next": "/zoo"})
    assert login.status_code == 303 and login.headers["location"] == "/zoo"
    cookie = login.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    session = login.cookies[COOKIE]
    assert token not in cookie and session != token
    jar = {COOKIE: session}
    zoo = ui.get("/zoo", cookies=jar)
    assert zoo.status_code == 200 and "digits_cnn" in zoo.text and token not in zoo.text
    assert ui.get("/api/evaluations", cookies=jar).json()["matched"] == 0
    assert ui.get("/fleet/live", cookies=jar).status_code == 200
    # A read token may look but not run: the run ends with the server's refusal, in one line.
    started = ui.post("/api/evaluations", json={"model": "digits_cnn"}, cookies=jar)
    assert started.status_code == 202
    run = wait_for(
        lambda: (r := ui.get(started.json()["url"], cookies=jar).json())["state"] == "failed" and r,
        60,
        "the run of a read-only token to fail",
    )
    assert "needs the role 'run'" in run["error"]
    # Revoked, the token stops working within the server's cache time, and so does the session.
    guarded.tokens.revoke(entry.id)
    wait_for(
        lambda: ui.get("/api/models", cookies=jar).status_code == 401,
        30,
        "the revoked token's session to be refused",
    )
    assert ui.get("/zoo", cookies=jar).status_code == 303


def test_logging_in_from_the_browser(browser, guarded: Guarded) -> None:
    _entry, token = guarded.tokens.create("ui-browser", ["read", "run"])
    context = browser.new_context()
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(guarded.ui.url + "/zoo")
    assert page.url.endswith("/login?next=/zoo")
    page.fill("#token", "mlms_000000000000_" + "B" * 43)
    page.click("#sign-in")
    assert "the server refused this token" in page.inner_text("main")
    page.fill("#token", token)
    page.click("#sign-in")
    page.wait_for_url(re.compile(r"/zoo$"))
    assert "digits_cnn" in page.inner_text("#models")
    cookie = next(c for c in context.cookies() if c["name"] == COOKIE)
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert page.evaluate("document.cookie") == ""  # the page's scripts cannot read it
    page.click("text=log out")
    page.wait_for_url(re.compile(r"/login$"))
    page.goto(guarded.ui.url + "/zoo")
    assert "/login" in page.url
    assert errors == []
    context.close()


# --- the command ------------------------------------------------------------------------------


def test_command_serves_and_refuses_plaintext_off_loopback(tmp_path: Path) -> None:
    refused = subprocess.run(
        [sys.executable, "-m", "mlms", "ui", "--listen", "0.0.0.0:0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        "mlms: error: mlms ui would serve plaintext on 0.0.0.0:0, which is not a loopback "
        "address: give --tls-cert and --tls-key (MLMS_TLS_CERT, MLMS_TLS_KEY), or --insecure "
        "to accept it"
    ]
    served = subprocess.Popen(
        [sys.executable, "-m", "mlms", "ui", "--listen", "127.0.0.1:0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = served.stderr.readline()  # type: ignore[union-attr]
        url = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert url, line
        assert requests.get(url.group(0) + "zoo", timeout=60).status_code == 200
    finally:
        served.terminate()
        served.wait(30)


# --- a fleet: a server and a torch agent on loopback ---------------------------------------


@pytest.fixture(scope="module")
def fleet_ui(store) -> Iterator[RunningUi]:
    """The UI of a server (no tokens: loopback) with one torch agent, sharing the session's
    store and an in-memory registry."""
    from mlms.agent.process import Agent, AgentConfig

    registry = registry_from_url("memory://")
    agent = Agent(AgentConfig(framework="torch"), registry=registry).start()
    server = Server(ServerConfig(), registry=registry).start()
    try:
        wait_for(lambda: server.fleet.agents(), 30, "the agent admitted into the fleet")
        with serving(UiConfig(server=f"127.0.0.1:{server.port}")) as running:
            yield running
    finally:
        server.stop(0)
        agent.stop(0)
        registry.close()


def test_a_fleet_lists_its_agents_and_runs_through_the_server(fleet_ui: RunningUi) -> None:
    fleet = fleet_ui.get("/api/fleet").json()
    assert not fleet["embedded"]
    [machine] = fleet["machines"]
    assert machine["framework"].startswith("torch ") and "cpu" in machine["hardware"]
    assert machine["id"] in fleet_ui.get("/fleet/live").text
    body = {"model": "digits_cnn", "framework": "torch", "batch_sizes": [1, 2],
            "iterations": 5, "warmup": 1, "min_seconds": 0}  # fmt: skip
    started = fleet_ui.post("/api/evaluations", json=body)
    assert started.status_code == 202, started.text
    url = started.json()["url"]
    run = wait_for(
        lambda: (r := fleet_ui.get(url).json())["state"] in ("finished", "failed") and r,
        EVALUATION_S,
        "the evaluation dispatched through the server to end",
        every=0.5,
    )
    assert run["state"] == "finished", run["error"]
    evaluation_id = run["evaluation_id"]
    page = fleet_ui.get(f"/evaluations/{evaluation_id}")
    assert page.status_code == 200 and "digits_cnn 1.0.0" in page.text
    listed = fleet_ui.get("/api/evaluations", params={"q": evaluation_id}).json()
    assert [e["id"] for e in listed["evaluations"]] == [evaluation_id]


def test_command_serves_https_with_a_certificate(tmp_path: Path) -> None:
    from mlms.security.ca import issue, make_ca

    ca = make_ca()
    pem = issue(ca, "server", ["127.0.0.1", "localhost"])
    (tmp_path / "ca.pem").write_bytes(ca.cert)
    (tmp_path / "ui.pem").write_bytes(pem.cert)
    (tmp_path / "ui-key.pem").write_bytes(pem.key)
    served = subprocess.Popen(
        [sys.executable, "-m", "mlms", "ui", "--listen", "127.0.0.1:0",
         "--tls-cert", str(tmp_path / "ui.pem"), "--tls-key", str(tmp_path / "ui-key.pem")],
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        line = served.stderr.readline()  # type: ignore[union-attr]
        url = re.search(r"https://127\.0\.0\.1:\d+/", line)
        assert url, line
        answer = requests.get(url.group(0) + "zoo", timeout=60, verify=str(tmp_path / "ca.pem"))
        assert answer.status_code == 200 and "digits_cnn" in answer.text
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.get(url.group(0).replace("https", "http") + "zoo", timeout=60)
    finally:
        served.terminate()
        served.wait(30)


def test_forms_posted_from_another_site_are_refused(ui: RunningUi) -> None:
    body = {"model": "digits_cnn", "batch_sizes": "0"}
    foreign = ui.post("/run", data=body, headers={"Origin": "https://evil.example"})
    assert foreign.status_code == 403 and "cross-site POST refused" in foreign.text
    same = ui.post("/run", data=body, headers={"Origin": ui.url})
    assert same.status_code == 400  # reached the form's checks (batch size 0)


def test_the_evaluations_page_links_its_next_page() -> None:
    """A page of the listing says how many match and links the next page with the same
    search (the index pages by token)."""
    from mlms.client import Evaluations
    from mlms.evaluation.summary import EvaluationSummary
    from mlms.ui import pages
    from mlms.ui.search import Filters
    from tests.evaluation_copies import copies

    shown = [EvaluationSummary.of(r) for r in copies(3, seed=9)]
    filters = Filters.parse({"model": "resnet50", "hardware": "H100", "sort": "p50"})
    html = pages.evaluations(Evaluations(shown, total=10, next_page_token="tok"), filters, [])
    assert "10 evaluations match, 3 on this page" in html
    assert (
        'href="/evaluations?model=resnet50&amp;hardware=h100&amp;sort=p50&amp;page_token=tok"'
        in html
    )
    assert all(s.id[:12] in html for s in shown)
    last = pages.evaluations(Evaluations(shown, total=3), filters, [])
    assert "page_token" not in last and "3 evaluations match" in last
