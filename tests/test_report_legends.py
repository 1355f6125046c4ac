"""A figure's legend never covers its title, however narrow the page: drawn by plotly.js in a
real browser and measured there."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from playwright.sync_api import sync_playwright

from mlms.report import figures
from tests.test_report import CHROMIUM, CHROMIUM_ARGS

LEVELS = ["framework", "ml_library", "system_library", "hardware", "full"]

BOXES = """() => {
  const box = sel => { const r = document.querySelector(sel).getBoundingClientRect();
                       return [r.left, r.top, r.right, r.bottom]; };
  return {title: box('.gtitle'), legend: box('.legend')};
}"""


def _overlap(a: list[float], b: list[float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


@pytest.fixture(scope="module")
def page():
    if not CHROMIUM.exists():
        pytest.skip(f"no chromium at {CHROMIUM}")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser.new_page()
        browser.close()


@pytest.mark.parametrize("width", [1200, 700, 480])
def test_overhead_legend_keeps_off_the_title(page, tmp_path: Path, width: int) -> None:
    table = pd.DataFrame(
        [
            {"level": level, "batch size": b, "overhead (x)": 1.0 + i, "p50 (ms)": 1.0, "spans": 10}
            for i, level in enumerate(LEVELS)
            for b in (1, 8)
        ]
    )
    figure = figures.leveled_overheads(table)
    figure.update_layout(width=width)
    path = tmp_path / "figure.html"
    figure.write_html(path, include_plotlyjs=True, full_html=True)
    page.set_viewport_size({"width": width + 40, "height": 600})
    page.goto(path.as_uri())
    page.wait_for_selector(".legend")
    boxes = page.evaluate(BOXES)
    assert not _overlap(boxes["title"], boxes["legend"]), boxes
