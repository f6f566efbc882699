/* The GEMM helper every dot_general of one dtype in a module calls (native/library.py
   inserts this file once per dtype, after defining the parameters below): the batched
   row-major product C[b] = op(A[b]) op(B[b]) through the BLAS of disc_env, split over the
   module's OpenMP team. Returns 1 when the environment has no such BLAS, 2 when the
   partial sums of a split K cannot be allocated.

   One function per module rather than this code at every call site: 26 inlined copies
   (one OpenMP region each) were about 0.7 s of a GPT backward module's 2.7 s C compile.

   Parameters (macros):
     DISC_GEMM_NAME      the function's name (disc_gemm_float, disc_gemm_double)
     DISC_GEMM_T         the element type
     DISC_GEMM_BLAS      the disc_env field of the Fortran-interface GEMM (sgemm, dgemm)
     DISC_GEMM_BLAS_FN   its function pointer type (disc_sgemm_fn, disc_dgemm_fn)
     DISC_GEMM_ROWMAJOR  1 to use disc_env.sgemm_rowmajor when present (f32 only)

   a_shared / b_shared: that operand is one matrix every batch shares (batch stride 0).

   With an epilogue (epi not NULL: a fused row or loop kernel over the GEMM's output,
   native/gemm_epilogue.py), C is computed in blocks of rows, each handed to the kernel
   right after BLAS writes it, while it is still in cache: epi(epi_args, S, lo, hi) runs
   the kernel's rows [lo, hi), epi_q kernel rows per row of C. Blocks go to the team
   dynamically (one BLAS thread each). Where splitting the rows would starve BLAS (few rows
   and more columns: the column split; a small C over a long K: the K split), the GEMM runs
   as without an epilogue and the kernel after it, over all rows in parallel.
   epi_count (when not NULL) counts the choice: [0] row blocks, [1] the kernel after.

   With a prologue (pro not NULL, native/gemm_prologue.py; the operand it makes is NULL):
   with pro_lhs the lhs, laid out [B, M, K], is made per block of C's rows into a
   per-thread buffer (C in row blocks, each followed by the epilogue). Else the rhs, laid
   out [B, N, K] (tb), is never in memory whole. C is computed in blocks of columns, each
   block's rhs rows made by pro(pro_args, S, lo, hi, buf) into a per-thread buffer
   (pro_q kernel rows per rhs row), multiplied at once and, with an epilogue, each row of
   the block handed to it (blocks are whole epilogue rows: a multiple of N / epi_q). Where
   the plain GEMM would split K (a small C over a long K), the rhs is made whole first. */
#ifndef DISC_GEMM_TYPES_DEFINED
#define DISC_GEMM_TYPES_DEFINED
/* a fused kernel's rows [lo, hi), its tensors in epi_args (native/gemm_epilogue.py) */
typedef void (*disc_epi_fn)(void *const *, const int64_t *, int64_t, int64_t);
/* a prologue's rhs (or lhs) rows [lo, hi) into buf (native/gemm_prologue.py) */
typedef void (*disc_pro_fn)(void *const *, const int64_t *, int64_t, int64_t, void *);
/* the helper's parameters, shared by its prototype and its definition */
#define DISC_GEMM_PARAMS (const disc_env *env, int ta, int tb,                              \
    int64_t M, int64_t N, int64_t K, int64_t B, int a_shared, int b_shared,                 \
    const DISC_GEMM_T *A, const DISC_GEMM_T *Bm,                                            \
    DISC_GEMM_T *Cm, disc_epi_fn epi, void *const *epi_args, const int64_t *S,             \
    int64_t epi_q, int64_t *epi_count, disc_pro_fn pro, void *const *pro_args, int64_t pro_q, \
    int pro_lhs)
/* the implementation's: the entry's plus the distance between the rows of A and of B
   (a_ld: M when A is transposed, else K; b_ld: K when B is transposed, else N; more where
   the entry padded them) */
#define DISC_GEMM_IMPL_PARAMS (const disc_env *env, int ta, int tb,                         \
    int64_t M, int64_t N, int64_t K, int64_t B, int a_shared, int b_shared,                 \
    const DISC_GEMM_T *A, const DISC_GEMM_T *Bm,                                            \
    DISC_GEMM_T *Cm, disc_epi_fn epi, void *const *epi_args, const int64_t *S,             \
    int64_t epi_q, int64_t *epi_count, disc_pro_fn pro, void *const *pro_args, int64_t pro_q, \
    int pro_lhs, int64_t a_ld, int64_t b_ld)
#define DISC_GEMM_CAT_(a, b) a##b
#define DISC_GEMM_CAT(a, b) DISC_GEMM_CAT_(a, b)
#endif
#define DISC_GEMM_IMPL DISC_GEMM_CAT(DISC_GEMM_NAME, _ld)
DISC_HELPER_ENTRY int DISC_GEMM_NAME DISC_GEMM_PARAMS;
#ifndef DISC_HELPER_DECLARE_ONLY
#ifndef DISC_GEMM_EPILOGUE_DEFINED
#define DISC_GEMM_EPILOGUE_DEFINED
/* rows of C per epilogue block: about this many bytes, but at least DISC_GEMM_EPI_MIN_ROWS
   rows (every block call packs B again). An eighth of the last-level cache, between 1 and
   8 MB: the block is read back by the epilogue right after the GEMM wrote it, from L3 on
   these sizes. 1 MB was chosen on a Zen 1 part (8 MB L3, where LLC / 8 is still 1 MB); on
   Zen 3 (32 MB) 4 MB blocks made GPT steps 2-4.5% faster (same-process A/B, T = 131 and
   241, inference and training) and fc + GELU at 524 x 256 x 1024 12% faster: fewer,
   longer BLAS calls, and B packed half as often. */
#define DISC_GEMM_EPI_BLOCK_BYTES (DISC_LLC_BYTES / 8 < (1 << 20) ? (1 << 20) \
    : DISC_LLC_BYTES / 8 > (8 << 20) ? (8 << 20) : DISC_LLC_BYTES / 8)
#define DISC_GEMM_EPI_MIN_ROWS 64
/* an epilogue kernel run after its GEMM goes parallel from this many elements */
#define DISC_GEMM_EPI_PAR_MIN 32768
/* a prologue's rhs block: about this many bytes per thread */
#define DISC_GEMM_PRO_BLOCK_BYTES (256 << 10)
/* blocks of C's M rows (in each of B batches) of at most cap rows, their count raised so
   the B * blocks tasks split evenly over nt members: 612 rows in 256-row blocks are three
   tasks, two members do 256 + 100 and 256, the GEMM takes 356 rows' time instead of 306 */
static int64_t disc_gemm_row_blocks(int64_t M, int64_t B, int64_t cap, int nt) {
  int64_t chunks = (M + cap - 1) / cap;
  chunks = chunks < 1 ? 1 : chunks;
  if (nt > 1 && B * chunks < 8 * (int64_t)nt)
    for (int64_t c = chunks; c < chunks + nt && c <= M; ++c)
      if ((B * c) % nt == 0) { chunks = c; break; }
  return chunks;
}
static void disc_gemm_epi_after(disc_epi_fn epi, void *const *args, const int64_t *S,
                                int64_t rows, int64_t cols) {
  const int64_t want = (int64_t)DISC_BLOCKS_PER_THREAD * omp_get_max_threads();
  const int64_t blocks = rows * cols < DISC_GEMM_EPI_PAR_MIN ? 1 : rows < want ? rows : want;
  if (blocks <= 1) { epi(args, S, 0, rows); return; }
  #pragma omp parallel for schedule(dynamic, 1)
  for (int64_t b = 0; b < blocks; ++b) epi(args, S, rows * b / blocks, rows * (b + 1) / blocks);
}
#endif
static int DISC_GEMM_IMPL DISC_GEMM_IMPL_PARAMS {
  if (!env->DISC_GEMM_BLAS) return 1;
  /* batch strides: 0 for an operand every batch shares */
  const int64_t sa = a_shared ? 0 : (ta ? K : M) * a_ld, sb = b_shared ? 0 : (tb ? N : K) * b_ld;
#if DISC_GEMM_ROWMAJOR
  const disc_sgemm_rowmajor_fn rowmajor = (disc_sgemm_rowmajor_fn)env->sgemm_rowmajor;
#endif
  if (pro) {
    if (B <= 0 || M <= 0) return 0;
    if (N <= 0 || K <= 0) {  /* C is empty or zeros; nothing to make */
      if (N > 0) memset(Cm, 0, (size_t)(B * M * N) * sizeof(*Cm));
      if (epi) {
        if (epi_count) epi_count[1] += 1;
        disc_gemm_epi_after(epi, epi_args, S, B * M * epi_q, N / (epi_q > 0 ? epi_q : 1));
      }
      return 0;
    }
    const int nt = (double)B * M * N * K >= DISC_GEMM_PARALLEL_MIN ? omp_get_max_threads() : 1;
    if (nt > 1 && B < nt && K >= DISC_GEMM_SPLIT_K_RATIO * (M > N ? M : N)) {
      /* a small C over a long K (a weight gradient): blocks of C's columns would each
         read all of A again; the rhs is made whole (in parallel) and the K split runs */
      const int64_t R = pro_lhs ? M : N;  /* rows of the operand made */
      DISC_GEMM_T *rhs = (DISC_GEMM_T *)disc_alloc((size_t)(B * R * K) * sizeof(DISC_GEMM_T));
      if (!rhs) return 2;
      const int64_t rows = B * R * pro_q, inner = K / pro_q;
      const int64_t want = (int64_t)DISC_BLOCKS_PER_THREAD * nt;
      const int64_t blocks = rows < want ? rows : want;
      #pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t lo = rows * blk / blocks, hi = rows * (blk + 1) / blocks;
        pro(pro_args, S, lo, hi, rhs + lo * inner);
      }
      const int rc = pro_lhs
          ? DISC_GEMM_IMPL(env, ta, tb, M, N, K, B, 0, b_shared, rhs, Bm, Cm, epi, epi_args,
                           S, epi_q, epi_count, NULL, NULL, 0, 0, ta ? M : K, b_ld)
          : DISC_GEMM_IMPL(env, ta, tb, M, N, K, B, a_shared, 0, A, rhs, Cm, epi, epi_args,
                           S, epi_q, epi_count, NULL, NULL, 0, 0, a_ld, tb ? K : N);
      free(rhs);
      return rc;
    }
    if (pro_lhs) {
      /* the lhs is made per block of C's rows: C in row blocks, each with its epilogue */
      const int64_t share = B >= nt ? M : (M + nt - 1) / nt;
      int64_t cap = DISC_GEMM_PRO_BLOCK_BYTES / (K * (int64_t)sizeof(DISC_GEMM_T));
      cap = cap < 16 ? 16 : cap;
      cap = cap < share ? cap : share;
      const int64_t chunks = disc_gemm_row_blocks(M, B, cap, nt), tasks = B * chunks;
      const int64_t mb = (M + chunks - 1) / chunks;
      const int64_t per = disc_align_count(mb * K, sizeof(DISC_GEMM_T));  /* per member */
      DISC_GEMM_T *bufs = (DISC_GEMM_T *)disc_alloc((size_t)(nt * per) * sizeof(DISC_GEMM_T));
      if (!bufs) return 2;
      if (epi && epi_count) epi_count[0] += 1;
      const int prev = env->blas_threads_local ? env->blas_threads_local(1) : 0;
      const int64_t ldb = b_ld;
      const char *opb = tb ? "T" : "N";
      #pragma omp parallel num_threads(nt) if (nt > 1)
      {
        DISC_GEMM_T *buf = bufs + (int64_t)omp_get_thread_num() * per;
        #pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < tasks; ++task) {
          const int64_t b = task / chunks, m0 = M * (task % chunks) / chunks;
          const int64_t m1 = M * (task % chunks + 1) / chunks;
          int64_t rows = m1 - m0;
          const DISC_GEMM_T one = 1, zero = 0;
          pro(pro_args, S, (b * M + m0) * pro_q, (b * M + m1) * pro_q, buf);
          DISC_GEMM_T *c = Cm + b*M*N + m0*N;
#if DISC_GEMM_ROWMAJOR
          if (rowmajor)
            rowmajor('N', *opb, rows, N, K, 1.0f, buf, K, Bm + b*sb, ldb, 0.0f, c, N);
          else
#endif
            ((DISC_GEMM_BLAS_FN)env->DISC_GEMM_BLAS)(opb, "N", &N, &rows, &K, &one, Bm + b*sb, &ldb, buf, &K, &zero, c, &N, 1, 1);
          if (epi) epi(epi_args, S, (b * M + m0) * epi_q, (b * M + m1) * epi_q);
        }
      }
      if (env->blas_threads_local) env->blas_threads_local(prev);
      free(bufs);
      return 0;
    }
    const int64_t cw = epi ? N / epi_q : 1;  /* columns of C per epilogue row */
    int64_t pb = DISC_GEMM_PRO_BLOCK_BYTES / (K * (int64_t)sizeof(DISC_GEMM_T));
    pb = pb < 16 ? 16 : pb;
    pb = (pb + cw - 1) / cw * cw;
    pb = pb < N ? pb : N;
    const int64_t chunks = (N + pb - 1) / pb, tasks = B * chunks;
    const int64_t per = disc_align_count(pb * K, sizeof(DISC_GEMM_T));  /* per member */
    DISC_GEMM_T *bufs = (DISC_GEMM_T *)disc_alloc((size_t)(nt * per) * sizeof(DISC_GEMM_T));
    if (!bufs) return 2;
    if (epi && epi_count) epi_count[0] += 1;
    const int prev = env->blas_threads_local ? env->blas_threads_local(1) : 0;
    const int64_t lda = a_ld;
    const char *opa = ta ? "T" : "N";
    #pragma omp parallel num_threads(nt) if (nt > 1)
    {
      DISC_GEMM_T *buf = bufs + (int64_t)omp_get_thread_num() * per;
      #pragma omp for schedule(dynamic, 1)
      for (int64_t task = 0; task < tasks; ++task) {
        const int64_t b = task / chunks, p0 = (task % chunks) * pb;
        const int64_t p1 = p0 + pb < N ? p0 + pb : N;
        int64_t cols = p1 - p0;
        const DISC_GEMM_T one = 1, zero = 0;
        pro(pro_args, S, (b * N + p0) * pro_q, (b * N + p1) * pro_q, buf);
        DISC_GEMM_T *c = Cm + b*M*N + p0;
#if DISC_GEMM_ROWMAJOR
        if (rowmajor)
          rowmajor(*opa, 'T', M, cols, K, 1.0f, A + b*sa, lda, buf, K, 0.0f, c, N);
        else
#endif
          ((DISC_GEMM_BLAS_FN)env->DISC_GEMM_BLAS)("T", opa, &cols, &M, &K, &one, buf, &K, A + b*sa, &lda, &zero, c, &N, 1, 1);
        if (epi)
          for (int64_t m = 0; m < M; ++m) {
            const int64_t r = (b * M + m) * epi_q;
            epi(epi_args, S, r + p0 / cw, r + p1 / cw);
          }
      }
    }
    if (env->blas_threads_local) env->blas_threads_local(prev);
    free(bufs);
    return 0;
  }
  if (epi) {
    if (B <= 0 || M <= 0) return 0;  /* no rows: the kernel has nothing to do either */
    const int nt = (double)B * M * N * K >= DISC_GEMM_PARALLEL_MIN ? omp_get_max_threads() : 1;
    const int64_t big = M > N ? M : N;
    const int rows_ok = nt == 1 || B >= nt || M >= N || M >= DISC_GEMM_EPI_MIN_ROWS * nt;
    const int split_k = nt > 1 && B < nt && K >= DISC_GEMM_SPLIT_K_RATIO * big;
    if (N <= 0 || K <= 0 || !rows_ok || split_k) {
      const int rc = DISC_GEMM_IMPL(env, ta, tb, M, N, K, B, a_shared, b_shared, A, Bm, Cm,
                                    NULL, NULL, NULL, 0, NULL, NULL, NULL, 0, 0, a_ld, b_ld);
      if (rc) return rc;
      if (epi_count) epi_count[1] += 1;
      disc_gemm_epi_after(epi, epi_args, S, B * M * epi_q, N / (epi_q > 0 ? epi_q : 1));
      return 0;
    }
    if (epi_count) epi_count[0] += 1;
    const int prev = env->blas_threads_local ? env->blas_threads_local(1) : 0;
    const int64_t lda = a_ld, ldb = b_ld;
    const char *opa = ta ? "T" : "N", *opb = tb ? "T" : "N";
    /* one block per member (as the plain row split), smaller when that overflows the
       cache budget */
    const int64_t share = B >= nt ? M : (M + nt - 1) / nt;
    int64_t cap = DISC_GEMM_EPI_BLOCK_BYTES / (N * (int64_t)sizeof(DISC_GEMM_T));
    cap = cap < DISC_GEMM_EPI_MIN_ROWS ? DISC_GEMM_EPI_MIN_ROWS : cap;
    const int64_t chunks = disc_gemm_row_blocks(M, B, share < cap ? share : cap, nt);
    const int64_t tasks = B * chunks;
    #pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (nt > 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t b = task / chunks, m0 = M * (task % chunks) / chunks;
      const int64_t m1 = M * (task % chunks + 1) / chunks;
      int64_t rows = m1 - m0;
      const DISC_GEMM_T one = 1, zero = 0;
      const DISC_GEMM_T *a = A + b*sa + (ta ? m0 : m0 * a_ld);
      DISC_GEMM_T *c = Cm + b*M*N + m0*N;
#if DISC_GEMM_ROWMAJOR
      if (rowmajor)
        rowmajor(*opa, *opb, rows, N, K, 1.0f, a, lda, Bm + b*sb, ldb, 0.0f, c, N);
      else
#endif
        ((DISC_GEMM_BLAS_FN)env->DISC_GEMM_BLAS)(opb, opa, &N, &rows, &K, &one, Bm + b*sb, &ldb, a, &lda, &zero, c, &N, 1, 1);
      epi(epi_args, S, (b * M + m0) * epi_q, (b * M + m1) * epi_q);
    }
    if (env->blas_threads_local) env->blas_threads_local(prev);
    return 0;
  }
  if (M > 0 && N > 0 && K == 0) memset(Cm, 0, (size_t)(B*M*N) * sizeof(*Cm));
  if (M <= 0 || N <= 0 || K <= 0) return 0;
  /* GEMMs run on this module's OpenMP team, one BLAS thread per member: batches
     split across threads, else the longer of M and N does. The BLAS thread count
     is set once, outside the team (in pthread OpenBLAS builds it is global). */
  const int nt = (double)B * M * N * K >= DISC_GEMM_PARALLEL_MIN ? omp_get_max_threads() : 1;
  const int prev = env->blas_threads_local ? env->blas_threads_local(1) : 0;
  /* a row block [m0, m1) of C reads rows m0.. of A (columns m0.. when A is
     transposed); a column block [n0, n1) reads columns n0.. of B (rows n0.. when B
     is transposed) */
  const int64_t lda = a_ld, ldb = b_ld;
  const char *opa = ta ? "T" : "N", *opb = tb ? "T" : "N";
  /* a small C over a long K (a convolution's or small layer's weight gradient:
     32x27 over 8192 positions) splits K instead: each member multiplies a slice
     of K into its own partial C (member 0 into C itself), and the partials are
     added up after (row or column blocks of so small a C leave each BLAS call
     too little to work on) */
  const int64_t big = M > N ? M : N;
  const int by_k = nt > 1 && B < nt && K >= DISC_GEMM_SPLIT_K_RATIO * big;
  /* each member's partial C starts on a line of its own */
  const int64_t part = disc_align_count(B * M * N, sizeof(DISC_GEMM_T));
  DISC_GEMM_T *parts = by_k ? (DISC_GEMM_T *)disc_alloc((size_t)((nt - 1) * part) * sizeof(DISC_GEMM_T)) : NULL;
  if (by_k && !parts) return 2;
  int64_t team = 1;
  #pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const int64_t T = omp_get_num_threads(), tid = omp_get_thread_num();
    if (by_k && tid == 0) team = T;
    const int by_batch = !by_k && B >= T, by_rows = !by_k && !by_batch && M >= N;
    const int by_cols = !by_k && !by_batch && !by_rows;
    const int64_t b0 = by_batch ? B * tid / T : 0;
    const int64_t b1 = by_batch ? B * (tid + 1) / T : B;
    const int64_t m0 = by_rows ? M * tid / T : 0;
    const int64_t m1 = by_rows ? M * (tid + 1) / T : M;
    const int64_t n0 = by_cols ? N * tid / T : 0;
    const int64_t n1 = by_cols ? N * (tid + 1) / T : N;
    const int64_t k0 = by_k ? K * tid / T : 0;
    const int64_t kb = by_k ? K * (tid + 1) / T - k0 : K;
    const int64_t mb = m1 - m0, nb = n1 - n0;
    const int64_t a_off = (ta ? m0 : m0 * a_ld) + (ta ? k0 * a_ld : k0);
    const int64_t b_off = (tb ? n0 * b_ld : n0) + (tb ? k0 : k0 * b_ld);
    DISC_GEMM_T *dst = (by_k && tid > 0 ? parts + (tid - 1) * part : Cm) + m0*N + n0;
    const DISC_GEMM_T one = 1, zero = 0;
    if (kb == 0)  /* a member of a split K with no slice: its partial is zero */
      memset(dst, 0, (size_t)(B * M * N) * sizeof(*dst));
    else if (mb > 0 && nb > 0)
#if DISC_GEMM_ROWMAJOR
      if (rowmajor) for (int64_t b = b0; b < b1; ++b)
        rowmajor(*opa, *opb, mb, nb, kb, 1.0f, A + b*sa + a_off, lda, Bm + b*sb + b_off, ldb, 0.0f, dst + b*M*N, N);
      else
#endif
      /* row-major C = op(A) op(B) is column-major C' = op(B)' op(A)' */
      for (int64_t b = b0; b < b1; ++b)
        ((DISC_GEMM_BLAS_FN)env->DISC_GEMM_BLAS)(opb, opa, &nb, &mb, &kb, &one, Bm + b*sb + b_off, &ldb, A + b*sa + a_off, &lda, &zero, dst + b*M*N, &N, 1, 1);
    if (by_k) {
      #pragma omp barrier
      const int64_t total = B * M * N, lo = total * tid / T, hi = total * (tid + 1) / T;
      for (int64_t p = 1; p < team; ++p) {
        const DISC_GEMM_T *partial = parts + (p - 1) * part;
        #pragma omp simd
        for (int64_t i = lo; i < hi; ++i) Cm[i] += partial[i];
      }
    }
  }
  free(parts);
  if (env->blas_threads_local) env->blas_threads_local(prev);
  return 0;
}
DISC_HELPER_ENTRY int DISC_GEMM_NAME DISC_GEMM_PARAMS {
#if DISC_GEMM_ROWMAJOR
  /* oneDNN's dnnl_sgemm (3.2, AVX2) packs an operand it reads across its rows (a
     transposed A, a plain B) slowly when those rows lie a multiple of 1 KB apart, as a
     layer's activations and weights of width 256, 768, 1024... do: cache-set aliasing in
     its packing, worst where the operands sit close together, as in a module's arena.
     Through modules on Zen 3, 2 threads: [524, 256] x [256, 1024] (a linear layer, C split
     by columns) ran at 68 GFLOPS, 173 with B's rows 64 bytes further apart; at 128 rows
     62 and 141; a weight gradient [524, 1024]^T x [524, 256] at 74, 160 padded (one
     thread alone, unpadded A: 37-40 against 85-88). MKL and OpenBLAS do not show it.
     Such an operand is copied with its rows DISC_LD_PAD elements further apart: one pass
     over it, cheap beside a GEMM that reads each element of A N times (of B, M times), so
     only where that is at least 32. */
  const int pad_a = env->sgemm_rowmajor && A && ta && disc_ld_aliases(M) && N >= 32;
  const int pad_b = env->sgemm_rowmajor && Bm && !tb && disc_ld_aliases(N) && M >= 32;
  if ((pad_a || pad_b) && B > 0 && K > 0 && (double)B * M * N * K >= DISC_GEMM_PARALLEL_MIN) {
    const int64_t a_ld = pad_a ? disc_unaliased_ld(M) : 0, b_ld = pad_b ? disc_unaliased_ld(N) : 0;
    const int64_t a_rows = pad_a ? (a_shared ? 1 : B) * K : 0;  /* rows of stored A, B */
    const int64_t b_rows = pad_b ? (b_shared ? 1 : B) * K : 0;
    const int64_t a_size = disc_align_count(a_rows * a_ld, sizeof(DISC_GEMM_T));
    DISC_GEMM_T *pad = (DISC_GEMM_T *)disc_alloc(
        (size_t)(a_size + b_rows * b_ld) * sizeof(DISC_GEMM_T));
    if (pad) {
      DISC_GEMM_T *pa = pad, *pb = pad + a_size;
      const int64_t rows = a_rows + b_rows;
      #pragma omp parallel for schedule(static) if (rows * (M > N ? M : N) >= DISC_GEMM_EPI_PAR_MIN)
      for (int64_t r = 0; r < rows; ++r) {
        if (r < a_rows) memcpy(pa + r * a_ld, A + r * M, (size_t)M * sizeof(DISC_GEMM_T));
        else memcpy(pb + (r - a_rows) * b_ld, Bm + (r - a_rows) * N, (size_t)N * sizeof(DISC_GEMM_T));
      }
      const int rc = DISC_GEMM_IMPL(env, ta, tb, M, N, K, B, a_shared, b_shared,
                                    pad_a ? pa : A, pad_b ? pb : Bm, Cm, epi, epi_args, S,
                                    epi_q, epi_count, pro, pro_args, pro_q, pro_lhs,
                                    pad_a ? a_ld : ta ? M : K, pad_b ? b_ld : tb ? K : N);
      free(pad);
      return rc;
    }
  }
#endif
  return DISC_GEMM_IMPL(env, ta, tb, M, N, K, B, a_shared, b_shared, A, Bm, Cm, epi, epi_args,
                        S, epi_q, epi_count, pro, pro_args, pro_q, pro_lhs, ta ? M : K,
                        tb ? K : N);
}
#endif
