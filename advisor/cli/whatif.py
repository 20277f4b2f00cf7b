"""`advise whatif`: predicted TPOT, step time and throughput with and without speculation per concurrency."""
from __future__ import annotations

import json

import click

from advisor import limits
from advisor.cli.options import FiniteFloatRange
from advisor.engine.whatif import whatif
from advisor.errors import ConfigError


def _concurrency(_ctx: click.Context, _param: click.Parameter, value: str) -> list[int]:
    parts = [part for part in value.split(",") if part.strip()]
    if len(parts) > limits.MAX_CONCURRENCY_LEVELS:
        raise click.BadParameter(f"at most {limits.MAX_CONCURRENCY_LEVELS} levels, got {len(parts)}")
    try:
        levels = [int(part) for part in parts if len(part.strip()) <= 20]
    except ValueError:
        raise click.BadParameter("expected integers separated by commas, e.g. 1,8,32,128") from None
    if len(levels) != len(parts) or not all(1 <= level <= limits.MAX_CONCURRENCY for level in levels):
        raise click.BadParameter(f"each level must be an integer in [1, {limits.MAX_CONCURRENCY:,}]")
    return levels


@click.command("whatif")
@click.option("--model", required=True, help="Target model: hub id from the built-in table or a local directory.")
@click.option("--gpu", required=True, help="GPU type: A10G, L4, L40S, A100-40GB, A100-80GB, H100, H200, B200, MI300X, CPU.")
@click.option("--k", "k", type=click.IntRange(1, limits.MAX_SPECULATIVE_TOKENS), required=True, help="Draft tokens verified per step (num_speculative_tokens).")
@click.option("--acceptance-length", type=FiniteFloatRange(1.0, limits.MAX_SPECULATIVE_TOKENS + 1), required=True,
              help="Mean tokens emitted per step with speculation, bonus token included (1 .. k+1).")
@click.option("--concurrency", default="1,8,32,128", show_default=True, callback=_concurrency,
              help="Comma-separated concurrency levels (requests in flight).")
@click.option("--input-len", type=click.IntRange(1, limits.MAX_WHATIF_TOKENS), default=512, show_default=True, help="Prompt tokens per request.")
@click.option("--output-len", type=click.IntRange(2, limits.MAX_WHATIF_TOKENS), default=256, show_default=True, help="Output tokens per request.")
@click.option("--tp", type=click.IntRange(1, limits.MAX_TP), default=1, show_default=True, help="Tensor-parallel size.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def whatif_command(model: str, gpu: str, k: int, acceptance_length: float, concurrency: list[int],
                   input_len: int, output_len: int, tp: int, as_json: bool) -> None:
    """Predict, per concurrency, where speculation stops paying on this hardware (no logs needed)."""
    if input_len < 1 or output_len < 2:
        raise ConfigError("--input-len must be >= 1 and --output-len >= 2")
    result = whatif(model, gpu, k, acceptance_length, concurrency, input_len, output_len, tp)
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(f"{result['assumptions']['model']} on {result['assumptions']['gpu']} x{tp}, k={k}, "
               f"AL={acceptance_length}, input {input_len}, output {output_len}")
    click.echo(f"{'conc':>5} {'TPOT base':>10} {'TPOT spec':>10} {'step base':>10} {'step spec':>10} "
               f"{'tok/s base':>11} {'tok/s spec':>11} {'speedup':>8}")
    for row in result["rows"]:
        click.echo(f"{row['concurrency']:>5} {row['baseline_tpot_ms']:>10.2f} {row['speculative_tpot_ms']:>10.2f} "
                   f"{row['baseline_step_ms']:>10.2f} {row['speculative_step_ms']:>10.2f} "
                   f"{row['baseline_output_tps']:>11.0f} {row['speculative_output_tps']:>11.0f} {row['speedup']:>7.2f}x")
    click.echo(f"calibration: {result['assumptions']['calibration']}")
