"""Horovod's DistributedOptimizer arguments, checked and resolved: ``op``,
``gradient_predivide_factor``, ``backward_passes_per_step``, ``num_groups`` / ``groups``,
``process_set`` (reference section 8)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch

from . import hvd_common as C
from .hvd_common import Average, Sum


@dataclass
class Reduction:
    """How gradients are reduced: ``op`` (a Horovod op), the core's average flag, pre/post scale."""

    op: int = Average
    average: bool = True
    prescale: float = 1.0
    postscale: float = 1.0
    groups: dict = field(default_factory=dict)  # param -> tuple of its group's params (groups of 2+)


def resolve(op, gradient_predivide_factor, backward_passes_per_step, num_groups, groups, process_set, params,
            size: int) -> Reduction:
    """Validates the arguments (ValueError / NotImplementedError as Horovod's) and returns a
    :class:`Reduction`."""
    what = "DistributedOptimizer"
    if not C.is_global(C.check_process_set(process_set, what)):
        raise NotImplementedError(f"{what}: process_set= other than the global set is not built yet in byteps (its "
                                  f"gradient reductions run on the global set); reduce within a set with "
                                  f"hvd.allreduce(..., process_set=...)")
    if isinstance(backward_passes_per_step, bool) or not isinstance(backward_passes_per_step, int) \
            or backward_passes_per_step <= 0:
        raise ValueError(f"{what}: backward_passes_per_step must be a positive int, got {backward_passes_per_step!r}")
    op = C.resolve_op(op, None, what)
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError(f"{what}: gradient_predivide_factor not supported with op != Average (got op="
                         f"{C.OP_NAMES[op]}); gradient_predivide_factor applies to op=Average only")
    if not gradient_predivide_factor > 0:
        raise ValueError(f"{what}: gradient_predivide_factor={gradient_predivide_factor!r} must be > 0")
    if num_groups:
        warnings.warn("num_groups is deprecated; use groups", DeprecationWarning, stacklevel=3)
        if groups is None:
            groups = num_groups
    out = Reduction(op=op)
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
    """Average and Sum go straight to the core's push_pull; Min/Max/Product through Horovod's
    allreduce (byteps.torch.hvd_allreduce)."""
    return reduction.op in (Average, Sum)
