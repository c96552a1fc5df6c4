"""Ring all-reduce as Horovod with NCCL runs it: tensor fusion, a cycle, one collective at a time.

Gradients that are ready wait for the background loop's next cycle (``cycle_s``, Horovod's 5 ms
HOROVOD_CYCLE_TIME); each cycle fuses the waiting tensors, in the order they became ready, into
buffers of at most ``fusion_bytes`` (64 MiB, HOROVOD_FUSION_THRESHOLD; a larger tensor goes
alone), and the buffers are all-reduced one after another (one NCCL stream).  An all-reduce of b
bytes takes

* hierarchical (reduce on the machine, ring across the n machines, broadcast on the machine;
  NCCL pipelines the stages in chunks, so the slowest stage counts):
  2(n-1) α + b · max(2(n-1)/(n B), 2(G-1)/(G B_intra))
* flat (one ring through all N = nG GPUs, machines contiguous, as NCCL builds it over one NIC:
  each machine's NIC carries the ring's 2(N-1)/N · b each way):
  2(N-1) α + b · 2(N-1)/(N B)

with α the latency of one ring step.  With ``bucket_bytes`` > 0 the grouping is torch DDP's
instead: fixed buckets in backward order, each all-reduced as soon as its last gradient is ready.  Every machine is identical, so one is simulated; the links
are the ring's alone (no other traffic), so no flow sharing is needed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .events import EventLoop
from .profiles import Profile, tensors_backward

MIB = 1 << 20


@dataclass
class RingConfig:
    n: int                      # machines
    rate: float                 # NIC bytes/s per direction
    gpus: int = 1
    intra_rate: float = 150e9   # bytes/s
    fusion_bytes: int = 64 * MIB
    cycle_s: float = 5e-3
    step_latency_s: float = 0.0
    flat: bool = False
    bucket_bytes: int = 0       # > 0: torch DDP's buckets instead of Horovod's cycle (see RingBackend)
    first_bucket_bytes: int = 1 * MIB

    def check(self) -> None:
        if self.n < 1 or self.gpus < 1:
            raise ValueError(f"ring: {self.n} machines of {self.gpus} GPUs (at least 1 each)")
        if not self.rate > 0:
            raise ValueError(f"ring: NIC rate must be positive, got {self.rate}")

    def allreduce_s(self, nbytes: float) -> float:
        n, g = self.n, self.gpus
        if self.flat:
            ranks = n * g
            if ranks <= 1:
                return 0.0
            per_byte = 2.0 * (ranks - 1) / ranks / (self.rate if n > 1 else self.intra_rate)
            return 2 * (ranks - 1) * self.step_latency_s + nbytes * per_byte
        inter = 2.0 * (n - 1) / (n * self.rate) if n > 1 else 0.0
        intra = 2.0 * (g - 1) / (g * self.intra_rate) if g > 1 else 0.0
        return (2 * (n - 1) * self.step_latency_s if n > 1 else 0.0) + nbytes * max(inter, intra)


class RingBackend:
    def __init__(self, cfg: RingConfig):
        cfg.check()
        self.cfg = cfg

    def network(self):
        return None

    def setup(self, loop: EventLoop, profile: Profile, on_done: Callable[[int, int], None]) -> None:
        self.loop, self.on_done = loop, on_done
        # DDP: gradients in backward order, a bucket closed once it reaches bucket_bytes (the
        # first at first_bucket_bytes); a bucket is all-reduced when its last gradient is ready.
        self.bucket_of: dict = {}
        self.bucket_size: list = []
        if self.cfg.bucket_bytes > 0:
            size, limit = 0, self.cfg.first_bucket_bytes
            for _, t, nbytes in tensors_backward(profile):
                if size >= limit:
                    self.bucket_size.append(size)
                    size, limit = 0, self.cfg.bucket_bytes
                self.bucket_of[t] = len(self.bucket_size)
                size += nbytes
            self.bucket_size.append(size)
        self.filling: dict = {}
        self.waiting: list = []      # (iteration, tensor, bytes) in ready order
        self.buffers: list = []      # fused buffers not yet reduced
        self.busy = False
        self.tick_pending = False

    def submit(self, iteration: int, tensor: int, nbytes: int) -> None:
        if self.cfg.bucket_bytes > 0:
            key = (iteration, self.bucket_of[tensor])
            items = self.filling.setdefault(key, [])
            items.append((iteration, tensor, nbytes))
            if sum(i[2] for i in items) >= self.bucket_size[key[1]]:
                self.buffers.append((self.filling.pop(key), self.bucket_size[key[1]]))
                self._next()
            return
        self.waiting.append((iteration, tensor, nbytes))
        if not self.tick_pending:
            self.tick_pending = True
            # The background loop wakes every cycle: the next wake-up after now.
            c = self.cfg.cycle_s
            delay = 0.0 if c <= 0 else c - (self.loop.now % c)
            self.loop.at(delay, self._tick)

    def _tick(self) -> None:
        self.tick_pending = False
        buf, size = [], 0
        for item in self.waiting:
            if buf and size + item[2] > self.cfg.fusion_bytes:
                self.buffers.append((buf, size))
                buf, size = [], 0
            buf.append(item)
            size += item[2]
        if buf:
            self.buffers.append((buf, size))
        self.waiting = []
        self._next()

    def _next(self) -> None:
        if self.busy or not self.buffers:
            return
        self.busy = True
        items, size = self.buffers.pop(0)
        self.loop.at(self.cfg.allreduce_s(size), lambda: self._done(items))

    def _done(self, items: list) -> None:
        self.busy = False
        for it, t, _ in items:
            self.on_done(it, t)
        self._next()
