"""byteps.dlpack: any DLPack array (NumPy and PyTorch here), in one process and in real jobs.

* A hand-made DLPack 0.8 producer (ctypes, :class:`Producer`) makes capsules NumPy 1.24 and torch
  1.13 cannot: kDLBool, a CUDA device, an OpenCL device; and counts its deleter's calls.
* Jobs: 2 workers x 2 servers, every dtype NumPy and torch export, exact sums and means, in place,
  broadcast, allgather, zero-size arrays, capsules; then a mixed job (worker 0 NumPy, worker 1
  torch), exact sums.
"""

from __future__ import annotations

import ctypes
import gc
import sys
import weakref

import numpy as np
import pytest

from test_numpy_api import PRELUDE, ok_count

torch = pytest.importorskip("torch", reason="PyTorch (python3-torch) is not installed")

pytestmark = pytest.mark.usefixtures("require_core")


@pytest.fixture
def bps(standalone):
    return standalone("byteps.dlpack")


# --------------------------------------------------------------------------------------------
# a DLPack producer of our own (the spec's structs, through ctypes)

class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32), ("dtype", _DType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Managed))
_Managed._fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class Producer:
    """An array that exports ``buffer`` (a NumPy array) as a DLPack tensor with the dtype, strides
    and device it is told; counts the deleter's calls and records the stream it was asked for."""

    def __init__(self, buffer: np.ndarray, code: int, bits: int, device=(1, 0), strides=None):
        self.buffer, self.code, self.bits, self.device, self.strides = buffer, code, bits, device, strides
        self.shape = buffer.shape
        self.deleted = 0
        self.streams = []
        self._keep = []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        return self.capsule()

    def capsule(self):
        nd = self.buffer.ndim
        shape = (ctypes.c_int64 * max(nd, 1))(*self.buffer.shape)
        strides = None if self.strides is None else (ctypes.c_int64 * nd)(*self.strides)
        m = _Managed()
        m.dl_tensor = _Tensor(self.buffer.ctypes.data, _Device(*self.device), nd, _DType(self.code, self.bits, 1),
                              shape, strides, 0)

        def deleter(_ptr):
            self.deleted += 1

        m.deleter = _DELETER(deleter)
        self._keep.append((m, shape, strides, m.deleter))
        return _capsule_new(ctypes.addressof(m), b"dltensor", None)


# --------------------------------------------------------------------------------------------
# one process

def test_numpy_and_torch_in_place_and_new(bps):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = bps.push_pull(x, name="np")
    assert type(out) is np.ndarray and out.shape == (3, 4) and not np.shares_memory(out, x)
    np.testing.assert_array_equal(out, x)
    assert bps.push_pull_inplace(x, average=False, name="np.in") is x
    t = torch.arange(12, dtype=torch.int64).reshape(3, 4)
    out = bps.push_pull(t, average=False, name="t")
    assert isinstance(out, torch.Tensor) and out.dtype == torch.int64 and out.data_ptr() != t.data_ptr()
    assert torch.equal(out, t)
    b = torch.ones(5, dtype=torch.bfloat16)
    assert torch.equal(bps.push_pull(b, name="bf16"), b)
    # a capsule (NumPy's): the result is a NumPy array
    np.testing.assert_array_equal(bps.push_pull(x.__dlpack__(), name="cap"), x)
    assert bps.broadcast(t, 0, name="bc") is t
    assert torch.equal(bps.allgather(t, name="ag"), t)
    assert bps.push_pull(np.zeros((0, 3), np.int8), name="empty").shape == (0, 3)
    assert bps.allgather(torch.zeros(0, 2), name="ag.empty").shape == (0, 2)


def test_bool_through_dlpack_0_8(bps):
    # kDLBool (code 6, 8 bits) is DLPack 0.8's; NumPy 1.24 and torch 1.13 do not export bool.
    flags = np.array([True, False, True])
    p = Producer(flags, 6, 8)
    assert bps.broadcast(p, 0, name="flags") is p
    np.testing.assert_array_equal(bps.allgather(Producer(flags, 6, 8), name="flags.ag"), flags)
    with pytest.raises(ValueError, match="bool tensors cannot be summed"):
        bps.push_pull(Producer(flags, 6, 8), average=False, name="flags.sum")


class _Lib:
    """A library's namespace: empty() on a device of its choosing, and from_dlpack()."""
    device = (1, 0)

    @staticmethod
    def empty(shape, dtype):
        return _Arr(np.empty(shape, dtype), 2, 32, device=_Lib.device)

    @staticmethod
    def from_dlpack(array):
        return ("from_dlpack", array)


class _Arr(Producer):
    dtype = np.float32

    def __array_namespace__(self):
        return _Lib


class _NoEmpty:
    from_dlpack = staticmethod(_Lib.from_dlpack)


class _Arr2(Producer):
    def __array_namespace__(self):
        return _NoEmpty


def test_outputs_from_the_array_library(bps, monkeypatch):
    x = np.arange(4, dtype=np.float32)
    out = bps.push_pull(_Arr(x, 2, 32), name="lib")
    assert isinstance(out, _Arr) and out.deleted == 1  # exported once, to check and fill it
    np.testing.assert_array_equal(out.buffer, x)
    # no empty(): a NumPy buffer through the library's from_dlpack
    tag, arr = bps.push_pull(_Arr2(x, 2, 32), name="lib2")
    assert tag == "from_dlpack" and type(arr) is np.ndarray
    np.testing.assert_array_equal(arr, x)
    monkeypatch.setattr(_Lib, "device", (3, 0))  # empty() put the output elsewhere
    with pytest.raises(ValueError, match=r"array 'lib3' is on DLPack device 1:0, but .*empty allocated the "
                                         r"output on 3:0; use the in-place call"):
        bps.push_pull(_Arr(x, 2, 32), name="lib3")


def test_deleter_runs_once_at_synchronize(bps):
    p = Producer(np.arange(6, dtype=np.int32), 0, 32)
    h = bps.push_pull_async_inplace(p, average=False, name="del")
    assert p.deleted == 0  # the core may still read and write the memory
    assert bps.synchronize(h) is p
    gc.collect()
    assert p.deleted == 1
    h = bps.push_pull_async(p, name="del")
    bps.synchronize(h)
    gc.collect()
    assert p.deleted == 2  # once per capsule


def test_numpy_reference_released_at_synchronize(bps):
    a = np.arange(100, dtype=np.float64)
    base = sys.getrefcount(a)
    h = bps.push_pull_async(a, name="ref")
    assert sys.getrefcount(a) == base + 1  # NumPy's DLPack tensor holds the array
    bps.synchronize(h)
    assert sys.getrefcount(a) == base


def test_torch_tensor_released_at_synchronize(bps):
    t = torch.arange(100, dtype=torch.float32)
    alive = weakref.ref(t)
    h = bps.push_pull_async(t, name="weak")
    del t
    gc.collect()
    assert alive() is not None  # the DLPack tensor keeps torch's tensor alive until synchronize
    bps.synchronize(h)
    gc.collect()
    assert alive() is None


def test_cuda_stream_protocol(bps):
    # A CUDA array: __dlpack__ gets the consumer stream (1, the legacy default stream, unless
    # given), and the core gets the CUDA kind, the device id and the stream (1 -> its null stream).
    from byteps import _basics, _tensor_view
    p = Producer(np.zeros(4, np.float32), 2, 32, device=(2, 3))
    view = _tensor_view.dlpack_view(p)
    assert p.streams == [1] and view.device == (_basics.core().DEVICE_CUDA, 3, 0)
    view = _tensor_view.dlpack_view(p, stream=0x1234)
    assert p.streams == [1, 0x1234] and view.device == (_basics.core().DEVICE_CUDA, 3, 0x1234)
    host = Producer(np.zeros(4, np.float32), 2, 32, device=(3, 0))  # kDLCUDAHost: host memory
    assert _tensor_view.dlpack_view(host).device == (0, 0, 0) and host.streams == [None]
    del view
    gc.collect()
    assert p.deleted == 2 and host.deleted == 1


# ---- bad input, each a named error

def test_no_dlpack(bps):
    with pytest.raises(TypeError, match=r"byteps.dlpack: array 'lst' has no DLPack \(__dlpack__"):
        bps.push_pull([1.0, 2.0], name="lst")
    with pytest.raises(TypeError, match=r"byteps.dlpack: builtins.list has no DLPack"):
        bps.push_pull_async_inplace([1.0, 2.0])


def test_unsupported_dtype(bps):
    with pytest.raises(TypeError, match=r"numpy.ndarray of shape \(3,\) has an unsupported dtype: DLPack code 5 "
                                        r"\(complex\), 64 bits, 1 lane"):
        bps.push_pull(np.zeros(3, np.complex64))
    with pytest.raises(TypeError, match=r"array 'u16' has an unsupported dtype: DLPack code 1 \(uint\), 16 bits"):
        bps.push_pull(torch.zeros(3, dtype=torch.int16).numpy().view(np.uint16), name="u16")
    with pytest.raises(TypeError, match=r"array 'b' cannot be exported through DLPack: Bool type is not supported"):
        bps.push_pull(torch.zeros(3, dtype=torch.bool), name="b")  # torch's own refusal, named


def test_unsupported_device(bps):
    p = Producer(np.zeros(3, np.float32), 2, 32, device=(4, 1))
    with pytest.raises(ValueError, match=r"array 'cl' is on an unsupported device: DLPack device type 4 "
                                         r"\(kDLOpenCL\), id 1"):
        bps.push_pull(p, name="cl")
    assert p.streams == []  # refused before exporting


def test_not_contiguous(bps):
    t = torch.zeros(3, 4).T  # torch exports strides (1, 4)
    for fn in (bps.push_pull, bps.push_pull_inplace, bps.push_pull_async):
        with pytest.raises(ValueError, match=r"torch.Tensor of shape \(4, 3\) is not C-contiguous; "
                                             r"pass a contiguous copy"):
            fn(t)
    p = Producer(np.zeros(6, np.float32), 2, 32, strides=(2,))
    with pytest.raises(ValueError, match="array 'every other' is not C-contiguous"):
        bps.push_pull(p, name="every other")
    assert p.deleted == 1  # a refused tensor is released too
    # extent-1 dimensions' strides do not matter
    np.testing.assert_array_equal(bps.push_pull(torch.zeros(3, 1).T, name="row"), np.zeros((1, 3), np.float32))


def test_read_only_numpy(bps):
    x = np.arange(4, dtype=np.int32)
    x.flags.writeable = False
    for fn in (bps.push_pull, bps.push_pull_inplace):
        with pytest.raises(ValueError, match=r"array 'ro' is read-only: NumPy does not export read-only arrays "
                                             r"through DLPack; pass a writable copy"):
            fn(x, name="ro")


def test_consumed_capsule(bps):
    from byteps import _basics
    capsule = np.zeros(3, np.float32).__dlpack__()
    owner = _basics.core().dlpack_view(capsule)[0]
    with pytest.raises(ValueError, match="capsule already consumed"):
        _basics.core().dlpack_view(capsule)
    with pytest.raises(ValueError, match=r"byteps.dlpack: array 'c': capsule already consumed"):
        bps.push_pull(capsule, name="c")
    assert owner.alive
    owner.release()
    assert not owner.alive
    owner.release()  # once only


# --------------------------------------------------------------------------------------------
# jobs

EVERY_DTYPE = PRELUDE.replace("import byteps.numpy as bps", "import byteps.dlpack as bps\nimport torch") + """
NP = ["float32", "float64", "float16", "uint8", "int8", "int16", "int32", "int64"]
TORCH = NP + ["bfloat16"]

def contribution(dtype, i, length=37):
    b = np.arange(length)
    if dtype == "uint8":
        return ((b % 9) + 2 * i).astype(dtype)
    if dtype == "int64":
        return ((b % 9) - 4 - 2 * i + (i + 1) * 2**40 * np.where(b % 2, 1, -1)).astype(dtype)
    if dtype.startswith("int"):
        return ((b % 9) - 4 - 2 * i).astype(dtype)
    return ((b % 13) - 6 + 0.5 * i).astype("float32" if dtype == "bfloat16" else dtype)

def want(dtype):
    total = sum(contribution(dtype, i).astype(np.float64 if dtype[0] in "fb" else np.int64) for i in range(n))
    mean = total / n if dtype[0] in "fb" else np.floor_divide(total, n)
    return total, mean

def host(v, lib):  # a result as NumPy (bfloat16 as float32, which holds it exactly)
    if lib == "np":
        return v
    return v.float().numpy() if v.dtype == torch.bfloat16 else v.numpy()

def as_(a, dtype):
    return a.astype(np.float32 if dtype == "bfloat16" else dtype)

for lib, dtypes in (("np", NP), ("torch", TORCH)):
    for dtype in dtypes:
        mine = contribution(dtype, rank)
        x = mine if lib == "np" else torch.from_numpy(mine).to(getattr(torch, dtype))
        copy = (lambda: x.copy()) if lib == "np" else (lambda: x.clone())
        total, mean = want(dtype)
        s = bps.push_pull(x, average=False, name=f"{lib}.sum.{dtype}")
        assert type(s) is type(x), type(s)
        check(f"{lib} sum {dtype}", host(s, lib), as_(total, dtype))
        check(f"{lib} mean {dtype}", host(bps.push_pull(x, name=f"{lib}.mean.{dtype}"), lib), as_(mean, dtype))
        y = copy()
        assert bps.push_pull_inplace(y, average=False, name=f"{lib}.in.{dtype}") is y
        check(f"{lib} inplace {dtype}", host(y, lib), as_(total, dtype))
        # broadcast from rank 1, allgather with one more row on rank 1
        z = copy()
        assert bps.broadcast(z, 1, name=f"{lib}.bc.{dtype}") is z
        check(f"{lib} bcast {dtype}", host(z, lib), as_(contribution(dtype, 1), dtype))
        g = bps.allgather(x.reshape(37, 1)[: 30 + rank], name=f"{lib}.ag.{dtype}")
        parts = [contribution(dtype, i).reshape(37, 1)[: 30 + i] for i in range(n)]
        check(f"{lib} allgather {dtype}", host(g, lib), as_(np.concatenate(parts), dtype))
# zero-size arrays, a capsule, async in flight together
check("empty", bps.push_pull(np.zeros((0, 5), np.float32), name="empty"), np.zeros((0, 5), np.float32))
assert tuple(bps.push_pull(torch.zeros(3, 0), name="empty.t").shape) == (3, 0)
check("capsule", bps.push_pull(np.full(9, rank + 1, np.int32).__dlpack__(), average=False, name="cap"),
      np.full(9, n * (n + 1) // 2, np.int32))
hs = [bps.push_pull_async(torch.full((1000 + k,), float(k + rank)), average=False, name=f"a.{k}") for k in range(20)]
for k, h in enumerate(hs):
    check(f"async {k}", bps.synchronize(h).numpy(), np.full(1000 + k, float(n * k + n * (n - 1) // 2), np.float32))
print("ALL OK", rank, flush=True)
"""


def test_every_dtype_numpy_and_torch(run_job):
    ok_count(run_job(2, 2, EVERY_DTYPE, env={"BYTEPS_PARTITION_BYTES": "4096"}, timeout=60), 2)


MIXED = PRELUDE.replace("import byteps.numpy as bps", "import byteps.dlpack as bps\nimport torch") + """
# worker 0 hands NumPy arrays, worker 1 torch tensors: the same bytes on the wire
for k, (dtype, size) in enumerate([("float32", 5000), ("int64", 77), ("float64", 1), ("int8", 300),
                                   ("float16", 64), ("uint8", 0)]):
    mine = ((np.arange(size) * (k + 1) + 3 * rank) % 50).astype(dtype)
    x = mine if rank == 0 else torch.from_numpy(mine.copy())
    out = bps.push_pull(x, average=False, name=f"mixed.{k}")
    assert type(out) is type(x), type(out)
    want = sum(((np.arange(size) * (k + 1) + 3 * i) % 50) for i in range(n)).astype(dtype)
    check(f"mixed {dtype}", out if rank == 0 else out.numpy(), want)
    y = x.copy() if rank == 0 else x.clone()
    bps.push_pull_inplace(y, average=False, name=f"mixed.in.{k}")
    check(f"mixed inplace {dtype}", y if rank == 0 else y.numpy(), want)
print("ALL OK", rank, flush=True)
"""


def test_mixed_numpy_and_torch_workers(run_job):
    ok_count(run_job(2, 1, MIXED, timeout=60), 2)
