#!/usr/bin/env python3
"""The GPU path's checks and figures, one step per call (scripts/gpu-check.sh runs them all):

    python3 scripts/gpu_check.py STEP OUT.json

Each step writes OUT.json ({"ok": bool, ...figures}; {"ok": false, "skipped": why} where torch sees
no usable GPU) from rank 0 and exits non-zero when a check failed. The steps and how each is run:

    dtypes       bpsrun -n 1 -s 1 --force-distributed: for every dtype and size class, push_pull of
                 a CUDA tensor (in and out of place, average or not) equals the CPU tensor's, through
                 a real server.
    speed        bpsrun -n 1 -s 1 --force-distributed: CUDA-tensor push_pull time against the same
                 push_pull of a CPU tensor (target: within 10 %), 4 / 64 / 256 MiB, medians of 7.
    copies       one process, no launcher (a job of one worker: a CUDA tensor's push_pull is the
                 copy stages alone, device to pinned host and back): the copy stages' bandwidth
                 against pinned cudaMemcpy in each direction, one after the other and overlapped
                 (target: >= 80 % of pinned cudaMemcpy).
    collectives  bpsrun -n 2 -s 1: broadcast (from each root) and allgather of CUDA tensors.
    worker       bpsrun -n 2 -s 1: exact sums of CUDA tensors across 2 processes sharing the GPU, and
                 DistributedOptimizer on CUDA against single-process training of the same data.
    dlpack       bpsrun -n 2 -s 1: byteps.dlpack on CuPy and JAX device arrays (those importable):
                 exact sums out of place (the result on the input's device) and in place, broadcast
                 and allgather (CuPy; JAX arrays are immutable: out of place only). NEVER RUN ON A
                 GPU YET (written without a GPU machine); gpu-check.sh runs it last (GPU_CHECK_DLPACK=0: not).

GPU_CHECK_DEVICE=cpu runs every step with CPU tensors in place of CUDA ones: not a check of the GPU
path, a rehearsal of this script's own logic on a machine without a GPU (tests/python runs it).
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time

import torch

import byteps.torch as bps

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.int8,
          torch.uint8]
DEV = os.environ.get("GPU_CHECK_DEVICE", "cuda")
ON_GPU = DEV == "cuda"


def sync() -> None:
    if ON_GPU:
        torch.cuda.synchronize()


def pinned(t: torch.Tensor) -> torch.Tensor:
    return t.pin_memory() if ON_GPU else t


def new_stream():
    return torch.cuda.Stream() if ON_GPU else None


def on(s):
    return torch.cuda.stream(s) if s is not None else contextlib.nullcontext()


def no_gpu_reason() -> str | None:
    if ON_GPU and not torch.cuda.is_available():
        return (f"torch {torch.__version__} sees no usable GPU (torch.version.cuda={torch.version.cuda}, "
                f"device count {torch.cuda.device_count()})")
    return None


def timed(fn, reps: int) -> float:
    """The median wall time of `fn` over `reps` runs, the GPU drained before and after each."""
    fn()  # warm-up: first-use costs (declaration, staging allocation) are not the steady state
    sync()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def size_classes(dt: torch.dtype) -> list[int]:
    """Elements: one, small, just over one 4 MiB partition (a partial last partition), and large
    (only for two dtypes, to keep the step short)."""
    elem = torch.empty(0, dtype=dt).element_size()
    sizes = [1, 1000, (4 << 20) // elem + 7]
    if dt in (torch.float32, torch.uint8):
        sizes.append(16 << 20)
    return sizes


def dtypes() -> dict:
    fails, checked = [], 0
    for dt in DTYPES:
        for n in size_classes(dt):
            base = (torch.arange(n) % 7).to(dt)
            for in_place in (False, True):
                for average in ((False, True) if dt.is_floating_point else (False,)):
                    name = f"chk.{str(dt).split('.')[-1]}.{n}.{int(in_place)}.{int(average)}"
                    cpu = bps.push_pull(base.clone(), average=average, name=name + ".cpu")
                    x = base.to(DEV)
                    got = bps.push_pull_inplace(x, average=average, name=name) if in_place else \
                        bps.push_pull(x, average=average, name=name)
                    checked += 1
                    if got.device.type != DEV:
                        fails.append(f"{name}: result on {got.device}")
                    elif not torch.equal(got.cpu(), cpu):
                        fails.append(f"{name}: differs from the CPU tensor's result")
    print(f"CHECK push_pull of CUDA tensors == CPU tensors: {checked} cases, {len(fails)} mismatches {fails[:5]}",
          flush=True)
    return {"ok": not fails, "cases": checked, "mismatches": fails}


def speed() -> dict:
    figures, worst = {}, 0.0
    for mib in (4, 64, 256):
        n = mib << 18  # float32 elements
        cpu_t, gpu_t = torch.ones(n), torch.ones(n, device=DEV)
        t_cpu = timed(lambda: bps.push_pull_inplace(cpu_t, average=False, name=f"speed.cpu.{mib}"), 7)
        t_gpu = timed(lambda: bps.push_pull_inplace(gpu_t, average=False, name=f"speed.gpu.{mib}"), 7)
        worst = max(worst, t_gpu / t_cpu)
        figures[f"{mib}MiB"] = {"push_pull_cpu_ms": t_cpu * 1e3, "push_pull_cuda_ms": t_gpu * 1e3,
                                "cuda_over_cpu": t_gpu / t_cpu}
        print(f"FIGURE push_pull {mib} MiB through a server: CUDA tensor {t_gpu * 1e3:.2f} ms, CPU tensor "
              f"{t_cpu * 1e3:.2f} ms: {t_gpu / t_cpu:.2f}x (target <= 1.10x)", flush=True)
    # A figure, not a check: the target is reported as reached or missed by gpu-check.sh's reader.
    return {"ok": True, "figures": figures, "worst_cuda_over_cpu": worst, "target_reached": worst <= 1.10}


def copies() -> dict:
    figures, worst = {}, float("inf")
    for mib in (16, 64, 256):
        n = mib << 18
        dev, dev2 = torch.ones(n, device=DEV), torch.empty(n, device=DEV)
        host, host2 = pinned(torch.empty(n)), pinned(torch.ones(n))
        t_d2h = timed(lambda: host.copy_(dev, non_blocking=True), 7)
        t_h2d = timed(lambda: dev2.copy_(host2, non_blocking=True), 7)
        d2h_stream, h2d_stream = new_stream(), new_stream()

        def both():  # each direction on its own stream, as the copy stages use them
            with on(d2h_stream):
                host.copy_(dev, non_blocking=True)
            with on(h2d_stream):
                dev2.copy_(host2, non_blocking=True)
        t_both = timed(both, 7)
        t_stages = timed(lambda: bps.push_pull_inplace(dev, average=False, name=f"copies.{mib}"), 7)
        if not torch.equal(dev[:4].cpu(), torch.ones(4)):
            raise RuntimeError(f"copies.{mib}: a one-worker push_pull changed the tensor")
        nbytes = n * 4
        serial = t_d2h + t_h2d
        if ON_GPU and t_stages < 0.5 * max(t_d2h, t_h2d):  # every byte crosses the bus both ways
            print(f"CHECK copies {mib} MiB: {t_stages * 1e3:.3f} ms is faster than one direction's memcpy "
                  f"({max(t_d2h, t_h2d) * 1e3:.3f} ms): the copy stages did not run", flush=True)
            return {"ok": False, "failure": f"{mib} MiB: the copy stages did not run", "figures": figures}
        fig = {"pinned_d2h_GBps": nbytes / t_d2h / 1e9, "pinned_h2d_GBps": nbytes / t_h2d / 1e9,
               "pinned_both_overlapped_ms": t_both * 1e3, "pinned_one_after_other_ms": serial * 1e3,
               "copy_stages_ms": t_stages * 1e3,
               "stages_vs_one_after_other": serial / t_stages, "stages_vs_overlapped": t_both / t_stages}
        figures[f"{mib}MiB"] = fig
        worst = min(worst, fig["stages_vs_one_after_other"])
        print(f"FIGURE {mib} MiB: pinned cudaMemcpy D2H {fig['pinned_d2h_GBps']:.1f} GB/s, H2D "
              f"{fig['pinned_h2d_GBps']:.1f} GB/s; copy stages (D2H + H2D of every partition) {t_stages * 1e3:.2f} ms "
              f"= {serial / t_stages:.2f}x the two memcpys one after the other, {t_both / t_stages:.2f}x the two "
              f"overlapped (target >= 0.80x)", flush=True)
    return {"ok": True, "figures": figures, "worst_stages_vs_memcpy": worst, "target_reached": worst >= 0.80}


def collectives() -> dict:
    rank, size = bps.rank(), bps.size()
    fails = []
    for dt in (torch.float32, torch.float16, torch.int64, torch.uint8):
        for n in (5, 300001):
            for root in range(size):
                x = ((torch.arange(n) % 11) + rank).to(dt).to(DEV)
                got = bps.broadcast(x, root, name=f"bc.{str(dt).split('.')[-1]}.{n}.{root}")
                want = ((torch.arange(n) % 11) + root).to(dt)
                if got.device.type != DEV or not torch.equal(got.cpu(), want):
                    fails.append(f"broadcast {dt}[{n}] from {root}")
            # allgather: rank r contributes r + 1 rows (uneven first dimensions)
            x = torch.full((rank + 1, n), rank, dtype=dt, device=DEV)
            got = bps.allgather(x, name=f"ag.{str(dt).split('.')[-1]}.{n}")
            want = torch.cat([torch.full((r + 1, n), r, dtype=dt) for r in range(size)])
            if got.device.type != DEV or not torch.equal(got.cpu(), want):
                fails.append(f"allgather {dt}[{n}]")
    print(f"CHECK rank {rank}: broadcast and allgather of CUDA tensors: {len(fails)} failures {fails[:5]}", flush=True)
    return {"ok": not fails, "failures": fails}


def worker() -> dict:
    rank, size = bps.rank(), bps.size()
    fails = []
    for dt in DTYPES:
        for n in (3, 70001):
            x = ((torch.arange(n) % 5) * (rank + 1)).to(dt).to(DEV)
            want = sum(((torch.arange(n) % 5) * (r + 1)) for r in range(size)).to(dt)
            if not torch.equal(bps.push_pull(x, average=False, name=f"w.{dt}.{n}").cpu(), want):
                fails.append(f"{dt}[{n}]")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).to(DEV)
    reference = [p.detach().clone() for p in model.parameters()]
    opt = bps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    data = [(torch.randn(16, 32, generator=torch.Generator().manual_seed(s)),
             torch.randn(16, 4, generator=torch.Generator().manual_seed(100 + s))) for s in range(2 * 5)]
    for step in range(5):
        x, y = data[2 * step + rank]
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x.to(DEV)), y.to(DEV)).backward()
        opt.step()
    # Single-process training on both workers' batches (the mean of the two gradients).
    ref = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).to(DEV)
    with torch.no_grad():
        for p, q in zip(ref.parameters(), reference):
            p.copy_(q)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(5):
        ref_opt.zero_grad()
        loss = sum(torch.nn.functional.mse_loss(ref(x.to(DEV)), y.to(DEV)) for x, y in data[2 * step:2 * step + 2]) / 2
        loss.backward()
        ref_opt.step()
    diff = max(float((p - q).abs().max()) for p, q in zip(model.parameters(), ref.parameters()))
    if diff > 1e-4:
        fails.append(f"training differs from single-process by {diff}")
    print(f"CHECK worker {rank}: {len(fails)} failures {fails}", flush=True)
    return {"ok": not fails, "failures": fails, "max_param_diff": diff}


def _dlpack_libs() -> tuple[list, list]:
    """(name, to the library's device array, back to NumPy, writable in place, on the device?) for
    each library the dlpack step uses, and the reasons of those it cannot."""
    import numpy as np
    if not ON_GPU:  # the rehearsal: the same logic on NumPy and torch CPU arrays
        return [("numpy", np.array, lambda a: a, True, lambda a: type(a) is np.ndarray),
                ("torch", lambda a: torch.from_numpy(a.copy()), lambda a: a.numpy(), True,
                 lambda a: isinstance(a, torch.Tensor))], []
    libs, missing = [], []
    try:
        import cupy as cp
        libs.append(("cupy", cp.asarray, cp.asnumpy, True,
                     lambda a: isinstance(a, cp.ndarray) and a.device.id == torch.cuda.current_device()))
    except ImportError as err:
        missing.append(f"cupy: {err}")
    try:
        import jax
        gpu = jax.devices("gpu")[0]
        # JAX reads on streams of its own, not ordered after the legacy default stream byteps
        # hands the core: a device-wide synchronize first.
        libs.append(("jax", lambda a: jax.device_put(a, gpu), lambda a: (sync(), np.asarray(a))[1], False,
                     lambda a: set(a.devices()) == {gpu}))
    except (ImportError, RuntimeError) as err:
        missing.append(f"jax: {err}")
    return libs, missing


def dlpack() -> dict:
    """byteps.dlpack on CuPy and JAX device arrays (never run on a GPU yet)."""
    import numpy as np
    import byteps.dlpack as dl
    rank, size = bps.rank(), bps.size()
    libs, missing = _dlpack_libs()
    if not libs:
        return {"ok": False, "skipped": "; ".join(missing)}
    fails = []
    for lib, make, host, writable, on_device in libs:
        for dt in ("float32", "float16", "int32", "int64", "uint8"):
            for n in (5, 300001):
                tag = f"{lib}.{dt}.{n}"
                mine = ((np.arange(n) % 7) * (rank + 1)).astype(dt)
                want = sum(((np.arange(n) % 7) * (r + 1)) for r in range(size)).astype(dt)
                out = dl.push_pull(make(mine), average=False, name=f"dl.{tag}")
                if not on_device(out) or not np.array_equal(host(out), want):
                    fails.append(f"push_pull {tag}")
                if writable:
                    y = make(mine)
                    dl.push_pull_inplace(y, average=False, name=f"dl.in.{tag}")
                    if not np.array_equal(host(y), want):
                        fails.append(f"push_pull_inplace {tag}")
                    z = make(mine)
                    dl.broadcast(z, 0, name=f"dl.bc.{tag}")
                    if not np.array_equal(host(z), (np.arange(n) % 7).astype(dt)):
                        fails.append(f"broadcast {tag}")
                g = dl.allgather(make(np.full((rank + 1, n), rank, dt)), name=f"dl.ag.{tag}")
                if not on_device(g) or not np.array_equal(host(g), np.concatenate(
                        [np.full((r + 1, n), r, dt) for r in range(size)])):
                    fails.append(f"allgather {tag}")
    names = [lib[0] for lib in libs]
    print(f"CHECK dlpack rank {rank} ({', '.join(names)}; not available: {missing or 'none'}): "
          f"{len(fails)} failures {fails[:5]}", flush=True)
    return {"ok": not fails, "libraries": names, "not_available": missing, "failures": fails}


STEPS = {"dtypes": dtypes, "speed": speed, "copies": copies, "collectives": collectives, "worker": worker,
         "dlpack": dlpack}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in STEPS:
        print(f"usage: gpu_check.py {{{'|'.join(STEPS)}}} OUT.json", file=sys.stderr)
        return 2
    step, out_path = argv
    # Every process of a launched job joins it, GPU or not, so that its servers see a whole job.
    bps.init()
    rank = bps.rank()
    why = no_gpu_reason()
    try:
        if why is not None:
            print(f"SKIP {step}: {why}", flush=True)
            result = {"ok": False, "skipped": why}
        else:
            if ON_GPU:
                torch.cuda.set_device(0)
            result = STEPS[step]()
            result["device"] = DEV
    finally:
        bps.shutdown()
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if result.get("ok") or "skipped" in result else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
