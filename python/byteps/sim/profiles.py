"""Compute profiles: a model's gradient tensors and per-layer compute times, loaded from JSON.

The JSON files in ``profiles/`` are written by ``bench/simulate/make_profiles.py`` (which needs
torch for VGG-16 and ResNet-50; the package does not).  Format::

    {"model": "vgg16", "source": "...", "gpu": "V100", "batch": 64, "unit": "...",
     "layers": [{"name": "features.0", "fwd_ms": 1.2, "bwd_ms": 2.4,
                 "tensors": [["features.0.weight", 6912], ...]}, ...]}     (forward order)

A tensor is [name, bytes]; a layer's backward emits its tensors at its end; the next forward
needs a layer's tensors before it starts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
NAMES = {"vgg16": "vgg16.json", "resnet50": "resnet50.json", "bert-large": "bert_large.json"}


@dataclass(frozen=True)
class Layer:
    name: str
    fwd_s: float
    bwd_s: float
    tensors: tuple[tuple[str, int], ...]  # (name, bytes), forward order

    @property
    def nbytes(self) -> int:
        return sum(b for _, b in self.tensors)


@dataclass(frozen=True)
class Profile:
    model: str
    layers: tuple[Layer, ...]  # forward order
    batch: int = 0
    source: str = ""

    @property
    def nbytes(self) -> int:
        return sum(layer.nbytes for layer in self.layers)

    @property
    def num_params(self) -> int:
        return self.nbytes // 4

    @property
    def compute_s(self) -> float:
        return sum(layer.fwd_s + layer.bwd_s for layer in self.layers)

    def scaled(self, factor: float) -> "Profile":
        """The same tensors with every compute time multiplied by *factor*."""
        return Profile(self.model, tuple(Layer(l.name, l.fwd_s * factor, l.bwd_s * factor, l.tensors)
                                         for l in self.layers), self.batch, self.source)


def from_dict(d: dict) -> Profile:
    try:
        layers = tuple(Layer(str(l["name"]), float(l["fwd_ms"]) / 1e3, float(l["bwd_ms"]) / 1e3,
                             tuple((str(t[0]), int(t[1])) for t in l["tensors"]))
                       for l in d["layers"])
        return Profile(str(d["model"]), layers, int(d.get("batch", 0)), str(d.get("source", "")))
    except (KeyError, TypeError, ValueError, IndexError) as err:
        raise ValueError(f"profile {d.get('model', '?')!r}: malformed ({err!r})") from err


def load(name: str) -> Profile:
    """A profile by model name (``vgg16``, ``resnet50``, ``bert-large``) or a JSON file path."""
    path = PROFILE_DIR / NAMES[name] if name in NAMES else Path(name)
    if not path.is_file():
        raise ValueError(f"unknown model {name!r}: give one of {', '.join(NAMES)} or a profile JSON file")
    with open(path, encoding="utf-8") as f:
        return from_dict(json.load(f))


def synthetic(grad_bytes: float, compute_s: float, layers: int = 10) -> Profile:
    """A model of *grad_bytes* gradient bytes and *compute_s* of compute per iteration: *layers*
    equal layers, forward : backward = 1 : 2 (the ratio the image profiles use)."""
    if not grad_bytes > 0:
        raise ValueError(f"--grad-bytes must be positive, got {grad_bytes}")
    if compute_s < 0:
        raise ValueError(f"--compute-ms must be 0 or more, got {compute_s * 1e3}")
    per = int(grad_bytes) // layers
    sizes = [per] * (layers - 1) + [int(grad_bytes) - per * (layers - 1)]
    ls = tuple(Layer(f"layer{i}", compute_s / layers / 3, compute_s / layers * 2 / 3, ((f"layer{i}.weight", b),))
               for i, b in enumerate(sizes))
    return Profile("synthetic", ls, 0, "given: --grad-bytes and --compute-ms")


def single_tensor(nbytes: int) -> Profile:
    """One tensor, no compute: the bare push_pull of the closed forms."""
    return Profile("bare", (Layer("t", 0.0, 0.0, (("t", int(nbytes)),)),))


def tensors_backward(profile: Profile) -> Sequence[tuple[int, int, int]]:
    """(layer index, tensor index in forward order, bytes) in the order backward emits them."""
    out, fwd_index = [], 0
    index = []
    for li, layer in enumerate(profile.layers):
        for _, b in layer.tensors:
            index.append((li, fwd_index, b))
            fwd_index += 1
    for li in reversed(range(len(profile.layers))):
        out.extend(reversed([t for t in index if t[0] == li]))
    return out
