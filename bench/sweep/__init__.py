"""byteps settings sweep: BYTEPS_PARTITION_BYTES x BYTEPS_SCHEDULING_CREDIT x
BYTEPS_CONNECTIONS_PER_PEER on the emulated cluster (tools/testbed), next to the core's
defaults, BYTEPS_AUTOTUNE and gloo all_reduce, in one command::

    /usr/bin/python3 -m bench.sweep.run [--quick] [--out bench-results/sweep] [--cases ...]
        [--partitions 64K,256K,1M,4096000] [--credits 0,4,16,64] [--connections 1,2]
        [--sizes 100M] [--max-minutes M]

* :mod:`bench.sweep.grid` - cases, grid, row environments, autotune check, best point, ratios,
  tables; pure, unit-tested in bench/sweep/test_sweep.py.
* :mod:`bench.sweep.run` - the runner (plan, estimate, testbeds via bench.collective.run,
  results.json, results.md).
"""
