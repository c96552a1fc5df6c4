/* MPI_Allreduce of one float32 buffer: the OpenMPI peer in the collective benchmark
 * (bench/collective, docs/benchmarks.md). Rank 0 prints the median time and a JSON line.
 *   mpirun -np 4 --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4 \
 *     ./mpi_allreduce 100000000 5
 * (algorithm 4 = ring, the one that is competitive on these links.) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long long bytes = argc > 1 ? atoll(argv[1]) : 100000000LL;
  int iters = argc > 2 ? atoi(argv[2]) : 5;
  int warmup = argc > 3 ? atoi(argv[3]) : 1;
  long long count = bytes / 4;
  float* buf = malloc((size_t)count * sizeof(float));
  if (!buf || iters < 1) MPI_Abort(MPI_COMM_WORLD, 2);
  for (long long i = 0; i < count; ++i) buf[i] = 1.0f;
  double* times = malloc(sizeof(double) * (size_t)iters);
  for (int it = 0; it < warmup + iters; ++it) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    /* MPI counts are int: large buffers go in chunks of at most 2^30 elements. */
    for (long long off = 0; off < count; off += (1LL << 30)) {
      long long n = count - off < (1LL << 30) ? count - off : (1LL << 30);
      MPI_Allreduce(MPI_IN_PLACE, buf + off, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    double dt = MPI_Wtime() - t0, worst = 0;
    MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (it >= warmup) times[it - warmup] = worst;
  }
  if (rank == 0) {
    qsort(times, (size_t)iters, sizeof(double), cmp);
    double med = iters % 2 ? times[iters / 2] : 0.5 * (times[iters / 2 - 1] + times[iters / 2]);
    printf("mpi_allreduce n=%d bytes=%lld median_s=%.4f algbw_GBps=%.3f\n", size, bytes, med, bytes / med / 1e9);
    printf("JSON {\"mode\":\"mpi_allreduce\",\"n\":%d,\"bytes\":%lld,\"median_s\":%.6f}\n", size, bytes, med);
  }
  free(times);
  free(buf);
  MPI_Finalize();
  return 0;
}
