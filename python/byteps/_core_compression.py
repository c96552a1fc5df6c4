"""The core's gradient-compression calls, shared by every plugin (re-exported by ``byteps._basics``).

* :func:`set_learning_rate`: the learning rate error feedback scales its residual by.
* :func:`declare_tensor_params`: per-name compression parameters (MXNet's ``byteps_*`` keywords).

Both call functions that cores built before gradient compression lack; :func:`_core_function`
says so by name instead of an AttributeError.

Thread-safety: any thread.
"""

from __future__ import annotations

from . import _basics  # the module, not its names: tests replace _basics.core


def _core_function(name: str):
    """``_core.<name>``, or RuntimeError saying the core is too old for it."""
    fn = getattr(_basics.core(), name, None)
    if fn is None:
        raise RuntimeError(f"this byteps core has no {name}: it predates gradient compression's Python API; "
                           f"rebuild the core (scripts/build.sh or pip install .)")
    return fn


def set_learning_rate(lr: float) -> None:
    """Tells the core the current learning rate (error feedback scales its residual by the ratio
    of the previous learning rate to this one)."""
    lr = float(lr)
    _core_function("set_learning_rate")(lr)


def declare_tensor_params(name: str, params: dict) -> None:
    """Per-name compression parameters (MXNet's ``byteps_declare_tensor(name, byteps_compressor_type=...)``):
    ``params`` keys with or without ``byteps_``; values passed as lowercased strings.  Later
    push_pulls of ``name`` that carry no compression attributes get these."""
    if name is None:
        raise TypeError("declare_tensor_params() needs a name")
    values = {}
    for key, value in params.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        else:
            text = str(value).lower()
        values[str(key)] = text
    _core_function("declare_tensor_params")(_basics.core_name(name), values)
