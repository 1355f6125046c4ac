"""``mlms site``: the static results site of a real sweep (an image classifier and a detector,
two batch sizes each, on this CPU), opened offline in Debian's chromium: the index draws every
model's throughput curve and filters by task, a model's page draws its report, each renders in
under twice the time of a page that draws one chart with the same plotly.js, nothing is fetched
from the network, and the site stays small."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from playwright.sync_api import sync_playwright

from mlms.cli.main import cli
from mlms.client import EmbeddedClient
from mlms.evaluation.record import EvaluationRequest
from mlms.evaluation.runner import evaluate
from mlms.evaluation.sweep import SweepSpec
from mlms.report import figures
from mlms.report.levels import parts_spans
from mlms.report.site import site_spans

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
MODELS = ["squeezenet1_1", "ssdlite320_mobilenet_v3"]


def _mlms(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "mlms", *args], capture_output=True, text=True, env=env, timeout=300
    )


@pytest.fixture(scope="module")
def site(store, tmp_path_factory) -> Path:
    spec = SweepSpec(models=MODELS, frameworks=["torch"], batch_sizes=[1, 2], hw=["cpu"],
                     iterations=2, warmup=0, min_seconds=0)  # fmt: skip
    sweep = EmbeddedClient(store).sweep(spec, None, lambda _state: None)
    assert sweep.count("completed") == 4
    folder = tmp_path_factory.mktemp("site") / "site"
    # Two processes write the model pages, one each.
    done = CliRunner().invoke(
        cli, ["site", sweep.id, "-o", str(folder), "--workers", "2"], catch_exceptions=False
    )
    assert done.exit_code == 0, done.output
    return folder


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.skip(f"no chromium at {CHROMIUM}: the site is not opened in a browser")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def test_site_is_one_index_a_page_a_model_and_one_plotly(site: Path) -> None:
    files = sorted(p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file())
    assert files == ["index.html", *(f"models/{m}.html" for m in MODELS), "plotly.min.js"]
    assert sum(p.stat().st_size for p in site.rglob("*") if p.is_file()) < 30e6
    for page in ("index.html", *(f"models/{m}.html" for m in MODELS)):
        text = (site / page).read_text()
        assert "plotly.min.js" in text and "https://" not in text.split("<body>")[0]
        assert len(text) < 500_000  # plotly.js is not inlined


class _OfflinePage:
    """A tab that may read only inside ``root``: a request outside it is refused and recorded,
    as are console errors."""

    def __init__(self, browser, root: Path) -> None:
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.foreign: list[str] = []
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        inside = root.as_uri()
        self.page.route(
            "**/*",
            lambda route: (
                route.continue_()
                if route.request.url.startswith(inside)
                else (self.foreign.append(route.request.url), route.abort())
            ),
        )

    def load_ms(self, path: Path) -> float:
        """Loads ``path`` until every chart is drawn; the navigation's load time in ms."""
        self.page.goto(path.as_uri(), wait_until="load")
        self.page.wait_for_function(
            "() => [...document.querySelectorAll('.plotly-graph-div')]"
            ".every((d) => d.classList.contains('js-plotly-plot'))",
            timeout=10_000,
        )
        return self.page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd")


ONE_CHART = (
    '<!doctype html><html><head><script src="plotly.min.js"></script></head><body>'
    '<div id="one" class="plotly-graph-div"></div><script>'
    'Plotly.newPlot("one", [{x: [1, 2, 3], y: [1, 3, 2], type: "scatter"}]);'
    "</script></body></html>"
)


def _load(browser, path: Path, root: Path, tmp_path: Path):
    """The page, offline, and its load time over that of a page that only loads the same
    plotly.js and draws one chart: each the best of three loads taken in alternation (the later
    ones with the compiled plotly.js that chromium caches, as a reader moving between pages has
    it), so that a busy machine slows both alike. The site's pages load in about 0.5 s on an
    idle two-core machine, 1.1 to 1.4 times the one chart."""
    (tmp_path / "plotly.min.js").symlink_to(root / "plotly.min.js")
    (tmp_path / "one_chart.html").write_text(ONE_CHART)
    site, reference = _OfflinePage(browser, root), _OfflinePage(browser, tmp_path)
    times = [(site.load_ms(path), reference.load_ms(tmp_path / "one_chart.html")) for _ in range(3)]
    for tab in (site, reference):
        assert tab.errors == [] and tab.foreign == []
    reference.page.close()
    return site.page, min(t for t, _ in times) / min(r for _, r in times)


def test_index_draws_every_model_and_filters_by_task(browser, site: Path, tmp_path: Path) -> None:
    page, slower = _load(browser, site / "index.html", site, tmp_path)
    assert slower < 2
    traces = page.evaluate("document.getElementById('curves').data.map((t) => t.name)")
    assert traces == [f"{m} (torch, fp32, cpu)" for m in MODELS]
    rows = page.locator("#index tbody tr")
    assert rows.count() == 2
    first = rows.nth(0).locator("td").all_inner_texts()
    assert first[:5] == ["squeezenet1_1", "image_classification", "torch", "fp32", "cpu"]
    assert first[7] in ("1", "2") and float(first[6].replace(",", "")) > 0
    page.select_option("#task", "object_detection")
    assert page.locator("#index tbody tr:visible").all_inner_texts()[0].startswith(MODELS[1])
    shown = page.evaluate("document.getElementById('curves').data.map((t) => t.visible)")
    assert shown == [False, True]
    assert page.locator("#shown").inner_text() == "1 shown"
    page.click(f"text={MODELS[1]}")
    page.wait_for_url(f"**/models/{MODELS[1]}.html")
    page.close()


def test_model_page_draws_its_report(browser, site: Path, tmp_path: Path) -> None:
    page, slower = _load(browser, site / "models" / f"{MODELS[1]}.html", site, tmp_path)
    assert slower < 2
    assert page.locator(".js-plotly-plot").count() >= 1
    # Both batch sizes in one evaluation: the sweep loaded the model once.
    assert page.locator("h1").inner_text().startswith(f"{MODELS[1]} on torch ")
    assert "2 evaluations compared" not in page.content()
    assert page.locator("nav a", has_text="all models").get_attribute("href") == "../index.html"
    page.close()


def test_unknown_sweep_is_one_line_error(tmp_path: Path) -> None:
    done = _mlms("site", "abc123", "-o", str(tmp_path / "site"))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"mlms: error: no sweep with id 'abc123' in file://{os.environ['MLMS_HOME']}/store"
    ]
    assert not (tmp_path / "site").exists()


def test_a_bad_worker_count_is_one_line(tmp_path: Path) -> None:
    done = _mlms("site", "abc123", "-o", str(tmp_path / "site"), "--workers", "0")
    assert done.returncode == 2
    assert "Invalid value for '--workers': 0 is not in the range x>=1" in done.stderr
    assert not (tmp_path / "site").exists()


def test_level_parts_of_a_model_level_trace_share_one_empty_spans(store) -> None:
    """The site's spans hold every trace; a trace with layers gets its own to itself, and the
    model-level ones one empty Spans for all (their parts have nothing below the model)."""
    client = EmbeddedClient(store)
    records = [
        evaluate(
            EvaluationRequest(model="digits_cnn", batch_sizes=[1], iterations=2, warmup=0,
                              min_seconds=0, trace_level=level),
            store=store,
        )
        for level in ("model", "framework", "model", "no_trace")
    ]  # fmt: skip
    spans = site_spans(client.span_archive(r.trace_id) for r in records if r.trace_id)
    shallow, deep, shallow_too, untraced = parts_spans(spans, records)
    assert shallow is shallow_too and len(shallow) == 0
    assert deep.scalar("SELECT list(DISTINCT trace_id) FROM spans") == [records[1].trace_id]
    assert deep.scalar("SELECT count(*) FROM layers") > 0
    assert untraced is None


def test_side_by_side_figures_put_the_right_traces_on_the_right_plot() -> None:
    sizes = [1, 16]
    latency = pd.DataFrame(
        {"batch size": sizes, "p50 (ms)": [1.0, 2.0], "p90 (ms)": [1.5, 2.5],
         "p99 (ms)": [2.0, 3.0], "throughput (inputs/s)": [1000.0, 8000.0]}
    )  # fmt: skip
    fig = figures.latency_and_throughput(latency)
    assert [(t.name, t.xaxis, t.yaxis) for t in fig.data] == [
        ("p50", "x", "y"), ("p90", "x", "y"), ("p99", "x", "y"), ("throughput", "x2", "y2")
    ]  # fmt: skip
    assert fig.layout.xaxis.domain == (0.0, 0.44) and fig.layout.xaxis2.domain == (0.56, 1.0)
    assert fig.layout.yaxis2.anchor == "x2" and fig.layout.xaxis2.type == "log"
    assert fig.layout.yaxis2.title.text == "throughput (inputs/s)"
    assert fig.layout.template.layout.plot_bgcolor == "white"  # plotly_white
    both = pd.DataFrame(
        {"evaluation": ["a" * 32] * 2 + ["b" * 32] * 2, "framework": "torch", "version": "2",
         "batch size": sizes * 2, "p50 (ms)": [1.0, 2.0, 1.1, 2.1],
         "throughput (inputs/s)": [1e3, 8e3, 9e2, 7e3]}
    )  # fmt: skip
    bars = figures.side_by_side(both)
    assert [(t.xaxis, t.yaxis, t.showlegend) for t in bars.data] == [
        ("x", "y", True), ("x2", "y2", False), ("x", "y", True), ("x2", "y2", False)
    ]  # fmt: skip
    assert bars.data[0].marker.color != bars.data[2].marker.color
    assert bars.layout.barmode == "group" and bars.layout.xaxis2.type == "category"
