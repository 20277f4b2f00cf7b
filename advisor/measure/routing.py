"""Which vLLM replica serves each request: the prefix cache and the suffix tree live in one replica.

Every vLLM server (one `vllm serve`, whatever its tensor parallelism) keeps its own KV cache, hence its own
prefix cache, and its own global suffix tree. A deployment of N replicas behind a router therefore hits
only what earlier requests routed to the same replica left behind, and the APC and suffix replays run once
per replica, their counters adding up.

The replica of a request comes from the log when it names one (a `replica` / `instance` field, or one
vLLM server log per replica); otherwise from a routing policy over `--replicas N`, named as the vLLM
Router names its policies (vllm-project/router, `--policy`):
- `round_robin`: the i-th request in arrival order goes to replica i mod N (what a plain load balancer does);
- `consistent_hash`: a conversation always goes to the same replica (session affinity: a hash of the
  conversation id, or of the request itself when it has none). Which replica a given session lands on
  depends on the router's hash ring; any consistent hash spreads sessions alike, so the counters do not.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from advisor.vllm_vocab import ROUTING_POLICIES

UNNAMED = "(no replica field)"  # the replica of a log's requests that name none, when others do


def affinity(key: str) -> int:
    """The 32-bit hash `consistent_hash` routes a conversation by (blake2b: spreads keys that differ only in
    a few digits, such as "#file:line", evenly over every N)."""
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=4).digest()
    return int.from_bytes(digest, "little")


@dataclass(frozen=True)
class ReplicaSplit:
    """The replicas the requests were spread over, and how: the report's `routing` section."""

    replicas: int
    policy: str  # "log" (the log names each request's replica) or one of ROUTING_POLICIES
    source: str  # where the split comes from, in words
    names: tuple[str, ...]  # the log's replica names, or "0".."N-1"
    requests: tuple[int, ...]  # requests per replica

    @property
    def busiest_share(self) -> float:
        """The share of the requests that the busiest replica serves (1 / replicas when even)."""
        total = sum(self.requests)
        return max(self.requests) / total if total else 1.0

    def to_dict(self) -> dict:
        return {"replicas": self.replicas, "policy": self.policy, "source": self.source, "names": list(self.names),
                "requests": list(self.requests), "busiest_share": self.busiest_share}


def assign(labels: np.ndarray, names: tuple[str, ...], affinities: np.ndarray, order: np.ndarray | None,
           replicas: int, policy: str) -> tuple[np.ndarray, ReplicaSplit]:
    """(replica of each request, the split) for requests in file order.

    `labels[i]`: the index in `names` of the replica the log names for request i (-1: none); when any request
    has one, the log decides and `replicas`/`policy` are not used (requests without one form the replica
    UNNAMED). Else `policy` spreads them over `replicas`: round_robin by rank in `order` (arrival order),
    consistent_hash by `affinities` (`affinity` of the conversation key) mod `replicas`. `order` may be None
    where round_robin over more than one replica does not apply (a caller spares a whole log's order).
    """
    count = labels.size
    if replicas < 1:
        raise ValueError(f"replicas must be at least 1, got {replicas}")
    if policy not in ROUTING_POLICIES:
        raise ValueError(f"unknown routing policy {policy!r}: choose from {', '.join(ROUTING_POLICIES)}")
    if count and (labels >= 0).any():
        replica = labels.astype(np.int64)
        shown = list(names)
        if (labels < 0).any():
            replica = np.where(labels < 0, len(names), replica)
            shown.append(UNNAMED)
        counts = np.bincount(replica, minlength=len(shown))
        return replica, ReplicaSplit(len(shown), "log", "the log names each request's replica", tuple(shown),
                                tuple(int(c) for c in counts))
    if replicas == 1:
        # A read-only broadcast of 0: one replica costs no bytes a request.
        return np.broadcast_to(np.int64(0), (count,)), ReplicaSplit(1, policy, "one replica", ("0",), (count,))
    if policy == "round_robin":
        if order is None:
            raise ValueError("round_robin over several replicas needs the arrival order")
        replica = np.empty(count, dtype=np.int64)
        replica[order] = np.arange(count, dtype=np.int64) % replicas
        source = f"--replicas {replicas}, round_robin in arrival order"
    else:
        replica = affinities.astype(np.int64) % replicas
        source = f"--replicas {replicas}, consistent_hash of the conversation (session affinity)"
    counts = np.bincount(replica, minlength=replicas)
    return replica, ReplicaSplit(replicas, policy, source, tuple(str(i) for i in range(replicas)),
                            tuple(int(c) for c in counts))
