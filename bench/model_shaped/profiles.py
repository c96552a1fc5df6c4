"""Per-layer profiles of torchvision VGG-16 and ResNet-50 for the model-shaped workload.

What a profile holds (see README.md next to this file for the method, sources and arithmetic):

* the model's gradient tensors, ``(name, shape, dtype)``, in **forward order** (the order of
  ``torchvision.models.<name>().named_parameters()``, i.e. the order the next forward pass needs
  the parameters) and in **backward order** (the reverse: the order backward produces them);
* the layers that own them (every Conv2d, Linear and BatchNorm2d), with the forward and backward
  compute time of each on a V100 (fp32, batch 64, 224x224 images).

The time model is a roofline per layer, calibrated to a published per-GPU throughput:

    raw_fwd(layer) = max(FLOPs / F_EFF, bytes / BW_EFF)          (batch 64, fp32)
    raw_bwd(layer) = BACKWARD_FACTOR * raw_fwd(layer)             (input grad + weight grad)
    t(layer)       = raw(layer) * c,   c = (64 / V100_IMG_PER_SEC[model]) / sum(raw_fwd + raw_bwd)

FLOPs and bytes come from forward hooks on a forward pass at 224x224 (run on the ``meta``
device: shapes only, no arithmetic; a real CPU pass is the fallback).  A conv counts
2 * out_elements * (in_channels / groups) * kh * kw (+ out_elements for a bias), a linear layer
2 * batch * in * out (+ batch * out for the bias), batch norm 4 * elements; bytes are the
layer's input + output activations + its parameters, 4 bytes each.

For the emulated cluster the times are dilated by ``link_scale(R) = 20 Gbit/s / R`` so that the
ratio of compute to communication is that of the original BytePS setup (V100s on 20 Gbit/s TCP)
on links of R Gbit/s: see :func:`link_scale`.

Run ``python3 -m bench.model_shaped.profiles`` for the summary table (``--layers`` for every
layer).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
from dataclasses import dataclass, field
from typing import Iterator, Optional, Sequence
from unittest import mock

MODELS = ("vgg16", "resnet50")

# ---- the assumptions (README.md, "Profile")

BATCH = 64                   # images per GPU per iteration (the original BytePS setup)
IMAGE_SIZE = 224
DTYPE = "float32"
DTYPE_BYTES = 4
V100_PEAK_FLOPS = 15.7e12    # fp32 (SXM2, boost clock)
V100_PEAK_BW = 900e9         # HBM2, bytes/s
F_EFF = 0.65 * V100_PEAK_FLOPS  # what a well-tuned conv/GEMM kernel sustains (assumed 65 %)
BW_EFF = 0.70 * V100_PEAK_BW    # what a memory-bound kernel (batch norm) sustains (assumed 70 %)
BACKWARD_FACTOR = 2.0        # backward = input gradient + weight gradient ~ 2x the forward work

# Whole-iteration throughput of one V100, fp32, batch 64, synthetic data (img/s): the totals
# the per-layer times are calibrated to.  Derived in README.md from tf_cnn_benchmarks' P100
# table (ResNet-50 219 img/s, VGG-16 154 img/s, batch 64) x the V100/P100 fp32 peak ratio 1.48,
# and for ResNet-50 rounded up to the ~400 img/s later cuDNN/framework releases reach.
V100_IMG_PER_SEC = {"resnet50": 400.0, "vgg16": 230.0}

# The original BytePS setup's network, and the goodput of TCP through tbf on the testbed
# (machine-facts.md: 0.956 x R).
ORIGINAL_LINK_GBIT = 20.0
TCP_GOODPUT = 0.956


def link_scale(link_gbit: float) -> float:
    """Factor by which V100 compute times are dilated on links of ``link_gbit`` Gbit/s so that
    compute / communication is what it was on the original 20 Gbit/s: ``20 / link_gbit``."""
    if not link_gbit > 0:
        raise ValueError(f"link rate must be positive, got {link_gbit}")
    return ORIGINAL_LINK_GBIT / link_gbit


# ---- data


@dataclass(frozen=True)
class Tensor:
    """One gradient tensor (= one parameter of the model)."""

    name: str             # the parameter's name in model.named_parameters()
    shape: tuple[int, ...]
    dtype: str = DTYPE

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES


@dataclass(frozen=True)
class Layer:
    """A module that owns parameters, with its V100 compute times (seconds, batch 64)."""

    name: str             # module name ("features.0", "layer1.0.conv1", "fc")
    kind: str             # "Conv2d", "Linear" or "BatchNorm2d"
    tensors: tuple[Tensor, ...]  # its parameters in forward (named_parameters) order
    flops: float          # forward FLOPs at batch 64
    bytes: float          # forward memory traffic at batch 64
    fwd_s: float          # calibrated forward time on a V100
    bwd_s: float          # calibrated backward time on a V100

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)


@dataclass(frozen=True)
class Profile:
    model: str
    layers: tuple[Layer, ...]     # forward order
    img_per_sec: float            # the calibration target (one V100)
    calibration: float            # c: calibrated time / roofline time
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def forward_tensors(self) -> list[Tensor]:
        return [t for layer in self.layers for t in layer.tensors]

    @property
    def backward_tensors(self) -> list[Tensor]:
        return list(reversed(self.forward_tensors))

    @property
    def nbytes(self) -> int:
        return sum(layer.nbytes for layer in self.layers)

    @property
    def num_params(self) -> int:
        return sum(t.numel for t in self.forward_tensors)

    @property
    def forward_s(self) -> float:
        return sum(layer.fwd_s for layer in self.layers)

    @property
    def backward_s(self) -> float:
        return sum(layer.bwd_s for layer in self.layers)

    @property
    def iteration_s(self) -> float:
        """Forward + backward of one iteration on a V100: BATCH / img_per_sec by construction."""
        return self.forward_s + self.backward_s

    @property
    def flops(self) -> float:
        return sum(layer.flops for layer in self.layers)

    def compute_s(self, link_gbit: float, time_scale: float = 1.0) -> float:
        """The replayed compute of one iteration on links of ``link_gbit`` Gbit/s."""
        return self.iteration_s * link_scale(link_gbit) * time_scale


# ---- building a profile from torchvision


@contextlib.contextmanager
def _no_init() -> Iterator[None]:
    """Constructing the model without random initialisation (we need shapes only)."""
    import torch  # noqa: PLC0415

    def noop(tensor, *args, **kwargs):
        del args, kwargs
        return tensor

    names = ("kaiming_normal_", "kaiming_uniform_", "normal_", "constant_", "uniform_", "zeros_",
             "ones_", "xavier_uniform_", "xavier_normal_", "trunc_normal_")
    with mock.patch.multiple(torch.nn.init, **{n: noop for n in names if hasattr(torch.nn.init, n)}):
        yield


def build_model(model: str):
    """``torchvision.models.<model>(weights=None)`` (shapes only: parameters uninitialised)."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r} (known: {', '.join(MODELS)})")
    from torchvision import models  # noqa: PLC0415

    with _no_init():
        try:
            return getattr(models, model)(weights=None)
        except TypeError:  # torchvision < 0.13
            return getattr(models, model)(pretrained=False)


def _count(model_obj, device: str) -> dict[str, tuple[float, float]]:
    """Forward FLOPs and bytes per image of every Conv2d / Linear / BatchNorm2d, by name."""
    import torch  # noqa: PLC0415
    from torch import nn  # noqa: PLC0415

    counts: dict[str, tuple[float, float]] = {}

    def hook(name):
        def record(module, inputs, output):
            x = inputs[0]
            in_el, out_el = x.numel(), output.numel()
            params = sum(p.numel() for p in module.parameters(recurse=False))
            if isinstance(module, nn.Conv2d):
                kh, kw = module.kernel_size
                flops = 2.0 * out_el * (module.in_channels // module.groups) * kh * kw
                flops += out_el if module.bias is not None else 0
            elif isinstance(module, nn.Linear):
                rows = in_el // module.in_features
                flops = 2.0 * rows * module.in_features * module.out_features
                flops += rows * module.out_features if module.bias is not None else 0
            else:  # BatchNorm2d: normalise, scale, shift
                flops = 4.0 * out_el
            counts[name] = (flops, float((in_el + out_el + params) * DTYPE_BYTES))
        return record

    handles = [m.register_forward_hook(hook(n)) for n, m in model_obj.named_modules()
               if isinstance(m, (nn.Conv2d, nn.Linear, nn.BatchNorm2d))]
    try:
        model_obj.to(device).eval()
        with torch.no_grad():
            model_obj(torch.zeros(1, 3, IMAGE_SIZE, IMAGE_SIZE, device=device))
    finally:
        for h in handles:
            h.remove()
    return counts


@functools.lru_cache(maxsize=None)
def profile(model: str) -> Profile:
    """The profile of ``model`` ("vgg16" or "resnet50"); computed once per process (~0.1 s)."""
    net = build_model(model)
    # Parameters (names, shapes) before the model moves to the meta device.
    owners: dict[str, list[Tensor]] = {}
    kinds: dict[str, str] = {}
    modules = dict(net.named_modules())
    for pname, p in net.named_parameters():
        mname = pname.rsplit(".", 1)[0]
        owners.setdefault(mname, []).append(Tensor(pname, tuple(p.shape), DTYPE))
        kinds[mname] = type(modules[mname]).__name__
    try:
        counts = _count(net, "meta")
    except Exception:  # noqa: BLE001 - an op without a meta kernel: count on the CPU instead
        counts = _count(build_model(model), "cpu")
    missing = [m for m in owners if m not in counts]
    if missing:
        raise RuntimeError(f"{model}: no FLOP count for parameter-owning modules {missing[:5]}")

    raw = []
    for mname in owners:  # named_parameters order = forward order
        flops, nbytes = counts[mname]
        params_bytes = sum(t.nbytes for t in owners[mname])
        # Per image -> batch: activations scale with the batch, the parameters are read once.
        flops_b = flops * BATCH
        bytes_b = (nbytes - params_bytes) * BATCH + params_bytes
        raw.append((mname, flops_b, bytes_b, max(flops_b / F_EFF, bytes_b / BW_EFF)))
    raw_total = sum(r[3] for r in raw) * (1.0 + BACKWARD_FACTOR)
    target = BATCH / V100_IMG_PER_SEC[model]
    c = target / raw_total
    layers = tuple(Layer(m, kinds[m], tuple(owners[m]), fl, by, r * c, r * c * BACKWARD_FACTOR)
                   for m, fl, by, r in raw)
    return Profile(model, layers, V100_IMG_PER_SEC[model], c,
                   {"roofline_img_per_sec": BATCH / raw_total})


# ---- communication bounds (for the README table and the reports)


def ideal_comm_s(nbytes: float, link_gbit: float, workers: int, kind: str) -> float:
    """Lower bound on the time to average ``nbytes`` over ``workers`` on links of ``link_gbit``:
    "ps" (enough server bandwidth: each worker sends and receives M once) = M / goodput,
    "ring" (all-reduce) = 2 (n-1)/n * M / goodput; goodput = 0.956 x the link rate."""
    goodput = TCP_GOODPUT * link_gbit * 1e9 / 8
    if kind == "ps":
        return nbytes / goodput
    if kind == "ring":
        return 2.0 * (workers - 1) / workers * nbytes / goodput
    raise ValueError(f"kind must be 'ps' or 'ring', got {kind!r}")


def summary_rows(link_gbit: float = 1.0, workers: Sequence[int] = (4, 8)) -> list[dict]:
    rows = []
    for model in MODELS:
        p = profile(model)
        row = {"model": model, "tensors": len(p.forward_tensors), "layers": len(p.layers),
               "params": p.num_params, "bytes": p.nbytes, "gflops_fwd": p.flops / 1e9,
               "v100_img_s": p.img_per_sec, "calibration": p.calibration,
               "roofline_img_s": p.extra["roofline_img_per_sec"],
               "v100_iter_s": p.iteration_s, "v100_fwd_s": p.forward_s, "v100_bwd_s": p.backward_s,
               "scaled_iter_s": p.compute_s(link_gbit), "scaled_fwd_s": p.forward_s * link_scale(link_gbit),
               "scaled_bwd_s": p.backward_s * link_scale(link_gbit)}
        for n in workers:
            row[f"ps_n{n}_s"] = ideal_comm_s(p.nbytes, link_gbit, n, "ps")
            row[f"ring_n{n}_s"] = ideal_comm_s(p.nbytes, link_gbit, n, "ring")
        rows.append(row)
    return rows


def markdown_table(link_gbit: float = 1.0) -> str:
    """The README's summary table (the test checks that the README carries exactly this)."""
    lines = [
        f"| model | tensors | gradient bytes | V100 img/s (assumed) | V100 iteration (fwd + bwd) | "
        f"at {link_gbit:g} Gbit/s: compute per iteration (fwd + bwd) | ideal PS, n=4 and n=8 | "
        f"ideal ring, n=4 | ideal ring, n=8 |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in summary_rows(link_gbit):
        lines.append(
            f"| {r['model']} | {r['tensors']} | {r['bytes'] / 1e6:.1f} MB = {r['bytes'] / 2**20:.1f} MiB | "
            f"{r['v100_img_s']:.0f} | {r['v100_iter_s'] * 1e3:.1f} ms ({r['v100_fwd_s'] * 1e3:.1f} + "
            f"{r['v100_bwd_s'] * 1e3:.1f}) | {r['scaled_iter_s']:.3f} s ({r['scaled_fwd_s']:.3f} + "
            f"{r['scaled_bwd_s']:.3f}) | {r['ps_n4_s']:.3f} s | {r['ring_n4_s']:.3f} s | {r['ring_n8_s']:.3f} s |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="print the model-shaped profiles")
    ap.add_argument("--link-gbit", type=float, default=1.0)
    ap.add_argument("--layers", action="store_true", help="also print every layer")
    args = ap.parse_args(argv)
    s = link_scale(args.link_gbit)
    print(f"V100 fp32, batch {BATCH}, {IMAGE_SIZE}x{IMAGE_SIZE}; F_eff {F_EFF / 1e12:.2f} TFLOP/s, "
          f"BW_eff {BW_EFF / 1e9:.0f} GB/s; link {args.link_gbit:g} Gbit/s -> compute x{s:g}")
    for r in summary_rows(args.link_gbit):
        print(f"{r['model']}: {r['tensors']} tensors in {r['layers']} layers, {r['params']:,} params, "
              f"{r['bytes'] / 1e6:.1f} MB; fwd {r['gflops_fwd'] / 64:.2f} GFLOP/img; roofline "
              f"{r['roofline_img_s']:.0f} img/s, calibrated to {r['v100_img_s']:.0f} (c = {r['calibration']:.3f})")
        print(f"  V100 iteration {r['v100_iter_s'] * 1e3:.1f} ms (fwd {r['v100_fwd_s'] * 1e3:.1f}, bwd "
              f"{r['v100_bwd_s'] * 1e3:.1f}); scaled {r['scaled_iter_s']:.3f} s (fwd {r['scaled_fwd_s']:.3f}, "
              f"bwd {r['scaled_bwd_s']:.3f})")
        print("  ideal comm at %g Gbit/s: " % args.link_gbit + ", ".join(
            f"n={n}: PS {r[f'ps_n{n}_s']:.3f} s, ring {r[f'ring_n{n}_s']:.3f} s" for n in (4, 8)))
        if args.layers:
            for layer in profile(r["model"]).layers:
                print(f"    {layer.name:<28} {layer.kind:<12} {layer.nbytes / 1e6:9.3f} MB "
                      f"{layer.flops / 1e9:9.2f} GFLOP  fwd {layer.fwd_s * 1e3:7.3f} ms  bwd {layer.bwd_s * 1e3:7.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
