"""Launchers for BytePS jobs.

``bpsrun`` (:mod:`byteps.launcher.bpsrun`) starts a whole job -- scheduler, servers and
workers -- on one machine; ``bpslaunch`` (:mod:`byteps.launcher.bpslaunch`) starts one
machine's part of a job from the environment, as the original did; ``byteps launch --hostfile``
(:mod:`byteps.launcher.ssh`, with :mod:`~byteps.launcher.hostfile` and the remote side
:mod:`~byteps.launcher.ssh_remote`) starts a whole job on a hostfile's hosts over ssh.  They
supervise their processes with :mod:`byteps.launcher.supervision`; :mod:`byteps.launcher.corebin` locates the
C++ core executable that runs the scheduler and server roles; :mod:`byteps.launcher.ports`
finds free ports and checks the scheduler's.  Inside a Slurm allocation ``bpslaunch`` derives
the roles with :mod:`byteps.launcher.slurm` and plans them with :mod:`byteps.launcher.slurm_start`.
"""
