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
     DISC_GEMM_PACKED    1 to keep weights packed (pack / pack_stamp below; f32 only)

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
   the plain GEMM would split K (a small C over a long K), the rhs is made whole first.

   Packed weights (pack not NULL, pack_stamp nonzero, the BLAS has MKL's packed GEMM in
   disc_env): the rhs is a module input (a weight: [N, K] as torch's Linear keeps it; the
   code takes [K, N] too, which core's lowering does not choose, library.packable_weight)
   that the
   caller promises holds the same values at every call passing the same stamp
   (disc_env.in_stamps: weights the bridge froze). The first such call packs it into the
   BLAS's own format (sgemm_pack, in column panels, one per member of the team) and keeps
   it in the call site's slot; later calls with that stamp run sgemm_compute on it, which
   skips the packing plain sgemm does on every call: 1.5-2.7x faster GEMMs at 8-32 rows
   (serving a short prompt, one token at a time), 1.0-1.3x at hundreds (MKL in PyTorch's
   wheel, Xeon with AVX-512, 2 threads). Prologue and epilogue run as above: row blocks
   where there are rows enough for the team, else one panel per member and the epilogue
   after. Only calls of DISC_GEMM_PACK_MIN_ROWS to _MAX_ROWS rows pack (see there). A slot in use by another thread's call with another stamp is left alone (this
   call runs unpacked); its memory (MKL's size for each panel, which holds about 8 MB
   besides the weight) lives as long as the module. */
#ifndef DISC_GEMM_TYPES_DEFINED
#define DISC_GEMM_TYPES_DEFINED
/* a fused kernel's rows [lo, hi), its tensors in epi_args (native/gemm_epilogue.py) */
typedef void (*disc_epi_fn)(void *const *, const int64_t *, int64_t, int64_t);
/* a prologue's rhs (or lhs) rows [lo, hi) into buf (native/gemm_prologue.py) */
typedef void (*disc_pro_fn)(void *const *, const int64_t *, int64_t, int64_t, void *);
/* a GEMM call site's packed weight (see Packed weights above): which input (its address,
   shape and stamp) the panels hold, and how many calls read them now */
typedef struct {
  int lock;                /* a spinlock over the fields below */
  int users;               /* calls computing from buf */
  uint64_t stamp;          /* 0: nothing packed */
  const void *src;
  int64_t n, k, parts;     /* weight [n, k] (tb) or [k, n], in parts column panels */
  int tb;
  int64_t packs;           /* times packed (disc_pack_count) */
  size_t part_bytes;       /* bytes between panels in buf */
  char *buf;
} disc_pack_slot;
/* the helper's parameters, shared by its prototype and its definition */
#define DISC_GEMM_PARAMS (const disc_env *env, int ta, int tb,                              \
    int64_t M, int64_t N, int64_t K, int64_t B, int a_shared, int b_shared,                 \
    const DISC_GEMM_T *A, const DISC_GEMM_T *Bm,                                            \
    DISC_GEMM_T *Cm, disc_epi_fn epi, void *const *epi_args, const int64_t *S,             \
    int64_t epi_q, int64_t *epi_count, disc_pro_fn pro, void *const *pro_args, int64_t pro_q, \
    int pro_lhs, disc_pack_slot *pack, uint64_t pack_stamp)
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
#if DISC_GEMM_PACKED && !defined(DISC_GEMM_PACKED_DEFINED)
#define DISC_GEMM_PACKED_DEFINED
/* the rows where packed weights pay (MKL in PyTorch 2.13's wheel, LayerNorm + Linear +
   GELU + Linear through aot_compile, weights 256 x 1024 and 768 x 3072, 2 threads): from
   16 to 64 rows the frozen model ran 1.2-1.85x faster; at 1-8 rows 0.64-1.03x (MKL's own
   small-matrix kernels read the plain weight, a third of the packed buffer's bytes); from
   128 rows on 0.97-1.05x, where plain sgemm's packing is a small part of the GEMM. Outside
   them the call runs unpacked (and packs nothing). */
#define DISC_GEMM_PACK_MIN_ROWS 16
#define DISC_GEMM_PACK_MAX_ROWS 127
static void disc_pack_acquire(disc_pack_slot *s) {
  while (__atomic_exchange_n(&s->lock, 1, __ATOMIC_ACQUIRE))
    while (__atomic_load_n(&s->lock, __ATOMIC_RELAXED)) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
}
static void disc_pack_release(disc_pack_slot *s) { __atomic_store_n(&s->lock, 0, __ATOMIC_RELEASE); }
/* the slot's panels of weight W ([N, K] when tb, else [K, N]) under stamp, packing them
   when the slot holds another weight and no call reads it; NULL (run unpacked) otherwise.
   A non-NULL result counts this call as a user until disc_pack_done. */
static char *disc_pack_panels(const disc_env *env, disc_pack_slot *s, uint64_t stamp,
                              const float *W, int64_t N, int64_t K, int tb) {
  char *panels = NULL;
  disc_pack_acquire(s);
  if (s->buf && s->stamp == stamp && s->src == W && s->n == N && s->k == K && s->tb == tb) {
    s->users += 1;
    panels = s->buf;
  } else if (s->users == 0) {
    free(s->buf);
    s->buf = NULL;
    s->stamp = 0;
    const int nt = omp_get_max_threads();
    /* a column panel per member: one shared panel, the members taking row blocks of it,
       measured 1.02-1.22x where panels gave 1.46-2.25x (16-48 rows, 768 x 3072) */
    const int64_t parts = nt > 1 && N >= 64 * (int64_t)nt ? nt : 1;
    const disc_sgemm_pack_get_size_fn size_of = (disc_sgemm_pack_get_size_fn)env->sgemm_pack_get_size;
    const disc_sgemm_pack_fn pack = (disc_sgemm_pack_fn)env->sgemm_pack;
    size_t part_bytes = 0;
    const int64_t one_col = 1;
    for (int64_t p = 0; p < parts; ++p) {
      const int64_t np = N * (p + 1) / parts - N * p / parts;
      const size_t bytes = size_of("A", &np, &one_col, &K, 1);
      part_bytes = bytes > part_bytes ? bytes : part_bytes;
    }
    part_bytes = (part_bytes + 63) / 64 * 64;
    char *buf = part_bytes ? (char *)disc_alloc((size_t)parts * part_bytes) : NULL;
    if (buf) {
      const float alpha = 1.0f;
      for (int64_t p = 0; p < parts; ++p) {
        const int64_t n0 = N * p / parts, np = N * (p + 1) / parts - n0;
        /* column-major op(A) [np, K] = rows n0.. of W [N, K] read transposed, or columns
           n0.. of W [K, N] as they are */
        const int64_t ld = tb ? K : N;
        pack("A", tb ? "T" : "N", &np, &one_col, &K, &alpha, tb ? W + n0 * K : W + n0, &ld,
             (float *)(buf + p * part_bytes), 1, 1);
      }
      s->buf = buf;
      s->stamp = stamp;
      s->src = W;
      s->n = N;
      s->k = K;
      s->tb = tb;
      s->parts = parts;
      s->part_bytes = part_bytes;
      s->packs += 1;
      s->users = 1;
      panels = buf;
    }
  }
  disc_pack_release(s);
  return panels;
}
static void disc_pack_done(disc_pack_slot *s) {
  disc_pack_acquire(s);
  s->users -= 1;
  disc_pack_release(s);
}
/* C [M, N] = op(A) [M, K] op(W) through the slot's panels; the rows of A (made by the
   prologue when pro is set) and of C are M consecutive rows (the caller flattened any
   batch); returns 0, 2 out of memory, or -1 when the slot is busy (run unpacked) */
static int disc_gemm_packed(const disc_env *env, disc_pack_slot *s, uint64_t stamp, int ta, int tb,
                            int64_t M, int64_t N, int64_t K, const float *A, int64_t a_ld,
                            const float *W, float *Cm, disc_epi_fn epi, void *const *epi_args,
                            const int64_t *S, int64_t epi_q, int64_t *epi_count,
                            disc_pro_fn pro, void *const *pro_args, int64_t pro_q) {
  char *panels = disc_pack_panels(env, s, stamp, W, N, K, tb);
  if (!panels) return -1;
  const int64_t parts = s->parts;  /* fixed while this call is a user */
  const size_t part_bytes = s->part_bytes;
  const disc_sgemm_compute_fn compute = (disc_sgemm_compute_fn)env->sgemm_compute;
  const int nt = (double)M * N * K >= DISC_GEMM_PARALLEL_MIN ? omp_get_max_threads() : 1;
  const int prev = env->blas_threads_local ? env->blas_threads_local(1) : 0;
  int rc = 0;
  if (parts == 1 || M >= DISC_GEMM_EPI_MIN_ROWS * nt) {
    /* row blocks, each through every panel, its epilogue right after */
    const int64_t share = (M + nt - 1) / nt;
    int64_t cap = share;
    if (epi) {
      int64_t c = DISC_GEMM_EPI_BLOCK_BYTES / (N * (int64_t)sizeof(float));
      c = c < DISC_GEMM_EPI_MIN_ROWS ? DISC_GEMM_EPI_MIN_ROWS : c;
      cap = cap < c ? cap : c;
    }
    if (pro) {
      int64_t c = DISC_GEMM_PRO_BLOCK_BYTES / (K * (int64_t)sizeof(float));
      c = c < 16 ? 16 : c;
      cap = cap < c ? cap : c;
    }
    const int64_t chunks = disc_gemm_row_blocks(M, 1, cap < 1 ? 1 : cap, nt);
    const int64_t mb = (M + chunks - 1) / chunks;
    const int64_t per = pro ? disc_align_count(mb * K, sizeof(float)) : 0;
    float *bufs = pro ? (float *)disc_alloc((size_t)(nt * per) * sizeof(float)) : NULL;
    if (pro && !bufs) { rc = 2; goto done; }
    if (epi && epi_count) epi_count[0] += 1;
    #pragma omp parallel num_threads(nt) if (nt > 1)
    {
      float *buf = pro ? bufs + (int64_t)omp_get_thread_num() * per : NULL;
      #pragma omp for schedule(dynamic, 1)
      for (int64_t task = 0; task < chunks; ++task) {
        const int64_t m0 = M * task / chunks, m1 = M * (task + 1) / chunks;
        const int64_t rows = m1 - m0;
        const float zero = 0.0f;
        const float *a = pro ? buf : ta ? A + m0 : A + m0 * a_ld;
        const int64_t lda = pro ? K : a_ld;
        if (pro) pro(pro_args, S, m0 * pro_q, m1 * pro_q, buf);
        for (int64_t p = 0; p < parts; ++p) {
          const int64_t n0 = N * p / parts, np = N * (p + 1) / parts - n0;
          compute("P", pro || !ta ? "N" : "T", &np, &rows, &K,
                  (const float *)(panels + p * part_bytes), &K, a, &lda, &zero,
                  Cm + m0 * N + n0, &N, 1, 1);
        }
        if (epi) epi(epi_args, S, m0 * epi_q, m1 * epi_q);
      }
    }
    free(bufs);
  } else {
    /* few rows: one panel per member over all of them, the epilogue after */
    float *made = NULL;
    if (pro) {
      made = (float *)disc_alloc((size_t)(M * K) * sizeof(float));
      if (!made) { rc = 2; goto done; }
      const int64_t rows = M * pro_q, inner = K / pro_q;
      const int64_t want = (int64_t)DISC_BLOCKS_PER_THREAD * nt;
      const int64_t blocks = rows < want ? rows : want;
      #pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (nt > 1 && M * K >= DISC_GEMM_EPI_PAR_MIN)
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t lo = rows * blk / blocks, hi = rows * (blk + 1) / blocks;
        pro(pro_args, S, lo, hi, made + lo * inner);
      }
    }
    const float *a = pro ? made : A;
    const int64_t lda = pro ? K : a_ld;
    #pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (nt > 1)
    for (int64_t p = 0; p < parts; ++p) {
      const int64_t n0 = N * p / parts, np = N * (p + 1) / parts - n0;
      const float zero = 0.0f;
      compute("P", pro || !ta ? "N" : "T", &np, &M, &K,
              (const float *)(panels + p * part_bytes), &K, a, &lda, &zero, Cm + n0, &N, 1, 1);
    }
    free(made);
    if (epi) {
      if (epi_count) epi_count[1] += 1;
      disc_gemm_epi_after(epi, epi_args, S, M * epi_q, N / (epi_q > 0 ? epi_q : 1));
    }
  }
done:
  if (env->blas_threads_local) env->blas_threads_local(prev);
  disc_pack_done(s);
  return rc;
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
#if DISC_GEMM_PACKED
  /* the rows of A and C of every batch are consecutive when A is not transposed (or there
     is one batch): one GEMM of B * M rows against the shared weight */
  if (pack && pack_stamp && Bm && (!pro || pro_lhs) && (B == 1 || (b_shared && !ta && !a_shared))
      && B > 0 && M > 0 && B * M >= DISC_GEMM_PACK_MIN_ROWS && B * M <= DISC_GEMM_PACK_MAX_ROWS
      && N > 0 && K > 0
      && env->sgemm_pack_get_size && env->sgemm_pack
      && env->sgemm_compute) {
    const int rc = disc_gemm_packed(env, pack, pack_stamp, ta, tb, B * M, N, K, A,
                                    ta ? M : K, Bm, Cm, epi, epi_args, S, epi_q, epi_count,
                                    pro, pro_args, pro_q);
    if (rc >= 0) return rc;
  }
#else
  (void)pack; (void)pack_stamp;
#endif
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
