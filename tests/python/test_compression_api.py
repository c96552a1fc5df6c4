"""byteps.torch.Compression and how compression attributes reach the core (issue 32).

The factories' exact attrs strings and their ValueErrors need no core.  The paths that push_pull
(ops, DistributedOptimizer, DistributedDataParallel, CrossBarrier, Horovod's allreduce, numpy)
run in a one-worker job of this process; the attrs each sends are captured by wrapping
``byteps._basics.start`` / ``start_reduce`` (the calls into the core).  The learning rate and
the per-name parameters are captured where they leave for the core (``_basics._core_function``).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from byteps import _basics, _core_compression  # noqa: E402
from byteps.torch.compression import Compression, attrs_of, has_error_feedback  # noqa: E402

# --------------------------------------------------------------------------------------------
# the factories (no core)


@pytest.mark.parametrize("compressor, attrs", [
    (Compression.none, ""),
    (Compression.fp16, "cast=fp16"),
    (Compression.bf16, "cast=bf16"),
    (Compression.onebit(), "compressor=onebit;scaling=false"),
    (Compression.onebit(scaling=True, ef="vanilla"), "compressor=onebit;scaling=true;ef=vanilla"),
    (Compression.topk(0.01, ef="vanilla"), "compressor=topk;k=0.01;ef=vanilla"),
    (Compression.topk(100, cast="fp16"), "compressor=topk;k=100;cast=fp16"),
    (Compression.topk(0.5, momentum="nesterov", mu=0.9), "compressor=topk;k=0.5;momentum=nesterov;mu=0.9"),
    (Compression.randomk(0.01, ef="vanilla"), "compressor=randomk;k=0.01;seed=0;ef=vanilla"),
    (Compression.randomk(7, seed=42, cast="bf16"), "compressor=randomk;k=7;seed=42;cast=bf16"),
    (Compression.dithering(8), "compressor=dithering;k=8;seed=0;partition=linear;normalize=max"),
    (Compression.dithering(4, partition="natural", normalize="l2", seed=3, ef="vanilla"),
     "compressor=dithering;k=4;seed=3;partition=natural;normalize=l2;ef=vanilla"),
    (Compression.onebit(ef="none", momentum=None), "compressor=onebit;scaling=false"),
])
def test_factory_attrs(compressor, attrs):
    assert compressor.attrs == attrs
    assert attrs_of(compressor) == attrs
    x = torch.arange(4.0)
    compressed, ctx = compressor.compress(x)
    assert compressed is x and compressor.decompress(compressed, ctx) is x


@pytest.mark.parametrize("params, attrs", [
    ({"compressor": "topk", "k": 0.01, "ef": "vanilla"}, "compressor=topk;k=0.01;ef=vanilla"),
    ({"compressor": "onebit", "scaling": True}, "compressor=onebit;scaling=true"),
    ({"byteps_compressor_type": "randomk", "byteps_compressor_k": "0.05", "byteps_seed": 9},
     "compressor=randomk;k=0.05;seed=9"),
    ({"compressor": "dithering", "k": 8, "partition": "natural", "normalize": "l2"},
     "compressor=dithering;k=8;seed=0;partition=natural;normalize=l2"),
    ({"compressor": "topk", "k": 0.01, "fp16": True}, "compressor=topk;k=0.01;cast=fp16"),
    ({"compressor": "onebit", "ef": "vanilla", "momentum": "nesterov", "mu": 0.9},
     "compressor=onebit;scaling=false;ef=vanilla;momentum=nesterov;mu=0.9"),
    ({"fp16": True}, "cast=fp16"),
    ({}, ""),
])
def test_from_params(params, attrs):
    assert Compression.from_params(params).attrs == attrs


def test_named_table():
    assert Compression.named("none") is Compression.none
    assert Compression.named("fp16") is Compression.fp16
    assert Compression.named("onebit").attrs == "compressor=onebit;scaling=true;ef=vanilla"
    assert Compression.named("topk").attrs == "compressor=topk;k=0.01;ef=vanilla"
    assert Compression.named("randomk").attrs == "compressor=randomk;k=0.01;seed=0;ef=vanilla"
    assert Compression.named("dithering").attrs == "compressor=dithering;k=8;seed=0;partition=linear;normalize=max"
    with pytest.raises(ValueError, match="unknown compression name 'zip'"):
        Compression.named("zip")


@pytest.mark.parametrize("make, arg", [
    (lambda: Compression.topk(0), "k"),
    (lambda: Compression.topk(-1), "k"),
    (lambda: Compression.topk("many"), "k"),
    (lambda: Compression.randomk(0.0), "k"),
    (lambda: Compression.dithering(0), "k"),
    (lambda: Compression.dithering(2.5), "k"),
    (lambda: Compression.topk(0.1, ef="fancy"), "ef"),
    (lambda: Compression.topk(0.1, momentum="heavy", mu=0.9), "momentum"),
    (lambda: Compression.topk(0.1, momentum="nesterov"), "mu"),
    (lambda: Compression.topk(0.1, mu=0.9), "mu"),
    (lambda: Compression.topk(0.1, momentum="nesterov", mu=1.0), "mu"),
    (lambda: Compression.dithering(4, partition="log"), "partition"),
    (lambda: Compression.dithering(4, normalize="l1"), "normalize"),
    (lambda: Compression.topk(0.1, cast="fp8"), "cast"),
    (lambda: Compression.randomk(0.1, seed=-1), "seed"),
    (lambda: Compression.onebit(scaling="yes"), "scaling"),
    (lambda: Compression.from_params({"compressor": "zip"}), "compressor"),
    (lambda: Compression.from_params({"compressor": "topk"}), "k"),
    (lambda: Compression.from_params({"compressor": "topk", "k": 0.1, "colour": 1}), "colour"),
    (lambda: Compression.from_params({"compressor": "onebit", "k": 0.1}), "'k'"),
    (lambda: Compression.from_params({"compressor": "onebit", "fp16": True}), "fp16"),
])
def test_value_errors_name_the_argument(make, arg):
    with pytest.raises(ValueError, match=arg):
        make()


def test_error_feedback_detection():
    assert has_error_feedback(Compression.topk(0.1, ef="vanilla"))
    assert not has_error_feedback(Compression.topk(0.1))
    assert not has_error_feedback(Compression.fp16) and not has_error_feedback(Compression.none)
    assert has_error_feedback("compressor=onebit;ef_type=vanilla")


# --------------------------------------------------------------------------------------------
# the paths into the core (a one-worker job in this process)


@pytest.fixture
def sent(monkeypatch, require_core):
    """The (core name, attrs) of every push_pull / reduction started, in order."""
    calls = []
    start, start_reduce = _basics.start, _basics.start_reduce

    def rec_start(name, *args, attrs="", **kwargs):
        calls.append((_basics.core_name(name), attrs))
        return start(name, *args, attrs=attrs, **kwargs)

    def rec_reduce(name, *args, attrs="", **kwargs):
        calls.append((_basics.core_name(name), attrs))
        return start_reduce(name, *args, attrs=attrs, **kwargs)

    monkeypatch.setattr(_basics, "start", rec_start)
    monkeypatch.setattr(_basics, "start_reduce", rec_reduce)
    return calls


@pytest.fixture
def core_calls(monkeypatch):
    """The calls of the core functions newer than some cores (set_learning_rate, declare_tensor_params)."""
    calls = []

    def fake(name):
        return lambda *args: calls.append((name, *args))

    monkeypatch.setattr(_core_compression, "_core_function", fake)
    return calls


@pytest.fixture
def bps(standalone, sent):
    return standalone("byteps.torch")


TOPK = Compression.topk(0.01, ef="vanilla")


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 1))


def _backward(model):
    model(torch.ones(2, 4)).sum().backward()


def test_push_pull_carries_attrs(bps, sent):
    x = torch.arange(6.0)
    out = bps.push_pull(x, name="pp", compression=TOPK)
    torch.testing.assert_close(out, x)
    bps.synchronize(bps.push_pull_async(x, name="ppa", compression=Compression.fp16))
    bps.synchronize(bps.push_pull_async_inplace(x.clone(), name="ppi", compression="compressor=onebit"))
    bps.synchronize(bps.push_pull_async(x, name="plain"))
    assert sent == [("byteps.pp", TOPK.attrs), ("byteps.ppa", "cast=fp16"), ("byteps.ppi", "compressor=onebit"),
                    ("byteps.plain", "")]


def test_a_cast_leaves_integer_tensors_alone(bps, sent):
    # As the Python cast did: fp16/bf16 apply to floating-point tensors only; a compressor is sent
    # as it is (the core refuses it for integers, naming the tensor).
    ints = torch.arange(4, dtype=torch.int32)
    torch.testing.assert_close(bps.push_pull(ints, average=False, name="ints", compression=Compression.fp16), ints)
    bps.allreduce(ints, op=bps.Sum, name="hints", compression=Compression.bf16)
    import byteps.numpy as bnp

    bnp.push_pull(np.arange(3, dtype=np.int64), average=False, name="nints", compression=Compression.fp16)
    assert sent[0] == ("byteps.ints", "")
    assert "cast" not in sent[1][1]
    assert sent[2] == ("byteps.nints", "")


def test_distributed_optimizer_carries_attrs_and_learning_rate(bps, sent, core_calls):
    model = _model()
    opt = bps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.25),
                                   named_parameters=model.named_parameters(), compression=TOPK)
    _backward(model)
    p = next(model.parameters())
    handle, ctx = opt._push_pull_grad_async(p)  # what the gradient hook runs with several workers
    bps.synchronize(handle)
    assert sent == [("byteps.Gradient.0.weight", TOPK.attrs)]
    opt.step()
    opt.param_groups[0]["lr"] = 0.125
    opt.step()
    assert [c for c in core_calls if c[0] == "set_learning_rate"] == [("set_learning_rate", 0.25),
                                                                    ("set_learning_rate", 0.125)]


def test_optimizer_without_ef_sets_no_learning_rate(bps, core_calls):
    model = _model()
    opt = bps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.25),
                                   named_parameters=model.named_parameters(), compression=Compression.topk(0.1))
    _backward(model)
    opt.step()
    assert core_calls == []


def test_compression_params(bps, sent):
    model = _model()
    opt = bps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   compression_params={"compressor": "onebit", "scaling": True})
    _backward(model)
    bps.synchronize(opt._push_pull_grad_async(next(model.parameters()))[0])
    assert sent[-1] == ("byteps.Gradient.0.weight", "compressor=onebit;scaling=true")
    with pytest.raises(ValueError, match="compression or compression_params, not both"):
        bps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters(),
                                 compression=TOPK, compression_params={"compressor": "onebit"})


def test_ddp_carries_attrs(bps, sent):
    from byteps.torch.parallel import DistributedDataParallel

    model = DistributedDataParallel(_model(), compression=Compression.bf16)
    _backward(model)
    p = next(model.module.parameters())
    bps.synchronize(model._push_pull_grad_async(p)[0])
    assert sent == [("byteps.Gradient.0.weight", "cast=bf16")]


def test_cross_barrier_carries_attrs_and_learning_rate(bps, sent, core_calls):
    from byteps.torch.cross_barrier import CrossBarrier

    model = _model()
    opt = CrossBarrier(model, torch.optim.SGD(model.parameters(), lr=0.5), named_parameters=model.named_parameters(),
                       compression=TOPK, num_steps=10)
    _backward(model)
    p = next(model.parameters())
    bps.synchronize(opt._push_pull_grad_async(p)[0])
    assert sent == [("byteps.Gradient.0.weight", TOPK.attrs)]
    opt.step()
    assert ("set_learning_rate", 0.5) in core_calls


def test_horovod_allreduce_carries_attrs(bps, sent):
    x = torch.arange(4.0)
    out = bps.allreduce(x, name="ar", compression=TOPK)
    torch.testing.assert_close(out, x)
    assert out.dtype == torch.float32
    outs = bps.grouped_allreduce([x, x + 1], name="gar", compression=Compression.fp16)
    torch.testing.assert_close(outs[1], x + 1)
    bps.allreduce(x, name="plain")
    assert len(sent) == 4
    assert sent[0][1].endswith(";" + TOPK.attrs) and sent[0][1].startswith("op=allreduce;")
    assert all(a.endswith(";cast=fp16") for _, a in sent[1:3])
    assert "compressor" not in sent[3][1] and "cast" not in sent[3][1]


def test_horovod_optimizer_on_the_allreduce_path(bps, sent):
    # op=Max goes through Horovod's allreduce; the attrs go along (a core that compresses refuses a
    # compressed max, naming the tensor).
    model = _model()
    opt = bps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), compression=TOPK, op=bps.Max)
    _backward(model)
    try:
        bps.synchronize(opt._push_pull_grad_async(next(model.parameters()))[0])
    except Exception as err:  # noqa: BLE001
        assert "cannot be compressed" in str(err) and "Gradient.0.weight" in str(err)
    assert len(sent) == 1 and sent[0][0].endswith("Gradient.0.weight")
    assert sent[0][1].startswith("op=allreduce;") and sent[0][1].endswith(";" + TOPK.attrs)


def test_numpy_push_pull_carries_attrs(standalone, sent):
    bnp = standalone("byteps.numpy")
    a = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(bnp.push_pull(a, name="np", compression=TOPK), a)
    bnp.push_pull_inplace(a.copy(), name="np2", compression="cast=bf16")
    assert sent == [("byteps.np", TOPK.attrs), ("byteps.np2", "cast=bf16")]
    with pytest.raises(TypeError, match="compression must be"):
        bnp.push_pull(a, name="np3", compression=3)


def test_declare_tensor_params(bps, core_calls):
    bps.declare_tensor("Gradient.fc.weight", byteps_compressor_type="TopK", byteps_compressor_k=0.01,
                       byteps_ef_type="vanilla", byteps_compressor_onebit_scaling=True)
    assert core_calls == [("declare_tensor_params", "byteps.Gradient.fc.weight",
                           {"byteps_compressor_type": "topk", "byteps_compressor_k": "0.01",
                            "byteps_ef_type": "vanilla", "byteps_compressor_onebit_scaling": "true"})]
    with pytest.raises(TypeError, match="'colour'"):
        bps.declare_tensor("x", colour="red")
    import byteps.numpy as bnp

    bnp.declare_tensor("w", byteps_compressor_type="onebit")
    assert core_calls[-1] == ("declare_tensor_params", "byteps.w", {"byteps_compressor_type": "onebit"})


def test_a_core_without_the_functions_says_so(monkeypatch, bps):
    class Old:
        pass

    with monkeypatch.context() as m:  # undone before the fixture shuts the real core down
        m.setattr(_basics, "core", lambda: Old())
        with pytest.raises(RuntimeError, match="no set_learning_rate: it predates"):
            bps.set_learning_rate(0.1)
        with pytest.raises(RuntimeError, match="no declare_tensor_params: it predates"):
            bps.declare_tensor("x", byteps_compressor_type="topk")
