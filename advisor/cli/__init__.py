"""The `advise` command: a click group whose default action on file arguments is the profile.

`advise logs.jsonl` is `advise profile logs.jsonl`; subcommands (`show`, `lint`, `whatif`, `verify`) sit beside it.
Command bodies only parse options and call the library; library errors become exit codes here, in one place.
"""
from __future__ import annotations

import os
import sys

# The command's matrix products are small (bootstrap resamples, segmentation): OpenBLAS's pool, a thread per
# core spinning between calls, only took the cores of the worker processes and of the replays' threads (on a
# 16-core host with --workers 16 the main process used 20.5 s of CPU with it, 12.3 s without). Set before
# numpy loads; an explicit setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

MALLOC_ARENAS = 2
M_ARENA_MAX = -8  # glibc's malloc.h


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> None:
    """Caps glibc's malloc arenas for this process and the workers it forks (a no-op elsewhere).

    glibc gives each new thread that allocates an arena of its own, up to 8 per core (8 threads: 9 arenas,
    tests/test_cli_malloc.py), and memory freed in one is not reused by another nor given back: the
    analyses after the stream run on a thread per worker (the ngram replay) beside the prefix, APC and
    segmentation threads, and their numpy temporaries ratcheted the main process's RSS up. On the 1 GB log
    with 16 workers (2-core machine) the peak was 852 MiB with the default and 706-721 MiB with 2 arenas, at
    the same CPU (glibc's
    MALLOC_ARENA_MAX, read only when a process starts, is what this sets from inside it). Called before
    any thread starts: threads that already have an arena keep it."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return
    mallopt(M_ARENA_MAX, arenas)


limit_malloc_arenas()

import importlib  # noqa: E402

import click  # noqa: E402 - after the setting above

from advisor import __version__  # noqa: E402
from advisor.errors import EXIT_INTERRUPTED, AdvisorError  # noqa: E402

# Each subcommand's module, imported only when that command runs (or for --help): `advise logs.jsonl` does
# not load the verify command's HTTP client and server plumbing (22 modules, 0.06-0.07 s of every profile run).
COMMANDS = {
    "profile": "advisor.cli.profile:profile_command",
    "show": "advisor.cli.show:show_command",
    "lint": "advisor.cli.lint:lint_command",
    "whatif": "advisor.cli.whatif:whatif_command",
    "verify": "advisor.cli.verify:verify_command",
}


class _DefaultToProfile(click.Group):
    """A group that routes anything that is not a subcommand to `profile`, and loads its commands lazily."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, name = target.split(":")
        return getattr(importlib.import_module(module), name)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in COMMANDS and args[0] not in ("--help", "-h", "--version"):
            args = ["profile", *args]
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except AdvisorError as error:
            click.secho(f"advise: error: {error}", fg="red", err=True)
            ctx.exit(error.exit_code)
        except KeyboardInterrupt:
            click.echo("advise: interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)


@click.group(cls=_DefaultToProfile, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="advise")
def cli() -> None:
    """Profile vLLM request logs and advise on prefix caching and speculative decoding.

    \b
    advise LOGS...            profile logs (the default command; see `advise profile --help`)
    advise show REPORT        re-render a saved JSON report (terminal, --json, --checklist)
    advise lint FILE          check vllm serve / bench commands and --config YAML
    advise whatif ...         predict TPOT with and without speculation per concurrency
    advise verify LOGS ...    A/B a speculative config against a real vLLM
    """


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="advise", args=sys.argv[1:])
