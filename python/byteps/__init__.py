"""byteps: parameter-server communication for distributed training.

A from-scratch reimplementation of BytePS.  The framework plugins are submodules::

    import byteps.numpy as bps      # NumPy arrays
    bps.init()
    total = bps.push_pull(grad, average=False, name="grad.0")

They all run on one native core, ``byteps._core`` (built by CMake, or by ``pip install .``),
which is imported only when a plugin first needs it: importing this package, or the launcher
``byteps.launcher.bpsrun``, works without a built core.
"""

__version__ = "0.1.0"
