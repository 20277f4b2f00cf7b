"""`advise show REPORT.json`: re-render a saved report (terminal, JSON, checklist) without the logs."""
from __future__ import annotations

from pathlib import Path

import click

from advisor.cli.profile import write_outputs
from advisor.errors import InputError


@click.command("show")
@click.argument("report_path", metavar="REPORT", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout (as `advise LOGS --json`).")
@click.option("--checklist", type=click.Path(dir_okay=False, writable=True),
              help="Write the pre-deployment checklist (Markdown) to FILE.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, writable=True),
              help="Write the report as one self-contained HTML page with plots to FILE (docs/html-report.md).")
def show_command(report_path: str, as_json: bool, checklist: str | None, html_path: str | None) -> None:
    """Print a report saved with `advise LOGS -o REPORT` (or `--json > REPORT`) exactly as the run printed it."""
    from advisor.report import loads

    source = "<stdin>" if report_path == "-" else report_path
    try:
        text = click.get_binary_stream("stdin").read() if report_path == "-" else Path(report_path).read_bytes()
    except OSError as error:
        raise InputError(f"{report_path}: cannot read the report ({error.strerror or error})") from error
    write_outputs(loads(text, source), as_json=as_json, out=None, checklist=checklist, html=html_path)
