"""Framework-neutral basics shared by every byteps plugin (byteps.numpy and byteps.torch).

A plugin turns its tensors into (data pointer, byte count, dtype code) and calls the native core
``byteps._core`` through the helpers here:

* :func:`core` imports the native module on first use, with a clear error when it was not built.
* :func:`init` / :func:`shutdown` / :func:`suspend` and the rank/size queries.  Unlike the
  original BytePS (which returned rank 0 / size 1 before init, quirk §11.9), the queries raise
  ``byteps._core.BytePSError`` before :func:`init`.
* :class:`HandleManager` (in ``_handles``) keeps each operation's input and output alive until it is synchronized,
  because the core reads and writes those buffers from its I/O threads until then.
* :func:`core_name` maps user names to core names (``"byteps." + name``).

Names: every worker must use the same name for the same logical tensor, with the same size and
dtype, and must first use (or declare) the names in the same order.  A call without a name gets
the next name of a per-process counter, ``"byteps.noname.<n>"`` (the original gave every unnamed
call the same name, quirk §11.2), so unnamed calls must be made in the same order on all workers.
Each unnamed call declares a new tensor: name the tensors a training loop pushes every step.

Thread-safety: every function here may be called from any thread.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import Any, Optional

_BUILD_HINT = ("byteps native core not built: run cmake -S . -B build && cmake --build build "
               "(it writes python/byteps/_core*.so), or pip install .")

_core_module = None
_lock = threading.Lock()
_atexit_registered = False
_noname_counter = 0


def core():
    """The native module ``byteps._core``, imported on first use.

    Raises:
        ImportError: the module was not built (or cannot be loaded); the message says how to
            build it and carries the original import error.
    """
    global _core_module
    if _core_module is None:
        try:
            from . import _core  # noqa: PLC0415 - deliberately lazy
        except ImportError as err:
            raise ImportError(f"{_BUILD_HINT} ({err})") from err
        _core_module = _core
    return _core_module


def error_type() -> type:
    """``byteps._core.BytePSError``: the exception the core raises (a RuntimeError)."""
    return core().BytePSError


def init(lazy: bool = True) -> None:
    """Joins the job (reads the configuration from the environment).

    Blocks until every worker and server has registered with the scheduler (at most
    BYTEPS_START_TIMEOUT); with one worker and no BYTEPS_FORCE_DISTRIBUTED it needs no network.
    Idempotent.  Registers :func:`shutdown` to run at interpreter exit.

    Args:
        lazy: accepted for compatibility with BytePS; this core always joins right away.

    Raises:
        ValueError: a bad configuration (the message names the variable).
        byteps._core.BytePSError: the job could not be joined (scheduler unreachable, refused,
            rendezvous timed out...).
    """
    global _atexit_registered
    del lazy
    c = core()
    with _lock:
        if not _atexit_registered:
            atexit.register(_shutdown_at_exit)
            _atexit_registered = True
    c.init()


def shutdown() -> None:
    """Finishes outstanding work and leaves the job together with the other workers.

    Forgets every handle not yet synchronized and restarts the unnamed-tensor counter (the
    core's declarations restart too).  A no-op when not initialized; :func:`init` may be called
    again afterwards.
    """
    global _noname_counter
    if _core_module is None:
        return  # never initialized: nothing to shut down, and no reason to load the core
    try:
        _core_module.shutdown()
    finally:
        handles.clear()
        with _lock:
            _noname_counter = 0


def _shutdown_at_exit() -> None:
    """:func:`shutdown` at interpreter exit; a failure (e.g. the job already failed, which the
    program was told by its push_pull) is one line on stderr, not a traceback."""
    try:
        shutdown()
    except Exception as err:  # noqa: BLE001 - nobody can catch it at exit
        print(f"byteps: shutdown at exit failed: {err}", file=sys.stderr, flush=True)


def suspend() -> None:
    """Same as :func:`shutdown` (as in BytePS): the core keeps the names declared or pushed since
    :func:`init` for :func:`resume`."""
    shutdown()


def resume(num_workers: int, num_servers: int, global_rank: Optional[int] = None) -> None:
    """Rejoins a (new) job after :func:`suspend` (the core's ``byteps_resume``): sets
    ``DMLC_NUM_WORKER``, ``DMLC_NUM_SERVER`` and (if given) ``BYTEPS_GLOBAL_RANK``, joins, and
    declares again every name declared or pushed since :func:`init`, in the same order (so keys and
    server placement are the same).  The rest of the new job's environment must already be set."""
    global _atexit_registered
    c = core()
    with _lock:
        if not _atexit_registered:
            atexit.register(_shutdown_at_exit)
            _atexit_registered = True
    try:
        c.resume(int(num_workers), int(num_servers), -1 if global_rank is None else int(global_rank))
    finally:
        handles.clear()
    # The environment the core set, for the Python side too (os.environ does not see setenv).
    os.environ["DMLC_NUM_WORKER"] = str(int(num_workers))
    os.environ["DMLC_NUM_SERVER"] = str(int(num_servers))
    if global_rank is not None:
        os.environ["BYTEPS_GLOBAL_RANK"] = str(int(global_rank))


def is_initialized() -> bool:
    return _core_module is not None and _core_module.is_initialized()


def rank() -> int:
    """Global rank of this process.  Raises BytePSError before :func:`init`."""
    return core().rank()


def size() -> int:
    """Number of training processes in the job.  Raises BytePSError before :func:`init`."""
    return core().size()


def local_rank() -> int:
    """Index of this process on its host.  Raises BytePSError before :func:`init`."""
    return core().local_rank()


def local_size() -> int:
    """Number of training processes on this host.  Raises BytePSError before :func:`init`."""
    return core().local_size()


def join() -> int:
    """Horovod's join(): this worker is out of data (the others' reductions count it as zeros
    until every worker joined).  Returns the last rank to join, the same on every worker."""
    return core().join()


def core_name(name: Optional[str]) -> str:
    """The core's name for a user-level tensor name; None draws the next unnamed name."""
    global _noname_counter
    if name is None:
        with _lock:
            n = _noname_counter
            _noname_counter += 1
        return f"byteps.noname.{n}"
    if not isinstance(name, str):
        raise TypeError(f"a tensor name must be a str, got {type(name).__name__} {name!r}")
    if not name:
        raise ValueError("a tensor name must not be empty (pass name=None for an unnamed tensor)")
    return "byteps." + name


def declare(name: str) -> int:
    """Declares tensor ``name`` (same order on all workers) and returns its key."""
    if name is None:
        raise TypeError("declare() needs a name")
    return core().declare(core_name(name))


def declare_tensor(name: str, nbytes: int, dtype: int) -> int:
    """Declares tensor ``name`` with its size (bytes) and dtype code and returns its key.

    Like :func:`declare` (same order on all workers), and the core places the tensor's
    partitions on the servers right away, balancing bytes over them.  Later push_pulls of
    ``name`` must use this size and dtype (ValueError otherwise, naming the tensor).
    """
    if name is None:
        raise TypeError("declare_tensor() needs a name")
    return core().declare_tensor(core_name(name), int(nbytes), int(dtype))


from ._handles import HandleManager, Pending  # noqa: E402,F401  (re-exported: plugins use _basics.Pending)

handles = HandleManager()


def start(name: Optional[str], input_ptr: int, output_ptr: int, nbytes: int, dtype: int,
          average: bool, priority: int, input_obj: Any, output_obj: Any, meta: Any = None,
          device: tuple[int, int, int] = (0, 0, 0), attrs: str = "") -> int:
    """Starts one push_pull in the core and records what must stay alive; returns the handle.
    ``device``: (kind, index, stream) of a tensor in a device's memory (``_core.DEVICE_*``; the
    stream is the framework's, e.g. torch's current ``cuda_stream``); (0, 0, 0) for host memory.
    ``attrs``: declaration attributes (e.g. compression's ``"compressor=topk;k=0.01"``); with
    any, the sum goes through the core's ``reduce_async`` (OP_SUM), which carries them."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(f"priority must be an int, got {type(priority).__name__}")
    if not isinstance(attrs, str):
        raise TypeError(f"attrs must be a str, got {type(attrs).__name__}")
    cname = core_name(name)
    kind, index, stream = device
    c = core()
    if attrs:
        handle = c.reduce_async(cname, input_ptr, output_ptr, int(nbytes), int(dtype), c.OP_SUM, bool(average),
                                attrs, priority, kind, index, stream)
    else:
        handle = c.push_pull_async(cname, input_ptr, output_ptr, nbytes, dtype, bool(average), priority, kind, index,
                                   stream)
    return handles.add(handle, Pending(input_obj, output_obj, cname, meta, int(nbytes)))


def start_reduce(name: Optional[str], input_ptr: int, output_ptr: int, nbytes: int, dtype: int, op: int,
                 average: bool, priority: int, device: tuple[int, int, int] = (0, 0, 0), attrs: str = "",
                 pending: Optional[Pending] = None) -> int:
    """Starts an element-wise reduction in the core (``byteps_reduce_async_on``) and records what
    must stay alive; returns the handle.

    Args:
        op: ``_core.OP_SUM``, ``OP_MIN``, ``OP_MAX`` or ``OP_PRODUCT`` (bool: min and product are
            and, max is or; a sum of bools is a ValueError), or ``OP_ADASUM`` (Horovod's Adasum of
            the whole tensors in rank order; float16/32/64; one partition, so at most
            BYTEPS_MAX_MESSAGE_BYTES; BYTEPS_LOCAL_SIZE=1 only).
        average: divide the sum by ``size()``; with another op a ValueError naming the tensor.
        device: as in :func:`start`.
        attrs: declaration attributes ``"key=value;key=value"`` the servers compare across
            workers on the name's first use: a difference raises BytePSError (code MISMATCH)
            on every worker, naming the attribute and each worker's value.
        pending: what to keep alive until synchronized (its ``name`` and ``nbytes`` are set
            here); None keeps nothing (the caller owns the buffers).
    """
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(f"priority must be an int, got {type(priority).__name__}")
    if not isinstance(attrs, str):
        raise TypeError(f"attrs must be a str, got {type(attrs).__name__}")
    cname = core_name(name)
    kind, index, stream = device
    handle = core().reduce_async(cname, input_ptr, output_ptr, int(nbytes), int(dtype), int(op), bool(average),
                                 attrs, priority, kind, index, stream)
    if pending is None:
        pending = Pending(None, None, cname)
    pending.name = cname
    pending.nbytes = int(nbytes)
    return handles.add(handle, pending)


def start_allgather(name: Optional[str], input_ptr: int, slice_bytes: int, output_ptr: int, total_bytes: int,
                    slice_offset: int, dtype: int, priority: int, input_obj: Any, output_obj: Any,
                    meta: Any = None, device: tuple[int, int, int] = (0, 0, 0), attrs: str = "") -> int:
    """Starts an allgather in the core (the servers concatenate: ``byteps_allgather_async_ex``): this
    worker's ``slice_bytes`` at ``input_ptr`` land at ``slice_offset`` of ``total_bytes`` at
    ``output_ptr`` on every worker, next to everyone else's; returns the handle.  ``attrs``: as in
    :func:`start_reduce`."""
    cname = core_name(name)
    handle = core().allgather_async(cname, input_ptr, int(slice_bytes), output_ptr, int(total_bytes),
                                    int(slice_offset), dtype, int(priority), *device, attrs=attrs)
    return handles.add(handle, Pending(input_obj, output_obj, cname, meta, int(slice_bytes)))


def start_broadcast(name: Optional[str], ptr: int, nbytes: int, dtype: int, root_rank: int, priority: int,
                    obj: Any, meta: Any = None, device: tuple[int, int, int] = (0, 0, 0), attrs: str = "") -> int:
    """Starts a broadcast in the core (the servers forward the root's bytes:
    ``byteps_broadcast_async_ex``), in place; returns the handle.  ``attrs``: as in
    :func:`start_reduce` (e.g. ``"root=0"``: workers naming different roots all fail alike)."""
    cname = core_name(name)
    handle = core().broadcast_async(cname, ptr, int(nbytes), dtype, int(root_rank), int(priority), *device,
                                    attrs=attrs)
    return handles.add(handle, Pending(obj, obj, cname, meta, int(nbytes)))


def _state(c, handle: int) -> str:
    """"running", "done" or "failed" (the core raises the operation's error from poll)."""
    try:
        return "done" if c.poll(handle) else "running"
    except (c.BytePSError, ValueError):
        return "failed"


def poll(handle: int) -> bool:
    """True once the operation has finished (successfully or not: synchronize tells which).
    Unknown handle: ValueError."""
    handles.get(handle)
    return _state(core(), handle) != "running"


def synchronize(handle: int, timeout: Optional[float] = None) -> Any:
    """Waits for ``handle`` and returns its output (the input itself for in-place calls).

    Args:
        timeout: seconds to wait; None waits up to BYTEPS_TIMEOUT.

    Raises:
        ValueError: unknown (or already synchronized) handle, or the core's error for an invalid
            argument of this process's own (e.g. a sum of bools).
        byteps._core.BytePSError: the operation failed (e.g. a peer died, or the workers disagree
            on the tensor's size, dtype, op or attributes: every worker gets that alike) or timed
            out; after a timeout the handle remains valid.
    """
    return wait(handle, timeout).output


def wait(handle: int, timeout: Optional[float] = None) -> Pending:
    """Waits for the operation, releases the handle and returns its :class:`Pending`.

    Args:
        timeout: seconds; None waits up to BYTEPS_TIMEOUT.

    Raises:
        ValueError: unknown handle.
        byteps._core.BytePSError or ValueError: the operation failed, with the core's message
            (the handle is released); BytePSError also when it did not finish within the
            timeout, in which case the handle stays valid and synchronize may be called again.
    """
    pending = handles.get(handle)
    c = core()
    try:
        c.wait(handle, -1.0 if timeout is None else float(timeout))
    except (c.BytePSError, ValueError):
        state = _state(c, handle)
        if state == "running":
            raise  # a timeout: the core still owns the buffers, so keep them alive
        if state == "failed":
            _release(c, handle)
            raise
        # "done": it finished between the timeout and the poll
    _release(c, handle)
    return pending


def get_pushpull_speed() -> tuple[int, float]:
    """The oldest unread push_pull speed sample, ``(ms since the epoch, MB/s)``: the input bytes of
    the push_pulls that completed in a window of at least 10 s, per second; ``(0, -5.0)`` when there
    is none, before init, or with ``BYTEPS_TELEMETRY_ON=0`` (as in BytePS).  Sampled by the core."""
    if _core_module is None:
        return (0, -5.0)
    ms, mbps = _core_module.get_pushpull_speed()
    return (int(ms), float(mbps))


def _release(c, handle: int) -> None:
    c.release(handle)
    handles.remove(handle)


# The compression calls (their own module; re-exported: the plugins call them through _basics).
from ._core_compression import declare_tensor_params, set_learning_rate  # noqa: E402,F401
