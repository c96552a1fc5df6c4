"""A flow-level discrete-event simulator of data-parallel training, and ``byteps plan`` on top.

Modules: closed_forms (the formulas and the mixed split), links (max-min fair flows), events (the
event loop and a worker's compute), ring (Horovod/NCCL all-reduce), ps (byteps' placements),
placements (a cluster and its candidate placements), profiles (per-layer model profiles, JSON in
profiles/), plan (the CLI).  Method and results: docs/simulator.md.
"""
