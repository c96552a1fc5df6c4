/* MPI_Allreduce sweep: the OpenMPI peer of the collective benchmark (bench/collective/run.py).
 * One float32 buffer per size, every size in one MPI job:
 *   mpirun -np 4 --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4 \
 *     ./mpi_sweep [--back-to-back] WARMUP BYTES:ITERS [BYTES:ITERS ...]
 * Every iteration: barrier, MPI_Allreduce (in place, in chunks of <= 2^30 elements), the time is
 * the slowest rank's (MPI_MAX), as bench/mpi_allreduce.c. With --back-to-back the allreduces
 * follow each other with no barrier or refill (a buffer of zeros, after one untimed allreduce of
 * ones that checks the sum), and the slowest rank's times are taken after the loop. Rank 0
 * prints, per size, a line
 *   JSON {"bytes":...,"iters":...,"median_s":...,"times_s":[...]}
 * and checks the sum. Build: mpicc -O2 -o mpi_sweep mpi_sweep.c */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* MPI_Allreduce in place, in chunks of <= 2^30 elements (its count is an int). */
static void sum_in_place(float* buf, long long count) {
  for (long long off = 0; off < count; off += (1LL << 30)) {
    long long c = count - off < (1LL << 30) ? count - off : (1LL << 30);
    MPI_Allreduce(MPI_IN_PLACE, buf + off, (int)c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int first = 1, back_to_back = 0;
  if (argc > 1 && strcmp(argv[1], "--back-to-back") == 0) {
    back_to_back = 1;
    first = 2;
  }
  if (argc < first + 2) {
    if (rank == 0) fprintf(stderr, "usage: mpi_sweep [--back-to-back] WARMUP BYTES:ITERS [BYTES:ITERS ...]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int warmup = atoi(argv[first]);
  int status = 0;
  for (int a = first + 1; a < argc; ++a) {
    long long bytes = atoll(argv[a]);
    const char* colon = strchr(argv[a], ':');
    int iters = colon ? atoi(colon + 1) : 5;
    long long count = bytes / 4;
    if (count < 1 || iters < 1) MPI_Abort(MPI_COMM_WORLD, 2);
    float* buf = malloc((size_t)count * sizeof(float));
    double* times = malloc(sizeof(double) * (size_t)iters);
    if (!buf || !times) MPI_Abort(MPI_COMM_WORLD, 3);
    float expected = (float)size;
    if (back_to_back) {
      for (long long i = 0; i < count; ++i) buf[i] = 1.0f;
      sum_in_place(buf, count);
      if (buf[0] != expected || buf[count - 1] != expected) {
        fprintf(stderr, "mpi_sweep: rank %d: wrong sum %g (expected %g)\n", rank, buf[0], expected);
        status = 1;
      }
      memset(buf, 0, (size_t)count * sizeof(float));
      expected = 0.0f;
    }
    for (int it = 0; it < warmup + iters; ++it) {
      if (!back_to_back) {
        for (long long i = 0; i < count; ++i) buf[i] = 1.0f;
        MPI_Barrier(MPI_COMM_WORLD);
      }
      double t0 = MPI_Wtime();
      sum_in_place(buf, count);
      double dt = MPI_Wtime() - t0, worst = 0;
      if (!back_to_back) {
        MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        dt = worst;
      }
      if (it >= warmup) times[it - warmup] = dt;
    }
    if (back_to_back) MPI_Allreduce(MPI_IN_PLACE, times, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (buf[0] != expected || buf[count - 1] != expected) {
      fprintf(stderr, "mpi_sweep: rank %d: wrong sum %g (expected %g)\n", rank, buf[0], expected);
      status = 1;
    }
    if (rank == 0) {
      double* sorted = malloc(sizeof(double) * (size_t)iters);
      memcpy(sorted, times, sizeof(double) * (size_t)iters);
      qsort(sorted, (size_t)iters, sizeof(double), cmp);
      int mid = iters / 2;
      double med = iters % 2 ? sorted[mid] : 0.5 * (sorted[mid - 1] + sorted[mid]);
      printf("JSON {\"bytes\":%lld,\"iters\":%d,\"n\":%d,\"median_s\":%.6f,\"times_s\":[", bytes,
             iters, size, med);
      for (int i = 0; i < iters; ++i) printf("%s%.6f", i ? "," : "", times[i]);
      printf("]}\n");
      fflush(stdout);
      free(sorted);
    }
    free(times);
    free(buf);
  }
  MPI_Finalize();
  return status;
}
