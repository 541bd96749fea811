/* mpi_allreduce_bench: bench/allreduce_bench's twin on Open MPI's MPI_Allreduce, the bar lockstep's
 * CPU all-reduce is measured against (BENCHMARKS.md). Same sweep, same timing rule (per size: -w untimed
 * iterations, -n timed ones each timed on its own; the time reported is the median over iterations of
 * the slowest rank), same columns and the same --csv row (impl "mpi"), float SUM only. Out-of-place is
 * MPI_Allreduce(in, out); in-place is MPI_IN_PLACE. #wrong: one more iteration on inputs r + 1 + (i % 4),
 * checked against n(n+1)/2 + n(i % 4) exactly.
 *
 *   tools/mpi/run.sh 2 -b 4 -e 256M -f 4        (builds with mpicc, runs with mpirun)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static double median(double* v, int n) {
  qsort(v, n, sizeof(double), cmp);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* "4", "64K", "256M" */
static long parse_size(const char* s) {
  char* end;
  long v = strtol(s, &end, 10);
  if (*end == 'K') v <<= 10;
  if (*end == 'M') v <<= 20;
  if (*end == 'G') v <<= 30;
  return v;
}

int main(int argc, char** argv) {
  long minb = 4, maxb = 64 << 20, factor = 4;
  int iters = 20, warmup = 5, csv = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "-b") && i + 1 < argc) minb = parse_size(argv[++i]);
    else if (!strcmp(argv[i], "-e") && i + 1 < argc) maxb = parse_size(argv[++i]);
    else if (!strcmp(argv[i], "-f") && i + 1 < argc) factor = atol(argv[++i]);
    else if (!strcmp(argv[i], "-n") && i + 1 < argc) iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-w") && i + 1 < argc) warmup = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--csv")) csv = 1;
    else {
      fprintf(stderr, "usage: %s [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [--csv]\n", argv[0]);
      return 1;
    }
  }
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const long max_count = maxb / 4;
  float* in = malloc(max_count * sizeof(float));
  float* out = malloc(max_count * sizeof(float));
  double* seconds = malloc(iters * sizeof(double));
  double* slowest = malloc(iters * sizeof(double));
  for (long i = 0; i < max_count; ++i) in[i] = out[i] = 1;
  if (rank == 0) {
    if (csv) {
      printf("impl,ranks,size_bytes,count,type,redop,oop_time_us,oop_algbw_gbs,oop_busbw_gbs,oop_wrong,"
             "ip_time_us,ip_algbw_gbs,ip_busbw_gbs,ip_wrong,oop_mean_us,ip_mean_us\n");
    } else {
      printf("# mpi_allreduce_bench: MPI_Allreduce, %d rank(s), -n %d -w %d\n", n, iters, warmup);
      printf("# %10s %12s %8s %6s   %9s %7s %7s %6s   %9s %7s %7s %6s\n", "size", "count", "type", "redop", "time",
             "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    }
  }
  long wrong_total = 0;
  for (long bytes = minb; bytes <= maxb; bytes *= factor) {
    const long count = bytes / 4;
    double us[2], algbw[2], busbw[2], mean[2];
    long wrong[2];
    for (int kind = 0; kind < 2; ++kind) {
      for (int i = 0; i < warmup + iters; ++i) {
        double t0 = now();
        if (kind == 0) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else MPI_Allreduce(MPI_IN_PLACE, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        if (i >= warmup) seconds[i - warmup] = now() - t0;
      }
      MPI_Allreduce(seconds, slowest, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      mean[kind] = 0;
      for (int i = 0; i < iters; ++i) mean[kind] += slowest[i] * 1e6 / iters;
      const double s = median(slowest, iters);
      us[kind] = s * 1e6;
      algbw[kind] = bytes / s / 1e9;
      busbw[kind] = algbw[kind] * 2.0 * (n - 1) / n;
      for (long i = 0; i < count; ++i) in[i] = out[i] = (float)(rank + 1 + i % 4);
      if (kind == 0) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else MPI_Allreduce(MPI_IN_PLACE, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      long w = 0;
      for (long i = 0; i < count; ++i) w += out[i] != (float)(n * (n + 1) / 2 + n * (i % 4));
      MPI_Allreduce(&w, &wrong[kind], 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
      wrong_total += wrong[kind];
      for (long i = 0; i < count; ++i) in[i] = out[i] = 1;
    }
    if (rank == 0) {
      if (csv) {
        printf("mpi,%d,%ld,%ld,float,sum,%.2f,%.4f,%.4f,%ld,%.2f,%.4f,%.4f,%ld,%.2f,%.2f\n", n, bytes, count, us[0],
               algbw[0], busbw[0], wrong[0], us[1], algbw[1], busbw[1], wrong[1], mean[0], mean[1]);
      } else {
        printf("  %10ld %12ld %8s %6s   %9.1f %7.3f %7.3f %6ld   %9.1f %7.3f %7.3f %6ld\n", bytes, count, "float",
               "sum", us[0], algbw[0], busbw[0], wrong[0], us[1], algbw[1], busbw[1], wrong[1]);
      }
      fflush(stdout);
    }
  }
  if (rank == 0 && !csv) printf("# Out of bounds values : %ld %s\n", wrong_total, wrong_total == 0 ? "OK" : "FAILED");
  free(in);
  free(out);
  free(seconds);
  free(slowest);
  MPI_Finalize();
  return wrong_total == 0 ? 0 : 2;
}
