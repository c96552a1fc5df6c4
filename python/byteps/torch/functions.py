"""Broadcasts built on push_pull: parameters, optimizer state, any picklable object.

A broadcast is a push_pull sum to which every rank but the root contributes zeros (as in
BytePS), so it is exact for every dtype.  All ranks must make the same calls in the same order.
"""

from __future__ import annotations

import collections
import pickle

import torch

from . import ops

__all__ = ["broadcast_parameters", "broadcast_optimizer_state", "broadcast_object"]


def _check_root(root_rank) -> None:
    n = ops.size()
    if isinstance(root_rank, bool) or not isinstance(root_rank, int) or not 0 <= root_rank < n:
        raise ValueError(f"root_rank {root_rank!r} is not a rank of this job (ranks 0..{n - 1})")


def broadcast_parameters(params, root_rank, prefix="Parameter."):
    """Overwrites ``params`` on every rank with their values on ``root_rank`` (in place).

    Args:
        params: a dict name -> tensor (e.g. ``model.state_dict()``; sent in sorted name order),
            or a list of tensors or of ``(name, tensor)`` tuples (e.g.
            ``list(model.named_parameters())``).  Unnamed tensors get a fresh name each, so
            every rank must pass them in the same order.
        root_rank: the rank whose values everyone gets.
        prefix: prepended to each name to form the push_pull name.

    All tensors are sent at once, then waited for.  A tensor that appears twice (tied weights)
    is sent once.  Raises ValueError for other ``params`` types or a bad ``root_rank``.
    """
    if isinstance(params, dict):
        params = sorted(params.items())
    elif isinstance(params, list):
        params = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError("invalid params of type: %s" % type(params))
    _check_root(root_rank)
    is_root = ops.rank() == root_rank
    started = []  # (tensor, buffer sent, handle)
    seen = set()
    with torch.no_grad():
        for name, p in params:
            if not isinstance(p, torch.Tensor):
                raise TypeError(f"broadcast_parameters: {name or 'an entry'} is a {type(p).__name__}, not a tensor")
            if p.numel() > 0:
                alias = (str(p.device), p.data_ptr(), p.dtype, tuple(p.shape), p.stride())
                if alias in seen:
                    continue  # tied weights: one broadcast fills both
                seen.add(alias)
            buf = p.view(torch.uint8) if p.dtype == torch.bool else p
            if not buf.is_contiguous():
                buf = buf.contiguous()  # a copy, written back below
            # The servers forward the root's bytes (the other ranks send none).
            handle = ops.broadcast_async_inplace(buf, root_rank, name=None if name is None else prefix + name)
            started.append((p, buf, handle))
    for p, buf, handle in started:
        ops.synchronize(handle)
        if buf is not p and buf.data_ptr() != p.data_ptr():
            with torch.no_grad():
                p.copy_(buf)


def broadcast_optimizer_state(optimizer, root_rank, prefix="Parameter."):
    """Overwrites ``optimizer``'s state (tensors like momentum buffers, scalars like step counts)
    and its options (lr, momentum...) with those of ``root_rank``.

    A new optimizer has no state yet: it is created first by one step with zero gradients (for a
    DistributedOptimizer, the wrapped class's step, which communicates nothing).  Tensor states
    go with :func:`broadcast_parameters` as ``prefix + "<state name>.<occurrence>"``, the
    rest in one :func:`broadcast_object`.  LBFGS is not supported (ValueError).
    """
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    _check_root(root_rank)
    state_dict = optimizer.state_dict()
    if len(state_dict["state"]) == 0:
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    p.grad = p.data.new(p.size()).zero_()
        base = getattr(type(optimizer), "_bps_base", None)
        if base is not None and base is not torch.optim.Optimizer:
            base.step(optimizer)  # no collective: other ranks may not step here
        else:
            optimizer.step()
        state_dict = optimizer.state_dict()
    if len(state_dict["state"]) == 0:
        return  # a stateless optimizer

    tensors = []
    scalars = {}
    callbacks = {}
    occurrences = collections.defaultdict(int)

    def set_option(index, key):
        return lambda value: optimizer.param_groups[index].__setitem__(key, value)

    def set_state(param, key):
        return lambda value: optimizer.state[param].__setitem__(key, value)

    for index, (packed, group) in enumerate(zip(state_dict["param_groups"], optimizer.param_groups)):
        for key, value in packed.items():
            if key == "params":
                continue
            scalars["%s.%d" % (key, index)] = value
            callbacks["%s.%d" % (key, index)] = set_option(index, key)
        for param in group["params"]:  # in model order, as packed["params"]
            if param not in optimizer.state:
                continue  # no state (e.g. requires_grad=False)
            for name, value in optimizer.state[param].items():
                occurrences[name] += 1
                key = "%s.%d" % (name, occurrences[name])
                if torch.is_tensor(value):
                    tensors.append((key, value))
                else:
                    scalars[key] = value
                    callbacks[key] = set_state(param, name)

    broadcast_parameters(tensors, root_rank, prefix)
    for key, value in broadcast_object(scalars, root_rank, name="dict").items():
        callbacks[key](value)


def _dumps(obj) -> bytes:
    try:
        import cloudpickle  # noqa: PLC0415 - optional: pickles lambdas and local classes
    except ImportError:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return cloudpickle.dumps(obj)


def broadcast_object(obj, root_rank=0, name=None):
    """Returns ``root_rank``'s ``obj`` on every rank (pickled; cloudpickle when installed).

    The byte length goes first (int32 tensor ``"Size.<name>.sz"``), then the bytes (uint8
    tensor ``"Parameter.<name>.t"``, padded to a power of two); the other ranks size their
    buffer from the length.  ``name`` defaults to ``type(obj).__name__``, so ranks whose
    ``obj`` have other types (e.g. None) must pass the same explicit name.

    Example: ``state = broadcast_object(optimizer.state_dict(), 0)``.
    """
    if name is None:
        name = type(obj).__name__
    _check_root(root_rank)
    is_root = ops.rank() == root_rank
    data = b""
    if is_root:
        data = _dumps(obj)
        if len(data) >= 2**31:
            raise ValueError(f"broadcast_object: {name} pickles to {len(data)} bytes (at most 2 GiB - 1)")
    size = torch.tensor([len(data)], dtype=torch.int32)
    broadcast_parameters([(name + ".sz", size)], root_rank, prefix="Size.")
    length = int(size[0])
    capacity = 1 << max(8, (length - 1).bit_length())
    # Buffers come in power-of-two size classes; a later broadcast of another class travels as
    # "<name>.t.<size>" (the root's length decides the class, so every rank picks the same name).
    first = ops.object_capacity.setdefault(name, capacity)
    buf = torch.zeros(capacity, dtype=torch.uint8)
    if is_root:
        buf[:length] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    tname = name + ".t" if capacity == first else "%s.t.%d" % (name, capacity)
    broadcast_parameters([(tname, buf)], root_rank, prefix="Parameter.")
    if is_root:
        return obj
    return pickle.loads(buf[:length].numpy().tobytes())


def verify_same_tensors(entries, what):
    """Raises ValueError on every rank unless all ranks passed the same ``entries`` (a list of
    (name, shape, dtype)).  The ranks that differ from rank 0 name the first differences.

    Costs three small collectives; call it before declaring names, whose keys would otherwise
    already disagree.
    """
    mine = [(name, tuple(int(d) for d in shape), str(dtype).replace("torch.", "")) for name, shape, dtype in entries]
    reference = broadcast_object(mine if ops.rank() == 0 else None, 0, name=what + ".parameters")
    problems = _differences(reference, mine)
    flags = torch.zeros(ops.size(), dtype=torch.int32)
    flags[ops.rank()] = 1 if problems else 0
    ops.push_pull_inplace(flags, average=False, name=what + ".parameters.differ")
    others = [r for r in range(ops.size()) if flags[r] and r != ops.rank()]
    if problems:
        raise ValueError(f"{what}: the parameters of rank {ops.rank()} differ from those of rank 0: "
                         + "; ".join(problems) + "; every worker must have the same named parameters")
    if others:
        raise ValueError(f"{what}: the parameters of rank(s) {others} differ from those of rank 0 "
                         f"(their errors name the parameters); every worker must have the same named parameters")


def _differences(reference, mine, limit=5):
    def show(entry):
        return f"shape {list(entry[0])} {entry[1]}"

    ref = {name: (shape, dtype) for name, shape, dtype in reference}
    own = {name: (shape, dtype) for name, shape, dtype in mine}
    out = []
    for name in sorted(set(ref) | set(own)):
        if name not in ref:
            out.append(f"parameter '{name}' ({show(own[name])}) is not on rank 0")
        elif name not in own:
            out.append(f"rank 0 has parameter '{name}' ({show(ref[name])}) that this rank lacks")
        elif ref[name] != own[name]:
            out.append(f"parameter '{name}' has {show(own[name])} here but {show(ref[name])} on rank 0")
        if len(out) >= limit:
            break
    return out
