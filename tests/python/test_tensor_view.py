"""byteps._tensor_view as the one conversion layer (issue 34): byteps.numpy, byteps.torch and
byteps.dlpack give the same dtype codes for the same dtypes, the same contiguity verdicts for the
same memory layouts, and the same device tuples for _basics.start (in one process, no job).

NumPy's bfloat16 (an extension dtype of ml_dtypes, not installed here) is not compared; bfloat16
is compared between torch and torch through DLPack.  The CUDA device tuple is compared with
torch.cuda.current_stream stubbed (no GPU here).
"""

from __future__ import annotations

import types

import numpy as np
import pytest

from test_dlpack import Producer

torch = pytest.importorskip("torch", reason="PyTorch (python3-torch) is not installed")

pytestmark = pytest.mark.usefixtures("require_core")

SHARED = ("float32", "float64", "float16", "uint8", "int8", "int16", "int32", "int64", "bool")


@pytest.fixture
def tv():
    from byteps import _tensor_view
    return _tensor_view


def test_one_table_of_core_dtype_names(tv):
    from byteps import _basics
    from byteps.torch import ops
    core = _basics.core()
    codes = [getattr(core, n) for n in tv.CORE_DTYPES]
    assert len(set(codes)) == len(codes)  # one distinct code per name
    assert set(tv.NUMPY_CODES.values()) <= set(tv.CORE_DTYPES)
    assert set(ops._CODES.values()) == set(tv.CORE_DTYPES)  # torch has every dtype the core has
    # the looked-up codes are the core's, kept after the first lookup; None for a dtype without a name
    assert ops._CORE_CODES[torch.int16] == core.INT16 and ops._CORE_CODES[torch.int16] == core.INT16
    assert ops._CORE_CODES[torch.complex64] is None and torch.complex64 not in ops._CORE_CODES
    assert tv.CoreCodes({"x": "FLOAT64"})["x"] == core.FLOAT64


@pytest.mark.parametrize("dtype", SHARED)
def test_same_dtype_code_in_every_plugin(tv, dtype):
    from byteps import _basics
    from byteps.torch import ops
    a = np.zeros((2, 3), dtype)
    t = torch.zeros((2, 3), dtype=getattr(torch, dtype))
    want = getattr(_basics.core(), tv.NUMPY_CODES[dtype])
    got = {
        "numpy": tv.check_numpy(a, inplace=True),
        "torch": ops.check_tensor(t),
        "torch dtype": ops.dtype_code(t.dtype),
    }
    if dtype == "bool":  # NumPy 1.24 and torch 1.13 export no bool through DLPack: DLPack 0.8's bool (code 6)
        got["dlpack bool"] = tv.dlpack_view(Producer(a, 6, 8)).code
    else:
        got["dlpack numpy"] = tv.dlpack_view(a).code
        got["dlpack torch"] = tv.dlpack_view(t).code
    assert got == dict.fromkeys(got, want)


def test_bfloat16_torch_and_dlpack(tv):
    from byteps import _basics
    from byteps.torch import ops
    t = torch.zeros(4, dtype=torch.bfloat16)
    assert ops.check_tensor(t) == tv.dlpack_view(t).code == _basics.core().BFLOAT16


def test_unsupported_dtype_refused_by_every_plugin(tv):
    from byteps.torch import ops
    a = np.zeros(3, np.complex64)
    t = torch.zeros(3, dtype=torch.complex64)
    with pytest.raises(TypeError, match=r"^byteps does not support arrays of dtype complex64 \(supported: "
                                        r"float32, .*, bool, in native byte order\)$"):
        tv.check_numpy(a, inplace=False)
    with pytest.raises(TypeError, match=r"^byteps does not support arrays of dtype >f4 "):
        tv.check_numpy(np.zeros(3, ">f4"), inplace=False)
    with pytest.raises(TypeError, match=r"^byteps does not support tensors of dtype torch.complex64 \(supported: "
                                        r"float32, .*, bool\)$"):
        ops.check_tensor(t)
    for x in (a, t):
        with pytest.raises(TypeError, match="has an unsupported dtype: DLPack code 5 \\(complex\\)"):
            tv.dlpack_view(x)


# (array, C-contiguous?): extent-1 dimensions' strides do not count, in any plugin.
def _layouts():
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    return [
        ("contiguous", base, True),
        ("transposed", base.T, False),
        ("every other column", base[:, ::2], False),
        ("row of a column, transposed", np.zeros((3, 1), np.float32).T, True),
        ("last rows", base[1:], True),
    ]


@pytest.mark.parametrize("case", range(len(_layouts())))
def test_same_contiguity_verdicts(tv, case):
    from byteps.torch import ops
    what, a, contiguous = _layouts()[case]
    t = torch.from_numpy(a)
    assert t.stride() == tuple(s // 4 for s in a.strides)  # the same layout in both
    checks = {
        "numpy": lambda: tv.check_numpy(a, inplace=False),
        "torch": lambda: ops.check_tensor(t),
        "dlpack numpy": lambda: tv.dlpack_view(a),
        "dlpack torch": lambda: tv.dlpack_view(t),
    }
    verdicts = {}
    for plugin, check in checks.items():
        try:
            check()
            verdicts[plugin] = True
        except ValueError as err:
            assert "contiguous; pass " in str(err), (plugin, err)
            verdicts[plugin] = False
    assert verdicts == dict.fromkeys(checks, contiguous), what


def test_not_contiguous_messages_unchanged(tv, monkeypatch):
    from byteps import _basics
    from byteps.torch import hvd_common, ops
    monkeypatch.setattr(_basics, "is_initialized", lambda: True)  # hvd's check wants a job; none is needed
    a = np.zeros((3, 4), np.float32).T
    with pytest.raises(ValueError, match=r"^array of shape \(4, 3\) is not C-contiguous; "
                                         r"pass np.ascontiguousarray\(x\)$"):
        tv.check_numpy(a, inplace=False)
    with pytest.raises(ValueError, match=r"^tensor of shape \(4, 3\) is not contiguous; pass tensor.contiguous\(\)$"):
        ops.check_tensor(torch.from_numpy(a))
    with pytest.raises(ValueError, match=r"^byteps.dlpack: numpy.ndarray of shape \(4, 3\) is not C-contiguous; "
                                         r"pass a contiguous copy$"):
        tv.dlpack_view(a)
    with pytest.raises(ValueError, match=r"^allreduce: tensor of shape \(4, 3\) is not contiguous; "
                                         r"pass tensor.contiguous\(\)$"):
        hvd_common.check_tensor(torch.from_numpy(a), hvd_common.REDUCE_DTYPES, "allreduce")
    ro = np.zeros(3, np.float32)
    ro.flags.writeable = False
    assert tv.check_numpy(ro, inplace=False) == tv.numpy_dtype_code(ro)  # read-only is fine out of place
    with pytest.raises(ValueError, match=r"^array of shape \(3,\) is read-only; an in-place push_pull writes the "
                                         r"result into it \(use push_pull for a new array\)$"):
        tv.check_numpy(ro, inplace=True)


def test_same_device_tuples(tv, monkeypatch):
    from byteps import _basics
    from byteps.torch import ops
    cuda = _basics.core().DEVICE_CUDA
    host = np.zeros(3, np.float32)
    assert ops._device_of(torch.zeros(3)) == tv.dlpack_view(host).device == tv.HOST_DEVICE == (0, 0, 0)
    # A CUDA tensor (stubbed: no GPU here) on device 1: torch's current stream goes to the core as
    # is; its default stream (handle 0) is the null stream, as DLPack's legacy default stream is.
    fake = types.SimpleNamespace(is_cuda=True, device=types.SimpleNamespace(index=1))
    for torch_stream, dlpack_stream, core_stream in ((0, None, 0), (0x1234, 0x1234, 0x1234)):
        monkeypatch.setattr(torch.cuda, "current_stream",
                            lambda device, s=torch_stream: types.SimpleNamespace(cuda_stream=s))
        p = Producer(np.zeros(4, np.float32), 2, 32, device=(2, 1))
        want = (cuda, 1, core_stream)
        assert ops._device_of(fake) == tv.dlpack_view(p, stream=dlpack_stream).device == want
