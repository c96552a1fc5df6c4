"""The flow model: links of fixed capacity shared max-min fairly by groups of identical flows.

A *link* is one direction of a NIC (or a server's summing, or a machine's intra-host reduce):
a capacity in bytes/s.  A *flow* moves bytes over a set of links, using ``weight`` bytes of a link
per byte it moves (a weight other than 1 stands for several identical machines, see ps.py).
Flows with the same set of (link, weight) pairs always get the same max-min rate, so they are kept
as one *group* (a bundle of FIFO connections, see FluidNetwork) and the max-min computation runs
over groups, not flows: O(servers) per event whatever the number of partitions in flight, which
is what lets 128 machines run in seconds.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Hashable, Sequence

Link = Hashable
EPS = 1e-3  # bytes


def max_min_rates(groups: dict[Hashable, tuple[Sequence[tuple[Link, float]], int]],
                  caps: dict[Link, float]) -> dict[Hashable, float]:
    """Max-min fair rate per flow of each group (progressive filling).

    *groups*: key -> (links with weights, number of flows); a flow of rate r uses r * weight of
    each link.  *caps*: link -> capacity.  A group on no capped link gets ``inf``."""
    rates: dict[Hashable, float] = {}
    left = dict(caps)
    active = {g: v for g, v in groups.items() if v[1] > 0}
    while active:
        use: dict[Link, float] = {}
        for links, count in active.values():
            for link, w in links:
                use[link] = use.get(link, 0.0) + w * count
        best_link, best_share = None, float("inf")
        for link, u in use.items():
            if u > 0:
                share = max(left[link], 0.0) / u
                if share < best_share:
                    best_link, best_share = link, share
        if best_link is None:
            for g in active:
                rates[g] = float("inf")
            break
        frozen = [g for g, (links, _) in active.items() if any(l == best_link for l, _ in links)]
        for g in frozen:
            links, count = active.pop(g)
            rates[g] = best_share
            for l, w in links:
                left[l] -= best_share * w * count
    return rates


@dataclass
class _Group:
    """FIFO flows; the first ``slots`` are served processor-sharing on a virtual clock (bytes
    served to each served flow), so a served flow ends when the clock passes its mark."""

    links: tuple[tuple[Link, float], ...]
    slots: int
    rate: float = 0.0             # bytes/s of each served flow
    clock: float = 0.0
    served: list = field(default_factory=list)   # heap of (finish mark, seq, payload)
    waiting: deque = field(default_factory=deque)  # (bytes, seq, payload)

    def count(self) -> int:
        return len(self.served) + len(self.waiting)

    def fill(self) -> None:
        while self.waiting and len(self.served) < self.slots:
            nbytes, seq, payload = self.waiting.popleft()
            heapq.heappush(self.served, (self.clock + nbytes, seq, payload))


class FluidNetwork:
    """Groups of flows over capped links; advance time, collect finished flows.

    A group is a bundle of FIFO connections with the same links (e.g. one worker's connections to
    one server): its first ``slots`` flows move at the group's per-flow max-min rate, the others
    wait their turn.  So partitions sent to one server go one after another, as over a TCP
    connection, and a partition's pull overlaps the next one's push (without FIFO order, flows
    started together would end together and push and pull would never overlap)."""

    def __init__(self, caps: dict[Link, float]):
        for link, c in caps.items():
            if not c > 0:
                raise ValueError(f"link {link!r}: capacity must be positive, got {c}")
        self.caps = dict(caps)
        self.groups: dict[Hashable, _Group] = {}
        self._dirty = True
        self._seq = itertools.count()

    def add(self, key: Hashable, links: Sequence[tuple[Link, float]], nbytes: float, payload: Any,
            slots: int = 1) -> None:
        """Queue a flow of *nbytes* on group *key* (every flow of a key has the same links)."""
        g = self.groups.get(key)
        if g is None:
            for link, _ in links:
                if link not in self.caps:
                    raise KeyError(f"flow group {key!r}: unknown link {link!r}")
            g = self.groups[key] = _Group(tuple(links), max(1, int(slots)))
        g.waiting.append((max(float(nbytes), 0.0), next(self._seq), payload))
        g.fill()
        self._dirty = True

    def active(self) -> int:
        return sum(g.count() for g in self.groups.values())

    def _rerate(self) -> None:
        if not self._dirty:
            return
        # A group's weight is its backlog (every queued flow); its served flows share what it gets.
        live = {k: (g.links, g.count()) for k, g in self.groups.items() if g.served}
        rates = max_min_rates(live, self.caps)
        for k, g in self.groups.items():
            g.rate = rates[k] * g.count() / len(g.served) if g.served else 0.0
        self._dirty = False

    def next_finish(self) -> float:
        """Seconds until the next flow finishes at the current rates (inf if none)."""
        self._rerate()
        best = float("inf")
        for g in self.groups.values():
            if not g.served:
                continue
            left = g.served[0][0] - g.clock
            if left <= EPS or g.rate == float("inf"):
                return 0.0
            if g.rate > 0:
                best = min(best, left / g.rate)
        return best

    def advance(self, dt: float) -> list[Any]:
        """Move time forward by *dt* (no later than next_finish); return the finished payloads."""
        self._rerate()
        done = []
        for g in self.groups.values():
            if not g.served:
                continue
            if g.rate == float("inf"):
                g.clock = max(m for m, _, _ in g.served)
            else:
                g.clock += g.rate * dt
            before = len(done)
            while g.served and g.served[0][0] <= g.clock + EPS:
                done.append(heapq.heappop(g.served)[2])
                g.fill()
            if len(done) != before:
                self._dirty = True
        return done
