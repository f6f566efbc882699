/* Stream copy: the memory-bandwidth denominator of benchmarks/memory_bound.py.
 *
 *   cc -O3 -march=native -fopenmp stream.c -o stream && OMP_NUM_THREADS=N ./stream [MiB] [reps]
 *
 * Copies one float array into another (b[i] = a[i]), both MiB mebibytes (default 512, well
 * past the last-level cache), split statically over the OpenMP threads. Both arrays are
 * first touched by the thread that later copies the same range. Bytes per copy = read +
 * write = 2 * MiB * 2^20 (no write-allocate traffic counted, as in STREAM). Prints the best
 * and the median rate over reps copies after one untimed warm-up copy, as one line:
 *   threads=N mib=M reps=R best_gbps=X median_gbps=Y
 */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void copy(float *restrict dst, const float *restrict src, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) dst[i] = src[i];
}

int main(int argc, char **argv) {
  int64_t mib = argc > 1 ? atoll(argv[1]) : 512;
  int reps = argc > 2 ? atoi(argv[2]) : 10;
  if (mib < 1 || reps < 1) {
    fprintf(stderr, "usage: stream [MiB >= 1] [reps >= 1]\n");
    return 2;
  }
  int64_t n = mib * (1 << 20) / (int64_t)sizeof(float);
  float *a = aligned_alloc(64, (size_t)n * sizeof(float));
  float *b = aligned_alloc(64, (size_t)n * sizeof(float));
  double *gbps = malloc((size_t)reps * sizeof(double));
  if (!a || !b || !gbps) {
    fprintf(stderr, "stream: out of memory for 2 x %lld MiB\n", (long long)mib);
    return 1;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    a[i] = (float)(i & 1023);
    b[i] = 0.0f;
  }
  copy(b, a, n); /* warm-up */
  for (int r = 0; r < reps; r++) {
    double t0 = omp_get_wtime();
    copy(b, a, n);
    double t = omp_get_wtime() - t0;
    gbps[r] = 2.0 * (double)n * sizeof(float) / t / 1e9;
  }
  /* keep the copies observable */
  if (b[n - 1] != a[n - 1]) {
    fprintf(stderr, "stream: copy check failed\n");
    return 1;
  }
  qsort(gbps, (size_t)reps, sizeof(double), cmp);
  printf("threads=%d mib=%lld reps=%d best_gbps=%.3f median_gbps=%.3f\n", omp_get_max_threads(),
         (long long)mib, reps, gbps[reps - 1], gbps[reps / 2]);
  free(a);
  free(b);
  free(gbps);
  return 0;
}
