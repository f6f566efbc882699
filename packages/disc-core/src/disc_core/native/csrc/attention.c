/* Fused attention kernels (the core ops attention and attention_grad; inserted once per
   dtype by native/attention_emit.py after defining the parameters below).

   Forward: softmax(Q K^T * scale + mask [causal]) V and the logsumexp of every row,
   tiled over (batch*heads, a block of query rows: ATT_BQ, or twice that without a causal
   mask) across the module's OpenMP team; each task walks the keys in blocks of ATT_BK
   with an online softmax (a running row maximum and sum; the output accumulator is
   rescaled when the maximum grows), so only a rows x ATT_BK block of scores ever exists,
   in the thread's own buffer. The two products per block are single-threaded BLAS calls
   (the library the rest of the module uses), which beat a hand-written micro-kernel on
   every head size measured.

   Backward (FlashAttention-2's order): per (batch*head), the key blocks outside and the
   query blocks inside; the probabilities come back from the saved logsumexp, dV and dK
   accumulate per key block and dQ in place. Tasks are whole heads, so no two threads
   write one gradient row; with fewer heads than threads, (head, key block) pairs, each
   thread adding its dQ into a copy of its own, summed at the end.

   Work skipped in both: with a causal mask, a block crossing the diagonal runs its
   products in bands of rows over the keys each band sees (ATT_DIAG, ATT_BWD_DIAG); keys a
   mask leaves -inf for every row of a task (key padding at either end) are not visited.
   The row loops (mask, max, exp, sum) run in whole vectors of ATT_LANES, in 16-lane
   registers where the CPU has AVX-512 (ATT_WIDE).

   Conventions (torch's CPU flash attention): a row with no unmasked key gives output 0
   and logsumexp 0; causal masks key j > query row i (top-left aligned).

   Layout: bit i of seqmaj marks head tensor i (Q, K, V, O, then for the backward dO, dQ,
   dK, dV) sequence-major, [batch, rows, H, cols] rather than [batch*H, rows, cols]: the
   kernels reach head bh at (bh / H) * rows * H * cols + (bh % H) * cols with a row stride
   of H * cols, so a projection's [B, S, H*D] output is read and the output written
   without a transpose (the BLAS calls take the row stride as their leading dimension).

   Parameters (macros):
     DISC_ATTN_T      the element type (float, double)
     DISC_ATTN_SFX    the function-name suffix (float, double)
     DISC_ATTN_EXP    its exp (disc_expf, exp)
     DISC_ATTN_LOG    its log (logf, log)
     DISC_ATTN_BLAS   the disc_env field of the Fortran GEMM (sgemm, dgemm)
     DISC_ATTN_BLAS_FN  its function pointer type
     DISC_ATTN_ROWMAJOR 1 to prefer disc_env.sgemm_rowmajor when present (f32) */

#ifndef DISC_ATTN_ONCE
#define DISC_ATTN_ONCE
/* block sizes (query rows x keys), measured against torch's flash kernel on one thread
   (f32, head 64, S 128..1024): the forward gains from long key blocks (fewer rescales
   of the accumulator), the backward from square ones */
#ifndef ATT_BQ
#define ATT_BQ 64
#endif
#ifndef ATT_BK
#define ATT_BK 512
#endif
#ifndef ATT_BWD_BQ
#define ATT_BWD_BQ 128
#endif
#ifndef ATT_BWD_BK
#define ATT_BWD_BK 128
#endif
/* causal: a block that crosses the diagonal runs its products in bands of ATT_DIAG query
   rows, each over the keys its last row sees, so only a band's own triangle above the
   diagonal is computed and thrown away (half of a whole block otherwise: 27% of the
   forward's products at S = 153) */
#ifndef ATT_DIAG
#define ATT_DIAG 32
#endif
#ifndef ATT_BWD_DIAG
#define ATT_BWD_DIAG 32
#endif
#ifndef ATT_LANES
#define ATT_LANES 16
#endif
/* the row loops run to a multiple of ATT_LANES inside a block row's stride */
_Static_assert(ATT_BK % ATT_LANES == 0 && ATT_BWD_BK % ATT_LANES == 0,
               "attention key blocks must be whole vectors");
/* the kernels' row loops (scale, mask, max, exp and sum over a block row) in 16-lane
   vectors where the CPU has AVX-512: the module's default prefers 8 lanes (generated row
   kernels measured faster so on short rows), but these loops run over whole key blocks
   and with 8 lanes took a third of the forward at S = 768 (GCC 8 has the attribute) */
#if defined(__GNUC__) && __GNUC__ >= 8 && !defined(__clang__) && defined(__x86_64__)
#define ATT_WIDE __attribute__((target("prefer-vector-width=512")))
#else
#define ATT_WIDE
#endif
#define ATT_CAT2(a, b) a##_##b
#define ATT_CAT(a, b) ATT_CAT2(a, b)
/* the offset of batch*head index bh in a mask whose batch dims have strides mbs (0 where
   the mask broadcasts) */
static inline int64_t disc_attn_mask_offset(int64_t bh, int64_t nb, const int64_t *bdims,
                                            const int64_t *mbs) {
  int64_t off = 0;
  for (int64_t d = nb - 1; d >= 0; --d) {
    off += (bh % bdims[d]) * mbs[d];
    bh /= bdims[d];
  }
  return off;
}
/* where head bh of a [BH, rows, cols] head tensor starts, and its row stride: contiguous,
   or sequence-major with H heads (see Layout above) */
static inline int64_t disc_attn_base(int64_t bh, int64_t H, int64_t rows, int64_t cols,
                                     int seq_major) {
  return seq_major ? (bh / H) * rows * H * cols + (bh % H) * cols : bh * rows * cols;
}
static inline int64_t disc_attn_ld(int64_t H, int64_t cols, int seq_major) {
  return seq_major ? H * cols : cols;
}
/* the entry points' parameters, shared by their prototypes and definitions */
#define ATT_FWD_PARAMS (                                                                  \
    const disc_env *env, int64_t BH, int64_t Sq, int64_t Sk, int64_t D, int64_t Dv,       \
    const ATT_T *Q, const ATT_T *K, const ATT_T *V, const ATT_T *Msk, int64_t nb,         \
    const int64_t *bdims, const int64_t *mbs, int64_t mrs, int64_t mcs, int64_t H,        \
    int seqmaj, ATT_T scale, int causal, int empty_nan, ATT_T *O, ATT_T *LSE)
#define ATT_BWD_PARAMS (                                                                  \
    const disc_env *env, int64_t BH, int64_t Sq, int64_t Sk, int64_t D, int64_t Dv,       \
    const ATT_T *Q, const ATT_T *K, const ATT_T *V, const ATT_T *O, const ATT_T *dO,      \
    const ATT_T *LSE, const ATT_T *Msk, int64_t nb, const int64_t *bdims,                 \
    const int64_t *mbs, int64_t mrs, int64_t mcs, int64_t H, int seqmaj, ATT_T scale,     \
    int causal, ATT_T *dQ, ATT_T *dK, ATT_T *dV)
#endif

#define ATT_T DISC_ATTN_T
/* the entry points the host calls: each returns 1 without a BLAS, 2 when a thread's buffers
   cannot be allocated */
DISC_HELPER_ENTRY ATT_WIDE int ATT_CAT(disc_attn_fwd, DISC_ATTN_SFX) ATT_FWD_PARAMS;
DISC_HELPER_ENTRY ATT_WIDE int ATT_CAT(disc_attn_bwd, DISC_ATTN_SFX) ATT_BWD_PARAMS;
#ifndef DISC_HELPER_DECLARE_ONLY
#define ATT_GEMM ATT_CAT(disc_attn_gemm, DISC_ATTN_SFX)

/* row-major C = alpha op(A) op(B) + beta C, one BLAS thread (the caller's team member) */
static inline void ATT_GEMM(const disc_env *env, int ta, int tb, int64_t M, int64_t N,
                            int64_t K, ATT_T alpha, const ATT_T *A, int64_t lda,
                            const ATT_T *B, int64_t ldb, ATT_T beta, ATT_T *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0 ? 0 : beta * C[i * ldc + j];
    return;
  }
#if DISC_ATTN_ROWMAJOR
  if (env->sgemm_rowmajor) {
    ((disc_sgemm_rowmajor_fn)env->sgemm_rowmajor)(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K,
        alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
#endif
  /* row-major C = op(A) op(B) is column-major C' = op(B)' op(A)' */
  ((DISC_ATTN_BLAS_FN)env->DISC_ATTN_BLAS)(tb ? "T" : "N", ta ? "T" : "N", &N, &M, &K, &alpha,
      B, &ldb, A, &lda, &beta, C, &ldc, 1, 1);
}

/* The rows x cols block at src (rows ld apart) as the plain B operand of a product on
   oneDNN's sgemm: a per-thread copy in stage (rows *ld_out apart) where ld is a multiple of
   DISC_LD_ALIAS, src itself otherwise or without stage. The heads of a [.., S, H, D]
   tensor lie H * D apart (256, 768, 1024... for the usual widths): unstaged, a [128, 64]
   block of K with rows 4 KB apart multiplied at 47 GFLOPS on one Zen 3 thread, staged at
   93 (rows 1 KB apart: 76 against 90). The copy is one pass over a block every row of the
   other operand reads. */
static inline const ATT_T *ATT_CAT(disc_attn_stage, DISC_ATTN_SFX)(
    const ATT_T *src, int64_t ld, int64_t rows, int64_t cols, ATT_T *stage, int64_t *ld_out) {
  if (!stage || !disc_ld_aliases(ld)) {
    *ld_out = ld;
    return src;
  }
  const int64_t to = disc_unaliased_ld(cols);  /* one head as wide as DISC_LD_ALIAS too */
  for (int64_t r = 0; r < rows; ++r)
    memcpy(stage + r * to, src + r * ld, sizeof(ATT_T) * (size_t)cols);
  *ld_out = to;
  return stage;
}
#define ATT_STAGE ATT_CAT(disc_attn_stage, DISC_ATTN_SFX)
#if DISC_ATTN_ROWMAJOR
#define ATT_RESTAGE(env) ((env)->sgemm_rowmajor != NULL)
#else
#define ATT_RESTAGE(env) 0
#endif

/* Narrows [*kbeg, *kend) to the keys that rows rows of the mask at M (row stride mrs,
   key stride mcs) leave unmasked anywhere: a key padding mask's -inf tail (or head) is
   then neither multiplied nor exponentiated. A mask broadcast along the keys (mcs 0) is
   left alone. */
static inline void ATT_CAT(disc_attn_keys, DISC_ATTN_SFX)(const ATT_T *M, int64_t rows,
    int64_t mrs, int64_t mcs, int64_t *kbeg, int64_t *kend) {
  if (mcs != 1) return;
  int64_t lo = *kend, hi = *kbeg;
  for (int64_t i = 0; i < rows && (lo > *kbeg || hi < *kend); ++i) {
    const ATT_T *m = M + i * mrs;
    int64_t a = *kbeg, b = *kend;
    while (a < lo && m[a] == -INFINITY) ++a;  /* a < lo: this row's first key */
    while (b > hi && m[b - 1] == -INFINITY) --b;  /* b > hi: one past its last */
    if (a < lo) lo = a;
    if (b > hi) hi = b;
  }
  *kbeg = lo < hi ? lo : 0;
  *kend = lo < hi ? hi : 0;
}

/* rowdot[i] = O[i] . dO[i], the sum that dP - rowdot cancels against (P (dP - rowdot)
   is the score gradient). Kept out of the kernels' 16-lane code, at the module's default
   vector width: with 16 lanes its summation order changed and a row attending to a single
   key (S = 1: O = V, dP = rowdot in exact arithmetic) left ~1 ulp of noise in gradients
   that are exactly zero with this order and in torch's (disc-torch
   test_attention_training holds them to 1e-8 of the largest gradient). */
static __attribute__((noinline)) void ATT_CAT(disc_attn_rowdot, DISC_ATTN_SFX)(
    const ATT_T *O, int64_t ldo, const ATT_T *dO, int64_t ldg, int64_t rows, int64_t Dv,
    ATT_T *rowdot) {
  for (int64_t i = 0; i < rows; ++i) {
    ATT_T r = 0;
    const ATT_T *o = O + i * ldo, *g = dO + i * ldg;
    #pragma omp simd reduction(+:r)
    for (int64_t d = 0; d < Dv; ++d) r += o[d] * g[d];
    rowdot[i] = r;
  }
}

DISC_HELPER_ENTRY ATT_WIDE int ATT_CAT(disc_attn_fwd, DISC_ATTN_SFX) ATT_FWD_PARAMS {
  if (!env->DISC_ATTN_BLAS
#if DISC_ATTN_ROWMAJOR
      && !env->sgemm_rowmajor
#endif
     ) return 1;
  if (BH <= 0 || Sq <= 0) return 0;
  const int64_t ldq = disc_attn_ld(H, D, seqmaj & 1), ldk = disc_attn_ld(H, D, seqmaj & 2);
  const int64_t ldv = disc_attn_ld(H, Dv, seqmaj & 4), ldo = disc_attn_ld(H, Dv, seqmaj & 8);
  const double work = (double)BH * Sq * (double)(Sk > 0 ? Sk : 1) * (D + Dv + 4);
  const int nt = work >= DISC_GEMM_PARALLEL_MIN && BH * ((Sq + ATT_BQ - 1) / ATT_BQ) > 1
                 ? omp_get_max_threads() : 1;
  /* without a causal mask, blocks of twice the rows where that still leaves every thread
     4 tasks: the library packs each key block once per query block (2-5% faster at S =
     128..1024; causal blocks keep ATT_BQ rows, whose diagonal bands measured better) */
  const int64_t bq = !causal && BH * ((Sq + 2 * ATT_BQ - 1) / (2 * ATT_BQ)) >= 4 * nt
                     ? 2 * ATT_BQ : ATT_BQ;
  const int64_t nqb = (Sq + bq - 1) / bq, tasks = BH * nqb;
  const int prev = env->blas_threads_local ? env->blas_threads_local(1) : 0;
  /* the score block's row stride: the keys a block holds, in whole vectors (the row
     loops run to a multiple of ATT_LANES, see below) */
  const int64_t lds = Sk < ATT_BK ? (Sk + ATT_LANES - 1) / ATT_LANES * ATT_LANES : ATT_BK;
  const int64_t ldacc = Dv > 0 ? Dv : 1;
  /* V's key blocks, staged for the library where its rows alias (ATT_STAGE) */
  const int64_t vstage = ATT_RESTAGE(env) && disc_ld_aliases(ldv) ? ATT_BK * disc_unaliased_ld(Dv) : 0;
  int failed = 0;
  #pragma omp parallel num_threads(nt) if (nt > 1)
  {
    ATT_T *buf = (ATT_T *)disc_alloc(sizeof(ATT_T) * (size_t)(bq * (lds > 0 ? lds : 1) + bq * ldacc + 2 * bq + vstage));
    if (!buf) {
      #pragma omp atomic write
      failed = 1;
    }
    #pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      if (!buf) continue;
      ATT_T *S = buf, *acc = buf + bq * (lds > 0 ? lds : 1), *mx = acc + bq * ldacc;
      ATT_T *sum = mx + bq, *vst = vstage ? sum + bq : NULL;
      const int64_t bh = task / nqb, q0 = (task % nqb) * bq;
      const int64_t qn = Sq - q0 < bq ? Sq - q0 : bq;
      const ATT_T *Qb = Q + disc_attn_base(bh, H, Sq, D, seqmaj & 1) + q0 * ldq;
      const ATT_T *Kb = K + disc_attn_base(bh, H, Sk, D, seqmaj & 2);
      const ATT_T *Vb = V + disc_attn_base(bh, H, Sk, Dv, seqmaj & 4);
      const ATT_T *Mb = Msk ? Msk + disc_attn_mask_offset(bh, nb, bdims, mbs) + q0 * mrs : NULL;
      for (int64_t i = 0; i < qn; ++i) { mx[i] = -INFINITY; sum[i] = 0; }
      memset(acc, 0, sizeof(ATT_T) * (size_t)(qn * Dv));
      int64_t kbeg = 0, kend = causal ? (q0 + qn < Sk ? q0 + qn : Sk) : Sk;
      if (Mb) ATT_CAT(disc_attn_keys, DISC_ATTN_SFX)(Mb, mrs ? qn : 1, mrs, mcs, &kbeg, &kend);
      for (int64_t k0 = kbeg; k0 < kend; k0 += ATT_BK) {
        const int64_t kn = kend - k0 < ATT_BK ? kend - k0 : ATT_BK;
        /* causal and crossing the diagonal (row 0 sees keys up to q0 only): in bands */
        const int64_t band = causal && k0 + kn > q0 + 1 ? ATT_DIAG : qn;
        for (int64_t r0 = 0; r0 < qn; r0 += band) {
          const int64_t rn = qn - r0 < band ? qn - r0 : band;
          const int64_t lim = causal && q0 + r0 + rn - k0 < kn ? q0 + r0 + rn - k0 : kn;
          ATT_GEMM(env, 0, 1, rn, lim, D, scale, Qb + r0 * ldq, ldq, Kb + k0 * ldk, ldk, 0,
                   S + r0 * lds, lds);
        }
        for (int64_t i = 0; i < qn; ++i) {
          ATT_T *s = S + i * lds;
          /* causal: keys past this row are out (jn <= 0: the whole block); the products
             past them may not have been computed (bands) */
          const int64_t jn = causal ? (q0 + i - k0 + 1 < kn ? q0 + i - k0 + 1 : kn) : kn;
          if (Mb) {
            const ATT_T *m = Mb + i * mrs + k0 * mcs;
            if (mcs == 1) {
              #pragma omp simd
              for (int64_t j = 0; j < jn; ++j) s[j] += m[j];
            } else {
              for (int64_t j = 0; j < jn; ++j) s[j] += m[0];
            }
          }
          /* max, exp and sum over whole vectors: the lanes past jn (inside the row's
             stride, whatever they hold) count as -inf, so no scalar remainder loop runs
             (a row of 33 keys was 2 vectors and a scalar exp per key left) */
          const int64_t jv = jn > 0 ? (jn + ATT_LANES - 1) / ATT_LANES * ATT_LANES : 0;
          ATT_T top = mx[i];
          #pragma omp simd reduction(max:top)
          for (int64_t j = 0; j < jv; ++j) {
            const ATT_T x = j < jn ? s[j] : -INFINITY;
            top = x > top ? x : top;
          }
          if (top == -INFINITY) {  /* nothing unmasked yet: this block adds zeros */
            memset(s, 0, sizeof(ATT_T) * (size_t)kn);
            continue;
          }
          const ATT_T alpha = mx[i] == -INFINITY ? 0 : DISC_ATTN_EXP(mx[i] - top);
          ATT_T add = 0;
          #pragma omp simd reduction(+:add)
          for (int64_t j = 0; j < jv; ++j) {
            const ATT_T p = j < jn ? DISC_ATTN_EXP(s[j] - top) : 0;
            s[j] = p;
            add += p;
          }
          if (jv < kn) memset(s + jv, 0, sizeof(ATT_T) * (size_t)(kn - jv));
          sum[i] = sum[i] * alpha + add;
          mx[i] = top;
          if (alpha != 1) {
            ATT_T *a = acc + i * Dv;
            #pragma omp simd
            for (int64_t d = 0; d < Dv; ++d) a[d] *= alpha;
          }
        }
        int64_t ldvs;
        const ATT_T *Vs = ATT_STAGE(Vb + k0 * ldv, ldv, kn, Dv, vst, &ldvs);
        for (int64_t r0 = 0; r0 < qn; r0 += band) {
          const int64_t rn = qn - r0 < band ? qn - r0 : band;
          const int64_t lim = causal && q0 + r0 + rn - k0 < kn ? q0 + r0 + rn - k0 : kn;
          ATT_GEMM(env, 0, 0, rn, Dv, lim, 1, S + r0 * lds, lds, Vs, ldvs, 1,
                   acc + r0 * Dv, Dv);
        }
      }
      ATT_T *Ob = O + disc_attn_base(bh, H, Sq, Dv, seqmaj & 8) + q0 * ldo;
      ATT_T *Lb = LSE + bh * Sq + q0;
      for (int64_t i = 0; i < qn; ++i) {
        const ATT_T l = sum[i], inv = l > 0 ? 1 / l : empty_nan && Sk > 0 ? NAN : 0;
        const ATT_T *a = acc + i * Dv;
        ATT_T *o = Ob + i * ldo;
        #pragma omp simd
        for (int64_t d = 0; d < Dv; ++d) o[d] = a[d] * inv;
        Lb[i] = l > 0 ? mx[i] + DISC_ATTN_LOG(l) : 0;
      }
    }
    free(buf);
  }
  if (env->blas_threads_local) env->blas_threads_local(prev);
  return failed ? 2 : 0;
}

/* The backward over one key block [k0, k0 + kn) of a head: P and dP against every query
   block that sees those keys (causal: from the diagonal on, in bands across it), the
   block's dV and dK rows and every dQ row accumulated (beta 1). */
static inline ATT_WIDE void ATT_CAT(disc_attn_bwd_keys, DISC_ATTN_SFX)(
    const disc_env *env, ATT_T *P, ATT_T *dP, int64_t lds, int64_t Sq, int64_t D,
    int64_t Dv, const ATT_T *Qh, int64_t ldq, const ATT_T *Kh, int64_t ldk,
    const ATT_T *Vh, int64_t ldv, const ATT_T *dOh, int64_t ldg, const ATT_T *Lh,
    const ATT_T *rowdot, const ATT_T *Mh, int64_t mrs, int64_t mcs, ATT_T scale,
    int causal, int64_t k0, int64_t kn, ATT_T *dQh, int64_t lddq, ATT_T *dKh,
    int64_t lddk, ATT_T *dVh, int64_t lddv, ATT_T *stage) {
  /* stage (NULL: none): the key block of K, then a query block of Q and of dO, as the
     plain B operands of the gradient products (ATT_STAGE) */
  ATT_T *qst = stage ? stage + ATT_BWD_BK * disc_unaliased_ld(D) : NULL;
  ATT_T *gst = stage ? qst + ATT_BWD_BQ * disc_unaliased_ld(D) : NULL;
  int64_t ldks, ldqs, ldgs;
  const ATT_T *Ks = ATT_STAGE(Kh + k0 * ldk, ldk, kn, D, stage, &ldks);
  /* causal: rows before k0 see none of these keys */
  const int64_t qstart = causal ? k0 / ATT_BWD_BQ * ATT_BWD_BQ : 0;
  for (int64_t q0 = qstart; q0 < Sq; q0 += ATT_BWD_BQ) {
    const int64_t qn = Sq - q0 < ATT_BWD_BQ ? Sq - q0 : ATT_BWD_BQ;
    /* crossing the diagonal: in bands of rows, as in the forward */
    const int64_t band = causal && k0 + kn > q0 + 1 ? ATT_BWD_DIAG : qn;
    for (int64_t r0 = 0; r0 < qn; r0 += band) {
      const int64_t rn = qn - r0 < band ? qn - r0 : band;
      const int64_t lim = causal && q0 + r0 + rn - k0 < kn ? q0 + r0 + rn - k0 : kn;
      if (lim <= 0) continue;
      ATT_GEMM(env, 0, 1, rn, lim, D, scale, Qh + (q0 + r0) * ldq, ldq, Kh + k0 * ldk,
               ldk, 0, P + r0 * lds, lds);
      ATT_GEMM(env, 0, 1, rn, lim, Dv, 1, dOh + (q0 + r0) * ldg, ldg, Vh + k0 * ldv, ldv,
               0, dP + r0 * lds, lds);
    }
    for (int64_t i = 0; i < qn; ++i) {
      ATT_T *s = P + i * lds, *dp = dP + i * lds;
      const int64_t jn = causal ? (q0 + i - k0 + 1 < kn ? q0 + i - k0 + 1 : kn) : kn;
      if (Mh) {
        const ATT_T *m = Mh + (q0 + i) * mrs + k0 * mcs;
        if (mcs == 1) {
          #pragma omp simd
          for (int64_t j = 0; j < jn; ++j) s[j] += m[j];
        } else {
          for (int64_t j = 0; j < jn; ++j) s[j] += m[0];
        }
      }
      const ATT_T l = Lh[q0 + i], r = rowdot[q0 + i];
      /* whole vectors, the lanes past jn zero (see the forward) */
      const int64_t jv = jn > 0 ? (jn + ATT_LANES - 1) / ATT_LANES * ATT_LANES : 0;
      #pragma omp simd
      for (int64_t j = 0; j < jv; ++j) {
        const ATT_T p = j < jn ? DISC_ATTN_EXP(s[j] - l) : 0;
        const ATT_T g = j < jn ? p * (dp[j] - r) : 0;
        s[j] = p;
        dp[j] = g;
      }
      if (jv < kn) {
        memset(s + jv, 0, sizeof(ATT_T) * (size_t)(kn - jv));
        memset(dp + jv, 0, sizeof(ATT_T) * (size_t)(kn - jv));
      }
    }
    /* dV += P^T dO, dQ += scale dS K, dK += scale dS^T Q */
    const ATT_T *Qs = ATT_STAGE(Qh + q0 * ldq, ldq, qn, D, qst, &ldqs);
    const ATT_T *Gs = ATT_STAGE(dOh + q0 * ldg, ldg, qn, Dv, gst, &ldgs);
    for (int64_t r0 = 0; r0 < qn; r0 += band) {
      const int64_t rn = qn - r0 < band ? qn - r0 : band;
      const int64_t lim = causal && q0 + r0 + rn - k0 < kn ? q0 + r0 + rn - k0 : kn;
      if (lim <= 0) continue;
      const ATT_T *Pb = P + r0 * lds, *dPb = dP + r0 * lds;
      ATT_GEMM(env, 1, 0, lim, Dv, rn, 1, Pb, lds, Gs + r0 * ldgs, ldgs, 1,
               dVh + k0 * lddv, lddv);
      ATT_GEMM(env, 0, 0, rn, D, lim, scale, dPb, lds, Ks, ldks, 1,
               dQh + (q0 + r0) * lddq, lddq);
      ATT_GEMM(env, 1, 0, lim, D, rn, scale, dPb, lds, Qs + r0 * ldqs, ldqs, 1,
               dKh + k0 * lddk, lddk);
    }
  }
}

DISC_HELPER_ENTRY ATT_WIDE int ATT_CAT(disc_attn_bwd, DISC_ATTN_SFX) ATT_BWD_PARAMS {
  if (!env->DISC_ATTN_BLAS
#if DISC_ATTN_ROWMAJOR
      && !env->sgemm_rowmajor
#endif
     ) return 1;
  if (BH <= 0) return 0;
  const int64_t ldq = disc_attn_ld(H, D, seqmaj & 1), ldk = disc_attn_ld(H, D, seqmaj & 2);
  const int64_t ldv = disc_attn_ld(H, Dv, seqmaj & 4), ldo = disc_attn_ld(H, Dv, seqmaj & 8);
  const int64_t ldg = disc_attn_ld(H, Dv, seqmaj & 16), lddq = disc_attn_ld(H, D, seqmaj & 32);
  const int64_t lddk = disc_attn_ld(H, D, seqmaj & 64), lddv = disc_attn_ld(H, Dv, seqmaj & 128);
  const double work = (double)BH * (Sq > 0 ? Sq : 1) * (double)(Sk > 0 ? Sk : 1) * (D + Dv + 4);
  const int64_t nkb = (Sk + ATT_BWD_BK - 1) / ATT_BWD_BK;
  const int nt = work >= DISC_GEMM_PARALLEL_MIN && (BH > 1 || nkb > 1)
                 ? omp_get_max_threads() : 1;
  /* fewer heads than threads: tasks are (head, key block) instead, dQ summed over private
     copies after (whole heads left threads idle: one head ran on one of 2 threads) */
  const int split = nt > 1 && BH < nt && nkb > 1;
  const int64_t lds = Sk < ATT_BWD_BK ? (Sk + ATT_LANES - 1) / ATT_LANES * ATT_LANES
                                      : ATT_BWD_BK;  /* as in the forward */
  ATT_T *shared = NULL;  /* split: rowdot [BH*Sq], then nt private dQ [BH*Sq*D] */
  /* their element counts, rounded to whole lines: each piece starts aligned */
  const int64_t rd = disc_align_count(BH * Sq, sizeof(ATT_T));
  const int64_t pd = disc_align_count(BH * Sq * D, sizeof(ATT_T));
  int64_t *range = NULL;  /* split: each head's [kbeg, kend) */
  if (split) {
    shared = (ATT_T *)disc_alloc(sizeof(ATT_T) * (size_t)(rd + (int64_t)nt * pd));
    range = (int64_t *)malloc(sizeof(int64_t) * (size_t)(2 * BH));
    if (!shared || !range) {
      free(shared);
      free(range);
      return 2;
    }
  }
  const int prev = env->blas_threads_local ? env->blas_threads_local(1) : 0;
  /* the blocks staged for the library where their rows alias (disc_attn_bwd_keys) */
  const int64_t bstage = ATT_RESTAGE(env) && (disc_ld_aliases(ldk) || disc_ld_aliases(ldq) ||
                                               disc_ld_aliases(ldg))
      ? (ATT_BWD_BK + ATT_BWD_BQ) * disc_unaliased_ld(D) + ATT_BWD_BQ * disc_unaliased_ld(Dv) : 0;
  int failed = 0;
  #pragma omp parallel num_threads(nt) if (nt > 1)
  {
    ATT_T *buf = (ATT_T *)disc_alloc(sizeof(ATT_T) * (size_t)(2 * ATT_BWD_BQ * (lds > 0 ? lds : 1) + (Sq > 0 ? Sq : 1) + bstage));
    if (!buf) {
      #pragma omp atomic write
      failed = 1;
    }
    ATT_T *P = buf, *dP = buf ? buf + ATT_BWD_BQ * (lds > 0 ? lds : 1) : NULL;
    ATT_T *rowdot = dP ? dP + ATT_BWD_BQ * (lds > 0 ? lds : 1) : NULL;
    ATT_T *stage = rowdot && bstage ? rowdot + (Sq > 0 ? Sq : 1) : NULL;
    if (split) {
      const int tid = omp_get_thread_num(), team = omp_get_num_threads();
      ATT_T *priv = shared + rd + (int64_t)tid * pd;
      memset(priv, 0, sizeof(ATT_T) * (size_t)(BH * Sq * D));
      #pragma omp for
      for (int64_t bh = 0; bh < BH; ++bh) {
        ATT_CAT(disc_attn_rowdot, DISC_ATTN_SFX)(O + disc_attn_base(bh, H, Sq, Dv, seqmaj & 8),
            ldo, dO + disc_attn_base(bh, H, Sq, Dv, seqmaj & 16), ldg, Sq, Dv, shared + bh * Sq);
        range[2 * bh] = 0;
        range[2 * bh + 1] = Sk;
        if (Msk && Sq > 0)
          ATT_CAT(disc_attn_keys, DISC_ATTN_SFX)(Msk + disc_attn_mask_offset(bh, nb, bdims, mbs),
              mrs ? Sq : 1, mrs, mcs, &range[2 * bh], &range[2 * bh + 1]);
      }
      #pragma omp for schedule(dynamic, 1)
      for (int64_t task = 0; task < BH * nkb; ++task) {
        if (!buf) continue;
        const int64_t bh = task / nkb, k0 = task % nkb * ATT_BWD_BK;
        const int64_t kn = Sk - k0 < ATT_BWD_BK ? Sk - k0 : ATT_BWD_BK;
        ATT_T *dKh = dK + disc_attn_base(bh, H, Sk, D, seqmaj & 64);
        ATT_T *dVh = dV + disc_attn_base(bh, H, Sk, Dv, seqmaj & 128);
        for (int64_t j = k0; j < k0 + kn; ++j) memset(dKh + j * lddk, 0, sizeof(ATT_T) * (size_t)D);
        for (int64_t j = k0; j < k0 + kn; ++j) memset(dVh + j * lddv, 0, sizeof(ATT_T) * (size_t)Dv);
        const int64_t lo = k0 > range[2 * bh] ? k0 : range[2 * bh];
        const int64_t hi = k0 + kn < range[2 * bh + 1] ? k0 + kn : range[2 * bh + 1];
        if (lo >= hi) continue;
        ATT_CAT(disc_attn_bwd_keys, DISC_ATTN_SFX)(env, P, dP, lds, Sq, D, Dv,
            Q + disc_attn_base(bh, H, Sq, D, seqmaj & 1), ldq,
            K + disc_attn_base(bh, H, Sk, D, seqmaj & 2), ldk,
            V + disc_attn_base(bh, H, Sk, Dv, seqmaj & 4), ldv,
            dO + disc_attn_base(bh, H, Sq, Dv, seqmaj & 16), ldg, LSE + bh * Sq,
            shared + bh * Sq, Msk ? Msk + disc_attn_mask_offset(bh, nb, bdims, mbs) : NULL,
            mrs, mcs, scale, causal, lo, hi - lo, priv + bh * Sq * D, D, dKh, lddk, dVh,
            lddv, stage);
      }
      #pragma omp for
      for (int64_t row = 0; row < BH * Sq; ++row) {
        const int64_t bh = row / Sq, i = row % Sq;
        ATT_T *dq = dQ + disc_attn_base(bh, H, Sq, D, seqmaj & 32) + i * lddq;
        const ATT_T *p0 = shared + rd + row * D;
        #pragma omp simd
        for (int64_t d = 0; d < D; ++d) dq[d] = p0[d];
        for (int t = 1; t < team; ++t) {
          const ATT_T *pt = p0 + (int64_t)t * pd;
          #pragma omp simd
          for (int64_t d = 0; d < D; ++d) dq[d] += pt[d];
        }
      }
    } else {
      #pragma omp for schedule(dynamic, 1)
      for (int64_t bh = 0; bh < BH; ++bh) {
        if (!buf) continue;
        const ATT_T *Qh = Q + disc_attn_base(bh, H, Sq, D, seqmaj & 1);
        const ATT_T *Kh = K + disc_attn_base(bh, H, Sk, D, seqmaj & 2);
        const ATT_T *Vh = V + disc_attn_base(bh, H, Sk, Dv, seqmaj & 4);
        const ATT_T *Oh = O + disc_attn_base(bh, H, Sq, Dv, seqmaj & 8);
        const ATT_T *dOh = dO + disc_attn_base(bh, H, Sq, Dv, seqmaj & 16), *Lh = LSE + bh * Sq;
        ATT_T *dQh = dQ + disc_attn_base(bh, H, Sq, D, seqmaj & 32);
        ATT_T *dKh = dK + disc_attn_base(bh, H, Sk, D, seqmaj & 64);
        ATT_T *dVh = dV + disc_attn_base(bh, H, Sk, Dv, seqmaj & 128);
        const ATT_T *Mh = Msk ? Msk + disc_attn_mask_offset(bh, nb, bdims, mbs) : NULL;
        for (int64_t i = 0; i < Sq; ++i) memset(dQh + i * lddq, 0, sizeof(ATT_T) * (size_t)D);
        for (int64_t j = 0; j < Sk; ++j) memset(dKh + j * lddk, 0, sizeof(ATT_T) * (size_t)D);
        for (int64_t j = 0; j < Sk; ++j) memset(dVh + j * lddv, 0, sizeof(ATT_T) * (size_t)Dv);
        ATT_CAT(disc_attn_rowdot, DISC_ATTN_SFX)(Oh, ldo, dOh, ldg, Sq, Dv, rowdot);
        /* the keys no row sees (a key padding mask's -inf tail) have zero gradients */
        int64_t kbeg = 0, kend = Sk;
        if (Mh && Sq > 0) ATT_CAT(disc_attn_keys, DISC_ATTN_SFX)(Mh, mrs ? Sq : 1, mrs, mcs,
                                                                 &kbeg, &kend);
        for (int64_t k0 = kbeg; k0 < kend; k0 += ATT_BWD_BK)
          ATT_CAT(disc_attn_bwd_keys, DISC_ATTN_SFX)(env, P, dP, lds, Sq, D, Dv, Qh, ldq, Kh,
              ldk, Vh, ldv, dOh, ldg, Lh, rowdot, Mh, mrs, mcs, scale, causal, k0,
              kend - k0 < ATT_BWD_BK ? kend - k0 : ATT_BWD_BK, dQh, lddq, dKh, lddk, dVh,
              lddv, stage);
      }
    }
    free(buf);
  }
  if (env->blas_threads_local) env->blas_threads_local(prev);
  free(shared);
  free(range);
  return failed ? 2 : 0;
}

#undef ATT_GEMM
#undef ATT_STAGE
#undef ATT_RESTAGE
#endif
#undef ATT_T
