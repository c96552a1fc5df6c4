"""Python's GIL is released around every call into the core that can wait, so the program's other
threads keep running (a data loader, a heartbeat, a progress bar). The call that waits here:
the first push_pull_async after ``lazy_init`` joins the job, and the job is complete only when
the second worker arrives, 2 s later. A second thread counts meanwhile; holding the GIL would
stop it for the whole wait.
"""

from __future__ import annotations

import pytest

from conftest import write_script

pytestmark = pytest.mark.usefixtures("require_core")

WAITER = r"""
import threading, time
import numpy as np
from byteps import _core as core
core.lazy_init()  # the job is joined on first use: the push_pull below waits for worker 1
ticks, stop = 0, False
def count():
    global ticks
    while not stop:
        ticks += 1
        time.sleep(0.005)
counter = threading.Thread(target=count)
counter.start()
x = np.full(1000, 2.0, np.float32)
out = np.zeros_like(x)
time.sleep(0.1)
t0, before = time.monotonic(), ticks
h = core.push_pull_async("gil.x", x.ctypes.data, out.ctypes.data, x.nbytes, core.FLOAT32, False)
blocked, during = time.monotonic() - t0, ticks - before
core.wait(h, -1.0)
stop = True
counter.join()
assert (out == 3.0).all(), out
print(f"BLOCKED {blocked:.2f} TICKS {during}", flush=True)
core.shutdown()
"""

LATE = r"""
import time
import numpy as np
from byteps import _core as core
time.sleep(2.0)  # deliberately late: worker 0's first call waits for this one
core.init()
x = np.full(1000, 1.0, np.float32)
out = np.zeros_like(x)
core.wait(core.push_pull_async("gil.x", x.ctypes.data, out.ctypes.data, x.nbytes, core.FLOAT32, False), -1.0)
assert (out == 3.0).all(), out
core.shutdown()
"""


def test_other_threads_run_while_a_call_waits_for_the_job(cluster):
    env = cluster.env(2, 1, {"BYTEPS_START_TIMEOUT": "30"})
    cluster.scheduler(env)
    cluster.server(0, env)
    waiter = cluster.worker("worker:0", write_script(cluster.dir, WAITER, "waiter.py"), {**env, "DMLC_WORKER_ID": "0"})
    cluster.worker("worker:1", write_script(cluster.dir, LATE, "late.py"), {**env, "DMLC_WORKER_ID": "1"})
    procs = cluster.wait(timeout=60)
    assert not cluster.leftovers(), cluster.dump()
    for proc in procs.values():
        assert proc.returncode == 0, cluster.dump()
    line = next(l for l in waiter.output.splitlines() if l.startswith("BLOCKED "))
    blocked, ticks = float(line.split()[1]), int(line.split()[3])
    assert blocked > 1.0, f"the call did not wait for the late worker ({line}): the test proves nothing"
    # Every 5 ms while the call waited: at least a quarter of that on a loaded machine; with the
    # GIL held it would be none.
    assert ticks >= blocked / 0.005 / 4, f"the other thread was stopped while the call waited: {line}"
