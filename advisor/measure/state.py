"""Compact state for streaming a log of any size into the measurements, in fixed or per-request-compact memory.

The profile reads requests one batch at a time; what it keeps of each request must not be Python objects
(a few hundred bytes each, and the log has millions). These containers hold it as packed numpy arrays:
- `Column`: one number per request (lengths, times, shares): 8 bytes a request;
- `ChainStore`: every request's KV block-hash chain in one packed array, within a block budget: past it, a
  seeded sample of conversations is kept (threshold sampling on a hash of the conversation id, so a
  conversation is kept or dropped whole and the kept set does not depend on batch boundaries);
- `ContextOutputs`: the earlier outputs of each live conversation (for the overlap's context), an LRU of
  conversations bounded in tokens;
- `SamplingCounts`: sampling settings as exact counts of their distinct values.
"""
from __future__ import annotations

import zlib
from collections import Counter, OrderedDict

import numpy as np

from advisor.measure.prefix import PrefixBlocks
from advisor.record import SamplingParams

_PRIORITY_SPACE = 1 << 32


class Column:
    """A growable 1-D array (amortized doubling); `values` is a view of what was appended."""

    def __init__(self, dtype: type | np.dtype = np.float64, capacity: int = 4096):
        self._data = np.empty(capacity, dtype=dtype)
        self.size = 0

    def extend(self, values: np.ndarray | list) -> None:
        values = np.asarray(values, dtype=self._data.dtype)
        end = self.size + values.size
        if end > self._data.size:
            grown = np.empty(max(end, 2 * self._data.size), dtype=self._data.dtype)
            grown[: self.size] = self._data[: self.size]
            self._data = grown
        self._data[self.size : end] = values
        self.size = end

    @property
    def values(self) -> np.ndarray:
        return self._data[: self.size]

    def keep(self, mask: np.ndarray) -> None:
        """Drops the entries where `mask` is False (compaction)."""
        kept = self.values[mask]
        self._data[: kept.size] = kept
        self.size = kept.size


def conversation_priority(key: str, seed: int) -> int:
    """A deterministic 32-bit priority for threshold sampling (same key and seed, same priority)."""
    return zlib.crc32(key.encode("utf-8", "surrogatepass"), seed & 0xFFFFFFFF)


class ChainStore:
    """Block-hash chains of the requests, packed, holding at most `block_budget` blocks.

    Rows are request indices (file order). A request's chain is kept while its conversation's priority
    is below the threshold; when the kept blocks pass the budget the threshold drops to the priority
    that keeps at most half the budget and the store is compacted, so memory stays within the budget
    whatever the log's size. `kept_share` is the threshold as a share of conversations (1.0: all kept).
    """

    def __init__(self, block_budget: int, seed: int):
        self.block_budget = block_budget
        self.seed = seed
        self.threshold = _PRIORITY_SPACE
        self.blocks = Column(np.uint64)
        self.rows = Column(np.int64)
        self.lengths = Column(np.int64)
        self.prompt_blocks = Column(np.int64)
        self.prompt_tokens = Column(np.int64)
        self.priorities = Column(np.int64)
        self.offered = 0  # requests with a chain, kept or not
        self.block_sizes: set[int] = set()

    def add(self, row: int, key: str, chain: PrefixBlocks, block_size: int) -> None:
        self.offered += 1
        self.block_sizes.add(block_size)
        priority = conversation_priority(key, self.seed)
        if priority >= self.threshold:
            return
        self.blocks.extend(chain.chain)
        self.rows.extend([row])
        self.lengths.extend([chain.chain.size])
        self.prompt_blocks.extend([chain.prompt_blocks])
        self.prompt_tokens.extend([chain.prompt_tokens])
        self.priorities.extend([priority])
        if self.blocks.size > self.block_budget:
            self._shrink()

    def _shrink(self) -> None:
        """Lowers the threshold until the kept chains fill at most half the budget, then compacts."""
        priorities = self.priorities.values
        order = np.argsort(priorities, kind="stable")
        cumulative = np.cumsum(self.lengths.values[order])
        fits = int(np.searchsorted(cumulative, self.block_budget // 2, side="right"))
        # Whole priorities only: every request of a conversation shares its priority.
        self.threshold = int(priorities[order[fits]]) if fits < order.size else self.threshold
        keep = priorities < self.threshold
        keep_blocks = np.repeat(keep, self.lengths.values)
        self.blocks.keep(keep_blocks)
        for column in (self.rows, self.lengths, self.prompt_blocks, self.prompt_tokens, self.priorities):
            column.keep(keep)

    @property
    def sampled(self) -> bool:
        return self.threshold < _PRIORITY_SPACE

    @property
    def kept_share(self) -> float:
        return self.threshold / _PRIORITY_SPACE

    def chains_by_row(self, rows: int) -> list[PrefixBlocks | None]:
        """One entry per request row (None: no chain, or not in the sample); chains are views, not copies."""
        out: list[PrefixBlocks | None] = [None] * rows
        blocks = self.blocks.values
        starts = np.concatenate(([0], np.cumsum(self.lengths.values)[:-1])).astype(np.int64)
        for row, start, length, prompt_blocks, prompt_tokens in zip(
            self.rows.values.tolist(), starts.tolist(), self.lengths.values.tolist(),
            self.prompt_blocks.values.tolist(), self.prompt_tokens.values.tolist(),
        ):
            out[row] = PrefixBlocks(prompt_tokens, prompt_blocks, blocks[start : start + length])
        return out


class ContextOutputs:
    """Earlier outputs per conversation for the overlap's context, an LRU bounded by `token_budget`.

    A conversation that has not been seen for long enough to be evicted starts again with an empty
    context (`evicted` counts them): logs usually keep a conversation's turns close together.
    """

    def __init__(self, token_budget: int):
        self.token_budget = token_budget
        self.tokens = 0
        self.evicted = 0
        self._outputs: OrderedDict[str, list[np.ndarray]] = OrderedDict()

    def earlier(self, conversation: str) -> list[np.ndarray]:
        outputs = self._outputs.get(conversation)
        if outputs is None:
            return []
        self._outputs.move_to_end(conversation)
        return list(outputs)

    def add(self, conversation: str, output_ids: np.ndarray) -> None:
        self._outputs.setdefault(conversation, []).append(output_ids)
        self._outputs.move_to_end(conversation)
        self.tokens += output_ids.size
        while self.tokens > self.token_budget and len(self._outputs) > 1:
            _, dropped = self._outputs.popitem(last=False)
            self.tokens -= sum(array.size for array in dropped)
            self.evicted += 1


class SamplingCounts:
    """Exact counts of the sampling settings that the summary reads (temperature, top_k, top_p present)."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[float | None, int | None, bool]] = Counter()

    def add(self, params: SamplingParams) -> None:
        self.counts[(params.temperature, params.top_k, params.top_p is not None)] += 1
