"""Horovod's process sets in byteps.torch (issue 29): sets are scopes of keys on the servers
(declared with ``members=<ranks>``; a round completes when every member pushed).  ONE 3-worker job
runs overlapping sets {0,1}, {1,2}, {0,2} and the global set with every op family against
references each worker computes, the non-member ValueError, dynamic add/remove, and a set that
the workers disagree on (HorovodInternalError on every worker)."""

from __future__ import annotations

import pytest

from test_hvd_ops import COMMON

pytestmark = pytest.mark.usefixtures("require_core")

SETS = COMMON.replace("hvd.init()", "SETS = [hvd.ProcessSet([0, 1]), hvd.ProcessSet([1, 2]), hvd.ProcessSet([0, 2])]\n"
                      "hvd.init(process_sets=SETS)") + r"""
same("ids", torch.tensor([ps.process_set_id for ps in SETS]), torch.tensor([1, 2, 3]))
for ps in SETS:
    if r not in ps.ranks:
        expect(f"non-member allreduce {ps.ranks}", ValueError, "not a member of process set",
               lambda: hvd.allreduce(torch.ones(2), process_set=ps))
        expect(f"non-member barrier {ps.ranks}", ValueError, "not a member", lambda: hvd.barrier(process_set=ps))
        continue
    m, me = len(ps.ranks), ps.rank()
    tag = f"set {ps.ranks}"
    xs = {w: inp(w, (4, 3), torch.float32) for w in ps.ranks}
    total = sum(xs.values())
    same(f"{tag} allreduce Sum", hvd.allreduce(xs[r], op=hvd.Sum, process_set=ps), total)
    same(f"{tag} allreduce Average", hvd.allreduce(xs[r], process_set=ps),
         total * torch.tensor(1 / m, dtype=total.dtype))  # Horovod scales by 1/m in the dtype
    ix = {w: inp(w, (5,), torch.int32) for w in ps.ranks}
    same(f"{tag} allreduce int Average", hvd.allreduce(ix[r], process_set=ps),
         torch.div(sum(ix.values()), m, rounding_mode="trunc"))
    same(f"{tag} allreduce Min", hvd.allreduce(ix[r], op=hvd.Min, process_set=ps),
         torch.stack(list(ix.values())).amin(0))
    same(f"{tag} allreduce Max unnamed", hvd.allreduce(ix[r], op=hvd.Max, name=None, process_set=ps),
         torch.stack(list(ix.values())).amax(0))
    g = hvd.grouped_allreduce([xs[r], ix[r]], op=hvd.Sum, process_set=ps)
    same(f"{tag} grouped 0", g[0], total)
    same(f"{tag} grouped 1", g[1], sum(ix.values()))
    rows = {w: inp(w, (w + 1, 2), torch.int16) for w in ps.ranks}  # uneven rows, set-rank order
    same(f"{tag} allgather", hvd.allgather(rows[r], process_set=ps), torch.cat([rows[w] for w in ps.ranks]))
    root = ps.ranks[-1]
    same(f"{tag} broadcast", hvd.broadcast(inp(r, (3,), torch.float64), root, process_set=ps),
         inp(root, (3,), torch.float64))
    outside = [w for w in range(n) if w not in ps.ranks][0]
    expect(f"{tag} broadcast root outside", ValueError, "is not a member of process set",
           lambda: hvd.broadcast(torch.ones(1), outside, process_set=ps))
    a2a = torch.arange(m * 2, dtype=torch.float32) + 10 * r
    got = hvd.alltoall(a2a, process_set=ps)
    same(f"{tag} alltoall", got, torch.cat([torch.arange(me * 2, me * 2 + 2, dtype=torch.float32) + 10 * w
                                           for w in ps.ranks]))
    big = {w: inp(w, (2 * m, 2), torch.float32) for w in ps.ranks}
    same(f"{tag} reducescatter", hvd.reducescatter(big[r], op=hvd.Sum, process_set=ps),
         sum(big.values())[2 * me:2 * me + 2])
    hvd.barrier(process_set=ps)
    # A gradient through a set: d(sum(allreduce Sum))/dx = m ones.
    x = xs[r].clone().requires_grad_(True)
    hvd.allreduce(x, op=hvd.Sum, process_set=ps).sum().backward()
    same(f"{tag} allreduce grad", x.grad, torch.full((4, 3), float(m)))
# Unnamed global ops after set calls that not every worker made still agree.
same("global after sets", hvd.allreduce(torch.ones(2) * (r + 1), op=hvd.Sum), torch.full((2,), float(n * (n + 1) // 2)))
expect("add without dynamic", ValueError, "HOROVOD_DYNAMIC_PROCESS_SETS", lambda: hvd.add_process_set([0, 1, 2][:2]))
hvd.barrier()
finish()
"""

DYNAMIC = COMMON.replace("hvd.init()", "hvd.init(process_sets='dynamic')") + r"""
ps = hvd.add_process_set([0, 2])
same("dynamic id", torch.tensor([ps.process_set_id]), torch.tensor([1]))
expect("add again", ValueError, "already registered", lambda: hvd.add_process_set([0, 2]))
if r in ps.ranks:
    same("dynamic allreduce", hvd.allreduce(torch.ones(3), op=hvd.Sum, process_set=ps), torch.full((3,), 2.0))
if not hvd.remove_process_set(ps) or ps.process_set_id is not None:
    fails.append("remove_process_set did not unregister the set")
expect("op on a removed set", ValueError, "not registered", lambda: hvd.allreduce(torch.ones(1), process_set=ps))
if hvd.remove_process_set(hvd.global_process_set):
    fails.append("remove_process_set(global) returned True")
# The workers disagree on a set: every worker gets HorovodInternalError from the registration.
mine = [0, 1] if r == 0 else [0, 2]
expect("disagreeing add", hvd.HorovodInternalError, "set", lambda: hvd.add_process_set(mine))
hvd.barrier()
finish()
"""


def test_overlapping_sets_with_every_op_family_on_three_workers(run_job):
    result = run_job(3, 1, SETS, timeout=200)
    assert result.returncode == 0 and result.stdout.count("ALL OK") == 3, result


def test_dynamic_sets_and_a_disagreement(run_job):
    result = run_job(3, 1, DYNAMIC, timeout=120)
    assert result.returncode == 0 and result.stdout.count("ALL OK") == 3, result
