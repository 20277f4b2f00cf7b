"""Click parameter types shared by the commands."""
from __future__ import annotations

import json
import math
from typing import Any

import click

from advisor import limits
from advisor.errors import ConfigError


class FiniteFloatRange(click.FloatRange):
    """A FloatRange that also refuses nan (click's range checks let it through: every comparison is false)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


def speculative_config(_ctx: click.Context, _param: click.Parameter, value: str | None) -> dict | None:
    """A --speculative-config value (profile and verify): one JSON object, as `vllm serve` takes it, of at most
    advise's size limit, its numeric keys within their limits (advisor.limits)."""
    if value is None:
        return None
    if len(value) > limits.MAX_SPECULATIVE_CONFIG_CHARS:
        raise click.BadParameter(f"{len(value):,} characters, over advise's limit of "
                                 f"{limits.MAX_SPECULATIVE_CONFIG_CHARS:,}: a speculative config is a few keys")
    try:
        parsed = json.loads(value)  # json, not orjson: an integer past 64 bits is then refused by its limit
    except (ValueError, RecursionError) as error:
        raise click.BadParameter(f"not JSON ({error}); pass one JSON object, as to vllm serve") from error
    if not isinstance(parsed, dict):
        raise click.BadParameter("expected one JSON object, as vllm serve --speculative-config takes, e.g. "
                                 "'{\"method\": \"ngram\", \"num_speculative_tokens\": 4}'")
    try:
        limits.check_speculative_config(parsed)
    except ConfigError as error:
        raise click.BadParameter(str(error)) from None
    return parsed
