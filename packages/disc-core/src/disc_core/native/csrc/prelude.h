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
   a polynomial evaluated as 1 + r(1 + r P(r)), 2^k applied in two steps so results may
   be subnormal; overflow and underflow by selects, a NaN passes through the arithmetic.
   P has degree 4 (a near-minimax fit of (e^r - 1 - r) / r^2 on [-ln2/2, ln2/2], 3.8e-9
   relative error with its f32 coefficients): Cephes' degree 5 gave the same 0.894 ulp
   over every float, the rounding of the evaluation being most of the error, with one
   more FMA. <= 0.9 ulp (0.86 units of 2^-149 where subnormal) over every float, checked
   against double exp. About 26 vector instructions: exp is most of a softmax row's work. */
typedef union { float f; int32_t i; } disc_f32_bits;
/* the elementwise math functions loops call are always inlined: a call left in an 'omp
   simd' loop keeps it scalar (no simd clone), and at -O2 gcc's size limits did leave
   disc_erff out of line in kernels with several versions (an exact GELU on a symbolic
   hidden size ran scalar in every version) */
#define DISC_MATH static inline __attribute__((always_inline))
/* exp's constants and its reduction and polynomial, written once for the scalar form
   below and the vector one (disc_vexpf16), which must give the same bits: FMA and C are
   the fused multiply-add and the constant of the element type (fmaf and the float itself,
   or their 16-lane vector forms). From x (xc, clamped): k = rint(x / ln 2) by adding
   1.5 * 2^23, whose ulp is 1 (the low bits of the sum are k); r = x - k ln 2 in two
   steps (Cody-Waite; k * DISC_EXP_LN2_HI is exact); p = e^r. */
#define DISC_EXP_ZERO_BELOW -103.972084045410156f  /* exp rounds to 0 below */
#define DISC_EXP_CLAMP 88.8f                        /* above ln(FLT_MAX): overflows */
#define DISC_EXP_SHIFTER 12582912.0f
#define DISC_EXP_REDUCE(FMA, C, xc, s, k, r)                                              \
  s = FMA(xc, C(1.44269504088896341f), C(DISC_EXP_SHIFTER));                             \
  k = s - C(DISC_EXP_SHIFTER);                                                            \
  r = FMA(k, C(-0.693359375f), xc);                                                       \
  r = FMA(k, C(2.12194440e-4f), r)
#define DISC_EXP_POLY(FMA, C, r, p)                                                       \
  p = C(1.381459879e-3f);                                                                 \
  p = FMA(p, r, C(8.368716575e-3f));                                                      \
  p = FMA(p, r, C(4.166838899e-2f));                                                      \
  p = FMA(p, r, C(1.666652113e-1f));                                                      \
  p = FMA(p, r, C(4.999999404e-1f));                                                      \
  p = FMA(r, FMA(r, p, C(1.0f)), C(1.0f))
#define DISC_SCALAR(x) (x)
/* exp(x); ``upper``, a constant the inlined call folds: clamp x above (0 only where x is
   known to be at most zero or NaN, see disc_expf_nonpos) */
DISC_MATH float disc_expf_body(float x, const int upper) {
  /* lanes whose result is 0 compute exp(0) instead, so no subnormal arithmetic (a
     microcode assist per vector on x86) happens unless a result really is subnormal */
  const int zero = x < DISC_EXP_ZERO_BELOW;
  const float xm = upper && DISC_EXP_CLAMP < x ? DISC_EXP_CLAMP : x;  /* NaN stays NaN */
  const float xc = zero ? 0.0f : xm;
  disc_f32_bits s;
  float k, r, p;
  DISC_EXP_REDUCE(fmaf, DISC_SCALAR, xc, s.f, k, r);
  /* the biased exponents of 2^k1 and 2^k2, k1 = floor(k / 2), k2 = k - k1, from the bits
     of s with one add: (k + 254) >> 1 = k1 + 127 and (k + 254) - (k1 + 127) = k2 + 127 */
  const int32_t kb = s.i - (0x4B400000 - 254), e1 = kb >> 1, e2 = kb - e1;
  DISC_EXP_POLY(fmaf, DISC_SCALAR, r, p);
  const disc_f32_bits s1 = { .i = e1 << 23 }, s2 = { .i = e2 << 23 };
  /* above ln(FLT_MAX) = 88.7228 (x clamped to 88.8: k = 128), p * 2^128 overflows to
     infinity by itself: the nearest float above ln(FLT_MAX) has a result 7.6e-6 above
     FLT_MAX, far beyond p's error */
  const float res = p * s1.f * s2.f;
  return zero ? 0.0f : res;
}
DISC_MATH float disc_expf(float x) { return disc_expf_body(x, 1); }
/* exp of an argument the graph proves at most zero or NaN (x - max(x), value_facts.py):
   it cannot overflow, so no upper clamp (a compare and a blend per vector; about 10% of
   the exp loop on AMD Zen 1) */
DISC_MATH float disc_expf_nonpos(float x) { return disc_expf_body(x, 0); }

/* erf for float, inline and vectorizable (libmvec's erff is a call per vector, spilling
   every vector register of the loop around it, and is absent without glibc 2.35):
   |x| < 0.921875: x + x P(x^2); above, sign(x) (1 - exp(Q(|x|) - x^2)), Q a polynomial
   in |x| - 2.4234375 fitted to log(erfc) + x^2, clamped at 3.925 where erf rounds to 1.
   Both pieces are near-minimax fits (relative error 1.6e-8 and 8.4e-9 in log erfc),
   <= 1.11 ulp over every float against double erf (glibc's vector erff: 4 ulp);
   a NaN passes through the first piece. */
DISC_MATH float disc_erff(float x) {
  const float a = fabsf(x), t = x * x;
  float p = -5.990891950204968e-4f;
  p = fmaf(p, t, 4.993189126253128e-3f);
  p = fmaf(p, t, -2.6766624301671982e-2f);
  p = fmaf(p, t, 1.128181666135788e-1f);
  p = fmaf(p, t, -3.7612494826316833e-1f);
  p = fmaf(p, t, 1.2837915122509003e-1f);  /* 2/sqrt(pi) - 1 */
  const float ac = a < 3.925f ? a : 3.925f, u = ac - 2.4234375953674316f;
  float q = 1.6306570387314423e-6f;
  q = fmaf(q, u, -1.4279347851697821e-5f);
  q = fmaf(q, u, 8.472266927128658e-5f);
  q = fmaf(q, u, -4.5744265662506223e-4f);
  q = fmaf(q, u, 2.333104843273759e-3f);
  q = fmaf(q, u, -1.154687162488699e-2f);
  q = fmaf(q, u, 5.867846682667732e-2f);
  q = fmaf(q, u, -3.614668846130371e-1f);
  q = fmaf(q, u, -1.5294793844223022f);
  q = fmaf(-ac, ac, q);  /* log(erfc(|x|)), in [-17.2, -1.5]: exp needs no special cases */
  const disc_f32_bits s = { fmaf(q, 1.44269504088896341f, 12582912.0f) };
  const float k = s.f - 12582912.0f;
  float r = fmaf(k, -0.693359375f, q);
  r = fmaf(k, 2.12194440e-4f, r);
  float e = 1.9875691500e-4f;
  e = fmaf(e, r, 1.3981999507e-3f);
  e = fmaf(e, r, 8.3334519073e-3f);
  e = fmaf(e, r, 4.1665795894e-2f);
  e = fmaf(e, r, 1.6666665459e-1f);
  e = fmaf(e, r, 5.0000001201e-1f);
  e = fmaf(r, fmaf(r, e, 1.0f), 1.0f);
  const disc_f32_bits scale = { .i = (s.i - 0x4B400000 + 127) << 23 };
  const float tail = copysignf(1.0f - e * scale.f, x);
  return a >= 0.921875f ? tail : fmaf(x, p, x);
}

/* erf where only its absolute error matters: an erf whose every use adds 1 to it (the
   normal CDF of an exact GELU and of its gradient, 0.5 (1 + erf(x / sqrt 2)), whose sum
   rounds at the scale of 1 anyway; ops/elementwise.py picks it from the kernel's uses).
   One rational function, x P(x^2) / Q(x^2) with P and Q of degree 6 (a fit of erf(x) / x
   on [0, 3.92] to 2.1e-8 relative error), and +-1 from 3.92 on. About half the vector
   instructions of disc_erff (no second piece, no exp): exact GELU at 0.32-0.39 ns a float
   on one Xeon core (AVX-512) against 0.61-0.72 (torch's own GELU: 0.42). Absolute error
   <= 3.9e-7 over every float (against double erf; the largest near 3.8, where P and Q
   are large and their rounding counts), relative error <= 1e-6 for |x| < 1 above the
   subnormals; torch's CPU GELU is itself within 9.3e-7 of the exact one. Odd, +-1 at the
   infinities, a NaN passes through. */
DISC_MATH float disc_erff_abs(float x) {
  const float t = x * x;
  float p = -4.632498473711166e-08f;
  p = fmaf(p, t, -9.942816632246831e-07f);
  p = fmaf(p, t, 2.92597251245752e-04f);
  p = fmaf(p, t, 2.971734618768096e-03f);
  p = fmaf(p, t, 5.080600082874298e-02f);
  p = fmaf(p, t, 1.681506633758545e-01f);
  p = fmaf(p, t, 1.1283791065216064f);
  float q = -6.742456548636255e-07f;
  q = fmaf(q, t, 3.6609009839594364e-05f);
  q = fmaf(q, t, 1.0274826781824231e-03f);
  q = fmaf(q, t, 1.3475334271788597e-02f);
  q = fmaf(q, t, 1.0581175982952118e-01f);
  q = fmaf(q, t, 4.8235252499580383e-01f);
  q = fmaf(q, t, 1.0f);
  /* from 3.92 on, where erf rounds to +-1, exactly +-1 (so 1 + erf(-x) is 0 there, not
     a residue a large x would scale up; P / Q of a huge x, NaN, is never chosen); the
     compare does not wait for P and Q, and a NaN x fails it and passes through */
  return fabsf(x) >= 3.92f ? copysignf(1.0f, x) : x * (p / q);
}

/* Sum, max and min of a contiguous float/double row (a row kernel's reduction whose operand
   is an input row or was stored in a row buffer). Four vector accumulators and a pairwise
   combination of the lanes: the 'omp simd reduction' loop this replaces kept one vector
   accumulator (a chain of dependent adds, 4 cycles each) and summed its 16 lanes one after
   the other, which made LayerNorm's two statistics about two thirds of its time on
   cache-resident rows. max/min: NaN if any element is NaN (a separate flag, as the loop
   form does), else the plain max/min; an empty row gives the reduction's identity.

   The vectors are the target's own width (DISC_RED_BYTES): gcc lowers a generic vector
   wider than the hardware's piecewise, and the max/min's mask arithmetic on 64-byte
   vectors became scalar code on AVX2 (8.6 us for a row of 1024 floats, 10x the sum). */
#if defined(__AVX512F__)
#define DISC_RED_BYTES 64
#elif defined(__AVX__)
#define DISC_RED_BYTES 32
#else
#define DISC_RED_BYTES 16
#endif
#define DISC_ROW_REDUCE(T, I, NAME)                                                       \
typedef T disc_vec_##NAME __attribute__((vector_size(DISC_RED_BYTES), aligned(sizeof(T)))); \
typedef I disc_vmask_##NAME __attribute__((vector_size(DISC_RED_BYTES)));                 \
enum { DISC_LANES_##NAME = DISC_RED_BYTES / sizeof(T) };                                  \
/* lane j combines lane j + w for w = half the lanes, a quarter, ...: pairwise */          \
static inline T disc_lanes_##NAME(disc_vec_##NAME *v) {                                   \
  T l[DISC_LANES_##NAME];                                                                 \
  for (int j = 0; j < DISC_LANES_##NAME; ++j) l[j] = (*v)[j];                             \
  for (int w = DISC_LANES_##NAME / 2; w >= 1; w /= 2)                                     \
    for (int j = 0; j < w; ++j) l[j] += l[j + w];                                         \
  return l[0]; }                                                                          \
static inline T disc_row_sum_##NAME(const T *restrict p, int64_t n) {                     \
  enum { N = DISC_LANES_##NAME };                                                         \
  disc_vec_##NAME a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};                                 \
  int64_t i = 0;                                                                          \
  for (; i + 4 * N <= n; i += 4 * N) {                                                    \
    a0 += *(const disc_vec_##NAME *)(p + i);                                              \
    a1 += *(const disc_vec_##NAME *)(p + i + N);                                          \
    a2 += *(const disc_vec_##NAME *)(p + i + 2 * N);                                      \
    a3 += *(const disc_vec_##NAME *)(p + i + 3 * N); }                                    \
  for (; i + N <= n; i += N) a0 += *(const disc_vec_##NAME *)(p + i);                     \
  T t = 0;                                                                                \
  for (; i < n; ++i) t += p[i];                                                           \
  a0 = (a0 + a1) + (a2 + a3);                                                             \
  return t + disc_lanes_##NAME(&a0); }                                                    \
DISC_ROW_EXTREMUM(T, NAME, max, >)                                                        \
DISC_ROW_EXTREMUM(T, NAME, min, <)
/* one select per element: a NaN element never wins the comparison, the flag records it */
#define DISC_ROW_EXTREMUM(T, NAME, KIND, CMP)                                             \
static inline void disc_##KIND##_step_##NAME(disc_vec_##NAME *a, const disc_vec_##NAME *xp, \
                                             disc_vmask_##NAME *nan) {                    \
  const disc_vec_##NAME x = *xp;                                                          \
  *nan |= (disc_vmask_##NAME)(x != x);                                                    \
  const disc_vmask_##NAME m = (disc_vmask_##NAME)(x CMP *a);                              \
  *a = (disc_vec_##NAME)(((disc_vmask_##NAME)x & m) | ((disc_vmask_##NAME)*a & ~m)); }    \
static inline T disc_row_##KIND##_##NAME(const T *restrict p, int64_t n, T init) {        \
  enum { N = DISC_LANES_##NAME };                                                         \
  disc_vec_##NAME a0, a1, a2, a3;                                                         \
  for (int j = 0; j < N; ++j) a0[j] = a1[j] = a2[j] = a3[j] = init;                       \
  disc_vmask_##NAME nan = {0};                                                            \
  int64_t i = 0;                                                                          \
  for (; i + 4 * N <= n; i += 4 * N) {                                                    \
    disc_##KIND##_step_##NAME(&a0, (const disc_vec_##NAME *)(p + i), &nan);               \
    disc_##KIND##_step_##NAME(&a1, (const disc_vec_##NAME *)(p + i + N), &nan);           \
    disc_##KIND##_step_##NAME(&a2, (const disc_vec_##NAME *)(p + i + 2 * N), &nan);       \
    disc_##KIND##_step_##NAME(&a3, (const disc_vec_##NAME *)(p + i + 3 * N), &nan); }     \
  for (; i + N <= n; i += N)                                                              \
    disc_##KIND##_step_##NAME(&a0, (const disc_vec_##NAME *)(p + i), &nan);               \
  disc_##KIND##_step_##NAME(&a0, &a1, &nan);                                              \
  disc_##KIND##_step_##NAME(&a2, &a3, &nan);                                              \
  disc_##KIND##_step_##NAME(&a0, &a2, &nan);                                              \
  int64_t any = 0;                                                                        \
  for (int j = 0; j < N; ++j) any |= nan[j];                                              \
  T l[N];                                                                                 \
  for (int j = 0; j < N; ++j) l[j] = a0[j];                                               \
  for (int w = N / 2; w >= 1; w /= 2) /* NaN lanes never won: the flag says */            \
    for (int j = 0; j < w; ++j) l[j] = l[j + w] CMP l[j] ? l[j + w] : l[j];               \
  T t = l[0];                                                                             \
  for (; i < n; ++i) { t = p[i] CMP t ? p[i] : t; any |= p[i] != p[i]; }                  \
  return any ? (T)NAN : t; }
DISC_ROW_REDUCE(float, int32_t, f32)
DISC_ROW_REDUCE(double, int64_t, f64)

/* AVX-512 vector code written with gcc's builtins, where the vectorizer's code from C is
   slower: instructions C cannot ask for (vscalefps), or mask arithmetic it lowers poorly.
   Builtins, not <immintrin.h>, whose parse with -march=native costs about 0.5 s per
   module (see disc_stream_bytes); clang spells them differently and keeps the C forms. */
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
#define DISC_AVX512_BUILTINS 1
typedef float disc_v16sf __attribute__((vector_size(64)));
static inline __attribute__((always_inline)) disc_v16sf disc_splat16(float x) {
  return (disc_v16sf){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }
static inline __attribute__((always_inline)) disc_v16sf disc_fma16(disc_v16sf a,
                                                                  disc_v16sf b, disc_v16sf c) {
  return __builtin_ia32_vfmaddps512_mask(a, b, c, (uint16_t)-1, 4); }
/* the lanes of a row's last vector that hold its n - i remaining elements */
static inline __attribute__((always_inline)) uint16_t disc_tail16(int64_t left) {
  return left >= 16 ? (uint16_t)-1 : (uint16_t)((1u << left) - 1); }

/* f32 row max and min (in place of the generic ones above): one vmaxps / vminps and one
   unordered compare into a mask per vector. The generic form's NaN flag, a vector of
   compare results, became compares, mask moves and scalar ORs (8 instructions a vector):
   0.051 against 0.032 ns a float on a 448-float row in L1 (one Xeon core), about 6% of a
   masked attention-score row. Same results: NaN if any element is, else the max / min,
   the accumulator kept on ties (vmaxps(x, a) is x > a ? x : a, as the generic select). */
#define DISC_ROW_EXTREMUM16(KIND, OP, CMP)                                                \
static inline float disc_row_##KIND##16_f32(const float *restrict p, int64_t n, float init) { \
  const disc_v16sf z = disc_splat16(0.0f);                                                \
  disc_v16sf a0 = disc_splat16(init), a1 = a0, a2 = a0, a3 = a0;                          \
  uint16_t nan = 0;                                                                       \
  int64_t i = 0;                                                                          \
  for (; i + 64 <= n; i += 64) {                                                          \
    disc_v16sf x0, x1, x2, x3;                                                            \
    memcpy(&x0, p + i, 64); memcpy(&x1, p + i + 16, 64);                                  \
    memcpy(&x2, p + i + 32, 64); memcpy(&x3, p + i + 48, 64);                             \
    a0 = OP(x0, a0, z, (uint16_t)-1, 4); a1 = OP(x1, a1, z, (uint16_t)-1, 4);             \
    a2 = OP(x2, a2, z, (uint16_t)-1, 4); a3 = OP(x3, a3, z, (uint16_t)-1, 4);             \
    nan |= (uint16_t)(__builtin_ia32_cmpps512_mask(x0, x0, 3, (uint16_t)-1, 4)            \
                      | __builtin_ia32_cmpps512_mask(x1, x1, 3, (uint16_t)-1, 4)          \
                      | __builtin_ia32_cmpps512_mask(x2, x2, 3, (uint16_t)-1, 4)          \
                      | __builtin_ia32_cmpps512_mask(x3, x3, 3, (uint16_t)-1, 4)); }      \
  for (; i < n; i += 16) {  /* the lanes past the row hold the accumulator itself */     \
    const uint16_t m = disc_tail16(n - i);                                                \
    const disc_v16sf x = __builtin_ia32_loadups512_mask(p + i, a0, m);                    \
    a0 = OP(x, a0, z, (uint16_t)-1, 4);                                                   \
    nan |= (uint16_t)__builtin_ia32_cmpps512_mask(x, x, 3, m, 4); }                       \
  a0 = OP(a0, a1, z, (uint16_t)-1, 4); a2 = OP(a2, a3, z, (uint16_t)-1, 4);               \
  a0 = OP(a0, a2, z, (uint16_t)-1, 4);                                                    \
  float t = init;                                                                         \
  for (int j = 0; j < 16; ++j) t = a0[j] CMP t ? a0[j] : t;                               \
  return nan ? NAN : t; }
DISC_ROW_EXTREMUM16(max, __builtin_ia32_maxps512_mask, >)
DISC_ROW_EXTREMUM16(min, __builtin_ia32_minps512_mask, <)
#define disc_row_max_f32 disc_row_max16_f32
#define disc_row_min_f32 disc_row_min16_f32
#else
#define DISC_AVX512_BUILTINS 0
#endif

/* dst[i] = exp(src[i] - shift) over a row of n floats (dst may be src) and the sum of the
   results: the sum of a softmax-like row (softmax, log-softmax, cross-entropy, masked
   attention scores; kernel_emit's row_sum_calls), from the row whose maximum was shifted
   out (an input row or a row buffer), or in place from a row buffer the row loop filled
   with the exponent's argument (shift 0). ``upper`` as for disc_expf_body (0 where the
   argument is at most zero). x - 0 is x for every float, NaN and -0 included.

   With AVX-512 (gcc) the exp is vector code: disc_expf_body's reduction and polynomial,
   with 2^k applied by one vscalefps, which rounds p * 2^k once, subnormal results
   included, as the two steps do: the results are disc_expf's bit for bit (over every
   float, measured). It replaces the two-step scaling and its integer arithmetic (7
   instructions), which gcc 12 cannot derive from C (it does not vectorize ldexpf). exp
   ran 1.3-1.5x faster per element than the auto-vectorized disc_expf (one Xeon core, in
   cache) and masked attention-score rows 10-19% faster overall. Elsewhere: the inline
   exp in one loop. */
#if DISC_AVX512_BUILTINS
/* exp of the lanes of x in ``lanes`` (the others: 0) */
static inline __attribute__((always_inline)) disc_v16sf disc_vexpf16(disc_v16sf x,
                                                                    uint16_t lanes,
                                                                    const int upper) {
  const disc_v16sf zero = disc_splat16(0.0f);
  /* results that are 0 (x below -103.97, or -inf) come from the mask on the last step; a
     NaN x compares unordered, stays live and passes through. Their lanes compute on
     regardless, with no subnormal arithmetic (a microcode assist per vector): k is
     integral even past 2^23, so r, exactly x - k c1 + k c2 rounded, is a multiple of
     2^-36 (the unit of c2; x and k c1 are coarser): 0 or at least 2^-36, NaN for
     x = -inf, and the polynomial of it normal, infinite or NaN. (-inf, -1e9 and -1e30
     rows ran as fast as ordinary ones; subnormal results do cost an assist, as in
     disc_expf_body.) */
  const uint16_t live = lanes & (uint16_t)__builtin_ia32_cmpps512_mask(
      x, disc_splat16(DISC_EXP_ZERO_BELOW), 0x15 /* not less than, unordered */,
      (uint16_t)-1, 4);
  disc_v16sf xc = x;
  /* min(88.8, x) keeps a NaN x (vminps returns its second operand then) */
  if (upper)
    xc = __builtin_ia32_minps512_mask(disc_splat16(DISC_EXP_CLAMP), xc, zero, (uint16_t)-1, 4);
  disc_v16sf s, k, r, p;
  DISC_EXP_REDUCE(disc_fma16, disc_splat16, xc, s, k, r);
  DISC_EXP_POLY(disc_fma16, disc_splat16, r, p);
  /* p * 2^k, k integral: overflow to infinity above ln(FLT_MAX) as disc_expf_body says */
  return __builtin_ia32_scalefps512_mask(p, k, zero, live, 4);
}
#endif
static inline float disc_row_exp_sum_f32(float *dst, const float *src, float shift,
                                         int64_t n, const int upper) {
#if DISC_AVX512_BUILTINS
  const disc_v16sf sv = disc_splat16(shift);
  disc_v16sf a0 = disc_splat16(0.0f), a1 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {  /* two independent exps per step */
    disc_v16sf x0, x1;
    memcpy(&x0, src + i, 64); memcpy(&x1, src + i + 16, 64);
    const disc_v16sf e0 = disc_vexpf16(x0 - sv, (uint16_t)-1, upper);
    const disc_v16sf e1 = disc_vexpf16(x1 - sv, (uint16_t)-1, upper);
    memcpy(dst + i, &e0, 64); memcpy(dst + i + 16, &e1, 64);
    a0 += e0; a1 += e1;
  }
  for (; i < n; i += 16) {  /* at most two more vectors, the last one masked */
    const uint16_t m = disc_tail16(n - i);
    const disc_v16sf x = __builtin_ia32_loadups512_mask(src + i, disc_splat16(0.0f), m);
    const disc_v16sf e = disc_vexpf16(x - sv, m, upper);
    __builtin_ia32_storeups512_mask(dst + i, e, m);
    a0 += e;
  }
  disc_vec_f32 total = (disc_vec_f32)(a0 + a1);
  return disc_lanes_f32(&total);
#else
  float t = 0;
  #pragma omp simd reduction(+:t)
  for (int64_t i = 0; i < n; ++i) {
    const float e = disc_expf_body(src[i] - shift, upper);
    dst[i] = e;
    t += e;
  }
  return t;
#endif
}

/* Whether row kernels prefetch their next input rows in software (kernel_emit's
   prefetch_rows), decided per CPU kind by measurement. On an Intel Xeon (Sapphire Rapids)
   it made 768-wide LayerNorm rows 5-10% faster at 0.5-6 MB. On AMD Zen 1 it made them
   5-15% slower at every size from 1.5 to 24 MB, and softmax 7% slower at 24 MB: Zen's
   hardware prefetcher follows the rows by itself and the prefetch loop costs issue slots.
   Later Zen generations are assumed to behave like Zen 1 (not measured). */
#ifndef DISC_ROW_PREFETCH
#if defined(__znver1__) || defined(__znver2__) || defined(__znver3__) || \
    defined(__znver4__) || defined(__znver5__)
#define DISC_ROW_PREFETCH 0
#else
#define DISC_ROW_PREFETCH 1
#endif
#endif

/* prefetch the n elements of a row (any element type, element size at most 8 bytes:
   one touch per 64 bytes) into the cache, for reading */
#define disc_prefetch_row(p, n) do {                                                      \
  const char *disc_pf_ = (const char *)(p);                                               \
  const int64_t disc_pf_bytes_ = (int64_t)(n) * (int64_t)sizeof(*(p));                    \
  for (int64_t disc_pf_i_ = 0; disc_pf_i_ < disc_pf_bytes_; disc_pf_i_ += 64)             \
    __builtin_prefetch(disc_pf_ + disc_pf_i_, 0, 3);                                      \
  } while (0)

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
/* MKL's packed-operand f32 GEMM, ILP64 Fortran interface (disc_env.sgemm_pack_get_size,
   sgemm_pack, sgemm_compute): the bytes a packed operand takes, packing it (op(A), alpha
   applied), and C = op(A) op(B) + beta C with a packed A ("P" as its transpose flag) */
typedef size_t (*disc_sgemm_pack_get_size_fn)(const char *, const int64_t *, const int64_t *,
                                              const int64_t *, size_t);
typedef void (*disc_sgemm_pack_fn)(const char *, const char *, const int64_t *,
                                   const int64_t *, const int64_t *, const float *,
                                   const float *, const int64_t *, float *, size_t, size_t);
typedef void (*disc_sgemm_compute_fn)(const char *, const char *, const int64_t *,
                                      const int64_t *, const int64_t *, const float *,
                                      const int64_t *, const float *, const int64_t *,
                                      const float *, float *, const int64_t *, size_t, size_t);
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
/* Scratch memory on cache-line (and 512-bit vector) boundaries; release with free().
   malloc aligns to 16 bytes only (page + 16 past its mmap threshold): BLAS writing C rows
   that start 16 bytes into a line measured about 10% slower (MKL sgemm, Zen 3, 964 x 256
   x 1024), and vector loops split a load across two lines at every row. */
#define DISC_ALIGN 64
static inline void *disc_alloc(size_t bytes) {
  void *p = NULL;
  return posix_memalign(&p, DISC_ALIGN, bytes ? bytes : DISC_ALIGN) == 0 ? p : NULL;
}
/* the same from the stack (released on return): alloca aligns to 16 bytes only */
#define DISC_STACK_ALLOC(bytes) __builtin_alloca_with_align((bytes), 8 * DISC_ALIGN)
/* a count of elements of `size` bytes rounded up to whole DISC_ALIGN lines: the stride of
   per-thread pieces cut from one disc_alloc block, so that every piece starts aligned */
static inline int64_t disc_align_count(int64_t count, int64_t size) {
  const int64_t per = DISC_ALIGN / size;
  return (count + per - 1) / per * per;
}
#define DISC_FAIL(...) do { snprintf(err, (size_t)errlen, __VA_ARGS__); goto fail; } while (0)
/* below this many multiply-adds a GEMM runs on one thread (thread start-up would dominate) */
#define DISC_GEMM_PARALLEL_MIN 262144.0
/* a GEMM splits its K across the team when K is this many times C's longer side */
#define DISC_GEMM_SPLIT_K_RATIO 8
#define DISC_BLOCKS_PER_THREAD 4
/* oneDNN's sgemm packs an operand it reads across its rows (a transposed A, a plain B) at
   half speed or less when those rows lie a multiple of DISC_LD_ALIAS elements (1 KB of
   f32) apart; the GEMM and attention helpers then hand it a copy whose rows lie
   DISC_LD_PAD elements (64 bytes) further apart (csrc/gemm.c, csrc/attention.c) */
#define DISC_LD_ALIAS 256
#define DISC_LD_PAD 16
/* do rows ld elements apart alias so? */
static inline int disc_ld_aliases(int64_t ld) { return ld % DISC_LD_ALIAS == 0; }
/* the row stride of a copy of rows ld elements apart (or cols wide) that does not */
static inline int64_t disc_unaliased_ld(int64_t ld) {
  return disc_ld_aliases(ld) ? ld + DISC_LD_PAD : ld;
}
/* lanes of a 4-byte element in the widest vectors the target has: kernels have a version
   for innermost extents that are a multiple of it (no remainder loop) */
#if defined(__AVX512F__)
#define DISC_VEC_LANES 16
/* kernel versions without remainder loops (rows a multiple of 16 at run time or statically,
   column chunks) vectorize 16 wide: -march=native on AVX-512 Intel cores (and gcc's tuning
   for them) prefers 256-bit vectors, which left exp-heavy rows (softmax, masked attention
   scores) compute-bound at about 0.65x of PyTorch's 16-wide kernels; 512-bit loops ran them
   1.3-1.5x faster and LayerNorm's 1.1-1.3x (same-process A/B, one thread). Rows with a
   remainder keep 8-wide loops: a 16-wide loop's 8-wide-then-scalar epilogue cost more. */
#define DISC_WIDE __attribute__((target("prefer-vector-width=512")))
/* short rows that are not a multiple of 16 (7x7 to 31x31 feature maps, odd sequence
   lengths below 32) run a version vectorized 8 wide: 16-wide loops leave up to 15 of
   their few elements to remainder code, about 2x slower per element there */
#define DISC_SHORT_ROWS __attribute__((target("prefer-vector-width=256")))
#define DISC_SHORT_ROW_MAX 32
#elif defined(__AVX__)
#define DISC_VEC_LANES 8
/* AVX2 without AVX-512: gcc's tuning for Zen 1 (-march=native = znver1) prefers 128-bit
   vectors, which left the versions for multiples of 8 lanes 4 wide (and one GELU version
   scalar); 256-bit loops ran the GELU backward kernel 9% faster with bit-identical
   results. Other AVX2 cores prefer 256 bits already, so this changes nothing there. */
#define DISC_WIDE __attribute__((target("prefer-vector-width=256")))
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
/* entry points of the library helpers (gemm.c, attention.c): file-local where a helper is
   compiled into the module's own unit; hidden symbols where the helpers are prebuilt
   objects linked into the module (DISC_HELPERS_LINKED, native/helper_objects.py). The
   module's unit then includes each helper with DISC_HELPER_DECLARE_ONLY: its types and
   entry prototypes, no bodies. */
#ifdef DISC_HELPERS_LINKED
#define DISC_HELPER_ENTRY __attribute__((visibility("hidden"), noinline))
#else
#define DISC_HELPER_ENTRY static __attribute__((noinline))
#endif
/* a kernel's _part function (its rows or chunks [lo, hi)) is never inlined into its entry:
   inlined into the OpenMP-outlined loop of the parallel path, its pointers come from the
   shared-data struct without restrict, and gcc left the inner loop scalar ("complicated
   access pattern"): a GELU kernel ran 4-10x slower than its vectorized form, with
   data-dependent branches */
#define DISC_PART __attribute__((noinline))
/* column-epilogue partial sums up to this size live on the calling thread's stack */
#define DISC_STACK_PARTIALS 262144
/* a row kernel's row buffers up to this size each (rows of 8192 floats) live on the stack
   of the thread running the block, instead of a malloc/free pair per block */
#define DISC_STACK_ROWBUF 32768

/* Streaming (non-temporal) output stores. A kernel whose call moves more bytes than the
   last-level cache holds (DISC_LLC_BYTES, which the toolchain reads from the machine) gets
   no reuse of its output lines from the cache anyway; a plain store first reads each line
   it writes (read-for-ownership), a third stream of memory traffic next to the input
   read and the write back. Such calls compute each row in chunks into a stack buffer in
   L1 and stream the chunk out (kernel_emit's streamed loop). Measured on AMD Zen 1 (8 MB
   L3), 768-wide LayerNorm at 2 threads: 18-24% faster from 12 to 24 MB moved, break-even
   near 8 MB, 10-15% slower below (the output would have stayed in the cache). */
#ifndef DISC_LLC_BYTES
#define DISC_LLC_BYTES (32 << 20)
#endif
/* elements per chunk of a streamed row (4 KB of f32: stays in L1 between its computation
   and the copy out) */
#define DISC_STREAM_CHUNK 1024
#if defined(__AVX__) && (defined(__GNUC__) || defined(__clang__))
#define DISC_HAVE_STREAM 1
/* the compiler builtins rather than <immintrin.h>, whose parse with -march=native on an
   AVX-512 machine costs about 0.5 s per module */
typedef long long disc_v4di __attribute__((vector_size(32)));
/* out of line: one copy per module, called once per chunk of a row */
static __attribute__((noinline)) void disc_stream_bytes(void *dst, const void *src, size_t n) {
  char *d = (char *)dst;
  const char *s = (const char *)src;
  size_t head = (size_t)(-(uintptr_t)d & 31);
  if (head > n) head = n;
  memcpy(d, s, head); d += head; s += head; n -= head;
  for (; n >= 32; n -= 32, d += 32, s += 32) {
    disc_v4di v;
    memcpy(&v, s, 32);
#if defined(__clang__)
    __builtin_nontemporal_store(v, (disc_v4di *)d);
#else
    __builtin_ia32_movntdq256((disc_v4di *)d, v);
#endif
  }
  memcpy(d, s, n);
}
/* streamed stores are weakly ordered: fenced before the block's thread reports done */
#define disc_stream_fence() __builtin_ia32_sfence()
#else
#define DISC_HAVE_STREAM 0
static inline void disc_stream_bytes(void *dst, const void *src, size_t n) {
  memcpy(dst, src, n);
}
#define disc_stream_fence() ((void)0)
#endif
/* does a call of rows x cols elements, moving bytes_per_elem bytes per element (the
   row-layout inputs it reads and the outputs it writes), stream its outputs? */
#define disc_streams(rows, cols, bytes_per_elem)                                          \
  (DISC_HAVE_STREAM && (cols) >= 64 &&                                                    \
   (double)(rows) * (double)(cols) * (double)(bytes_per_elem) >= (double)DISC_LLC_BYTES)
