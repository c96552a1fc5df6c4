"""Launchers for BytePS jobs.

``bpsrun`` (:mod:`byteps.launcher.bpsrun`) starts a whole job -- scheduler, servers and
workers -- on one machine; :mod:`byteps.launcher.corebin` locates the C++ core executable
that runs the scheduler and server roles.
"""
