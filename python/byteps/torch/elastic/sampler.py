"""Horovod's ``ElasticSampler`` on byteps: a distributed sampler that remembers how far the job got
in the current epoch, so that a restored state resumes the epoch where it was committed."""

from __future__ import annotations

import math

import torch
import torch.utils.data

from ... import _basics

__all__ = ["ElasticSampler"]


class ElasticSampler(torch.utils.data.Sampler):
    """Gives this worker every ``size()``-th index of the epoch's order, starting at ``rank()``.

    The order is ``range(len(dataset))``, shuffled with ``seed + epoch`` when ``shuffle``; the
    first ``processed_num`` indices of it (already processed this epoch, by every worker together)
    are dropped, and the rest is padded (by repeating its start) to a multiple of ``size()``.
    :meth:`record_batch` counts a batch of every worker; :meth:`state_dict` /
    :meth:`load_state_dict` carry ``{"epoch", "processed_num"}``, which
    :class:`~byteps.torch.elastic.TorchState` saves, restores and syncs from rank 0.
    """

    def __init__(self, dataset, shuffle: bool = True, seed: int = 0) -> None:
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.reset()

    def set_epoch(self, epoch: int) -> None:
        """Starts epoch ``epoch`` from its beginning."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx: int, batch_size: int) -> None:
        """Counts one batch of ``batch_size`` samples on every worker as processed."""
        del batch_idx  # the count is what matters: every worker processed one batch
        self.processed_num += batch_size * self.num_replicas

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict: dict) -> None:
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def reset(self) -> None:
        """Recomputes this worker's indices for the current size, rank, epoch and progress."""
        self.num_replicas = _basics.size()
        self.rank = _basics.rank()
        count = len(self.dataset)
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            order = torch.randperm(count, generator=generator).tolist()
        else:
            order = list(range(count))
        remaining = order[self.processed_num:]
        self.num_samples = math.ceil(len(remaining) / self.num_replicas)
        total = self.num_samples * self.num_replicas
        padded = remaining + (remaining * math.ceil(total / len(remaining)))[:total - len(remaining)] if remaining \
            else []
        self.indices = padded[self.rank:total:self.num_replicas]

    def __iter__(self):
        return iter(self.indices)

    def __len__(self) -> int:
        return self.num_samples
