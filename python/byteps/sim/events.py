"""The event loop and the compute process of one (representative) worker machine.

``EventLoop`` keeps timed callbacks and an optional ``FluidNetwork``; time jumps to whichever
comes first, the next callback or the next flow to finish (a finished flow's payload is a
callable, called with no arguments).

``train`` runs a worker's iterations against a communication backend (ring.py or ps.py):

* backward, last layer to first: after a layer's backward time its gradients are handed to the
  backend (``submit(iteration, tensor, nbytes)``, tensor = forward index, so a smaller index is
  more urgent);
* the next forward, first layer to last: layer l waits for the sums of its own tensors
  (``barrier="layer"``, byteps with its cross-barrier) or for every tensor of the previous
  iteration (``barrier="step"``, an optimizer step that synchronizes all handles, as Horovod's
  and the stock plugins do), then runs its forward time.

Iterations 0..I-1 run fully, then iteration I's forward; the iteration time is the time between
the ends of the last two forwards (steady state after I-1 iterations).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Callable, Optional, Protocol

from .links import FluidNetwork
from .profiles import Profile


class EventLoop:
    def __init__(self, network: Optional[FluidNetwork] = None):
        self.now = 0.0
        self.net = network
        self._heap: list = []
        self._seq = itertools.count()

    def at(self, delay: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._heap, (self.now + max(delay, 0.0), next(self._seq), fn))

    def run(self, deadline_events: int = 50_000_000) -> None:
        """Until nothing is left; *deadline_events* bounds the work (a bug, not a model, exceeds it)."""
        for _ in range(deadline_events):
            t_ev = self._heap[0][0] if self._heap else float("inf")
            dt_net = self.net.next_finish() if self.net is not None else float("inf")
            t_next = min(t_ev, self.now + dt_net)
            if t_next == float("inf"):
                return
            if self.net is not None:
                done = self.net.advance(t_next - self.now)
            else:
                done = []
            self.now = t_next
            for fn in done:
                fn()
            while self._heap and self._heap[0][0] <= self.now:
                _, _, fn = heapq.heappop(self._heap)
                fn()
        raise RuntimeError(f"simulation did not finish within {deadline_events} events (t={self.now:.6f} s)")


class Backend(Protocol):
    def setup(self, loop: EventLoop, profile: Profile, on_done: Callable[[int, int], None]) -> None: ...
    def submit(self, iteration: int, tensor: int, nbytes: int) -> None: ...


@dataclass
class TrainResult:
    iteration_s: float       # steady-state iteration time
    compute_s: float         # forward + backward alone
    fwd_ends: list           # end of each forward
    comm_done: dict          # (iteration, tensor) -> time its sum was back

    @property
    def stall_s(self) -> float:
        return max(self.iteration_s - self.compute_s, 0.0)


def train(profile: Profile, backend: Backend, iterations: int = 3, barrier: str = "layer",
          network: Optional[FluidNetwork] = None) -> TrainResult:
    if barrier not in ("layer", "step"):
        raise ValueError(f"barrier must be 'layer' or 'step', got {barrier!r}")
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    loop = EventLoop(network)
    layers = profile.layers
    first_tensor, f = [], 0
    for layer in layers:
        first_tensor.append(f)
        f += len(layer.tensors)
    total_tensors = f
    done: dict = {}
    remaining = [total_tensors] * (iterations + 1)
    waiters: dict = {}          # (iteration, tensor) -> callback
    fwd_ends: list = []

    def on_done(it: int, t: int) -> None:
        done[(it, t)] = loop.now
        remaining[it] -= 1
        cb = waiters.pop((it, t), None)
        if cb is not None:
            cb()
        if remaining[it] == 0:
            cb = waiters.pop((it, "all"), None)
            if cb is not None:
                cb()

    backend.setup(loop, profile, on_done)

    def needed(it: int, li: int) -> list:
        if it == 0:
            return []
        if barrier == "step":
            return [] if li > 0 or remaining[it - 1] == 0 else [(it - 1, "all")]
        start = first_tensor[li]
        return [(it - 1, t) for t in range(start, start + len(layers[li].tensors)) if (it - 1, t) not in done]

    def forward(it: int, li: int) -> None:
        if li == len(layers):
            fwd_ends.append(loop.now)
            if it < iterations:
                backward(it, len(layers) - 1)
            return
        missing = needed(it, li)
        if missing:
            waiters[missing[0]] = lambda: forward(it, li)  # re-checks the rest when it fires
            return
        loop.at(layers[li].fwd_s, lambda: forward(it, li + 1))

    def backward(it: int, li: int) -> None:
        if li < 0:
            loop.at(0.0, lambda: forward(it + 1, 0))
            return

        def emit() -> None:
            for j, (_, nbytes) in reversed(list(enumerate(layers[li].tensors))):
                backend.submit(it, first_tensor[li] + j, nbytes)
            backward(it, li - 1)
        loop.at(layers[li].bwd_s, emit)

    forward(0, 0)
    loop.run()
    if len(fwd_ends) != iterations + 1:
        raise RuntimeError(f"simulation stopped after {len(fwd_ends)} of {iterations + 1} forwards "
                           f"(a tensor's sum never came back)")
    return TrainResult(fwd_ends[-1] - fwd_ends[-2], profile.compute_s, fwd_ends, done)
