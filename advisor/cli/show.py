"""`advise show REPORT.json`: re-render a saved report (terminal, JSON, checklist) without the logs."""
from __future__ import annotations


import click

from advisor.cli.profile import OUTPUT_PATH, write_outputs


@click.command("show")
@click.argument("report_path", metavar="REPORT", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout (as `advise LOGS --json`).")
@click.option("--checklist", type=OUTPUT_PATH, help="Write the pre-deployment checklist (Markdown) to FILE (- : stdout).")
@click.option("--html", "html_path", type=OUTPUT_PATH,
              help="Write the report as one self-contained HTML page with plots to FILE (- : stdout; docs/html-report.md).")
def show_command(report_path: str, as_json: bool, checklist: str | None, html_path: str | None) -> None:
    """Print a report saved with `advise LOGS -o REPORT` (or `--json > REPORT`) exactly as the run printed it."""
    from advisor.report import load

    write_outputs(load(report_path), as_json=as_json, out=None, checklist=checklist, html=html_path)
