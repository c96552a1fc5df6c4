"""The tensor checks the byteps plugins share: dtype, contiguity, writability, device.

Three kinds of input come through here:

* NumPy arrays (``byteps.numpy``): :func:`numpy_dtype_code` and :func:`check_numpy`, read from
  the array's own flags.
* Any array that speaks DLPack, or a DLPack capsule (``byteps.dlpack``): :func:`dlpack_view`
  exports it (``__dlpack__``), hands the capsule to the core's reader (``_core.dlpack_view``, which
  takes ownership of the DLPack tensor) and checks what the tensor itself says, so the checks are
  the same whichever library made it.
* torch tensors (``byteps.torch``: ``ops.dtype_code``/``check_tensor``/``_device_of``): torch
  maps its dtypes onto :data:`CORE_DTYPES` (a :class:`CoreCodes`) and calls :func:`check_layout`,
  :data:`HOST_DEVICE` and :func:`cuda_device` from here; it reads its tensors' own attributes
  (``is_contiguous()``, ``device``) and does not go through ``__dlpack__`` (an export costs per
  call).  What only torch has stays in torch: the sparse-layout check and the torch.cuda queries
  (is CUDA available, is the tensor on this process's GPU, torch's current stream).

The shared pieces: one table of the core's dtype names (:data:`CORE_DTYPES`; each plugin maps its
dtypes onto it and looks the codes up through a :class:`CoreCodes`; DLPack's (code, bits) are
mapped by the core's reader), the unsupported-dtype
message (:func:`unsupported_dtype`), the contiguity and in-place writability checks
(:func:`check_layout`), and the device tuple ``(kind, index, stream)`` that ``_basics.start``
takes (:data:`HOST_DEVICE`, :func:`cuda_device`).  Each plugin keeps its own wording of what it
names (array, tensor) and how to fix it, so its messages are as before.

Errors of byteps.numpy and byteps.dlpack name the array: its ``name=`` when given, else its type
and shape; byteps.torch's name the tensor's shape.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

from . import _basics

try:
    import numpy as _np
except ImportError:  # byteps.dlpack works without NumPy; byteps.numpy needs it anyway
    _np = None

# The core's dtype code constants (``byteps._core.FLOAT32``...): every plugin maps its own dtypes
# onto these names, so the codes come from one table.
CORE_DTYPES = ("FLOAT32", "FLOAT64", "FLOAT16", "BFLOAT16", "UINT8", "INT8", "INT32", "INT64", "INT16", "BOOL")
# The device tuple (kind, index, stream) of host memory, as _basics.start takes it.
HOST_DEVICE = (0, 0, 0)


class CoreCodes(dict):
    """A plugin's dtype -> the core's dtype code, by its table ``names`` (its dtype -> a name of
    :data:`CORE_DTYPES`).  ``codes[dtype]``: the code, read from the core on a dtype's first lookup
    (the core loads lazily) and kept, so a lookup costs one dict access; None for a dtype that
    ``names`` lacks."""

    __slots__ = ("names",)

    def __init__(self, names: dict) -> None:
        super().__init__()
        self.names = names

    def __missing__(self, key: Any) -> Optional[int]:
        core_name = self.names.get(key)
        if core_name is None:
            return None
        code = self[key] = getattr(_basics.core(), core_name)
        return code


def unsupported_dtype(noun: str, shown: Any, supported, suffix: str = "") -> TypeError:
    """The error for a dtype the core has no code for (``noun``: arrays or tensors)."""
    return TypeError(f"byteps does not support {noun} of dtype {shown} (supported: {', '.join(supported)}{suffix})")


def check_layout(contiguous: bool, writable: bool, x: Any, describe, order: str, fix: str) -> None:
    """The contiguity and (for an in-place call) writability checks of every plugin: ValueError
    naming the array (``describe(x)``, called only on failure) and the fix (``order``: "C-" where
    the plugin says C-contiguous)."""
    if not contiguous:
        raise ValueError(f"{describe(x)} is not {order}contiguous; pass {fix}")
    if not writable:
        raise ValueError(f"{describe(x)} is read-only; an in-place push_pull writes the result into it "
                         f"(use push_pull for a new array)")


# numpy dtype name -> name of the core's dtype code constant.
NUMPY_CODES = {
    "float32": "FLOAT32", "float64": "FLOAT64", "float16": "FLOAT16", "uint8": "UINT8",
    "int8": "INT8", "int32": "INT32", "int64": "INT64", "int16": "INT16", "bool": "BOOL",
}
# bfloat16 is not a NumPy dtype, but extension packages (ml_dtypes) register one.
BFLOAT16 = "bfloat16"

SUPPORTED_DTYPES = tuple(NUMPY_CODES)
_NUMPY_CORE_CODES = CoreCodes(NUMPY_CODES)


def numpy_dtype_code(array) -> int:
    """The core's dtype code of a NumPy array; TypeError naming the dtype when unsupported."""
    dt = array.dtype
    key = dt.name
    if key == BFLOAT16 and dt.itemsize == 2 and dt.isnative:
        return _basics.core().BFLOAT16
    code = _NUMPY_CORE_CODES[key] if dt.isnative else None
    if code is None:
        raise unsupported_dtype("arrays", dt.str if not dt.isnative else dt.name, SUPPORTED_DTYPES,
                                ", in native byte order")
    return code


def _numpy_label(array) -> str:
    return f"array of shape {array.shape}"


def check_numpy(array, inplace: bool) -> int:
    """Validates a NumPy array for push_pull (``inplace``: it must be writable) and returns its
    dtype code."""
    if not isinstance(array, _np.ndarray):
        raise TypeError(f"byteps.numpy needs a numpy.ndarray, got {type(array).__name__}")
    code = numpy_dtype_code(array)
    flags = array.flags
    check_layout(flags.c_contiguous, not inplace or flags.writeable, array, _numpy_label, "C-",
                 "np.ascontiguousarray(x)")
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
        self.device = HOST_DEVICE  # (kind, index, stream) for _basics.start


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
    check_layout(view.contiguous, True, (x, name, view), _dlpack_label, "C-", "a contiguous copy")
    if view.device_type not in (DL_CPU, DL_CUDA, DL_CUDA_HOST):
        raise ValueError(_device_message(x, name, view.device_type, view.device_id))
    if view.device_type == DL_CUDA:
        view.device = cuda_device(c, view.device_id, stream)
    return view


def cuda_device(c, device_id: int, stream: Optional[int]) -> tuple[int, int, int]:
    """The device tuple for CUDA memory: the core's CUDA kind, the device id and the consumer
    stream (None, 0 or 1, DLPack's legacy default stream, is the core's null stream: the same stream;
    DLPack forbids 0, so it is taken for the null stream it is in CUDA).  byteps.dlpack passes the
    DLPack consumer stream, byteps.torch torch's current stream handle (0 for the default stream)."""
    s = DEFAULT_STREAM if not stream else int(stream)
    return (c.DEVICE_CUDA, int(device_id), 0 if s == DEFAULT_STREAM else s)


def _named(x: Any, name: Optional[str], view: DLView) -> str:
    if name is not None or getattr(x, "shape", None) is not None:
        return label(x, name)
    return f"{label(x, name)} of shape {view.shape}"


def _dlpack_label(what: tuple) -> str:
    return f"byteps.dlpack: {_named(*what)}"
