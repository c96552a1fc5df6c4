"""Writes the simulator's static profiles: python/byteps/sim/profiles/{vgg16,resnet50,bert_large}.json.

    python3 -m bench.simulate.make_profiles [--out DIR]

* VGG-16 and ResNet-50 come from bench/model_shaped/profiles.py (torchvision's tensors in forward
  order; per-layer V100 fp32 times at batch 64, calibrated to 230 and 400 img/s; sources in
  bench/model_shaped/README.md).  This needs torch and torchvision; the package reads the JSON.
* BERT-large is built here from its architecture (24 layers, hidden 1024, 16 heads, FFN 4096,
  vocabulary 30522, 512 positions, 2 token types, pooler; no pre-training heads): 335.1M
  parameters, the figure usually quoted as "340M" (Devlin et al. 2018).
  Per-layer time from FLOPs: a token costs 2 FLOPs per weight of the encoder layers and pooler
  (multiply-add) plus the attention scores and mix, 4 * seq * hidden per layer; forward FLOPs /
  F_EFF with F_EFF = 65 % of the V100's 15.7 TFLOP/s fp32 peak (bench/model_shaped's assumption
  for conv/GEMM kernels; its ResNet-50 calibration implies 63 %); backward = 2 x forward.  Batch 32 sequences of 128 tokens (pre-training phase 1's sequence
  length).  The embeddings' gather costs no FLOPs; it gets the memory time of its output.
  The result, 0.74 s per iteration (43 sequences/s per V100 fp32), is an estimate, not a measured
  figure; it only sets the compute / communication ratio.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Optional, Sequence

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "python" / "byteps" / "sim" / "profiles"
F_EFF = 0.65 * 15.7e12
BW_EFF = 0.70 * 900e9
BERT = dict(layers=24, hidden=1024, ffn=4096, vocab=30522, positions=512, types=2, seq=128, batch=32)


def _round(x: float) -> float:
    return float(f"{x:.6g}")


def vision(model: str) -> dict:
    from bench.model_shaped import profiles as mp  # noqa: PLC0415 - needs torch

    p = mp.profile(model)
    return {
        "model": model, "gpu": "V100 (fp32)", "batch": mp.BATCH,
        "source": ("bench/model_shaped/profiles.py: torchvision tensors; roofline per layer calibrated to "
                   f"{p.img_per_sec:.0f} img/s per V100 (tf_cnn_benchmarks' P100 figure x 1.48, see "
                   "bench/model_shaped/README.md)"),
        "layers": [{"name": l.name, "fwd_ms": _round(l.fwd_s * 1e3), "bwd_ms": _round(l.bwd_s * 1e3),
                    "tensors": [[t.name, t.nbytes] for t in l.tensors]} for l in p.layers],
    }


def bert_large() -> dict:
    c = BERT
    h, f, seq, batch = c["hidden"], c["ffn"], c["seq"], c["batch"]
    tokens = seq * batch
    layers = []

    def add(name: str, tensors: list, flops: float, mem_bytes: float = 0.0) -> None:
        fwd = max(flops / F_EFF, mem_bytes / BW_EFF)
        layers.append({"name": name, "fwd_ms": _round(fwd * 1e3), "bwd_ms": _round(2 * fwd * 1e3),
                       "tensors": [[n, 4 * e] for n, e in tensors]})

    emb = [("embeddings.word_embeddings.weight", c["vocab"] * h),
           ("embeddings.position_embeddings.weight", c["positions"] * h),
           ("embeddings.token_type_embeddings.weight", c["types"] * h),
           ("embeddings.LayerNorm.weight", h), ("embeddings.LayerNorm.bias", h)]
    add("embeddings", emb, 8.0 * tokens * h, 3 * 4.0 * tokens * h)
    for i in range(c["layers"]):
        p = f"encoder.layer.{i}."
        ts = []
        for m in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            ts += [(p + m + ".weight", h * h), (p + m + ".bias", h)]
        ts += [(p + "attention.output.LayerNorm.weight", h), (p + "attention.output.LayerNorm.bias", h),
               (p + "intermediate.dense.weight", f * h), (p + "intermediate.dense.bias", f),
               (p + "output.dense.weight", h * f), (p + "output.dense.bias", h),
               (p + "output.LayerNorm.weight", h), (p + "output.LayerNorm.bias", h)]
        weights = 4 * h * h + 2 * h * f
        add(f"encoder.layer.{i}", ts, tokens * (2.0 * weights + 4.0 * seq * h))
    add("pooler", [("pooler.dense.weight", h * h), ("pooler.dense.bias", h)], 2.0 * batch * h * h)
    return {
        "model": "bert-large", "gpu": "V100 (fp32)", "batch": batch, "seq": seq,
        "source": ("BERT-large architecture (Devlin et al. 2018: 24 layers, hidden 1024, 16 heads, FFN 4096; "
                   "vocabulary 30522); times from FLOPs at 65 % of the V100's 15.7 TFLOP/s fp32 peak, backward "
                   "= 2 x forward, batch 32 x 128 tokens (bench/simulate/make_profiles.py): an estimate"),
        "layers": layers,
    }


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--only", default="vgg16,resnet50,bert-large")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    makers = {"vgg16": lambda: vision("vgg16"), "resnet50": lambda: vision("resnet50"), "bert-large": bert_large}
    for name in args.only.split(","):
        d = makers[name]()
        path = args.out / (name.replace("-", "_") + ".json")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(d, fh, indent=None, separators=(",", ":"))
            fh.write("\n")
        params = sum(t[1] for l in d["layers"] for t in l["tensors"]) // 4
        ms = sum(l["fwd_ms"] + l["bwd_ms"] for l in d["layers"])
        print(f"{path}: {len(d['layers'])} layers, {params:,} parameters, {ms:.1f} ms per iteration")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
