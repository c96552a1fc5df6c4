"""The parameter-server placements as byteps runs them: partitions, priority, credit, servers.

One worker machine is simulated; the other n-1 are identical (same compute, same tensors at the
same times), which is what makes 128 machines cost no more than 2:

* a push of a partition to a CPU server is one flow over the representative worker's egress
  (weight 1) and the server's ingress and summing (weight n: the n workers' copies arrive
  together); the pull is the mirror image.  When the flow ends, all n pushes have arrived.
* the n colocated servers are averaged: a partition on "a colocated server" costs each worker
  machine (n-1)/n of its bytes in each direction for the push (its push leaves unless it is the
  host; the host receives n-1 copies, spread over n machines) and (n-1)/n for the pull, i.e. the
  2(n-1)/n per direction of all-reduce.  This is exact when the colocated partitions are spread
  evenly (the planner keeps every server within one partition of its share), and hides the
  imbalance of a tensor with fewer partitions than servers.  Likewise, above ``aggregate_above``
  (8) CPU servers, the k CPU servers are simulated as one server with k times the NIC and
  summing rate and k times the connections (their partitions are still assigned one by one, and
  reported per server).
* a group of connections with the same links (one worker's to one server) gets a share of a
  bottleneck in proportion to the partitions queued on it (what a FIFO bottleneck queue gives:
  each sender's share of the queue is its share of the rate); within the group the partitions go
  in order, ``connections`` at a time.
* the G GPUs of a machine are reduced into one buffer before the push and the sum is broadcast
  back after the pull, through links of ``intra_rate`` (bytes/s of bus bandwidth) with weight
  (G-1)/G, pipelined with the network per partition.

Scheduling as the pipeline does it: a tensor is cut by ``split_partitions`` (partitioner.cc);
ready partitions wait in a queue ordered by (tensor's forward index, partition); one is sent
while the bytes in flight plus its own stay within the credit (or nothing is in flight); a
partition's bytes count as in flight from its push until its pull is back.  Each push and pull
starts ``latency_s`` after it is issued (one-way latency).  Assignment to servers follows the
shares (``closed_forms.server_shares``) partition by partition in declaration (backward) order.

Per-partition CPU cost ``partition_cost_s`` (c, docs/performance.md's fixed cost per partition):
each process handles its messages on one thread, c per partition message, overlapping the wire.
The worker's dispatcher spends c on each partition before its push leaves; a server spends c on
each worker's push of a partition, and its sum goes back once it has handled all n of them
(a CPU server: n c per partition on its thread, of which only the last push's c shows when the
thread keeps up; the colocated servers, averaged: c per partition on each worker machine).  On
the testbed's 1 Gbit/s links a 256 KiB partition takes 2.2 ms on the wire, so c is hidden
there; it counts where a partition's wire time nears c (small partitions on fast NICs).  Off
(0) unless given: placements.Cluster and ``byteps plan --partition-cost-us`` default to 0
(docs/simulator.md says why).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable

from .closed_forms import assign_partitions, server_shares
from .events import EventLoop
from .links import FluidNetwork
from .profiles import Profile, tensors_backward


def split_partitions(nbytes: int, partition_bytes: int, elem_size: int = 4) -> list[int]:
    """As SplitIntoPartitions: ceil(M/P) equal partitions in whole elements, the last the rest."""
    if nbytes <= 0:
        return [0]
    step = max(elem_size, partition_bytes // elem_size * elem_size)
    count = -(-nbytes // step)
    per = -(-(nbytes // elem_size) // count)
    out, offset = [], 0
    while len(out) < count and offset < nbytes:
        length = min(per * elem_size, nbytes - offset)
        out.append(length)
        offset += length
    return out


@dataclass
class PSConfig:
    n: int                        # worker machines
    k: int                        # CPU-only server machines
    colocated: bool               # a server on every worker machine too
    worker_rate: float            # NIC bytes/s per direction, worker machines
    cpu_rate: float               # NIC bytes/s per direction, CPU machines
    partition_bytes: int = 4_096_000
    credit_bytes: float = float("inf")
    gpus: int = 1
    intra_rate: float = 150e9     # bytes/s, NVLink-class local reduce
    sum_rate: float = float("inf")  # bytes/s each server sums
    latency_s: float = 0.0        # one-way
    split: str = "optimal"        # "optimal" (mixed split) or "equal"
    connections: int = 1          # FIFO connections per (worker, server) pair
    priority: bool = True         # False: FIFO (every tensor the same priority, ready order)
    aggregate_above: int = 8      # more CPU servers than this: simulated as one k-fold server
    partition_cost_s: float = 0.0  # CPU time per partition message per process (c, see above)

    def check(self) -> None:
        if self.n < 1:
            raise ValueError(f"PS placement: {self.n} worker machines (at least 1)")
        if self.k < 0 or (self.k == 0 and not self.colocated):
            raise ValueError(f"PS placement: no servers (k={self.k} CPU machines, colocated={self.colocated})")
        if not (self.worker_rate > 0 and self.cpu_rate > 0):
            raise ValueError(f"PS placement: NIC rates must be positive (worker {self.worker_rate}, CPU {self.cpu_rate})")
        if self.partition_bytes < 4:
            raise ValueError(f"PS placement: partition_bytes {self.partition_bytes} (at least 4)")
        if not self.partition_cost_s >= 0:
            raise ValueError(f"PS placement: partition_cost_s {self.partition_cost_s} (0 or more seconds)")

    def shares(self) -> list[float]:
        """Per server: k CPU servers first, then the n colocated ones."""
        flags = [False] * self.k + ([True] * self.n if self.colocated else [])
        if self.split == "equal":
            return [1.0 / len(flags)] * len(flags)
        return server_shares(self.n, flags, self.cpu_rate, self.worker_rate)


class PSBackend:
    def __init__(self, cfg: PSConfig):
        cfg.check()
        self.cfg = cfg
        self.shares = cfg.shares()
        self.server_bytes = [0] * len(self.shares)

    def network(self) -> FluidNetwork:
        c = self.cfg
        caps = {("w", "out"): c.worker_rate, ("w", "in"): c.worker_rate,
                ("w", "reduce"): c.intra_rate, ("w", "bcast"): c.intra_rate, ("w", "sum"): c.sum_rate}
        self.aggregate = c.k > c.aggregate_above
        for s in range(1 if self.aggregate else c.k):
            m = c.k if self.aggregate else 1
            caps.update({("c", s, "in"): m * c.cpu_rate, ("c", s, "out"): m * c.cpu_rate, ("c", s, "sum"): m * c.sum_rate})
        caps = {l: v for l, v in caps.items() if v != float("inf")}
        self.net = FluidNetwork(caps)
        return self.net

    def _links(self, server: int, push: bool) -> list:
        c, n = self.cfg, self.cfg.n
        local = (c.gpus - 1) / c.gpus
        if server < c.k:
            server = 0 if self.aggregate else server
            if push:
                links = [(("w", "out"), 1.0), (("c", server, "in"), n), (("c", server, "sum"), n),
                         (("w", "reduce"), local)]
            else:
                links = [(("c", server, "out"), n), (("w", "in"), 1.0), (("w", "bcast"), local)]
        else:
            share = (n - 1) / n
            links = [(("w", "out"), share), (("w", "in"), share)]
            links += [(("w", "sum"), 1.0), (("w", "reduce"), local)] if push else [(("w", "bcast"), local)]
        return [(l, w) for l, w in links if w > 0 and l in self.net.caps]

    def setup(self, loop: EventLoop, profile: Profile, on_done: Callable[[int, int], None]) -> None:
        self.loop, self.on_done = loop, on_done
        if loop.net is None:
            raise ValueError("PSBackend needs the EventLoop built on its network() (train(..., network=...))")
        # Declaration order = backward order; partitions are assigned once, as the key layout.
        self.parts: dict[int, list[tuple[int, int]]] = {}   # tensor -> [(bytes, server)]
        lengths, owners = [], []
        for _, t, nbytes in tensors_backward(profile):
            for length in split_partitions(nbytes, self.cfg.partition_bytes):
                lengths.append(length)
                owners.append(t)
        servers = assign_partitions(lengths, self.shares)
        for t, length, s in zip(owners, lengths, servers):
            self.parts.setdefault(t, []).append((length, s))
            self.server_bytes[s] += length
        self.queue: list = []
        self.in_flight = 0.0
        self.left: dict = {}
        self.order = 0
        self.busy_until: dict = {}   # a thread (the worker's dispatcher, a server) -> when it is free

    def submit(self, iteration: int, tensor: int, nbytes: int) -> None:
        parts = self.parts[tensor]
        self.left[(iteration, tensor)] = len(parts)
        self.order += 1
        rank = tensor if self.cfg.priority else self.order
        for j, (length, server) in enumerate(parts):
            heapq.heappush(self.queue, (rank, j, iteration, length, server, tensor))
        self._issue()

    def _issue(self) -> None:
        credit = self.cfg.credit_bytes
        while self.queue:
            length = self.queue[0][3]
            if self.in_flight > 0 and self.in_flight + length > credit:
                return
            _, j, it, length, server, tensor = heapq.heappop(self.queue)
            self.in_flight += length
            ready = self._handle("dispatcher", self.cfg.partition_cost_s, self.cfg.partition_cost_s)
            self._start(server, True, length, lambda it=it, t=tensor, s=server, b=length: self._pushed(it, t, s, b),
                        ready - self.loop.now)

    def _handle(self, thread, latency: float, work: float) -> float:
        """When *thread* is done with a partition that reached it now: *latency* after now when it
        keeps up, else *work* after it is free (partitions queue on one thread)."""
        if latency <= 0 and work <= 0:
            return self.loop.now
        done = max(self.loop.now + latency, self.busy_until.get(thread, 0.0) + work)
        self.busy_until[thread] = done
        return done

    def _server_ready(self, server: int) -> float:
        c, n = self.cfg.partition_cost_s, self.cfg.n
        if server >= self.cfg.k:  # a colocated server, averaged over the n worker machines
            return self._handle("colocated", c, c)
        if self.aggregate:        # k threads simulated as one
            return self._handle(("cpu", 0), c, n * c / self.cfg.k)
        return self._handle(("cpu", server), c, n * c)

    def _start(self, server: int, push: bool, length: int, then: Callable[[], None], delay: float = 0.0) -> None:
        cpu = server < self.cfg.k
        key = ("push" if push else "pull", (0 if self.aggregate else server) if cpu else "colo")
        links = self._links(server, push)
        # A worker's connections to one CPU server (all k when aggregated), or to the n-1 other
        # colocated servers.
        per = (self.cfg.k if self.aggregate else 1) if cpu else max(self.cfg.n - 1, 1)
        slots = self.cfg.connections * per
        self.loop.at(delay + self.cfg.latency_s, lambda: self.net.add(key, links, length, then, slots))

    def _pushed(self, it: int, tensor: int, server: int, length: int) -> None:
        ready = self._server_ready(server)
        self._start(server, False, length, lambda: self._pulled(it, tensor, length), ready - self.loop.now)

    def _pulled(self, it: int, tensor: int, length: int) -> None:
        self.in_flight -= length
        self.left[(it, tensor)] -= 1
        if self.left[(it, tensor)] == 0:
            del self.left[(it, tensor)]
            self.on_done(it, tensor)
        self._issue()
