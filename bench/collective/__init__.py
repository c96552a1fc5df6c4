"""Collective benchmark: byteps push_pull vs torch.distributed gloo all_reduce vs OpenMPI
MPI_Allreduce (ring) on the emulated cluster (tools/testbed), in one command::

    /usr/bin/python3 -m bench.collective.run [--quick] [--rate 1000] [--n 2,4,8]
        [--k n,n/2,colocated] [--sizes 1M,4M,16M,64M,256M] [--systems byteps,gloo,mpi] [--out DIR]

* :mod:`bench.collective.model` - the arithmetic (goodput, ideal ring and PS times, the
  theoretical PS/ring ratio, % of goodput) and the table formatting; pure, unit-tested.
* :mod:`bench.collective.run` - the runner (testbeds, jobs, JSON, table, Markdown, plot).
* :mod:`bench.collective.gloo_worker` - one gloo rank looping over every size.
* ``mpi_sweep.c`` - one MPI rank looping over every size (compiled with mpicc at run time).
* :mod:`bench.collective.plot` - time vs size per n, measured and ideal lines (matplotlib).
"""
