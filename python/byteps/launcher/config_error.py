"""The launchers' configuration error, in a module of its own so that ``python -m
byteps.launcher.bpslaunch`` and :mod:`byteps.launcher.slurm` raise and catch one class."""


class LaunchConfigError(ValueError):
    """The environment or the command line does not describe a valid launch (exit 2)."""
