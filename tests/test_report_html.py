"""The HTML report: self-contained, every plot or the reason it is missing, no prompt or completion text;
and the same pages loaded from file:// in a real headless Chromium (Debian's chromium + chromium-driver).

The browser tests skip with a reason when Chromium, chromedriver or selenium is missing, and FAIL instead when
ADVISOR_BROWSER_REQUIRED is set (.ci/run sets it and installs the packages). Screenshots go to
$ADVISOR_ARTIFACTS when set, else to pytest's tmp_path; the test prints the folder.
"""
from __future__ import annotations

import base64
import html
import os
import re
from pathlib import Path

import pytest
from markupsafe import escape

from advisor.emit.checklist import render_checklist
from advisor.emit.html import figures, render_html
from advisor.ingest import read_requests
from advisor.profile import ProfileOptions, build_profile
from advisor.report import Report, dumps, loads

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ALL_PLOTS = {
    "apc": "Prefix-cache hit rate vs cache size",
    "speculative": "Acceptance rate by k",
    "tpot": "Predicted TPOT by concurrency",
    "lengths": "Prompt and completion lengths",
    "arrivals": "Arrival rate over time",
}
MIN_SNIPPET = 24  # characters: shorter lines (``` or "import os") could occur in any page by chance


def _page(path: Path) -> tuple[Report, str]:
    """A profile's report read back from its JSON (as `advise show` reads it) and the HTML page of it."""
    report = loads(dumps(build_profile(ProfileOptions(paths=(str(path),))).report))
    return report, render_html(report)


def _text_snippets(path: Path) -> list[str]:
    """Every line of at least MIN_SNIPPET characters of every prompt, message and completion in the log."""
    snippets = set()
    for request in read_requests([str(path)]):
        texts = [m.content for m in request.messages or ()] + [request.prompt or "", request.completion or ""]
        for text in texts:
            snippets.update(line.strip() for line in text.splitlines() if len(line.strip()) >= MIN_SNIPPET)
    return sorted(snippets)


def _assert_no_log_text(page: str, snippets: list[str]) -> None:
    assert snippets, "the log has no text: the privacy check would be empty"
    forms = (lambda s: s, lambda s: html.escape(s, quote=False), lambda s: str(escape(s)))
    leaked = [s for s in snippets if any(form(s) in page for form in forms)]
    assert not leaked, f"{len(leaked)} prompt/completion lines in the page, e.g. {leaked[0][:60]!r}"


@pytest.fixture(scope="module")
def code_editing() -> tuple[Report, str]:
    return _page(FIXTURES / "code_editing.jsonl")


def test_page_is_self_contained_with_every_plot(code_editing: tuple[Report, str]) -> None:
    report, page = code_editing
    assert not re.search(r"<script|<link(?![^>]*href=\"data:)|@import|url\((?!#)", page)
    assert not re.search(r"(src|href)=\"(?!data:|#)", page)  # nothing to fetch at view time
    assert page.count("<svg") == len(ALL_PLOTS)
    for key, title in ALL_PLOTS.items():
        assert f'data-plot="{key}"' in page and title in page
    assert "@media print" in page
    emitted = report.recommendation.emitted
    assert str(escape(emitted.serve_command)) in page  # as the template escapes it
    assert str(escape(emitted.config_yaml)) in page
    candidates = page[page.index('data-table="candidates"'):]
    assert candidates[:candidates.index("</table>")].count("<tr>") == len(report.recommendation.candidates) + 1
    boxes = render_checklist(report).count("\n- [ ] ")
    checklist = page[page.index("Pre-deployment checklist"):]
    assert boxes > 10 and checklist.count('<ul class="checklist">') == 4 and checklist.count("<li>") == boxes
    assert "<h3>A/B verification (<code>advise verify</code>)</h3>" in checklist


def test_page_has_no_prompt_or_completion_text(code_editing: tuple[Report, str]) -> None:
    _assert_no_log_text(code_editing[1], _text_snippets(FIXTURES / "code_editing.jsonl"))


def test_missing_data_gives_the_reason_instead_of_a_plot() -> None:
    profile = build_profile(ProfileOptions(paths=(str(FIXTURES / "azure_trace.csv"),)))
    shown = figures(profile.report)
    assert shown["lengths"].svg and shown["arrivals"].svg  # token counts and timestamps are in the trace
    assert shown["apc"].svg is None and "no prompt text and no block hashes" in shown["apc"].missing
    assert shown["speculative"].svg is None and "no completion text" in shown["speculative"].missing
    page = render_html(profile.report)
    assert page.count("<svg") == 2 and "Not plotted: prefix sharing and APC disabled" in page
    measured_only = build_profile(ProfileOptions(paths=(str(FIXTURES / "azure_trace.csv"),), recommend=False))
    assert "(--no-recommend)" in figures(measured_only.report)["tpot"].missing
    assert "Configs to deploy" not in render_html(measured_only.report)


def test_sparse_arrivals_are_plotted_per_hour() -> None:
    from advisor.emit.plots import arrival_rate

    svg = arrival_rate(21600.0, [1, 0, 3, 2], 6 / 86400)
    assert "per 6 h bin" in svg and "requests per hour" in svg and "mean 0.25 requests per hour" in svg
    assert "time since the first request (hours)" in svg


def test_plots_carry_exactly_the_report_figures(code_editing: tuple[Report, str]) -> None:
    """The SVGs are drawn from the document: every replayed setting is a series, every APC point a marker."""
    report, _ = code_editing
    shown = figures(report)
    settings = {"ngram window 1-3", "ngram window 2-4", "ngram window 3-5", "ngram window 5-5", "suffix (vLLM defaults)"}
    assert all(name in shown["speculative"].svg for name in settings)
    assert f"unlimited cache: {report.apc.ceiling.hit_rate:.0%}" in shown["apc"].svg
    assert report.recommendation.tpot_by_concurrency.candidate in shown["tpot"].svg
    assert f"per {report.arrivals.bin_s:g} s bin" in shown["arrivals"].svg  # 10 s bins over 151 s
    assert "requests per second" in shown["arrivals"].svg


def test_each_draft_is_its_own_series_and_the_header_carries_the_ingest_counts(
        code_editing: tuple[Report, str]) -> None:
    """Two drafts replayed at the same k are two lines named by their draft, not one "draft_model" line; the
    page header repeats what the terminal says of the input (skip reasons, conversations, notes)."""
    from dataclasses import replace

    from advisor.report import DraftRef

    report, _ = code_editing
    base = next(r for r in report.replay_sweep if r.method == "ngram")
    drafts = tuple(
        replace(base, method="draft_model", draft=DraftRef(name, 135_000_000),
                config={"method": "draft_model", "model": f"/models/{name}", "num_speculative_tokens": k},
                tokens_per_step=tokens_per_step)
        for name, tokens_per_step in (("draft-alpha", 1.4), ("draft-beta", 1.2)) for k in (1, 2))
    ingest = replace(report.ingest, skipped=4, skipped_by_reason={"not valid JSON": 3, "no messages": 1},
                     conversations=7, turns=19, unfinished=2, truncated=1, notes=("the log has no timestamps",))
    page_report = replace(report, replay_sweep=report.replay_sweep + drafts, ingest=ingest)
    svg = figures(page_report)["speculative"].svg
    assert "draft draft-alpha" in svg and "draft draft-beta" in svg and ">draft_model<" not in svg
    page = render_html(page_report)
    assert "4 skipped (3 not valid JSON; 1 no messages)" in page
    assert "7 conversations, 19 turns" in page and "2 unfinished (no output logged), 1 cut" in page
    assert "Note: the log has no timestamps" in page


def test_input_counts_of_one_read_in_the_singular_on_the_page_and_the_terminal(
        code_editing: tuple[Report, str]) -> None:
    """A one-conversation log (an agent trajectory) reads "1 conversation", in both renderings."""
    from dataclasses import replace

    from advisor.emit.terminal import render_terminal

    report, _ = code_editing
    one = replace(report, ingest=replace(report.ingest, requests=1, records_read=1, conversations=1, turns=1))
    many = replace(report, ingest=replace(report.ingest, requests=2, records_read=1_500, conversations=2, turns=28))
    for render in (render_html, render_terminal):
        assert "1 request from 1 record" in render(one) and "1 conversation, 1 turn" in render(one)
        assert "2 requests from 1,500 records" in render(many) and "2 conversations, 28 turns" in render(many)


# --------------------------------------------------------------------------------------------------------
# in a real browser
# --------------------------------------------------------------------------------------------------------

PLOTS_JS = """
return Array.from(document.querySelectorAll('[data-plot]')).map(el => {
  const svg = el.querySelector('svg');
  const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
  const texts = svg ? Array.from(svg.querySelectorAll('text')).map(t => {
      const b = t.getBBox(); return {text: t.textContent, width: b.width}; }) : [];
  return {key: el.dataset.plot, width: box.width, height: box.height,
          paths: svg ? svg.querySelectorAll('path').length : 0, texts: texts, body: el.textContent};
});
"""


def _artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = Path(os.environ["ADVISOR_ARTIFACTS"]) if os.environ.get("ADVISOR_ARTIFACTS") else \
        tmp_path_factory.mktemp("html-report")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium through chromedriver, both from Debian; selenium-manager never runs (explicit paths)."""
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.is_file()]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("selenium (pip install -e '.[test]')")
    if missing:
        reason = "no headless browser: missing " + ", ".join(missing) + " (apt-get install chromium chromium-driver)"
        if os.environ.get("ADVISOR_BROWSER_REQUIRED"):
            pytest.fail(reason + "; ADVISOR_BROWSER_REQUIRED is set")
        pytest.skip(reason)
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,900", "--hide-scrollbars", "--disable-extensions"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _severe(driver) -> list[str]:
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def _load(driver, path: Path) -> None:
    driver.get_log("browser")  # drop what an earlier page logged
    driver.get(path.as_uri())


def _check_in_browser(driver, page: str, name: str, expected: set[str], folder: Path, snippets: list[str]) -> None:
    path = folder / f"{name}.html"
    path.write_text(page, encoding="utf-8")
    _load(driver, path)
    assert _severe(driver) == []
    assert driver.execute_script("return performance.getEntriesByType('resource').length") == 0  # fetched nothing
    duplicate_ids = "const ids = [...document.querySelectorAll('[id]')].map(e => e.id); return ids.length - new Set(ids).size;"
    assert driver.execute_script(duplicate_ids) == 0  # the SVGs' clip paths and markers resolve to their own figure
    plots = {item["key"]: item for item in driver.execute_script(PLOTS_JS)}
    assert set(plots) == set(ALL_PLOTS)
    for key in expected:
        item = plots[key]
        assert item["width"] > 300 and item["height"] > 150, (key, item["width"], item["height"])
        assert item["paths"] >= 10, key
        title = next((t for t in item["texts"] if t["text"] == ALL_PLOTS[key]), None)
        assert title is not None and title["width"] > 50, f"{key}: title not laid out"
    for key in set(ALL_PLOTS) - expected:
        assert plots[key]["paths"] == 0 and "Not plotted:" in plots[key]["body"], key
    _assert_no_log_text(driver.page_source, snippets)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, height)
    screenshot = folder / f"{name}.png"
    assert driver.save_screenshot(str(screenshot)) and screenshot.stat().st_size > 20_000
    driver.set_window_size(1280, 900)
    from selenium.webdriver.common.print_page_options import PrintOptions

    pdf = base64.b64decode(driver.print_page(PrintOptions()))  # the print CSS, as "Save as PDF" applies it
    assert pdf.startswith(b"%PDF") and len(re.findall(rb"/Type\s*/Page[^s]", pdf)) >= 3
    (folder / f"{name}.pdf").write_bytes(pdf)
    print(f"HTML report, screenshot and print: {path} {screenshot} {folder / (name + '.pdf')}")


def test_console_errors_are_seen(browser, tmp_path: Path) -> None:
    """The console check can fail: a page with a missing image logs a SEVERE entry."""
    broken = tmp_path / "broken.html"
    broken.write_text('<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head>'
                      '<body><img src="missing.png" alt=""></body></html>')
    _load(browser, broken)
    assert any("missing.png" in message for message in _severe(browser))


def test_fixture_report_in_browser(browser, code_editing: tuple[Report, str],
                                   tmp_path_factory: pytest.TempPathFactory) -> None:
    _check_in_browser(browser, code_editing[1], "code_editing", set(ALL_PLOTS), _artifacts(tmp_path_factory),
                      _text_snippets(FIXTURES / "code_editing.jsonl"))


@pytest.mark.real_data
def test_real_agent_trajectory_report_in_browser(browser, real_file, tmp_path_factory: pytest.TempPathFactory) -> None:
    """A real SWE-agent trajectory: text, no timestamps, so the arrival plot gives its reason instead."""
    path = real_file("swe_agent_marshmallow_1867.traj")
    report, page = _page(path)
    assert "arrival rate and burstiness" in {item.analysis for item in report.disabled_analyses}
    _check_in_browser(browser, page, "swe_agent", set(ALL_PLOTS) - {"arrivals"}, _artifacts(tmp_path_factory),
                      _text_snippets(path))


def test_cli_writes_the_html_report_and_show_rewrites_it_identically(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from advisor.cli import cli

    saved, first, again = tmp_path / "report.json", tmp_path / "run.html", tmp_path / "show.html"
    runner = CliRunner()
    result = runner.invoke(cli, [str(FIXTURES / "mooncake_trace.jsonl"), "-o", str(saved), "--html", str(first)],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    page = first.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and 'data-plot="apc"' in page and "Pre-deployment checklist" in page
    result = runner.invoke(cli, ["show", str(saved), "--html", str(again)], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert again.read_bytes() == first.read_bytes()  # the page is a rendering of the saved document alone
