"""byteps vs ps-lite (BytePS's own transport): the same loopback push_pull shape, in one run.

* :mod:`bench.pslite.run` - the runner: builds ps-lite from the peer tarball in a cache folder,
  compiles bench/pslite/pslite_kv_bench.cc against it, interleaves byteps and the ps-lite variants
  over rounds, prints medians and ratios, writes JSON.  Pure parts tested in
  bench/pslite/test_pslite.py.
"""
