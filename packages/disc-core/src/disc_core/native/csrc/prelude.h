#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <math.h>
#include <omp.h>
#include <time.h>

/* Symbolic dim arithmetic. A zero divisor gives 0 instead of trapping (SIGFPE would kill
   the caller's process): such a dim is only legal in an empty tensor, which disc_run checks
   for every shape before any work (symbolic.evaluate_shape is the same rule in Python). */
static inline int64_t disc_floordiv(int64_t a, int64_t b) {
  if (b == 0) return 0;
  int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int64_t disc_ceildiv(int64_t a, int64_t b) { return -disc_floordiv(-a, b); }
static inline int64_t disc_mod(int64_t a, int64_t b) { return a - b * disc_floordiv(a, b); }
static inline int64_t disc_min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t disc_max(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t disc_clampi(int64_t i, int64_t top) { return i < 0 ? 0 : i > top ? top : i; }

/* exp for float that vectorizes without special-case fallbacks (libmvec takes a slow path
   for lanes that underflow, as masked attention scores do): Cody-Waite range reduction,
   the Cephes polynomial (<= 1.01 ulp, checked against double exp on a 1-in-97 sweep of
   every float), 2^k applied in two steps so results may be subnormal; NaN, overflow and
   underflow handled by selects. */
static inline float disc_pow2i(int32_t k) {
  union { int32_t i; float f; } u; u.i = (k + 127) << 23; return u.f; }
static inline float disc_expf(float x) {
  /* lanes whose result is 0 compute exp(0) instead, so no subnormal arithmetic (a
     microcode assist per vector on x86) happens unless a result really is subnormal */
  const int zero = x < -103.972084045410156f;
  const float xs = zero ? 0.0f : x;
  const float xc = xs < 89.0f ? xs : 89.0f;
  const float k = rintf(xc * 1.44269504088896341f);
  float r = fmaf(k, -0.693359375f, xc);
  r = fmaf(k, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = fmaf(p, r, 1.3981999507e-3f);
  p = fmaf(p, r, 8.3334519073e-3f);
  p = fmaf(p, r, 4.1665795894e-2f);
  p = fmaf(p, r, 1.6666665459e-1f);
  p = fmaf(p, r, 5.0000001201e-1f);
  p = fmaf(p, r * r, r) + 1.0f;
  const int32_t ki = (int32_t)k, k1 = ki >> 1, k2 = ki - k1;
  float res = p * disc_pow2i(k1) * disc_pow2i(k2);
  res = x > 88.72283935546875f ? INFINITY : res;
  res = zero ? 0.0f : res;
  return x != x ? x : res;
}

/* ILP64 Fortran-interface GEMM (disc_env.sgemm / dgemm): every argument by pointer,
   column-major; the two trailing lengths are the hidden Fortran string lengths of the
   transpose flags (C implementations ignore them). */
typedef void (*disc_sgemm_fn)(const char *, const char *, const int64_t *, const int64_t *,
                              const int64_t *, const float *, const float *, const int64_t *,
                              const float *, const int64_t *, const float *, float *,
                              const int64_t *, size_t, size_t);
typedef void (*disc_dgemm_fn)(const char *, const char *, const int64_t *, const int64_t *,
                              const int64_t *, const double *, const double *,
                              const int64_t *, const double *, const int64_t *,
                              const double *, double *, const int64_t *, size_t, size_t);
/* row-major f32 GEMM with oneDNN's dnnl_sgemm signature (disc_env.sgemm_rowmajor) */
typedef int (*disc_sgemm_rowmajor_fn)(char, char, int64_t, int64_t, int64_t, float,
                                      const float *, int64_t, const float *, int64_t, float,
                                      float *, int64_t);

#ifdef DISC_LIBMVEC
/* glibc's vector math library: lets loops calling these vectorize (declared simd only
   under -ffast-math by math.h, which DISC does not use: NaN and infinity semantics stay). */
#define DISC_SIMD __attribute__((simd("notinbranch")))
DISC_SIMD float expf(float); DISC_SIMD float expm1f(float); DISC_SIMD float logf(float);
DISC_SIMD float log1pf(float); DISC_SIMD float erff(float); DISC_SIMD float tanhf(float);
DISC_SIMD float sinf(float); DISC_SIMD float cosf(float); DISC_SIMD float tanf(float);
DISC_SIMD float powf(float, float); DISC_SIMD float atan2f(float, float);
DISC_SIMD double exp(double); DISC_SIMD double expm1(double); DISC_SIMD double log(double);
DISC_SIMD double log1p(double); DISC_SIMD double erf(double); DISC_SIMD double tanh(double);
DISC_SIMD double sin(double); DISC_SIMD double cos(double); DISC_SIMD double tan(double);
DISC_SIMD double pow(double, double); DISC_SIMD double atan2(double, double);
#endif

/* the per-step profile (disc_env.profile, NULL unless profiling): slot 0 counts calls,
   slot 1 is host time (checks, allocation, copies), slot 2 + i the wall time of step i, in
   nanoseconds. Atomic adds: calls may run concurrently on one env's buffer. */
static inline int64_t disc_now_ns(void) {
  struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec; }
#define DISC_PROFILE(slot) do { if (prof) { const int64_t now_ = disc_now_ns(); \
  __atomic_fetch_add(&env->profile[slot], now_ - prof_t, __ATOMIC_RELAXED); prof_t = now_; } \
  } while (0)
#define DISC_FAIL(...) do { snprintf(err, (size_t)errlen, __VA_ARGS__); goto fail; } while (0)
/* below this many multiply-adds a GEMM runs on one thread (thread start-up would dominate) */
#define DISC_GEMM_PARALLEL_MIN 262144.0
/* a GEMM splits its K across the team when K is this many times C's longer side */
#define DISC_GEMM_SPLIT_K_RATIO 8
#define DISC_BLOCKS_PER_THREAD 4
/* lanes of a 4-byte element in the widest vectors the target has: kernels have a version
   for innermost extents that are a multiple of it (no remainder loop) */
#if defined(__AVX512F__)
#define DISC_VEC_LANES 16
/* every other kernel version vectorizes 16 wide: -march=native on AVX-512 Intel cores
   (and gcc's tuning for them) prefers 256-bit vectors, which left DISC_VEC_LANES-multiple
   rows 8 wide and made exp-heavy rows (softmax, masked attention scores) compute-bound at
   about 0.65x of PyTorch's 16-wide kernels; 512-bit loops ran them 1.3x faster and
   LayerNorm's 1.2x (same-process A/B, one thread, cache-resident rows) */
#define DISC_WIDE __attribute__((target("prefer-vector-width=512")))
/* short rows that are not a multiple of 16 (7x7 to 31x31 feature maps, odd sequence
   lengths below 32) run a version vectorized 8 wide: 16-wide loops leave up to 15 of
   their few elements to remainder code, about 2x slower per element there */
#define DISC_SHORT_ROWS __attribute__((target("prefer-vector-width=256")))
#define DISC_SHORT_ROW_MAX 32
#elif defined(__AVX__)
#define DISC_VEC_LANES 8
#else
#define DISC_VEC_LANES 4
#endif
#ifndef DISC_SHORT_ROWS
#define DISC_SHORT_ROWS
#define DISC_SHORT_ROW_MAX 0
#endif
#ifndef DISC_WIDE
#define DISC_WIDE
#endif
/* kernel entries the host calls: file-local in a one-file module, hidden across the
   files of a module split for parallel compilation */
#ifndef DISC_ENTRY
#define DISC_ENTRY static
#endif
/* column-epilogue partial sums up to this size live on the calling thread's stack */
#define DISC_STACK_PARTIALS 262144
/* a row kernel's row buffers up to this size live on the stack of the thread running the
   block (OpenMP threads' stacks are megabytes) */
#define DISC_STACK_ROWBUF 65536
