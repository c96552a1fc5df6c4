"""Gradient compression applied by the torch plugin before push_pull and undone after it.

A compressor has two static methods: ``compress(tensor) -> (tensor, ctx)`` and
``decompress(tensor, ctx) -> tensor``; ``ctx`` is whatever decompress needs.  As in BytePS the
compressed tensor is what travels (and is summed by the servers), so it must be a tensor of a
dtype byteps supports.

* :attr:`Compression.none`: identity.
* :attr:`Compression.fp16`: floating-point tensors travel as float16 (half the bytes; the servers
  sum in float16), other tensors unchanged.
"""

from __future__ import annotations

import torch

__all__ = ["Compressor", "NoneCompressor", "FP16Compressor", "Compression"]


class Compressor:
    """Interface of a gradient compressor (static methods, so the class itself is passed)."""

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

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Floating-point tensors travel as float16; ctx is the original dtype."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != torch.float16:
            return tensor.to(torch.float16), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        if ctx is not None and ctx.is_floating_point and tensor.dtype != ctx:
            return tensor.to(ctx)
        return tensor


class Compression:
    """The compressors to pass as ``compression=``: ``Compression.none`` or ``Compression.fp16``."""

    none = NoneCompressor
    fp16 = FP16Compressor


def wire_dtype(compression, dtype: torch.dtype):
    """The dtype a tensor of ``dtype`` travels as under ``compression``, or None when unknown
    (a custom compressor may change sizes, so only the built-in ones are trusted)."""
    if isinstance(compression, type) and issubclass(compression, (NoneCompressor, FP16Compressor)):
        return compression.compress(torch.empty(0, dtype=dtype))[0].dtype
    return None
