"""Horovod's DistributedOptimizer arguments, checked and resolved: ``op``,
``gradient_predivide_factor``, ``backward_passes_per_step``, ``num_groups`` / ``groups``,
``process_set`` (reference section 8); and the check, among a process set's members, that they
have the same parameters."""

from __future__ import annotations

import pickle
import warnings
from dataclasses import dataclass, field

import torch

from . import hvd_common as C
from .hvd_gather import gather_now
from .hvd_common import Average, Sum


@dataclass
class Reduction:
    """How gradients are reduced.  Two paths (:func:`uses_push_pull` picks):

    * the core's push_pull (Average / Sum on the global set): ``average`` is the core's flag,
      ``prescale`` / ``postscale`` are applied here before and after;
    * Horovod's allreduce (Min / Max / Product, or any op on another set, among its members):
      ``op`` with ``prescale_factor=1/predivide`` and ``postscale_factor=predivide``, as Horovod
      passes its ``gradient_predivide_factor`` (Average divides by the set's size).
    """

    op: int = Average
    average: bool = True
    prescale: float = 1.0
    postscale: float = 1.0
    predivide: float = 1.0  # gradient_predivide_factor
    groups: dict = field(default_factory=dict)  # param -> tuple of its group's params (groups of 2+)
    process_set: object = C.global_process_set  # the set the gradients are reduced in
    member: bool = True  # this worker is in process_set (else the optimizer is a plain local one)


def resolve(op, gradient_predivide_factor, backward_passes_per_step, num_groups, groups, process_set, params,
            size: int) -> Reduction:
    """Validates the arguments (ValueError / NotImplementedError as Horovod's) and returns a
    :class:`Reduction`.  ``size``: the world's; a ``process_set`` other than the global one
    reduces among its members (Average over the set's size), and on a worker outside it the
    optimizer is a plain local one (Horovod's contract; Adasum: global set only)."""
    what = "DistributedOptimizer"
    op = C.resolve_op(op, None, what)
    process_set = C.check_process_set(process_set, what, op, members_only=False)
    if not C.is_global(process_set):
        size = C.set_size(process_set)  # (the set's reductions take it from Horovod's allreduce)
    if isinstance(backward_passes_per_step, bool) or not isinstance(backward_passes_per_step, int) \
            or backward_passes_per_step <= 0:
        raise ValueError(f"{what}: backward_passes_per_step must be a positive int, got {backward_passes_per_step!r}")
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError(f"{what}: gradient_predivide_factor not supported with op != Average (got op="
                         f"{C.OP_NAMES[op]}); gradient_predivide_factor applies to op=Average only")
    if not gradient_predivide_factor > 0:
        raise ValueError(f"{what}: gradient_predivide_factor={gradient_predivide_factor!r} must be > 0")
    if num_groups:
        warnings.warn("num_groups is deprecated; use groups", DeprecationWarning, stacklevel=3)
        if groups is None:
            groups = num_groups
    out = Reduction(op=op, predivide=float(gradient_predivide_factor), process_set=process_set,
                    member=C.is_global(process_set) or process_set.included())
    if gradient_predivide_factor != 1.0:
        # Average in two steps with a predivide factor f: 1/f before the sum, f/size after.
        out.average, out.prescale, out.postscale = False, 1.0 / gradient_predivide_factor, \
            gradient_predivide_factor / size
    else:
        out.average = op == Average
    out.groups = _groups(groups, [p for p in params if p.requires_grad], what)
    return out


def _groups(groups, params, what) -> dict:
    if groups is None:
        return {}
    if isinstance(groups, bool):
        raise ValueError(f"{what}: groups must be a positive int or a list of lists of parameters, got {groups!r}")
    if isinstance(groups, int):
        if groups <= 0:
            raise ValueError(f"{what}: groups must be > 0 (got {groups}); leave it out for no grouping")
        k = min(groups, len(params)) or 1
        per = -(-len(params) // k)
        chunks = [tuple(params[i:i + per]) for i in range(0, len(params), per)]
    elif isinstance(groups, (list, tuple)):
        seen = set()
        chunks = []
        for group in groups:
            members = list(group) if isinstance(group, (list, tuple)) else [group]
            for p in members:
                if not isinstance(p, torch.Tensor):
                    raise ValueError(f"{what}: groups must hold tensors (parameters), got {type(p).__name__}")
                if id(p) in seen:
                    raise ValueError(f"{what}: a parameter appears in more than one group (or twice in one)")
                seen.add(id(p))
            chunks.append(tuple(members))
    else:
        raise ValueError(f"{what}: groups must be a positive int or a list of lists of parameters, got "
                         f"{type(groups).__name__}")
    return {p: chunk for chunk in chunks if len(chunk) > 1 for p in chunk}


def uses_push_pull(reduction: Reduction) -> bool:
    """Average and Sum on the global set go straight to the core's push_pull; Min/Max/Product,
    and every op on another set, through Horovod's allreduce (byteps.torch.hvd_allreduce)."""
    return reduction.op in (Average, Sum) and C.is_global(reduction.process_set)


def verify_same_in_set(order, process_set, what: str) -> None:
    """Raises ValueError on every member of ``process_set`` unless all its members have the same
    parameters (``order``: (name, tensor) pairs): one allgather of each member's (name, shape,
    dtype) list among the members (a global check would wait for workers outside the set)."""
    mine = sorted((name, tuple(int(d) for d in p.shape), str(p.dtype).replace("torch.", "")) for name, p in order)
    data = torch.frombuffer(bytearray(pickle.dumps(mine)), dtype=torch.uint8)
    (gathered,), (counts,) = gather_now("allgather", what + ".parameters", [data], what, process_set)
    lists, start = [], 0
    for c in counts:
        lists.append(pickle.loads(gathered[start:start + c].numpy().tobytes()))
        start += c
    ranks = process_set.ranks
    for rank, entries in zip(ranks[1:], lists[1:]):
        if entries != lists[0]:
            raise ValueError(f"{what}: the parameters of rank {rank} differ from those of rank {ranks[0]} (process set "
                             f"{process_set.process_set_id} {ranks}): {_first_difference(lists[0], entries)}; every "
                             f"member must have the same named parameters")


def _first_difference(reference, other) -> str:
    ref = {name: (list(shape), dtype) for name, shape, dtype in reference}
    own = {name: (list(shape), dtype) for name, shape, dtype in other}
    for name in sorted(set(ref) | set(own)):
        if ref.get(name) != own.get(name):
            return (f"parameter '{name}' is {own.get(name, 'missing')} there, {ref.get(name, 'missing')} on the first "
                    f"member")
    return "the same parameters in another order"
