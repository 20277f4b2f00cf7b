"""Compact state for streaming a log of any size into the measurements, in fixed or per-request-compact memory.

The profile reads requests one batch at a time; what it keeps of each request must not be Python objects
(a few hundred bytes each, and the log has millions). These containers hold it as packed numpy arrays:
- `Column`: one number per request (lengths, times, shares): 8 bytes a request;
- `ChainStore`: every request's KV block-hash chain in one packed array, within a block budget: past it, a
  seeded sample of conversations is kept (threshold sampling on a hash of the conversation id, so a
  conversation is kept or dropped whole; the kept set depends only on the set of chains offered, not on
  their order or on batch or shard boundaries, so two stores merge into the one a single pass gives);
- `ReplaySample`: token ids of requests for the replays within a token budget: past it, a seeded sample of
  requests by the same order-free threshold rule;
- `RowSample`: the per-request numbers (lengths, times, shares) within a row budget: past it, a seeded
  uniform sample of requests by the same rule;
- `ContextOutputs`: the earlier outputs of each live conversation (for the overlap's context), an LRU of
  conversations bounded in tokens;
- `SamplingCounts`: sampling settings as exact counts of their distinct values.
"""
from __future__ import annotations

import hashlib
import zlib
from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence

import numpy as np

from advisor.measure.prefix import PrefixBlocks
from advisor.record import SamplingParams

_PRIORITY_SPACE = 1 << 32
# A sampled store keeps at most this share of its budget; between compactions it fills up to the whole budget.
SAMPLE_SHARE = (3, 4)



class Column:
    """A growable 1-D array (amortized doubling); `values` is a view of what was appended."""

    def __init__(self, dtype: type | np.dtype = np.float64, capacity: int = 4096):
        self._data = np.empty(capacity, dtype=np.dtype(dtype))
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

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_data": self.values.copy()}  # what was appended, not the spare capacity

    def keep(self, mask: np.ndarray) -> None:
        """Drops the entries where `mask` is False (compaction)."""
        kept = self.values[mask]
        self._data[: kept.size] = kept
        self.size = kept.size


def conversation_priority(key: str, seed: int) -> int:
    """A deterministic 32-bit priority for threshold sampling (same key and seed, same priority)."""
    return zlib.crc32(key.encode("utf-8", "surrogatepass"), seed & 0xFFFFFFFF)


def priority_threshold(priorities: np.ndarray, weights: np.ndarray, cut: int) -> int:
    """The threshold of a weighted bottom-k sample: the smallest priority p whose items, with every lower
    one, weigh more than `cut` (_PRIORITY_SPACE when all of them fit). Items with priority < threshold are
    kept: the lowest priorities that fit, whole priorities only (a conversation shares its priority).

    A function of the multiset of (priority, weight) alone: a store that keeps every item below the
    threshold of what it has seen so far never drops an item of the final sample, and the union of such
    stores gives the threshold of the whole (`merge_threshold`)."""
    order = np.argsort(priorities, kind="stable")
    cumulative = np.cumsum(weights[order])
    over = int(np.searchsorted(cumulative, cut, side="right"))
    return int(priorities[order[over]]) if over < order.size else _PRIORITY_SPACE


def merge_threshold(thresholds: list[int], priorities: np.ndarray, weights: np.ndarray, cut: int) -> int:
    """The threshold of the union of stores, from their own thresholds and the items they kept.

    Every item below the whole's threshold T is in some store (each store's threshold is >= T), so the
    union's own threshold is T unless a store reached T itself and dropped the items at T: the minimum of
    the two is T either way."""
    return min([*thresholds, priority_threshold(priorities, weights, cut)])


class _PrioritySample:
    """What the chain store and the replay sample share: items with a priority and a weight (blocks, tokens),
    of which those below `priority_threshold` of everything offered are kept, with a cut of SAMPLE_SHARE of
    `budget`. When the stored weight passes the budget the sample drops what is at or above the threshold of
    what it has seen (compaction); reads settle the rest. Subclasses hold the payload and drop it in `_keep`.
    """

    def __init__(self, budget: int, seed: int, carried: np.dtype | None = None):
        self.budget = budget
        self.cut = budget * SAMPLE_SHARE[0] // SAMPLE_SHARE[1]
        self.seed = seed
        self._threshold = _PRIORITY_SPACE
        self._settled = True
        self._rows = Column(np.int64)
        self.priorities = Column(np.int64)
        self.weights = Column(np.int64)
        self.weight = 0  # of the stored items
        # Values of each kept item that the analyses read (its time, output length, replica, ...), one record
        # of the structured dtype `carried` an item: carried here, not looked up in columns of the whole log,
        # so those may be sampled on their own. One record a request, not a column a value: one append a batch.
        self._carried = Column(carried) if carried is not None else None

    def _kept(self, priorities: Sequence[int]) -> list[int]:
        """Which of a batch's offered items (their priorities) to store: those below the threshold."""
        threshold = self._threshold
        return [k for k, priority in enumerate(priorities) if priority < threshold]

    def _stored(self, rows: Sequence[int] | np.ndarray, priorities: Sequence[int] | np.ndarray,
                weights: Sequence[int] | np.ndarray, values: np.ndarray | None = None) -> None:
        """Records the items just stored (a batch's), with their carried `values` (a record each); compacts
        when the budget is passed. The threshold was not lowered within the batch: that stores a few more
        items, never other ones (see `priority_threshold`), and the batch's items go in as arrays."""
        self._rows.extend(rows)
        self.priorities.extend(priorities)
        self.weights.extend(weights)
        self.weight += int(np.sum(weights))
        if self._carried is not None:
            self._carried.extend(values)
        self._settled = False
        if self.weight > self.budget:
            self._settle()

    def _absorb_items(self, other: _PrioritySample, row_offset: int) -> list[int]:
        """Appends `other`'s rows (shifted), priorities and weights; returns both settled thresholds."""
        if (other.budget, other.seed) != (self.budget, self.seed):
            raise ValueError("samples of different budgets or seeds do not merge")
        thresholds = [self.threshold, other.threshold]  # each settled on its own items first
        self._rows.extend(other._rows.values + row_offset)
        self.priorities.extend(other.priorities.values)
        self.weights.extend(other.weights.values)
        self.weight += other.weight
        if self._carried is not None:
            self._carried.extend(other._carried.values)
        return thresholds

    def _merged(self, thresholds: list[int]) -> None:
        self._threshold = merge_threshold(thresholds, self.priorities.values, self.weights.values, self.cut)
        self._compact()

    def _settle(self) -> None:
        """Lowers the threshold to that of the items seen (see `priority_threshold`) and compacts."""
        self._threshold = min(self._threshold,
                              priority_threshold(self.priorities.values, self.weights.values, self.cut))
        self._compact()

    def _compact(self) -> None:
        keep = self.priorities.values < self._threshold
        if not keep.all():
            self._keep(keep)
            for column in (self._rows, self.priorities, self.weights, self._carried):
                if column is not None:
                    column.keep(keep)
            self.weight = int(self.weights.values.sum())
        self._settled = True

    def _keep(self, keep: np.ndarray) -> None:
        raise NotImplementedError

    def carried(self, name: str) -> np.ndarray:
        """The carried values `name` of the kept items, in row order: a view of the records' field (strided,
        not copied: the analyses read them; rows of its width for a subarray field)."""
        self._settled_rows()
        return self._carried.values[name]

    def overwrite(self, rows: np.ndarray, name: str, values: np.ndarray) -> None:
        """Sets the carried values `name` of those of `rows` (ascending) still stored to `values` (one entry
        or row each), without settling: a settle sorts every stored priority, which per call would cost the
        main process of a worker run O(rows) for every chunk it recounts."""
        stored = self._rows.values  # ascending: stored in row order, compaction keeps it
        if not stored.size or not rows.size:
            return
        places = np.minimum(np.searchsorted(stored, rows), stored.size - 1)
        found = stored[places] == rows
        self._carried.values[name][places[found]] = values[found]

    def relabel(self, name: str, mapping: np.ndarray) -> None:
        """Replaces each carried value v of `name` by mapping[v] (replica labels renumbered on a merge)."""
        if self._carried is not None and self._carried.size:
            records = self._carried.values.copy()  # a shard's arrays come back from Ray read-only
            records[name] = mapping[records[name]]
            self._carried = Column(records.dtype)
            self._carried.extend(records)

    @property
    def threshold(self) -> int:
        if not self._settled:
            self._settle()
        return self._threshold

    @property
    def bound(self) -> int:
        """No item of this priority or above will ever be stored (the threshold only falls): whoever prepares
        the items (a worker, ahead of the collection) may skip those."""
        return self._threshold

    @property
    def sampled(self) -> bool:
        return self.threshold < _PRIORITY_SPACE

    def _settled_rows(self) -> np.ndarray:
        if not self._settled:
            self._settle()
        return self._rows.values


class ChainStore(_PrioritySample):
    """Block-hash chains of the requests, packed, holding at most `block_budget` blocks (see _PrioritySample).

    Rows are request indices (file order). The priority is the conversation's, so a conversation is kept
    or dropped whole. Memory stays within the budget whatever the log's size. `kept_share` is the threshold
    as a share of conversations (1.0: all kept).
    """

    def __init__(self, block_budget: int, seed: int, carried: np.dtype | None = None):
        super().__init__(block_budget, seed, carried)
        self.blocks = Column(np.uint64)
        self.prompt_blocks = Column(np.int64)
        self.prompt_tokens = Column(np.int64)
        self.offered = 0  # requests with a chain, kept or not
        self.block_sizes: set[int] = set()

    lengths = property(lambda self: self.weights)  # blocks of each kept chain

    def priority(self, key: str) -> int:
        """The sample priority of the conversation (or request) `key`."""
        return conversation_priority(key, self.seed)

    def add(self, row: int, priority: int, chain: PrefixBlocks | None, block_size: int,
            values: np.ndarray | None = None) -> None:
        """Offers the chain of request `row`, of sample priority `priority` (`self.priority(key)`), with its
        carried record (an array of one); `chain` may be None only when the priority is at or above `bound`
        (see _PrioritySample)."""
        self.add_many([row], [priority], [chain], 1, (block_size,), values)

    def add_many(self, rows: list[int], priorities: list[int], chains: Sequence[PrefixBlocks | None], offered: int,
                 block_sizes: Iterable[int], values: np.ndarray | None = None) -> None:
        """Offers `offered` chains at once (a batch's, of `block_sizes`), of which only these (request rows in
        order, priorities, chains, carried values) may be kept: the others' priorities are at or above
        `bound`. A chain may be None where its priority is too."""
        chosen = [k for k, chain in enumerate(chains) if chain is not None]
        kept = [chains[k] for k in chosen]
        assert all(priorities[k] >= self.bound for k, chain in enumerate(chains) if chain is None), \
            "a chain the sample keeps"
        self.add_packed(np.array([rows[k] for k in chosen], dtype=np.int64),
                        np.array([priorities[k] for k in chosen], dtype=np.int64),
                        np.concatenate([chain.chain for chain in kept] or [np.zeros(0, dtype=np.uint64)]),
                        np.cumsum([0] + [chain.chain.size for chain in kept]),
                        np.array([chain.prompt_tokens for chain in kept], dtype=np.int64),
                        np.array([chain.prompt_blocks for chain in kept], dtype=np.int64), offered, block_sizes,
                        None if values is None else values[chosen])

    def add_packed(self, rows: np.ndarray, priorities: np.ndarray, blocks: np.ndarray, offsets: np.ndarray,
                   prompt_tokens: np.ndarray, prompt_blocks: np.ndarray, offered: int,
                   block_sizes: Iterable[int], values: np.ndarray | None = None) -> None:
        """`add_many` with the chains packed as the workers send them: chain k is
        `blocks[offsets[k]:offsets[k + 1]]`, with `prompt_tokens[k]` and `prompt_blocks[k]` (PrefixBlocks'
        fields) and the carried record `values[k]`. No object per chain: building one per offered chain was
        0.17 s of the main process's 0.37 s collection of the 320 MB log's chains on 3 workers."""
        self.offered += offered
        self.block_sizes.update(block_sizes)
        keep = priorities < self._threshold
        if not keep.any():
            return
        lengths = np.diff(offsets)
        self.blocks.extend(blocks[offsets[0]:offsets[-1]] if keep.all() else blocks[np.repeat(keep, lengths)])
        self.prompt_blocks.extend(prompt_blocks[keep])
        self.prompt_tokens.extend(prompt_tokens[keep])
        self._stored(rows[keep], priorities[keep], lengths[keep], None if values is None else values[keep])

    def absorb(self, other: ChainStore, row_offset: int) -> None:
        """Appends the chains of `other`, whose rows follow this store's (shifted by `row_offset`): the result
        is the store one pass over both gives."""
        thresholds = self._absorb_items(other, row_offset)
        self.blocks.extend(other.blocks.values)
        self.prompt_blocks.extend(other.prompt_blocks.values)
        self.prompt_tokens.extend(other.prompt_tokens.values)
        self.offered += other.offered
        self.block_sizes |= other.block_sizes
        self._merged(thresholds)

    def _keep(self, keep: np.ndarray) -> None:
        self.blocks.keep(np.repeat(keep, self.weights.values))
        self.prompt_blocks.keep(keep)
        self.prompt_tokens.keep(keep)

    @property
    def rows(self) -> Column:
        """The request row of each kept chain."""
        self._settled_rows()
        return self._rows

    @property
    def kept_share(self) -> float:
        return self.threshold / _PRIORITY_SPACE

    def kept_chains(self) -> tuple[np.ndarray, list[PrefixBlocks]]:
        """The request row of each kept chain, and the chains (views into the store, not copies), in the
        store's order: nothing per request of the whole log."""
        kept_rows = self._settled_rows()
        blocks = self.blocks.values
        starts = np.concatenate(([0], np.cumsum(self.weights.values)[:-1])).astype(np.int64)
        chains = [PrefixBlocks(prompt_tokens, prompt_blocks, blocks[start : start + length])
                  for start, length, prompt_blocks, prompt_tokens in zip(
                      starts.tolist(), self.weights.values.tolist(),
                      self.prompt_blocks.values.tolist(), self.prompt_tokens.values.tolist())]
        return kept_rows.copy(), chains


def request_priority(key: str, seed: int) -> int:
    """A deterministic 32-bit priority of one request for the replay sample (a keyed hash, not crc32: the
    request keys share long prefixes, and crc32's linearity would tie the kept set to the key lengths)."""
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=4,
                             key=(seed & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little"))
    return int.from_bytes(digest.digest(), "little")


class ReplaySample(_PrioritySample):
    """(prompt ids, output ids) of the requests the replays read, holding at most `token_budget` tokens.

    Past the budget, the requests of lowest priority (`request_priority` of the request's key) that fit in
    SAMPLE_SHARE of it (see _PrioritySample): a uniform sample of requests, the same whatever the order or
    sharding of the log. `seen` counts every request offered.
    """

    def __init__(self, token_budget: int, seed: int, carried: np.dtype | None = None):
        super().__init__(token_budget, seed, carried)
        self._inputs: list[tuple[np.ndarray, np.ndarray]] = []
        self.seen = 0

    def priority(self, key: str) -> int:
        """The sample priority of the request `key` (its source)."""
        return request_priority(key, self.seed)

    def add(self, row: int, priority: int, prompt_ids: np.ndarray, output_ids: np.ndarray,
            values: np.ndarray | None = None) -> None:
        """Offers request `row`'s ids, of sample priority `priority` (`self.priority(key)`), with its carried
        record (an array of one)."""
        self.add_many([row], [priority], [(prompt_ids, output_ids)], 1, values)

    def add_many(self, rows: list[int], priorities: list[int], inputs: list[tuple[np.ndarray, np.ndarray]],
                 offered: int, values: np.ndarray | None = None) -> None:
        """Offers `offered` requests at once (a batch's), of which only these (rows in order, priorities,
        (prompt ids, output ids), carried values) may be kept: the others' priorities are at or above
        `bound`."""
        self.seen += offered
        keep = self._kept(priorities)
        if not keep:
            return
        # Copies: the ids may be views of a whole batch's, which the sample must not keep alive.
        kept = [(inputs[k][0].copy(), inputs[k][1].copy()) for k in keep]
        self._inputs.extend(kept)
        self._stored([rows[k] for k in keep], [priorities[k] for k in keep],
                     [prompt.size + output.size for prompt, output in kept],
                     None if values is None else values[keep])

    def absorb(self, other: ReplaySample, row_offset: int) -> None:
        """Appends the requests of `other`, whose rows follow this sample's: the sample one pass gives."""
        thresholds = self._absorb_items(other, row_offset)
        self._inputs.extend(other._inputs)
        self.seen += other.seen
        self._merged(thresholds)

    def _keep(self, keep: np.ndarray) -> None:
        self._inputs = [pair for pair, kept in zip(self._inputs, keep.tolist()) if kept]

    tokens = property(lambda self: self.weight)

    @property
    def inputs(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The kept (prompt ids, output ids), in row order."""
        self._settled_rows()
        return self._inputs

    @property
    def rows(self) -> np.ndarray:
        """The request row of each kept input."""
        return self._settled_rows()


class RowSample(_PrioritySample):
    """Per-request values (records of the structured dtype `carried`: lengths, times, shares) of every
    request within `budget` rows; past it, the requests of lowest priority (`request_priority`, as the
    replay sample's) that fit in SAMPLE_SHARE of it: a uniform sample of requests, the same whatever the
    order or sharding of the log, so that what the profile keeps per request stays bounded whatever the
    log's size. `offered` counts every request offered.
    """

    def __init__(self, budget: int, seed: int, carried: np.dtype):
        super().__init__(budget, seed, carried)
        self.offered = 0

    def add(self, rows: np.ndarray, priorities: np.ndarray, values: np.ndarray) -> None:
        """Offers the requests `rows` (in order) with their priorities and values (a record each)."""
        self.offered += rows.size
        keep = priorities < self._threshold
        if not keep.all():
            rows, priorities, values = rows[keep], priorities[keep], values[keep]
        if rows.size:
            self._stored(rows, priorities, np.ones(rows.size, dtype=np.int64), values)

    def absorb(self, other: RowSample, row_offset: int) -> None:
        """Appends the requests of `other`, whose rows follow this sample's: the sample one pass gives."""
        thresholds = self._absorb_items(other, row_offset)
        self.offered += other.offered
        self._merged(thresholds)

    def _keep(self, keep: np.ndarray) -> None:
        pass  # the values are all carried records

    @property
    def rows(self) -> np.ndarray:
        """The request row of each kept request."""
        return self._settled_rows()


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
        self._held: dict[str, int] = {}  # tokens per conversation: what its eviction frees, without a sum

    def push(self, conversation: str, output_ids: np.ndarray) -> list[np.ndarray]:
        """Appends the conversation's next output and returns the kept ones before it (its context); the
        conversation becomes the most recent. One call a request: this runs for every request of the log."""
        outputs = self._outputs.get(conversation)
        size = output_ids.size
        if outputs is None:
            earlier: list[np.ndarray] = []
            self._outputs[conversation] = [output_ids]  # a new key is the most recent
            self._held[conversation] = size
        else:
            earlier = outputs.copy()
            outputs.append(output_ids)
            self._outputs.move_to_end(conversation)
            self._held[conversation] += size
        self.tokens += size
        if self.tokens > self.token_budget:
            self._evict()
        return earlier

    def push_run(self, conversations: Sequence[str | None], ids: np.ndarray, starts: Sequence[int],
                 lengths: Sequence[int]) -> list[tuple[int, list[np.ndarray]]]:
        """`push` for each request k of a run, in order: the copy of ids[starts[k]:starts[k] + lengths[k]]
        to conversation k (None: none, skipped). Returns (k, its context) for each request whose context is
        not its conversation's earlier outputs within the run: the conversation began before the run, or the
        LRU dropped it during the run. The main process of a worker run pushes every request of the log
        through here (one call a chunk), and needs only those: the loop is `push`'s with its lookups bound
        once (it is a large part of the main process's work per chunk)."""
        outputs_of, held = self._outputs, self._held
        get, latest = outputs_of.get, outputs_of.move_to_end
        in_run: dict[str, int] = {}
        seen_in_run = in_run.get
        differ: list[tuple[int, list[np.ndarray]]] = []
        budget = self.token_budget
        for k, (conversation, start, size) in enumerate(zip(conversations, starts, lengths)):
            if conversation is None:
                continue
            output = ids[start:start + size].copy()
            seen = seen_in_run(conversation, 0)
            in_run[conversation] = seen + 1
            outputs = get(conversation)
            if outputs is None:
                outputs_of[conversation] = [output]
                held[conversation] = size
                if seen:
                    differ.append((k, []))
            else:
                if len(outputs) != seen:
                    differ.append((k, outputs.copy()))
                outputs.append(output)
                latest(conversation)
                held[conversation] += size
            self.tokens += size
            if self.tokens > budget:
                self._evict()
        return differ

    def _evict(self) -> None:
        """Drops the least recent conversations (never the last one left) until the budget holds."""
        outputs_of, held = self._outputs, self._held
        while self.tokens > self.token_budget and len(outputs_of) > 1:
            conversation, _ = outputs_of.popitem(last=False)
            self.tokens -= held.pop(conversation)
            self.evicted += 1


class SamplingCounts:
    """Exact counts of the sampling settings that the summary reads (temperature, top_k, top_p present)."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[float | None, int | None, bool]] = Counter()

    @classmethod
    def of(cls, params: Iterable[SamplingParams]) -> SamplingCounts:
        """The counts of these settings (a batch's, counted where it is measured)."""
        counts = cls()
        counts.counts.update((p.temperature, p.top_k, p.top_p is not None) for p in params)
        return counts

    def absorb(self, other: SamplingCounts) -> None:
        self.counts.update(other.counts)
