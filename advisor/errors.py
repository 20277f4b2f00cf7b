"""Error types and the exit codes the CLI maps them to.

Library code raises these; only the CLI turns them into exit codes (one place, documented in the README).
Messages say what was expected, what was found and what to try.
"""
from __future__ import annotations

# Exit codes (documented in README.md, "Exit codes").
EXIT_OK = 0
EXIT_FINDINGS = 1  # lint found an error; verify refuted the candidate
EXIT_USAGE = 2  # bad command-line usage (click's own code)
EXIT_INPUT = 3  # input file missing, unreadable, or nothing usable in it
EXIT_BAD_LINES = 4  # --strict and at least one bad record
EXIT_TOKENIZER = 5  # tokenizer or model config could not be loaded offline
EXIT_VLLM = 6  # a vLLM server or benchmark failed (verify)
EXIT_INTERRUPTED = 130  # Ctrl-C


class AdvisorError(Exception):
    """Base class: an error the user can act on; the message is shown as is."""

    exit_code = EXIT_INPUT


class InputError(AdvisorError):
    """A log file is missing, unreadable, of an unknown format or holds nothing usable."""

    exit_code = EXIT_INPUT


class BadRecordError(AdvisorError):
    """One record (line) of a log is unusable; raised instead of skipping under --strict."""

    exit_code = EXIT_BAD_LINES

    def __init__(self, source: str, line: int, reason: str):
        self.source = source
        self.line = line
        self.reason = reason
        super().__init__(f"{source}:{line}: {reason}")

    def __reduce__(self) -> tuple[type, tuple[str, int, str]]:
        """Pickled by its three fields: a `--workers` process that parses lines raises it in the main one."""
        return type(self), (self.source, self.line, self.reason)


class TokenizerError(AdvisorError):
    """A tokenizer, chat template or model config could not be found or loaded offline."""

    exit_code = EXIT_TOKENIZER


class ConfigError(AdvisorError):
    """An option value or a speculative config is invalid."""

    exit_code = EXIT_USAGE


class VllmError(AdvisorError):
    """A vLLM server failed to start or a benchmark run failed."""

    exit_code = EXIT_VLLM
