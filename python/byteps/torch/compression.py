"""Gradient compression: what ``compression=`` takes (docs/compression.md).

The core does the work: a compressor's :attr:`~Compressor.attrs` (``"compressor=topk;k=0.01;ef=vanilla"``,
``"cast=fp16"``) travel with the tensor's declaration; the worker that talks to the servers compresses
the locally reduced tensor, the servers decompress, sum and compress the sum, and the workers
decompress it.  Tensors under ``BYTEPS_MIN_COMPRESS_BYTES`` (default 65536) travel as they are.
``compress`` / ``decompress`` of the built-in compressors are identities; a user-defined compressor
(static ``compress(tensor) -> (tensor, ctx)`` and ``decompress(tensor, ctx)``, no ``attrs``) still
runs in Python around the push_pull, as before.

* :attr:`Compression.none`: nothing.
* :attr:`Compression.fp16` / :attr:`Compression.bf16`: floating-point tensors travel as 16 bits
  between hosts (the local reduce sums in full precision); the result keeps the tensor's dtype.
* :meth:`Compression.onebit`, :meth:`~Compression.topk`, :meth:`~Compression.randomk`,
  :meth:`~Compression.dithering`: BytePS's compressors, with error feedback (``ef="vanilla"``) and
  Nesterov momentum (``momentum="nesterov", mu=...``).
* :meth:`Compression.from_params`: MXNet's ``compression_params`` dict; :meth:`Compression.named`:
  the names of ``train_digits.py --compression``.
"""

from __future__ import annotations

from typing import Optional

import torch

__all__ = ["Compressor", "NoneCompressor", "FP16Compressor", "BF16Compressor", "CoreCompressor", "Compression",
           "attrs_of", "attrs_for", "has_error_feedback", "join_attrs"]


class Compressor:
    """Interface of a gradient compressor (static methods, so the class itself is passed).
    ``attrs``: the compression attributes sent to the core ("" for none)."""

    attrs = ""

    @staticmethod
    def compress(tensor):
        """Returns ``(compressed tensor, ctx)``."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        """Undoes :meth:`compress` with the ``ctx`` it returned."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """No compression: the tensor travels as it is."""

    attrs = ""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(NoneCompressor):
    """Floating-point tensors travel as float16 between hosts (a cast in the core)."""

    attrs = "cast=fp16"


class BF16Compressor(NoneCompressor):
    """Floating-point tensors travel as bfloat16 between hosts (a cast in the core)."""

    attrs = "cast=bf16"


class CoreCompressor(NoneCompressor):
    """A compressor the core runs, configured by ``attrs``; compress/decompress are identities."""

    def __init__(self, attrs: str):
        self.attrs = attrs

    def __repr__(self) -> str:
        return f"CoreCompressor({self.attrs!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, CoreCompressor) and other.attrs == self.attrs

    def __hash__(self) -> int:
        return hash(self.attrs)


_EF = ("vanilla",)
_MOMENTUM = ("nesterov",)
_PARTITION = ("linear", "natural")
_NORMALIZE = ("max", "l2")
_CAST = ("fp16", "bf16")


def _word(value, allowed, arg: str) -> Optional[str]:
    if value is None:
        return None
    word = str(value).lower()
    if word == "none":
        return None
    if word not in allowed:
        raise ValueError(f"compression argument {arg}={value!r}: expected one of {', '.join(allowed)} or None")
    return word


def _number(value) -> str:
    """A number as the core writes it: integral values without a fraction, else the shortest repr."""
    v = float(value)
    return str(int(v)) if v.is_integer() else repr(v)


def _k(k, arg: str = "k") -> float:
    if isinstance(k, bool) or not isinstance(k, (int, float)):
        raise ValueError(f"compression argument {arg}={k!r}: expected a number > 0")
    if not k > 0:
        raise ValueError(f"compression argument {arg}={k!r}: expected a number > 0")
    return float(k)


def _seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0 or seed >= 2 ** 64:
        raise ValueError(f"compression argument seed={seed!r}: expected an unsigned 64-bit integer")
    return seed


def _tail(ef, momentum, mu, cast=None) -> list:
    """The ef / momentum / mu / cast attributes, validated."""
    parts = []
    if _word(ef, _EF, "ef"):
        parts.append("ef=vanilla")
    m = _word(momentum, _MOMENTUM, "momentum")
    if m:
        if mu is None:
            raise ValueError("compression argument mu: momentum='nesterov' needs mu (e.g. mu=0.9)")
        if isinstance(mu, bool) or not isinstance(mu, (int, float)) or not 0 <= mu < 1:
            raise ValueError(f"compression argument mu={mu!r}: expected a number in [0, 1)")
        parts += ["momentum=nesterov", f"mu={_number(mu)}"]
    elif mu is not None:
        raise ValueError(f"compression argument mu={mu!r} needs momentum='nesterov'")
    c = _word(cast, _CAST, "cast")
    if c:
        parts.append(f"cast={c}")
    return parts


def _make(parts: list) -> CoreCompressor:
    return CoreCompressor(";".join(parts))


class Compression:
    """The compressors to pass as ``compression=``: ``none``, ``fp16``, ``bf16``, or a factory's."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor

    @staticmethod
    def onebit(scaling: bool = False, ef=None, momentum=None, mu=None) -> CoreCompressor:
        """Signs only (1 bit per element); ``scaling``: times the mean magnitude (BytePS's)."""
        if not isinstance(scaling, bool):
            raise ValueError(f"compression argument scaling={scaling!r}: expected True or False")
        return _make(["compressor=onebit", f"scaling={'true' if scaling else 'false'}"] + _tail(ef, momentum, mu))

    @staticmethod
    def topk(k, ef=None, momentum=None, mu=None, cast=None) -> CoreCompressor:
        """The ``k`` largest magnitudes (``k`` < 1: a fraction of the elements, else a count)."""
        return _make(["compressor=topk", f"k={_number(_k(k))}"] + _tail(ef, momentum, mu, cast))

    @staticmethod
    def randomk(k, seed=0, ef=None, momentum=None, mu=None, cast=None) -> CoreCompressor:
        """``k`` elements drawn at random (the same on every worker for a given seed and round)."""
        return _make(["compressor=randomk", f"k={_number(_k(k))}", f"seed={_seed(seed)}"]
                     + _tail(ef, momentum, mu, cast))

    @staticmethod
    def dithering(k, partition="linear", normalize="max", seed=0, ef=None, momentum=None,
                  mu=None) -> CoreCompressor:
        """Stochastic quantization to ``k`` levels (``partition`` linear or natural, ``normalize``
        by max or l2 norm)."""
        kv = _k(k)
        if not kv.is_integer():
            raise ValueError(f"compression argument k={k!r}: dithering needs an integer number of levels")
        p = _word(partition, _PARTITION, "partition") or "linear"
        n = _word(normalize, _NORMALIZE, "normalize") or "max"
        return _make(["compressor=dithering", f"k={int(kv)}", f"seed={_seed(seed)}", f"partition={p}",
                      f"normalize={n}"] + _tail(ef, momentum, mu))

    @staticmethod
    def from_params(params: dict):
        """MXNet's ``compression_params``: keys compressor, k, scaling, ef, momentum, mu, seed,
        partition, normalize, fp16 (True: cast=fp16), each optionally with a ``byteps_`` prefix."""
        if not isinstance(params, dict):
            raise ValueError(f"compression_params must be a dict, got {type(params).__name__}")
        known = {"compressor", "k", "scaling", "ef", "momentum", "mu", "seed", "partition", "normalize", "fp16"}
        p = {}
        for key, value in params.items():
            k = str(key).lower()
            k = k[len("byteps_"):] if k.startswith("byteps_") else k
            k = {"compressor_type": "compressor", "compressor_k": "k", "compressor_onebit_scaling": "scaling",
                 "ef_type": "ef", "momentum_type": "momentum", "momentum_mu": "mu",
                 "dithering_partition": "partition", "dithering_normalize": "normalize"}.get(k, k)
            if k not in known:
                raise ValueError(f"compression_params: unknown key {key!r} (known: {', '.join(sorted(known))})")
            p[k] = value
        fp16 = p.pop("fp16", False)
        if isinstance(fp16, str):
            fp16 = fp16.lower() in ("1", "true", "yes")
        name = str(p.pop("compressor", "none")).lower()
        if "scaling" in p and isinstance(p["scaling"], str):
            p["scaling"] = p["scaling"].lower() in ("1", "true", "yes")
        for key in ("k", "mu"):
            if isinstance(p.get(key), str):
                try:
                    p[key] = float(p[key])
                except ValueError:
                    raise ValueError(f"compression argument {key}={p[key]!r}: expected a number") from None
        if isinstance(p.get("seed"), str):
            p["seed"] = int(p["seed"]) if p["seed"].isdigit() else p["seed"]
        allowed = {"none": {"ef", "momentum", "mu"}, "onebit": {"scaling", "ef", "momentum", "mu"},
                   "topk": {"k", "ef", "momentum", "mu"}, "randomk": {"k", "seed", "ef", "momentum", "mu"},
                   "dithering": {"k", "partition", "normalize", "seed", "ef", "momentum", "mu"}}
        if name not in allowed:
            raise ValueError(f"compression argument compressor={name!r}: expected one of onebit, topk, randomk, "
                             f"dithering or none")
        extra = sorted(set(p) - allowed[name])
        if extra:
            raise ValueError(f"compression_params: key {extra[0]!r} does not apply to compressor {name!r}")
        if fp16 and name in ("onebit", "dithering"):
            raise ValueError(f"compression_params: fp16 does not apply to compressor {name!r}")
        if name == "none":
            if not fp16:
                if p:
                    raise ValueError(f"compression_params: key {sorted(p)[0]!r} needs a compressor or fp16")
                return Compression.none
            return _make(["cast=fp16"] + _tail(p.get("ef"), p.get("momentum"), p.get("mu"))) if p \
                else Compression.fp16
        if name in ("topk", "randomk"):
            if "k" not in p:
                raise ValueError(f"compression argument k: compressor {name!r} needs k")
            p["cast"] = "fp16" if fp16 else None
        if name == "dithering" and "k" not in p:
            raise ValueError("compression argument k: compressor 'dithering' needs k")
        return getattr(Compression, name)(**p)

    @staticmethod
    def named(name: str):
        """The compression of ``train_digits.py --compression NAME``: none, fp16, onebit (scaled,
        error feedback), topk (1%, error feedback), randomk (1%, error feedback), dithering (8 levels)."""
        table = {
            "none": lambda: Compression.none,
            "fp16": lambda: Compression.fp16,
            "onebit": lambda: Compression.onebit(scaling=True, ef="vanilla"),
            "topk": lambda: Compression.topk(0.01, ef="vanilla"),
            "randomk": lambda: Compression.randomk(0.01, ef="vanilla"),
            "dithering": lambda: Compression.dithering(8),
        }
        if name not in table:
            raise ValueError(f"unknown compression name {name!r} (known: {', '.join(table)})")
        return table[name]()


def attrs_of(compression) -> str:
    """The compression attributes of ``compression`` (a compressor, an attrs string, or None)."""
    if compression is None:
        return ""
    if isinstance(compression, str):
        return compression
    return getattr(compression, "attrs", "") or ""


CASTS = ("cast=fp16", "cast=bf16")


def attrs_for(compression, floating: bool) -> str:
    """:func:`attrs_of` for a tensor: a cast alone (``Compression.fp16`` / ``bf16``) leaves
    non-floating-point tensors as they are (as the Python cast did), so it sends nothing for them."""
    attrs = attrs_of(compression)
    return "" if not floating and attrs in CASTS else attrs


def has_error_feedback(compression) -> bool:
    """Whether ``compression``'s attributes ask for error feedback (then the learning rate matters)."""
    return any(part.strip().lower() in ("ef=vanilla", "ef_type=vanilla")
               for part in attrs_of(compression).split(";"))


def join_attrs(*parts: Optional[str]) -> str:
    """``parts`` joined by ';', empty ones left out."""
    return ";".join(p for p in parts if p)


def wire_dtype(compression, dtype: torch.dtype):
    """The dtype a tensor of ``dtype`` is handed to the core as under ``compression`` (the built-in
    compressors leave it unchanged: the core casts or compresses), or None when unknown (a custom
    compressor may change sizes)."""
    if isinstance(compression, CoreCompressor) or (
            isinstance(compression, type) and issubclass(compression, NoneCompressor)):
        return dtype
    return None
