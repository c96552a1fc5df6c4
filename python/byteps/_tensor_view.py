"""The tensor checks the byteps plugins share: dtype, contiguity, writability, device.

Two kinds of input come through here:

* NumPy arrays (``byteps.numpy``): :func:`numpy_dtype_code` and :func:`check_numpy`, read from
  the array's own flags.
* Any array that speaks DLPack, or a DLPack capsule (``byteps.dlpack``): :func:`dlpack_view`
  exports it (``__dlpack__``), hands the capsule to the core's reader (``_core.dlpack_view``, which
  takes ownership of the DLPack tensor) and checks what the tensor itself says, so the checks are
  the same whichever library made it.

Every error names the array: its ``name=`` when given, else its type and shape.
(``byteps.torch`` keeps its own checks in this increment.)
"""

from __future__ import annotations

import sys
from typing import Any, Optional

from . import _basics

try:
    import numpy as _np
except ImportError:  # byteps.dlpack works without NumPy; byteps.numpy needs it anyway
    _np = None

# numpy dtype name -> name of the core's dtype code constant.
NUMPY_CODES = {
    "float32": "FLOAT32", "float64": "FLOAT64", "float16": "FLOAT16", "uint8": "UINT8",
    "int8": "INT8", "int32": "INT32", "int64": "INT64", "int16": "INT16", "bool": "BOOL",
}
# bfloat16 is not a NumPy dtype, but extension packages (ml_dtypes) register one.
BFLOAT16 = "bfloat16"

SUPPORTED_DTYPES = tuple(NUMPY_CODES)


def numpy_dtype_code(array) -> int:
    """The core's dtype code of a NumPy array; TypeError naming the dtype when unsupported."""
    dt = array.dtype
    key = dt.name
    if key == BFLOAT16 and dt.itemsize == 2 and dt.isnative:
        return _basics.core().BFLOAT16
    if key not in NUMPY_CODES or not dt.isnative:
        raise TypeError(f"byteps does not support arrays of dtype {dt.str if not dt.isnative else dt.name} "
                        f"(supported: {', '.join(SUPPORTED_DTYPES)}, in native byte order)")
    return getattr(_basics.core(), NUMPY_CODES[key])


def check_numpy(array, inplace: bool) -> int:
    """Validates a NumPy array for push_pull (``inplace``: it must be writable) and returns its
    dtype code."""
    if not isinstance(array, _np.ndarray):
        raise TypeError(f"byteps.numpy needs a numpy.ndarray, got {type(array).__name__}")
    code = numpy_dtype_code(array)
    if not array.flags.c_contiguous:
        raise ValueError(f"array of shape {array.shape} is not C-contiguous; pass np.ascontiguousarray(x)")
    if inplace and not array.flags.writeable:
        raise ValueError(f"array of shape {array.shape} is read-only; an in-place push_pull writes the "
                         f"result into it (use push_pull for a new array)")
    return code


def numpy_is_floating(array) -> bool:
    return array.dtype.kind == "f" or array.dtype.name == BFLOAT16


# ---------------------------------------------------------------------------------------------
# DLPack

DL_CPU, DL_CUDA, DL_CUDA_HOST = 1, 2, 3  # DLDeviceType
_DEVICE_NAMES = {1: "kDLCPU", 2: "kDLCUDA", 3: "kDLCUDAHost", 4: "kDLOpenCL", 7: "kDLVulkan", 8: "kDLMetal",
                 9: "kDLVPI", 10: "kDLROCM", 11: "kDLROCMHost", 12: "kDLExtDev", 13: "kDLCUDAManaged",
                 14: "kDLOneAPI", 15: "kDLWebGPU", 16: "kDLHexagon"}
_TYPE_CODES = {0: "int", 1: "uint", 2: "float", 3: "opaque handle", 4: "bfloat", 5: "complex", 6: "bool"}
# (DLPack type code, bits) -> NumPy dtype name, for outputs allocated as NumPy buffers.
DL_NUMPY_NAMES = {(0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64", (1, 8): "uint8",
                  (2, 16): "float16", (2, 32): "float32", (2, 64): "float64", (4, 16): "bfloat16",
                  (6, 8): "bool"}
DL_SUPPORTED = "int8/16/32/64, uint8, float16/32/64, bfloat16, bool"
# The consumer stream byteps hands a CUDA producer: 1, CUDA's legacy default stream (DLPack's code
# for it); the core gets it as the null stream, which is the same stream.
DEFAULT_STREAM = 1


def label(x: Any, name: Optional[str]) -> str:
    """How errors name an array: ``'name'`` when given, else its type and (if known) shape."""
    if name is not None:
        return f"array {name!r}"
    t = type(x)
    shape = getattr(x, "shape", None)
    kind = "a DLPack capsule" if t.__name__ == "PyCapsule" else f"{t.__module__}.{t.__qualname__}"
    return kind if shape is None else f"{kind} of shape {tuple(shape)}"


class DLView:
    """A consumed DLPack tensor: ``owner`` keeps its memory alive (the producer's deleter runs,
    once, when the owner goes away)."""

    __slots__ = ("owner", "ptr", "code", "dl_dtype", "shape", "contiguous", "device_type", "device_id", "nbytes",
                 "device")

    def __init__(self, raw: tuple) -> None:
        (self.owner, self.ptr, self.code, self.dl_dtype, self.shape, self.contiguous, self.device_type,
         self.device_id, self.nbytes) = raw
        self.device = (0, 0, 0)  # (kind, index, stream) for _basics.start; host memory


def _export(x: Any, name: Optional[str], stream: Optional[int]):
    """``x.__dlpack__`` as the protocol defines it: no stream for host memory, the consumer
    stream for CUDA memory.  Returns (capsule, DLPack device type or None for a capsule)."""
    if type(x).__name__ == "PyCapsule":
        return x, None
    try:
        export, where = x.__dlpack__, x.__dlpack_device__
    except AttributeError:
        raise TypeError(f"byteps.dlpack: {label(x, name)} has no DLPack (__dlpack__ and __dlpack_device__); "
                        f"pass an array of a library that speaks DLPack, or a DLPack capsule") from None
    torch = sys.modules.get("torch")
    if torch is not None and type(x) is torch.Tensor:
        # torch's __dlpack_device__ costs 2 us a call; is_cuda says the same for CPU and CUDA
        # tensors (other devices: the DLPack tensor's own device type is checked after export).
        device_type, device_id = (DL_CUDA, x.get_device()) if x.is_cuda else (DL_CPU, 0)
    else:
        device_type, device_id = where()
        device_type = int(device_type)
    if device_type not in (DL_CPU, DL_CUDA, DL_CUDA_HOST):
        raise ValueError(_device_message(x, name, device_type, device_id))
    try:
        if device_type == DL_CUDA:
            return export(stream=DEFAULT_STREAM if not stream else int(stream)), device_type
        return export(), device_type
    except BufferError as err:
        flags = getattr(x, "flags", None)
        if flags is not None and getattr(flags, "writeable", True) is False:
            raise ValueError(f"byteps.dlpack: {label(x, name)} is read-only: NumPy does not export read-only "
                             f"arrays through DLPack; pass a writable copy (x.copy()), or use byteps.numpy "
                             f"({err})") from None
        raise TypeError(f"byteps.dlpack: {label(x, name)} cannot be exported through DLPack: {err}") from None
    except (RuntimeError, TypeError, ValueError) as err:
        raise TypeError(f"byteps.dlpack: {label(x, name)} cannot be exported through DLPack: {err}") from None


def _device_message(x: Any, name: Optional[str], device_type: int, device_id: int) -> str:
    where = _DEVICE_NAMES.get(device_type, "unknown")
    return (f"byteps.dlpack: {label(x, name)} is on an unsupported device: DLPack device type {device_type} "
            f"({where}), id {device_id}; supported: kDLCPU (1), kDLCUDAHost (3), kDLCUDA (2)")


def dlpack_view(x: Any, name: Optional[str] = None, stream: Optional[int] = None) -> DLView:
    """Exports ``x`` (an object with ``__dlpack__``, or a capsule), consumes the capsule and checks
    it: a supported dtype, C-contiguous, on a supported device.  The returned view owns the DLPack
    tensor.  Errors (each naming the array): TypeError for no DLPack or an unsupported dtype,
    ValueError for strides, device, read-only NumPy arrays and consumed capsules."""
    capsule, _ = _export(x, name, stream)
    c = _basics.core()
    try:
        view = DLView(c.dlpack_view(capsule))
    except ValueError as err:  # a consumed capsule
        raise ValueError(f"byteps.dlpack: {label(x, name)}: {err}") from None
    if view.code < 0:
        code, bits, lanes = view.dl_dtype
        kind = _TYPE_CODES.get(code, "unknown")
        raise TypeError(f"byteps.dlpack: {_named(x, name, view)} has an unsupported dtype: DLPack code {code} "
                        f"({kind}), {bits} bits, {lanes} lane{'s' if lanes != 1 else ''} "
                        f"(supported: {DL_SUPPORTED}, one lane)")
    if not view.contiguous:
        raise ValueError(f"byteps.dlpack: {_named(x, name, view)} is not C-contiguous; pass a contiguous copy")
    if view.device_type not in (DL_CPU, DL_CUDA, DL_CUDA_HOST):
        raise ValueError(_device_message(x, name, view.device_type, view.device_id))
    if view.device_type == DL_CUDA:
        view.device = cuda_device(c, view.device_id, stream)
    return view


def cuda_device(c, device_id: int, stream: Optional[int]) -> tuple[int, int, int]:
    """The device tuple for CUDA memory: the core's CUDA kind, the device id and the consumer
    stream (None, 0 or 1, DLPack's legacy default stream, is the core's null stream: the same stream;
    DLPack forbids 0, so it is taken for the null stream it is in CUDA)."""
    s = DEFAULT_STREAM if not stream else int(stream)
    return (c.DEVICE_CUDA, int(device_id), 0 if s == DEFAULT_STREAM else s)


def _named(x: Any, name: Optional[str], view: DLView) -> str:
    if name is not None or getattr(x, "shape", None) is not None:
        return label(x, name)
    return f"{label(x, name)} of shape {view.shape}"
