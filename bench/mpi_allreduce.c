/* mpi_allreduce: the MPI_Allreduce baseline for `tessel bench all_reduce` (bench/compare_mpi.sh).
 *
 *   mpicc -O2 -o mpi_allreduce mpi_allreduce.c
 *   mpirun --oversubscribe -np 4 ./mpi_allreduce -b 4K -e 64M -f 2 -n 20 -w 5
 *
 * f32 sum, out of place, over the sizes -b..-e (times -f). Timing is defined exactly as in
 * `tessel bench`: before every call the ranks meet at MPI_Barrier; each rank times its own call
 * with MPI_Wtime; one call's time is the slowest rank's; the reported time is the median over
 * the -n timed calls (after -w untimed ones). algbw = bytes / time, busbw = algbw * 2(n-1)/n
 * (nccl-tests' definitions). After timing, one more call on fresh inputs is checked against the
 * exact reference: rank r's element j is 1 + (j + 3r) mod 8 (the same values tessel bench uses),
 * and #wrong counts elements that differ, summed over ranks.
 *
 * Output (rank 0): '#' comment lines, then one row per size:
 *   bytes count time_us algbw_gbps busbw_gbps wrong
 * Exit status 1 if any result is wrong, 2 on bad arguments.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t parse_size(const char* text) {
  char* end = NULL;
  long long v = strtoll(text, &end, 10);
  if (end == text || v < 0) return -1;
  switch (*end) {
    case '\0': return v;
    case 'K': case 'k': v <<= 10; break;
    case 'M': case 'm': v <<= 20; break;
    case 'G': case 'g': v <<= 30; break;
    default: return -1;
  }
  return end[1] == '\0' ? v : -1;
}

static int compare_doubles(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median(double* v, int n) {
  qsort(v, (size_t)n, sizeof *v, compare_doubles);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static float input_value(int rank, int64_t j) { return (float)(1 + (j + 3 * rank) % 8); }

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);

  int64_t min_bytes = 4 << 10, max_bytes = 64 << 20, factor = 2;
  int iters = 20, warmup = 5;
  for (int i = 1; i < argc; ++i) {
    const char* flag = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : NULL;
    int ok = value != NULL;
    if (ok && strcmp(flag, "-b") == 0) ok = (min_bytes = parse_size(value)) >= 0;
    else if (ok && strcmp(flag, "-e") == 0) ok = (max_bytes = parse_size(value)) >= 0;
    else if (ok && strcmp(flag, "-f") == 0) ok = (factor = atoll(value)) >= 2;
    else if (ok && strcmp(flag, "-n") == 0) ok = (iters = atoi(value)) >= 1;
    else if (ok && strcmp(flag, "-w") == 0) ok = (warmup = atoi(value)) >= 0;
    else ok = 0;
    if (!ok) {
      if (rank == 0) fprintf(stderr, "mpi_allreduce: error: bad argument '%s'\n", flag);
      MPI_Finalize();
      return 2;
    }
    ++i;
  }

  const int calls = warmup + iters;
  double* mine = malloc(sizeof(double) * (size_t)calls);
  double* slowest = malloc(sizeof(double) * (size_t)calls);
  if (rank == 0) {
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    MPI_Get_library_version(version, &length);
    char* newline = strchr(version, '\n');
    if (newline) *newline = '\0';
    printf("# MPI_Allreduce f32 sum, out of place, %d ranks (%s)\n", n, version);
    printf("# time: median over %d iters (after %d warm-up) of one call's time on its slowest rank\n",
           iters, warmup);
    printf("# %10s  %12s  %10s  %10s  %10s  %6s\n", "bytes", "count", "time_us", "algbw_gbps",
           "busbw_gbps", "wrong");
  }
  int64_t total_wrong = 0;
  for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
    const int64_t count = bytes / (int64_t)sizeof(float);
    float* send = malloc(sizeof(float) * (size_t)(count > 0 ? count : 1));
    float* recv = malloc(sizeof(float) * (size_t)(count > 0 ? count : 1));
    for (int64_t j = 0; j < count; ++j) send[j] = input_value(rank, j);
    memset(recv, 0, sizeof(float) * (size_t)count);
    for (int i = 0; i < calls; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      mine[i] = MPI_Wtime() - t0;
    }
    MPI_Reduce(mine, slowest, calls, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    /* The checked call: fresh inputs, poisoned output. */
    for (int64_t j = 0; j < count; ++j) send[j] = input_value(rank, j);
    memset(recv, 0xA5, sizeof(float) * (size_t)count);
    MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    long long wrong = 0, wrong_all = 0;
    for (int64_t j = 0; j < count; ++j) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += input_value(r, j);
      if (recv[j] != want) ++wrong;
    }
    MPI_Reduce(&wrong, &wrong_all, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      const double t = median(slowest + warmup, iters);
      const double algbw = (double)(count * (int64_t)sizeof(float)) / t / 1e9;
      printf("  %10lld  %12lld  %10.2f  %10.3f  %10.3f  %6lld\n", (long long)(count * 4), (long long)count,
             t * 1e6, algbw, algbw * 2.0 * (n - 1) / n, wrong_all);
      fflush(stdout);
      total_wrong += wrong_all;
    }
    free(send);
    free(recv);
    if (bytes > max_bytes / factor) break;
  }
  free(mine);
  free(slowest);
  MPI_Finalize();
  return total_wrong == 0 ? 0 : 1;
}
