"""The zoo sweep's results site from its results folder's records, and the README's screenshots
of it: one command, which also checks what the issue asks of the site (built in <= 10 s, every
page opened in chromium with 0 console errors and 0 network requests).

    .venv/bin/python benchmarks/site_zoo.py benchmarks/results/zoo_sweep_gpu -o /tmp/zoo-site \
        --screenshots docs

The plan's sweeps (its chunks, the heavy detectors, jax) are merged into one sweep
(``zoo_findings.merged_sweep``) and written by mlms's own site writer (``mlms site``'s
``write_site``). Every page is then opened offline in Debian's chromium through playwright
(``/usr/bin/chromium``, never a downloaded browser): a request outside the site's folder is
refused and counted, as are console errors and page errors. With ``--screenshots DIR``:
``zoo-site-index.png`` (every model), ``zoo-site-detection.png`` (the index filtered to one
task) and ``zoo-site-model.png`` (one model's report page).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.zoo_findings import merged_sweep  # noqa: E402
from scripts.report_screenshot import ARGS, CHROMIUM  # noqa: E402

TARGET_S = 10.0
#: A page is drawn when every plotly figure on it has been made a plot.
DRAWN = (
    "() => [...document.querySelectorAll('.plotly-graph-div')]"
    ".every((d) => d.classList.contains('js-plotly-plot'))"
)
#: The model page shown, the first of these the sweep has.
SHOWN = ("maskrcnn_resnet50_fpn", "resnet50", "squeezenet1_1", "digits_cnn")
FILTERED_TASK = "object_detection"


def build(results: Path, output: Path, workers: int) -> tuple[list[Path], float]:
    """The site of the results folder's merged sweep in ``output`` (mlms's ``write_site``, its
    model pages written by ``workers`` processes); its files and seconds."""
    from mlms.catalog.resolve import resolve_model
    from mlms.evaluation.record_store import load_record
    from mlms.report.site import write_site
    from mlms.store.local import LocalStore
    from mlms.tracer.archive import local_archive

    began = time.perf_counter()
    store = LocalStore(results / "store")
    sweep = merged_sweep(store)
    if sweep is None:
        raise SystemExit(f"site_zoo: {results}/store holds no sweep: expected the kit's results")
    tasks = {name: resolve_model(name, store).task for name in {c.model for c in sweep.cells}}
    done = dict.fromkeys(c.evaluation_id for c in sweep.cells if c.state == "completed")
    records = [load_record(store, evaluation_id) for evaluation_id in done]
    archives = {r.trace_id: local_archive(store, r.trace_id) for r in records if r.trace_id}
    written = write_site(sweep, records, tasks, archives, output, workers)
    return written, time.perf_counter() - began


def check_pages(site: Path, screenshots: Path | None) -> tuple[int, list[str], list[str]]:
    """Every page of the site opened offline: (pages, console errors, refused requests); the
    screenshots taken on the way."""
    from playwright.sync_api import sync_playwright

    pages = [site / "index.html", *sorted((site / "models").glob("*.html"))]
    errors: list[str] = []
    foreign: list[str] = []
    inside = site.resolve().as_uri()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.route("**/*", lambda route: _inside_only(route, inside, foreign))
        for path in pages:
            page.goto(path.resolve().as_uri(), wait_until="load")
            page.wait_for_function(DRAWN, timeout=30_000)
        if screenshots is not None:
            _screenshots(page, site, screenshots)
        browser.close()
    return len(pages), errors, foreign


def _inside_only(route, inside: str, foreign: list[str]) -> None:
    if route.request.url.startswith(inside):
        route.continue_()
    else:
        foreign.append(route.request.url)
        route.abort()


def _screenshots(page, site: Path, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    page.goto((site / "index.html").resolve().as_uri(), wait_until="load")
    page.wait_for_function(DRAWN, timeout=30_000)
    page.screenshot(path=str(folder / "zoo-site-index.png"))
    tasks = page.eval_on_selector_all("#task option", "(options) => options.map((o) => o.value)")
    if FILTERED_TASK in tasks:
        page.select_option("#task", FILTERED_TASK)
        page.screenshot(path=str(folder / "zoo-site-detection.png"))
    shown = next((m for m in SHOWN if (site / "models" / f"{m}.html").is_file()), None)
    if shown is not None:
        page.goto((site / "models" / f"{shown}.html").resolve().as_uri(), wait_until="load")
        page.wait_for_function(DRAWN, timeout=30_000)
        page.screenshot(path=str(folder / "zoo-site-model.png"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="the kit's results folder of zoo_sweep")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the site's folder")
    parser.add_argument("--screenshots", type=Path, default=None, help="write the PNGs here")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="processes writing the model pages")  # fmt: skip
    args = parser.parse_args()
    written, seconds = build(args.results, args.output, args.workers)
    size = sum(path.stat().st_size for path in written)
    print(f"site: {len(written) - 2} model pages, {size / 1e6:.1f} MB, built in {seconds:.1f} s "
          f"(target <= {TARGET_S:g} s) in {args.output}")  # fmt: skip
    began = time.perf_counter()
    pages, errors, foreign = check_pages(args.output, args.screenshots)
    print(f"chromium: {pages} pages in {time.perf_counter() - began:.1f} s, "
          f"{len(errors)} console errors, {len(foreign)} network requests")  # fmt: skip
    for line in [*errors, *foreign][:10]:
        print(f"  {line}")
    return 1 if errors or foreign or seconds > TARGET_S else 0


if __name__ == "__main__":
    sys.exit(main())
