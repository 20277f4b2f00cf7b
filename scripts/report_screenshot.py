#!/usr/bin/env python3
"""Writes docs/report.png, the README's picture of the HTML report: a fixture profiled, rendered with
`advise --html`, and photographed by Debian's headless Chromium (chromium + chromium-driver, through selenium
with explicit paths, so nothing is downloaded).

Usage: python scripts/report_screenshot.py [FIXTURE] [OUTPUT_PNG]
       (defaults: fixtures/code_editing.jsonl, docs/report.png)
The picture shows the top of the page (summary, evidence, the plots down to the predicted TPOT) with a
reduced palette, so the file stays small enough for the repository.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WIDTH = 1280  # CSS pixels
LAST_PLOT = "tpot"  # the picture ends below the row of this plot
COLOURS = 160  # palette size of the written PNG


def main(fixture: Path, output: Path) -> None:
    from PIL import Image
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    with tempfile.TemporaryDirectory() as folder:
        page = Path(folder) / "report.html"
        shown = fixture.resolve().relative_to(REPO) if fixture.resolve().is_relative_to(REPO) else fixture
        subprocess.run([sys.executable, "-c", "from advisor.cli import main; main()", str(shown), "--html", str(page),
                        "--no-progress"], check=True, stdout=subprocess.DEVNULL, cwd=REPO)
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                         f"--window-size={WIDTH},900", "--force-device-scale-factor=1"):
            options.add_argument(argument)
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        try:
            driver.get(page.as_uri())
            bottom = driver.execute_script(
                f"return document.querySelector('[data-plot=\"{LAST_PLOT}\"]').closest('.row')"
                ".getBoundingClientRect().bottom")
            chrome = driver.execute_script("return window.outerHeight - window.innerHeight")
            driver.set_window_size(WIDTH, int(bottom) + 24 + chrome)
            raw = Path(folder) / "raw.png"
            driver.save_screenshot(str(raw))
        finally:
            driver.quit()
        image = Image.open(raw).convert("RGB")
        image.quantize(colors=COLOURS, method=Image.Quantize.FASTOCTREE).save(output, optimize=True)
    print(f"{output}: {output.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    arguments = sys.argv[1:]
    main(Path(arguments[0]) if arguments else REPO / "fixtures" / "code_editing.jsonl",
         Path(arguments[1]) if len(arguments) > 1 else REPO / "docs" / "report.png")
