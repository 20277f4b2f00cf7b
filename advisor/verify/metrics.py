"""Scrape vLLM's Prometheus /metrics: speculative decoding, prefix cache and token counters.

`vllm bench serve` already reports spec-decode figures, but only for spec decoding and as a /metrics
difference it takes itself; verify scrapes before and after each run to get the prefix cache counters too,
and to check the bench's figures against an independent reading.

prometheus_client's parser strips `_total` from a counter's family name but keeps it on the samples, and
vLLM adds `_created` samples; matching on sample names sidesteps both. Counters with an `engine` (or
`model_name`) label are summed over those labels.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from advisor.errors import VllmError

SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
SPEC_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
CACHE_CONFIG_INFO = "vllm:cache_config_info"

_COUNTERS = {
    SPEC_DRAFTS: "spec_drafts",
    SPEC_DRAFT_TOKENS: "spec_draft_tokens",
    SPEC_ACCEPTED: "spec_accepted_tokens",
    PREFIX_QUERIES: "prefix_cache_queries",
    PREFIX_HITS: "prefix_cache_hits",
    GENERATION_TOKENS: "generation_tokens",
    PROMPT_TOKENS: "prompt_tokens",
}


@dataclass(frozen=True)
class MetricsSnapshot:
    """Counter values at one moment (tokens, or drafts); subtract two snapshots to get one run's share.

    Spec-decode counters are 0 on a server without speculation (vLLM does not export them there).
    `block_size` is the KV block size the server really uses (the CPU backend forces 128).
    """

    spec_drafts: float = 0.0
    spec_draft_tokens: float = 0.0
    spec_accepted_tokens: float = 0.0
    spec_accepted_per_pos: tuple[float, ...] = ()
    prefix_cache_queries: float = 0.0
    prefix_cache_hits: float = 0.0
    generation_tokens: float = 0.0
    prompt_tokens: float = 0.0
    block_size: int | None = None
    has_spec_decode: bool = False

    def _combine(self, other: MetricsSnapshot, sign: float) -> MetricsSnapshot:
        width = max(len(self.spec_accepted_per_pos), len(other.spec_accepted_per_pos))
        mine = self.spec_accepted_per_pos + (0.0,) * (width - len(self.spec_accepted_per_pos))
        theirs = other.spec_accepted_per_pos + (0.0,) * (width - len(other.spec_accepted_per_pos))
        return MetricsSnapshot(
            **{name: getattr(self, name) + sign * getattr(other, name) for name in _COUNTERS.values()},
            spec_accepted_per_pos=tuple(a + sign * b for a, b in zip(mine, theirs)),
            block_size=self.block_size if self.block_size is not None else other.block_size,
            has_spec_decode=self.has_spec_decode or other.has_spec_decode,
        )

    def __sub__(self, before: MetricsSnapshot) -> MetricsSnapshot:
        """The counts between `before` and this snapshot."""
        return self._combine(before, -1.0)

    def __add__(self, other: MetricsSnapshot) -> MetricsSnapshot:
        """Counts of two runs together (an arm over its trials)."""
        return self._combine(other, 1.0)

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / proposed draft tokens (a fraction), conditional on a draft existing."""
        return self.spec_accepted_tokens / self.spec_draft_tokens if self.spec_draft_tokens else None

    @property
    def mean_acceptance_length(self) -> float | None:
        """1 + accepted / drafts: tokens emitted per target step that had a draft."""
        return 1.0 + self.spec_accepted_tokens / self.spec_drafts if self.spec_drafts else None

    @property
    def per_position_acceptance(self) -> tuple[float, ...]:
        return tuple(a / self.spec_drafts for a in self.spec_accepted_per_pos) if self.spec_drafts else ()

    @property
    def prefix_cache_hit_rate(self) -> float | None:
        return self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else None

    def to_dict(self) -> dict[str, object]:
        return {
            **{name: getattr(self, name) for name in _COUNTERS.values()},
            "spec_accepted_per_pos": list(self.spec_accepted_per_pos),
            "block_size": self.block_size,
            "has_spec_decode": self.has_spec_decode,
            "acceptance_rate": self.acceptance_rate,
            "mean_acceptance_length": self.mean_acceptance_length,
            "per_position_acceptance": list(self.per_position_acceptance),
            "prefix_cache_hit_rate": self.prefix_cache_hit_rate,
        }


def parse_metrics(text: str) -> MetricsSnapshot:
    """Parse Prometheus exposition text from vLLM into a snapshot (VllmError if it is not Prometheus text)."""
    from prometheus_client.parser import text_string_to_metric_families

    sums: dict[str, float] = defaultdict(float)
    per_pos: dict[int, float] = defaultdict(float)
    block_size: int | None = None
    seen_spec = False
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in _COUNTERS:
                    sums[_COUNTERS[sample.name]] += sample.value
                    seen_spec |= sample.name.startswith("vllm:spec_decode")
                elif sample.name == SPEC_ACCEPTED_PER_POS:
                    per_pos[int(sample.labels["position"])] += sample.value
                elif sample.name == CACHE_CONFIG_INFO and "block_size" in sample.labels:
                    block_size = int(sample.labels["block_size"])
    except ValueError as exc:
        raise VllmError(f"/metrics: not Prometheus text ({exc})") from exc
    positions = tuple(per_pos[i] for i in range(max(per_pos) + 1)) if per_pos else ()
    return MetricsSnapshot(
        **sums, spec_accepted_per_pos=positions, block_size=block_size, has_spec_decode=seen_spec
    )


def scrape_metrics(base_url: str, timeout: float = 10.0) -> MetricsSnapshot:
    """GET {base_url}/metrics and parse it."""
    from advisor.verify.server import http_get

    status, body = http_get(f"{base_url.rstrip('/')}/metrics", timeout=timeout)
    if status != 200:
        raise VllmError(f"{base_url}/metrics: HTTP status {status or 'no answer'}")
    return parse_metrics(body)
