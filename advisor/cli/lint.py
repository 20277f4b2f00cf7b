"""`advise lint FILE|-`: check vllm serve / bench serve commands and --config YAML before running them."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from advisor.errors import EXIT_FINDINGS
from advisor.lint import RULES, lint_file, lint_text, observed_p999_from_report

def _observed_p999(logs: tuple[str, ...], report_path: str | None) -> float | None:
    if report_path:
        from advisor.report import load

        return observed_p999_from_report(load(report_path))
    if logs:
        from advisor.profile import ProfileOptions, build_profile

        profile = build_profile(ProfileOptions(paths=tuple(logs), sweep=False, recommend=False))
        return observed_p999_from_report(profile.report)
    return None


@click.command("lint")
@click.argument("file", type=click.Path(allow_dash=True, dir_okay=False))
@click.option("--logs", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="Request logs: check --max-model-len against their observed p99.9 of prompt + output.")
@click.option("--report", "report_path", type=click.Path(exists=True, dir_okay=False),
              help="A saved `advise LOGS --json` report, instead of --logs.")
@click.option("--json", "as_json", is_flag=True, help="Print findings as JSON.")
def lint_command(file: str, logs: tuple[str, ...], report_path: str | None, as_json: bool) -> None:
    """Check `vllm serve` / `vllm bench serve` command lines and `--config` YAML files.

    Exit 1 when an error is found, 0 otherwise (warnings do not fail).
    """
    observed = _observed_p999(logs, report_path)
    if file == "-":
        findings = lint_text(sys.stdin.read(), "<stdin>", Path.cwd(), observed)
    else:
        findings = lint_file(Path(file), observed)
    if as_json:
        click.echo(json.dumps({"findings": [f.to_dict() for f in findings],
                               "rules": {rule: {"severity": s, "checks": what} for rule, (s, what) in RULES.items()}},
                              indent=2))
    else:
        for finding in findings:
            click.echo(finding.render())
        errors = sum(f.severity == "error" for f in findings)
        click.echo(f"{errors} error(s), {len(findings) - errors} warning(s)", err=True)
    if any(f.severity == "error" for f in findings):
        sys.exit(EXIT_FINDINGS)
