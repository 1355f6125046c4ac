"""A PNG of one section of an mlms HTML report, as Debian's chromium renders it.

    .venv/bin/python scripts/report_screenshot.py report.html docs/report_gpu_kernels.png \
        --section kernels-0

Uses the system browser (/usr/bin/chromium) through playwright; never downloads one. Exits
non-zero when the page logs a console error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--section", help="the id of the element to scroll to (e.g. kernels-0)")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=1500)
    args = parser.parse_args()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": args.width, "height": args.height})
        errors: list[str] = []
        page.on("console", lambda message: message.type == "error" and errors.append(message.text))
        page.goto(args.report.resolve().as_uri())
        page.wait_for_selector(".js-plotly-plot .main-svg")
        if args.section:
            page.locator(f"#{args.section}").scroll_into_view_if_needed()
            page.evaluate(f"document.getElementById('{args.section}').scrollIntoView()")
        page.screenshot(path=str(args.png))
        browser.close()
    if errors:
        sys.exit(f"the page logged console errors: {errors}")


if __name__ == "__main__":
    main()
