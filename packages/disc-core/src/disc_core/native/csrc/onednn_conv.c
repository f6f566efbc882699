/* Convolutions through oneDNN's convolution primitives (native/onednn_conv.py inserts this
   file once per module that has a ``dnn_convolution`` step; see ops/dnn_conv.py).

   Why oneDNN: eager PyTorch runs its convolutions in oneDNN (mkldnn), so calling the same
   library holds the convolution code fixed while DISC fuses what surrounds it: the bias
   and activation run as the primitive's post-ops on the output while it is in cache
   (eager runs the ReLU as one more pass), and the filter gradient's bias gradient comes
   from the same backward-weights primitive.

   The library is the standalone oneDNN that disc-runtime finds (pip onednn-cpu-gomp, its
   threading the GNU OpenMP that modules use): opened with dlopen by the path the compiler
   saw, its C entry points looked up by name. No oneDNN header is needed: the few
   prototypes and enum values of the stable v3 C API used here are declared below (checked
   against dnnl_types.h of 2023.2 / v3.2). Without the library at run time a call fails
   with a message (the bridge then runs the cluster in the framework).

   Shapes are dynamic: a primitive is made for each concrete problem (dims, strides,
   padding, post-ops) on its first call and kept in a small LRU cache inside the module
   (module state, guarded by a mutex; entries in use are never evicted). A problem oneDNN
   rejects is cached as such too, so that a call does not retry the creation (which costs
   as much as a small convolution) every time. Plain buffers are reordered in and out of
   the primitive's layouts, as eager does; see disc_dnnl_blocked_fits for which layouts.

   Per call, the entry's memory objects are reused (their buffer set with
   dnnl_memory_set_data_handle) and reorder buffers come from a per-thread scratch area
   that grows to the largest problem: creating six memory objects and allocating the
   reorder buffers on every call cost a few microseconds, the difference between a conv
   call and any other DISC call on tiny inputs.

   Problems (disc_dnnl_conv_desc) are plain arrays so that equal problems compare equal with
   memcmp. kind 0: forward, dst = act(conv(src, wei) + bias); kind 1: backward weights,
   wei = d conv / d wei given diff_dst in ``dst``, bias (when not NULL) = its bias gradient;
   kind 2: backward data, src = d conv / d src given diff_dst in ``dst``. */
#ifndef DISC_DNNL_CONV_DEFINED
#define DISC_DNNL_CONV_DEFINED
/* A core ``convolution`` (ops/linalg.py) on buffers described by their dims and strides
   in canonical order: lhs [N, C, sp...], rhs [O, I, sp...], out [N, C, sp...]; with
   ``flip`` its kernel is rhs with the taps reversed (fused_convolution's flip_kernel). */
typedef struct {
  int64_t nsp, fgc, bgc, act, flip;  /* flip: the kernel's taps are read in reverse */
  int64_t lhs[5], lhs_st[5], rhs[5], rhs_st[5], out[5], out_st[5];
  int64_t stride[3], rdil[3], ldil[3], pad_lo[3];  /* right paddings: from the sizes */
} disc_conv;
/* the entry point the host calls (its parameters shared by prototype and definition) */
#define DISC_DNNL_CONVOLUTION_PARAMS (const char *lib, const disc_conv *c, void *lhs,      \
    void *rhs, void *bias, void *out, char *msg, int64_t len)
DISC_HELPER_ENTRY int disc_dnnl_convolution DISC_DNNL_CONVOLUTION_PARAMS;
#ifndef DISC_HELPER_DECLARE_ONLY
#include <dlfcn.h>
#include <omp.h>
#include <pthread.h>

typedef struct {
  int64_t kind, nsp, groups, act, has_bias;
  int64_t src[5], src_st[5];  /* [N, C, sp...]: dims and element strides */
  int64_t wei[5], wei_st[5];  /* [O, I/groups, sp...] */
  int64_t dst[5], dst_st[5];  /* [N, O, sp...] */
  int64_t stride[3], dil[3], pad_l[3], pad_r[3];  /* dil: oneDNN's (dilation - 1) */
} disc_dnnl_conv_desc;

/* oneDNN v3 C API: opaque handles, enum values and prototypes (dnnl_types.h, dnnl.h) */
typedef void *dnnl_h;
typedef struct { int arg; dnnl_h memory; } disc_dnnl_arg;
enum { DNNL_CPU = 1, DNNL_ANY = 1, DNNL_F32 = 3, DNNL_FWD_TRAINING = 64,
       DNNL_FWD_INFERENCE = 96, DNNL_BWD_WEIGHTS = 192, DNNL_BWD_DATA = 160, DNNL_CONV_DIRECT = 1,
       DNNL_ELT_RELU = 32, DNNL_ELT_GELU_ERF = 49, DNNL_ELT_GELU_TANH = 43,
       DNNL_ELT_SWISH = 44, DNNL_ELT_LOGISTIC = 41,
       DNNL_Q_SRC = 129, DNNL_Q_DIFF_SRC = 130, DNNL_Q_WEI = 131, DNNL_Q_DIFF_WEI = 132,
       DNNL_Q_DST = 133, DNNL_Q_DIFF_DST = 134, DNNL_Q_IMPL = 8,
       DNNL_ARG_SRC = 1, DNNL_ARG_DIFF_SRC = 129, DNNL_ARG_DST = 17, DNNL_ARG_WEI = 33, DNNL_ARG_BIAS = 41,
       DNNL_ARG_DIFF_DST = 145, DNNL_ARG_DIFF_WEI = 161, DNNL_ARG_DIFF_BIAS = 169,
       DNNL_ARG_FROM = 1, DNNL_ARG_TO = 17,
       /* dnnl_format_tag_t: channel-blocked activations (nCw16c, nChw16c, nCdhw16c) */
       DNNL_TAG_ABC16B = 56, DNNL_TAG_ABCD16B = 78, DNNL_TAG_ABCDE16B = 121,
       /* the same with 8-channel blocks (nCw8c, nChw8c, nCdhw8c) */
       DNNL_TAG_ABC8B = 69, DNNL_TAG_ABCD8B = 102, DNNL_TAG_ABCDE8B = 142 };

static struct {
  int (*engine_create)(dnnl_h *, int, size_t);
  int (*stream_create)(dnnl_h *, dnnl_h, unsigned);
  int (*stream_destroy)(dnnl_h);
  int (*stream_wait)(dnnl_h);
  int (*md_strides)(dnnl_h *, int, const int64_t *, int, const int64_t *);
  int (*md_tag)(dnnl_h *, int, const int64_t *, int, int);
  int (*md_destroy)(dnnl_h);
  int (*md_equal)(const void *, const void *);
  size_t (*md_size)(const void *);
  int (*attr_create)(dnnl_h *);
  int (*attr_destroy)(dnnl_h);
  int (*attr_post_ops)(dnnl_h, const void *);
  int (*po_create)(dnnl_h *);
  int (*po_destroy)(dnnl_h);
  int (*po_eltwise)(dnnl_h, int, float, float);
  int (*conv_fwd)(dnnl_h *, dnnl_h, int, int, const void *, const void *, const void *,
                  const void *, const int64_t *, const int64_t *, const int64_t *,
                  const int64_t *, const void *);
  int (*conv_bwd_w)(dnnl_h *, dnnl_h, int, const void *, const void *, const void *,
                    const void *, const int64_t *, const int64_t *, const int64_t *,
                    const int64_t *, const void *, const void *);
  int (*conv_bwd_d)(dnnl_h *, dnnl_h, int, const void *, const void *, const void *,
                    const int64_t *, const int64_t *, const int64_t *, const int64_t *,
                    const void *, const void *);
  int (*reorder)(dnnl_h *, const void *, dnnl_h, const void *, dnnl_h, const void *);
  const void *(*query_md)(const void *, int, int);
  int (*query)(const void *, int, int, void *);
  int (*prim_create)(dnnl_h *, const void *);
  int (*pd_destroy)(dnnl_h);
  int (*prim_destroy)(dnnl_h);
  int (*mem_create)(dnnl_h *, const void *, dnnl_h, void *);
  int (*mem_destroy)(dnnl_h);
  int (*mem_set_handle)(dnnl_h, void *);
  int (*execute)(const void *, dnnl_h, int, const disc_dnnl_arg *);
} disc_dnnl;
static dnnl_h disc_dnnl_engine;
static int disc_dnnl_state;  /* 0 not tried, 1 loaded, -1 unavailable */
static pthread_mutex_t disc_dnnl_lock = PTHREAD_MUTEX_INITIALIZER;

/* every plain buffer the primitive reads or writes: the user's layout, the primitive's,
   and the reorder between them (NULL when they are the same) */
typedef struct { int arg, out; dnnl_h user_md; const void *prim_md; dnnl_h reorder;
                 size_t bytes; } disc_dnnl_slot;
typedef struct {
  disc_dnnl_conv_desc key;
  int64_t used, refs;
  int failed;    /* oneDNN rejected the problem (key): no primitive, no retry */
  int mem_busy;  /* a call is using mem[] (another one at the same time makes its own) */
  dnnl_h pd, prim, bias_md;  /* pd: owns the primitive's layouts (slot prim_md) */
  disc_dnnl_slot slot[3];
  dnnl_h mem[7];  /* the user buffers, the reordered ones, the bias: handles set per call */
  char impl[64];
} disc_dnnl_entry;
#define DISC_DNNL_CACHE 48
/* multiply-adds below which a problem runs on one thread (a few microseconds) */
#define DISC_DNNL_SERIAL_WORK 65536
static disc_dnnl_entry disc_dnnl_cache[DISC_DNNL_CACHE];
static int64_t disc_dnnl_clock;
/* primitive creations tried and failed, this module (see disc_dnnl_counts) */
static int64_t disc_dnnl_built, disc_dnnl_rejected;

/* Counts of this module's oneDNN primitive creations: out[0] convolutions made, out[1]
   problems oneDNN rejected (each tried once: the rejection is cached). For tests. */
void disc_dnnl_counts(int64_t *out) {
  pthread_mutex_lock(&disc_dnnl_lock);
  out[0] = disc_dnnl_built; out[1] = disc_dnnl_rejected;
  pthread_mutex_unlock(&disc_dnnl_lock);
}

static int disc_dnnl_load(const char *path, char *msg, size_t len) {
  if (disc_dnnl_state) return disc_dnnl_state;
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) { snprintf(msg, len, "cannot open oneDNN (%s)", dlerror()); disc_dnnl_state = -1;
            return -1; }
  struct { void **fn; const char *name; } syms[] = {
    {(void **)&disc_dnnl.engine_create, "dnnl_engine_create"},
    {(void **)&disc_dnnl.stream_create, "dnnl_stream_create"},
    {(void **)&disc_dnnl.stream_destroy, "dnnl_stream_destroy"},
    {(void **)&disc_dnnl.stream_wait, "dnnl_stream_wait"},
    {(void **)&disc_dnnl.md_strides, "dnnl_memory_desc_create_with_strides"},
    {(void **)&disc_dnnl.md_tag, "dnnl_memory_desc_create_with_tag"},
    {(void **)&disc_dnnl.md_destroy, "dnnl_memory_desc_destroy"},
    {(void **)&disc_dnnl.md_equal, "dnnl_memory_desc_equal"},
    {(void **)&disc_dnnl.md_size, "dnnl_memory_desc_get_size"},
    {(void **)&disc_dnnl.attr_create, "dnnl_primitive_attr_create"},
    {(void **)&disc_dnnl.attr_destroy, "dnnl_primitive_attr_destroy"},
    {(void **)&disc_dnnl.attr_post_ops, "dnnl_primitive_attr_set_post_ops"},
    {(void **)&disc_dnnl.po_create, "dnnl_post_ops_create"},
    {(void **)&disc_dnnl.po_destroy, "dnnl_post_ops_destroy"},
    {(void **)&disc_dnnl.po_eltwise, "dnnl_post_ops_append_eltwise"},
    {(void **)&disc_dnnl.conv_fwd, "dnnl_convolution_forward_primitive_desc_create"},
    {(void **)&disc_dnnl.conv_bwd_w, "dnnl_convolution_backward_weights_primitive_desc_create"},
    {(void **)&disc_dnnl.conv_bwd_d, "dnnl_convolution_backward_data_primitive_desc_create"},
    {(void **)&disc_dnnl.reorder, "dnnl_reorder_primitive_desc_create"},
    {(void **)&disc_dnnl.query_md, "dnnl_primitive_desc_query_md"},
    {(void **)&disc_dnnl.query, "dnnl_primitive_desc_query"},
    {(void **)&disc_dnnl.prim_create, "dnnl_primitive_create"},
    {(void **)&disc_dnnl.pd_destroy, "dnnl_primitive_desc_destroy"},
    {(void **)&disc_dnnl.prim_destroy, "dnnl_primitive_destroy"},
    {(void **)&disc_dnnl.mem_create, "dnnl_memory_create"},
    {(void **)&disc_dnnl.mem_destroy, "dnnl_memory_destroy"},
    {(void **)&disc_dnnl.mem_set_handle, "dnnl_memory_set_data_handle"},
    {(void **)&disc_dnnl.execute, "dnnl_primitive_execute"},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; ++i) {
    *syms[i].fn = dlsym(h, syms[i].name);
    if (!*syms[i].fn) { snprintf(msg, len, "oneDNN at %s lacks %s", path, syms[i].name);
                        disc_dnnl_state = -1; return -1; }
  }
  if (disc_dnnl.engine_create(&disc_dnnl_engine, DNNL_CPU, 0)) {
    snprintf(msg, len, "oneDNN could not create a CPU engine"); disc_dnnl_state = -1;
    return -1;
  }
  disc_dnnl_state = 1;
  return 1;
}

static void disc_dnnl_release(disc_dnnl_entry *e) {
  for (int i = 0; i < 7; ++i) if (e->mem[i]) disc_dnnl.mem_destroy(e->mem[i]);
  if (e->prim) disc_dnnl.prim_destroy(e->prim);
  if (e->bias_md) disc_dnnl.md_destroy(e->bias_md);
  for (int i = 0; i < 3; ++i) {
    if (e->slot[i].user_md) disc_dnnl.md_destroy(e->slot[i].user_md);
    if (e->slot[i].reorder) disc_dnnl.prim_destroy(e->slot[i].reorder);
  }
  if (e->pd) disc_dnnl.pd_destroy(e->pd);
  memset(e, 0, sizeof *e);
}

/* slot for a plain buffer (dims, element strides) that the primitive sees as prim_md */
static int disc_dnnl_slot_setup(disc_dnnl_slot *s, int arg, int out, int nd,
                                const int64_t *dims, const int64_t *st, const void *prim_md) {
  s->arg = arg; s->out = out; s->prim_md = prim_md;
  if (!prim_md || disc_dnnl.md_strides(&s->user_md, nd, dims, DNNL_F32, st)) return 1;
  s->bytes = disc_dnnl.md_size(prim_md);
  if (disc_dnnl.md_equal(s->user_md, prim_md)) return 0;
  dnnl_h rpd = NULL;
  const void *from = out ? prim_md : s->user_md, *to = out ? s->user_md : prim_md;
  if (disc_dnnl.reorder(&rpd, from, disc_dnnl_engine, to, disc_dnnl_engine, NULL)) return 1;
  const int rc = disc_dnnl.prim_create(&s->reorder, rpd);
  disc_dnnl.pd_destroy(rpd);
  return rc != 0;
}

/* Channels per block of the blocked activations: the vector width of the CPU's widest JIT
   kernels, 16 floats with AVX-512, 8 with AVX2 (oneDNN 3.2 has no JIT kernel for nChw16c
   on an AVX2-only CPU: the 16c problem was rejected there and every forward convolution
   ran channels-last, with the transposes described below, where eager's oneDNN runs
   nChw8c: jit:avx2 on [8,32,16,16], AMD EPYC). Called under disc_dnnl_lock. */
static int disc_dnnl_block(void) {
  static int blk;
  if (!blk) blk = __builtin_cpu_supports("avx512f") ? 16 : 8;
  return blk;
}

/* Whether problem ``d`` is first tried with channel-blocked activations (nChw16c, or
   nChw8c on AVX2: disc_dnnl_block) rather than the layouts oneDNN picks itself. On plain
   channel-first buffers oneDNN 3.2 picks channels-last (brgconv), and the transposes into
   and out of it cost 2-3x the blocked reorders eager's oneDNN makes: 0.20 against 0.08 ms
   around a 0.55 ms 32->32 3x3 convolution of [4,32,40,40] (one thread, ONEDNN_VERBOSE,
   AVX-512 Xeon; on the AVX2 EPYC the 8c reorders around the CNN's 32->64 stride-2
   convolution of [8,32,16,16] took 0.045 against 0.055 ms, the kernels within noise, load average 5),
   while the blocked kernel itself runs as fast. Channels-last buffers keep oneDNN's choice
   (no reorder at all), as do channel counts that are not multiples of the block (a
   3-channel stem would be padded) and single-pixel images (plain and blocked are then the same bytes, but
   oneDNN would reorder between them). Forward only: the gradients' primitives with
   blocked layouts made no measurable difference to the small CNN's training step (1.35x
   vs 1.36x eager, one thread, noise larger than that), so they keep oneDNN's choice. */
static int disc_dnnl_blocked_fits(const disc_dnnl_conv_desc *d) {
  if (d->kind != 0) return 0;
  const int64_t blk = disc_dnnl_block();
  int64_t sp_src = 1, sp_dst = 1;
  for (int j = 0; j < d->nsp; ++j) { sp_src *= d->src[2 + j]; sp_dst *= d->dst[2 + j]; }
  if (sp_src <= 1 || sp_dst <= 1 || d->src_st[1] == 1 || d->dst_st[1] == 1) return 0;
  const int64_t G = d->groups, cg = d->src[1] / G, og = d->dst[1] / G;
  if (G > 1 && cg == 1 && og == 1) return d->src[1] % blk == 0;  /* depthwise */
  return cg % blk == 0 && og % blk == 0;
}

/* Makes the primitive of ``d`` in ``e`` (0), with oneDNN's own choice of layouts
   (blocked == 0) or channel-blocked activations (1, rejected unless a JIT kernel runs
   it); 1 when oneDNN has none. */
static int disc_dnnl_build(disc_dnnl_entry *e, const disc_dnnl_conv_desc *d, int blocked) {
#ifdef DISC_DNNL_REJECT_KIND
  /* tests only (a -D the test adds to the module's flags): oneDNN "rejects" every problem
     of this kind, the one deterministic way to reach the rejection cache now that every
     padding oneDNN used to refuse is described */
  if (d->kind == DISC_DNNL_REJECT_KIND) return 1;
#endif
  const int nd = 2 + (int)d->nsp;
  const int64_t G = d->groups;
  int64_t wdims[6], wst[6];
  int wnd = nd;
  if (G > 1) {  /* grouped weights: [G, O/G, I/G, sp...] */
    wnd = nd + 1;
    wdims[0] = G; wst[0] = d->wei_st[0] * (d->wei[0] / G);
    wdims[1] = d->wei[0] / G; wst[1] = d->wei_st[0];
    for (int i = 1; i < nd; ++i) { wdims[i + 1] = d->wei[i]; wst[i + 1] = d->wei_st[i]; }
  } else {
    for (int i = 0; i < nd; ++i) { wdims[i] = d->wei[i]; wst[i] = d->wei_st[i]; }
  }
  dnnl_h src_any = NULL, wei_any = NULL, dst_any = NULL, attr = NULL, po = NULL;
  dnnl_h fwd_pd = NULL;
  int rc = 1;
  e->key = *d;
  /* never the user's plain NCHW layout: there oneDNN 3.2 picks an im2col GEMM that ran
     2-3x slower than reorders plus its blocked kernels */
  const int b16 = disc_dnnl_block() == 16;
  const int act_tag = !blocked ? DNNL_ANY
                      : nd == 3 ? (b16 ? DNNL_TAG_ABC16B : DNNL_TAG_ABC8B)
                      : nd == 4 ? (b16 ? DNNL_TAG_ABCD16B : DNNL_TAG_ABCD8B)
                      : (b16 ? DNNL_TAG_ABCDE16B : DNNL_TAG_ABCDE8B);
  if (disc_dnnl.md_tag(&src_any, nd, d->src, DNNL_F32, act_tag)
      || disc_dnnl.md_tag(&wei_any, wnd, wdims, DNNL_F32, DNNL_ANY)
      || disc_dnnl.md_tag(&dst_any, nd, d->dst, DNNL_F32, act_tag)) goto done;
  if (d->has_bias) {
    const int64_t one = 1;
    if (disc_dnnl.md_strides(&e->bias_md, 1, &d->wei[0], DNNL_F32, &one)) goto done;
  }
  if (disc_dnnl.attr_create(&attr)) goto done;
  if (d->kind == 0 && d->act) {
    if (disc_dnnl.po_create(&po) || disc_dnnl.po_eltwise(po, (int)d->act, 0.f, 0.f)
        || disc_dnnl.attr_post_ops(attr, po)) goto done;
  }
  if (disc_dnnl.conv_fwd(d->kind == 0 ? &e->pd : &fwd_pd, disc_dnnl_engine,
                         d->kind == 0 ? DNNL_FWD_INFERENCE : DNNL_FWD_TRAINING,
                         DNNL_CONV_DIRECT, src_any, wei_any, e->bias_md, dst_any, d->stride,
                         d->dil, d->pad_l, d->pad_r, attr)) goto done;
  if (d->kind == 0) {
    if (disc_dnnl_slot_setup(&e->slot[0], DNNL_ARG_SRC, 0, nd, d->src, d->src_st,
                             disc_dnnl.query_md(e->pd, DNNL_Q_SRC, 0))
        || disc_dnnl_slot_setup(&e->slot[1], DNNL_ARG_WEI, 0, wnd, wdims, wst,
                                disc_dnnl.query_md(e->pd, DNNL_Q_WEI, 0))
        || disc_dnnl_slot_setup(&e->slot[2], DNNL_ARG_DST, 1, nd, d->dst, d->dst_st,
                                disc_dnnl.query_md(e->pd, DNNL_Q_DST, 0))) goto done;
  } else if (d->kind == 2) {  /* src: diff_src (written), dst: diff_dst (read) */
    if (disc_dnnl.conv_bwd_d(&e->pd, disc_dnnl_engine, DNNL_CONV_DIRECT, src_any, wei_any,
                             dst_any, d->stride, d->dil, d->pad_l, d->pad_r, fwd_pd, attr))
      goto done;
    if (disc_dnnl_slot_setup(&e->slot[0], DNNL_ARG_DIFF_SRC, 1, nd, d->src, d->src_st,
                             disc_dnnl.query_md(e->pd, DNNL_Q_DIFF_SRC, 0))
        || disc_dnnl_slot_setup(&e->slot[1], DNNL_ARG_WEI, 0, wnd, wdims, wst,
                                disc_dnnl.query_md(e->pd, DNNL_Q_WEI, 0))
        || disc_dnnl_slot_setup(&e->slot[2], DNNL_ARG_DIFF_DST, 0, nd, d->dst, d->dst_st,
                                disc_dnnl.query_md(e->pd, DNNL_Q_DIFF_DST, 0))) goto done;
  } else {
    if (disc_dnnl.conv_bwd_w(&e->pd, disc_dnnl_engine, DNNL_CONV_DIRECT, src_any, wei_any,
                             e->bias_md, dst_any, d->stride, d->dil, d->pad_l, d->pad_r,
                             fwd_pd, attr)) goto done;
    if (disc_dnnl_slot_setup(&e->slot[0], DNNL_ARG_SRC, 0, nd, d->src, d->src_st,
                             disc_dnnl.query_md(e->pd, DNNL_Q_SRC, 0))
        || disc_dnnl_slot_setup(&e->slot[1], DNNL_ARG_DIFF_WEI, 1, wnd, wdims, wst,
                                disc_dnnl.query_md(e->pd, DNNL_Q_DIFF_WEI, 0))
        || disc_dnnl_slot_setup(&e->slot[2], DNNL_ARG_DIFF_DST, 0, nd, d->dst, d->dst_st,
                                disc_dnnl.query_md(e->pd, DNNL_Q_DIFF_DST, 0))) goto done;
  }
  const char *impl = NULL;
  if (!disc_dnnl.query(e->pd, DNNL_Q_IMPL, 0, &impl) && impl)
    snprintf(e->impl, sizeof e->impl, "%s", impl);
  /* blocked layouts only for oneDNN's blocked JIT kernels, not its reference or GEMM ones */
  if (blocked && (!impl || !strncmp(impl, "ref", 3) || strstr(impl, "gemm"))) goto done;
  if (disc_dnnl.prim_create(&e->prim, e->pd)) goto done;
  rc = 0;
done:
  if (src_any) disc_dnnl.md_destroy(src_any);
  if (wei_any) disc_dnnl.md_destroy(wei_any);
  if (dst_any) disc_dnnl.md_destroy(dst_any);
  if (attr) disc_dnnl.attr_destroy(attr);
  if (po) disc_dnnl.po_destroy(po);
  if (fwd_pd) disc_dnnl.pd_destroy(fwd_pd);
  if (rc) disc_dnnl_release(e);
  return rc;
}

/* the cache entry of problem ``d`` (made on first use), with a reference taken; NULL when
   oneDNN rejects the problem (remembered: the next call with it fails at once). *own: the
   caller may use the entry's memory objects (no other call is using them). */
static disc_dnnl_entry *disc_dnnl_acquire(const disc_dnnl_conv_desc *d, int *own) {
  pthread_mutex_lock(&disc_dnnl_lock);
  disc_dnnl_entry *hit = NULL, *victim = NULL;
  for (int i = 0; i < DISC_DNNL_CACHE; ++i) {
    disc_dnnl_entry *e = &disc_dnnl_cache[i];
    const int held = e->prim || e->failed;
    if (held && !memcmp(&e->key, d, sizeof *d)) { hit = e; break; }
    if (e->refs == 0 && (!victim || ((victim->prim || victim->failed)
                                     && (!held || e->used < victim->used))))
      victim = e;
  }
  if (!hit && victim) {
    if (victim->prim || victim->failed) disc_dnnl_release(victim);
    if ((disc_dnnl_blocked_fits(d) && !disc_dnnl_build(victim, d, 1))
        || !disc_dnnl_build(victim, d, 0)) {
      disc_dnnl_built++;
    } else {
      disc_dnnl_rejected++;
      victim->key = *d; victim->failed = 1;
    }
    hit = victim;
  }
  if (hit) hit->used = ++disc_dnnl_clock;
  if (hit && hit->failed) hit = NULL;
  *own = 0;
  if (hit) {
    hit->refs++;
    if (!hit->mem_busy) { hit->mem_busy = 1; *own = 1; }
  }
  pthread_mutex_unlock(&disc_dnnl_lock);
  return hit;
}

/* this thread's reorder buffers, grown to the largest problem it ran (freed with it) */
typedef struct { void *buf[3]; size_t bytes[3]; } disc_dnnl_scratch;
static pthread_key_t disc_dnnl_scratch_key;
static pthread_once_t disc_dnnl_scratch_once = PTHREAD_ONCE_INIT;
static void disc_dnnl_scratch_free(void *p) {
  disc_dnnl_scratch *s = (disc_dnnl_scratch *)p;
  for (int i = 0; i < 3; ++i) free(s->buf[i]);
  free(s);
}
static void disc_dnnl_scratch_init(void) {
  pthread_key_create(&disc_dnnl_scratch_key, disc_dnnl_scratch_free);
}
static void *disc_dnnl_scratch_get(int i, size_t bytes) {
  pthread_once(&disc_dnnl_scratch_once, disc_dnnl_scratch_init);
  disc_dnnl_scratch *s = (disc_dnnl_scratch *)pthread_getspecific(disc_dnnl_scratch_key);
  if (!s) {
    s = (disc_dnnl_scratch *)calloc(1, sizeof *s);
    if (!s || pthread_setspecific(disc_dnnl_scratch_key, s)) { free(s); return NULL; }
  }
  if (s->bytes[i] < bytes) {
    free(s->buf[i]);
    s->bytes[i] = 0;
    s->buf[i] = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!s->buf[i]) return NULL;
    s->bytes[i] = bytes;
  }
  return s->buf[i];
}

/* Runs nonempty problem ``d`` in its cached primitive (see disc_dnnl_conv). */
static int disc_dnnl_run(const disc_dnnl_conv_desc *d, void *src, void *wei, void *bias,
                         void *dst, char *msg, int64_t len, const char **impl) {
  int own = 0;
  disc_dnnl_entry *e = disc_dnnl_acquire(d, &own);
  if (!e) { snprintf(msg, (size_t)len, "oneDNN has no convolution for this problem"); return 1; }
  if (impl) *impl = e->impl;
  void *user[3] = {src, wei, dst};
  /* the entry's memory objects when this call owns them, else this call's own */
  dnnl_h local[7] = {0}, *mem = own ? e->mem : local;
  /* one stream per thread, kept: a CPU stream is a few allocations oneDNN makes anew */
  static __thread dnnl_h stream;
  disc_dnnl_arg args[5];
  int n = 0, rc = 1;
  if (!stream && disc_dnnl.stream_create(&stream, disc_dnnl_engine, 1)) goto done;
  for (int i = 0; i < 3; ++i) {
    disc_dnnl_slot *s = &e->slot[i];
    if (mem[i] ? disc_dnnl.mem_set_handle(mem[i], user[i])
               : disc_dnnl.mem_create(&mem[i], s->user_md, disc_dnnl_engine, user[i])) goto done;
    dnnl_h m = mem[i];
    if (s->reorder) {
      void *tmp = disc_dnnl_scratch_get(i, s->bytes);
      if (!tmp || (mem[3 + i] ? disc_dnnl.mem_set_handle(mem[3 + i], tmp)
                   : disc_dnnl.mem_create(&mem[3 + i], s->prim_md, disc_dnnl_engine, tmp)))
        goto done;
      m = mem[3 + i];
      if (!s->out) {
        disc_dnnl_arg r[2] = {{DNNL_ARG_FROM, mem[i]}, {DNNL_ARG_TO, m}};
        if (disc_dnnl.execute(s->reorder, stream, 2, r)) goto done;
      }
    }
    args[n++] = (disc_dnnl_arg){s->arg, m};
  }
  if (bias) {
    if (mem[6] ? disc_dnnl.mem_set_handle(mem[6], bias)
               : disc_dnnl.mem_create(&mem[6], e->bias_md, disc_dnnl_engine, bias)) goto done;
    args[n++] = (disc_dnnl_arg){d->kind == 0 ? DNNL_ARG_BIAS : DNNL_ARG_DIFF_BIAS, mem[6]};
  }
  if (disc_dnnl.execute(e->prim, stream, n, args)) goto done;
  for (int i = 0; i < 3; ++i)
    if (e->slot[i].reorder && e->slot[i].out) {
      disc_dnnl_arg r[2] = {{DNNL_ARG_FROM, mem[3 + i]}, {DNNL_ARG_TO, mem[i]}};
      if (disc_dnnl.execute(e->slot[i].reorder, stream, 2, r)) goto done;
    }
  if (disc_dnnl.stream_wait(stream)) goto done;
  rc = 0;
done:
  if (rc) snprintf(msg, (size_t)len, "oneDNN convolution failed (%s)", e->impl);
  for (int i = 0; i < 7; ++i) if (local[i]) disc_dnnl.mem_destroy(local[i]);
  pthread_mutex_lock(&disc_dnnl_lock);
  if (own) e->mem_busy = 0;
  e->refs--;
  pthread_mutex_unlock(&disc_dnnl_lock);
  return rc;
}


/* Runs problem ``d`` (library ``lib``): buffers src, wei, dst as described there and bias
   (NULL when d->has_bias is 0). 0 on success, else 1 with a message in msg. */
static __attribute__((noinline)) int disc_dnnl_conv(const char *lib,
    const disc_dnnl_conv_desc *d, void *src, void *wei, void *bias, void *dst,
    char *msg, int64_t len, const char **impl) {
  if (disc_dnnl_state != 1) {
    pthread_mutex_lock(&disc_dnnl_lock);
    disc_dnnl_load(lib, msg, (size_t)len);
    pthread_mutex_unlock(&disc_dnnl_lock);
    if (disc_dnnl_state != 1) return 1;
  }
  {  /* empty problems: oneDNN takes no zero dims */
    int64_t nsrc = 1, nwei = 1, ndst = 1;
    for (int i = 0; i < 2 + d->nsp; ++i) { nsrc *= d->src[i]; nwei *= d->wei[i]; ndst *= d->dst[i]; }
    if (d->kind == 1 && (nsrc == 0 || ndst == 0)) {  /* nothing summed: zero gradients */
      memset(wei, 0, (size_t)nwei * sizeof(float));  /* (contiguous: the op's own result) */
      if (bias) memset(bias, 0, (size_t)d->wei[0] * sizeof(float));
      return 0;
    }
    if (d->kind == 2 && nsrc == 0) return 0;
    if (d->kind == 2 && (ndst == 0 || nwei == 0)) {  /* nothing reaches the input */
      memset(src, 0, (size_t)nsrc * sizeof(float));  /* (contiguous: the op's own result) */
      return 0;
    }
    if (d->kind == 0 && ndst == 0) return 0;
    if (d->kind == 0 && (nsrc == 0 || nwei == 0)) {  /* no taps: act(bias) everywhere */
      float *y = (float *)dst;
      const int64_t inner = ndst / (d->dst[0] * d->dst[1]);
      for (int64_t n = 0; n < d->dst[0]; ++n)
        for (int64_t o = 0; o < d->dst[1]; ++o) {
          float v = bias ? ((const float *)bias)[o] : 0.f;
          if (d->act == DNNL_ELT_RELU && !(v > 0.f)) v = 0.f;
          for (int64_t r = 0; r < inner; ++r) {
            int64_t off = n * d->dst_st[0] + o * d->dst_st[1], rest = r;
            for (int j = (int)d->nsp - 1; j >= 0; --j) {
              off += (rest % d->dst[2 + j]) * d->dst_st[2 + j]; rest /= d->dst[2 + j];
            }
            y[off] = v;
          }
        }
      return 0;
    }
  }
  /* A problem of a few microseconds runs on the calling thread alone (its primitive is
     made so, once): a team of OpenMP threads forked and joined for the weights' reorder
     and again for the convolution cost more than the work (exe.run of the memory-bound
     benchmark's 1x1 image, best of 15, two threads: 9.4 -> 7.4 us). The thread count set
     is the calling thread's own (per-thread OpenMP state) and restored after; a team of
     one leaves the OpenMP thread pool as it is (no thread is made again afterwards). */
  int64_t work = d->dst[0] * d->dst[1] * (d->src[1] / (d->groups > 0 ? d->groups : 1));
  for (int j = 0; j < d->nsp; ++j) work *= d->wei[2 + j] * d->dst[2 + j];
  const int team = omp_get_max_threads();
  const int alone = team > 1 && work < DISC_DNNL_SERIAL_WORK;
  if (alone) omp_set_num_threads(1);
  const int rc = disc_dnnl_run(d, src, wei, bias, dst, msg, len, impl);
  if (alone) omp_set_num_threads(team);
  return rc;
}

/* Runs core convolution ``c`` (out = act(conv(lhs, rhs) + bias)) as the oneDNN primitive
   that fits it. Every convolution is the forward of one problem and the weight gradient
   of another, with batch and features swapped (XLA's filter gradient is written so:
   builder.conv_filter_grad): a "kernel" larger than the result is the output gradient of
   a forward convolution whose kernel is the result, and oneDNN's backward-weights
   primitive computes it directly (its forward primitive would slide a 56x56 kernel).
   Batch groups are that form's groups; bias and activation only fit the forward. */
DISC_HELPER_ENTRY int disc_dnnl_convolution DISC_DNNL_CONVOLUTION_PARAMS {
  disc_dnnl_conv_desc d;
  memset(&d, 0, sizeof d);
  d.nsp = c->nsp; d.act = c->act; d.has_bias = bias != NULL;
  if (c->flip) {
    /* an input gradient (builder.conv_input_grad): lhs is the output gradient dilated by
       the forward stride (lhs_dilation), the kernel the forward's flipped with I and O
       swapped. Output position p = o * s + t * d - pl with pl = (k - 1) * d - pad_lo, the
       forward convolution's own relation: oneDNN's backward-data primitive, no phases */
    if (c->fgc != 1 || c->bgc != 1 || bias || c->act) {
      snprintf(msg, (size_t)len, "oneDNN: flipped kernel with groups or post-ops"); return 1;
    }
    d.kind = 2; d.groups = 1;
    for (int i = 0; i < 2 + c->nsp; ++i) {
      const int sw = i < 2 ? 1 - i : i;
      d.src[i] = c->out[i]; d.src_st[i] = c->out_st[i];
      d.dst[i] = c->lhs[i]; d.dst_st[i] = c->lhs_st[i];
      d.wei[i] = c->rhs[sw]; d.wei_st[i] = c->rhs_st[sw];
    }
    for (int j = 0; j < c->nsp; ++j) {
      const int64_t ext = (d.wei[2 + j] - 1) * c->rdil[j] + 1;
      d.stride[j] = c->ldil[j]; d.dil[j] = c->rdil[j] - 1;
      d.pad_l[j] = ext - 1 - c->pad_lo[j];
      d.pad_r[j] = (d.dst[2 + j] - 1) * d.stride[j] + ext - d.src[2 + j] - d.pad_l[j];
    }
    /* a forward whose windows left the input's last positions unread (VALID padding with
       a stride that does not divide the extent, or an explicit high padding below it):
       those positions get no gradient and oneDNN takes no negative padding. The primitive
       writes the covered part (the same strides, fewer positions) of a zeroed result. */
    int tail = 0;
    for (int j = 0; j < c->nsp; ++j) {
      if (d.pad_r[j] < 0) { d.src[2 + j] += d.pad_r[j]; d.pad_r[j] = 0; tail = 1; }
    }
    if (tail) {
      int64_t n = 1;
      for (int i = 0; i < 2 + c->nsp; ++i) n *= c->out[i];
      memset(out, 0, (size_t)n * sizeof(float));  /* (contiguous: the op's own result) */
      for (int j = 0; j < c->nsp; ++j) if (d.src[2 + j] <= 0) return 0;
    }
    return disc_dnnl_conv(lib, &d, out, rhs, NULL, lhs, msg, len, NULL);
  }
  int64_t kern = 1, res = 1;
  for (int j = 0; j < c->nsp; ++j) { kern *= c->rhs[2 + j]; res *= c->out[2 + j]; }
  const int weights = c->bgc > 1 || (c->fgc == 1 && !bias && !c->act && kern > res);
  if (weights) {
    /* the weight-gradient form: src = lhs with N and C swapped, diff_dst = rhs with O and
       I swapped, diff_weights = out with N and C swapped */
    d.kind = 1; d.groups = c->bgc;
    for (int i = 0; i < 2 + c->nsp; ++i) {
      const int sw = i < 2 ? 1 - i : i;
      d.src[i] = c->lhs[sw]; d.src_st[i] = c->lhs_st[sw];
      d.dst[i] = c->rhs[sw]; d.dst_st[i] = c->rhs_st[sw];
      d.wei[i] = c->out[sw]; d.wei_st[i] = c->out_st[sw];
    }
    for (int j = 0; j < c->nsp; ++j) {
      d.stride[j] = c->rdil[j]; d.dil[j] = c->stride[j] - 1; d.pad_l[j] = c->pad_lo[j];
      /* the right padding that makes the forward's output exactly the gradient's size */
      d.pad_r[j] = (d.dst[2 + j] - 1) * d.stride[j] + (d.wei[2 + j] - 1) * c->stride[j] + 1
                   - d.src[2 + j] - d.pad_l[j];
      /* negative: the input's last positions are unread (oneDNN takes no negative
         padding): describe the read part only, same strides */
      if (d.pad_r[j] < 0) { d.src[2 + j] += d.pad_r[j]; d.pad_r[j] = 0; }
    }
    /* a forward convolution whose kernel outgrows its result (a tiny image) is tried in
       this form first; where oneDNN finds it inconsistent (strides, paddings), it runs
       as the forward it is (nothing was written) */
    const int rc = disc_dnnl_conv(lib, &d, lhs, out, NULL, rhs, msg, len, NULL);
    if (rc == 0 || c->bgc > 1) return rc;  /* batch groups have no forward form */
    memset(&d, 0, sizeof d);
    d.nsp = c->nsp; d.act = c->act; d.has_bias = bias != NULL;
  }
  if (c->bgc > 1) { snprintf(msg, (size_t)len, "oneDNN: batch-grouped convolution"); return 1; }
  d.kind = 0; d.groups = c->fgc;
  for (int i = 0; i < 2 + c->nsp; ++i) {
    d.src[i] = c->lhs[i]; d.src_st[i] = c->lhs_st[i];
    d.wei[i] = c->rhs[i]; d.wei_st[i] = c->rhs_st[i];
    d.dst[i] = c->out[i]; d.dst_st[i] = c->out_st[i];
  }
  for (int j = 0; j < c->nsp; ++j) {
    d.stride[j] = c->stride[j]; d.dil[j] = c->rdil[j] - 1;
    d.pad_l[j] = c->pad_lo[j];
    /* the right padding that makes the output exactly its size: the op's less what a stride
       that does not divide the extent leaves unread, plus fused_convolution's lhs_high (a
       zero edge of run-time size); negative: the input's last positions are unread, so
       the read part only is described (same strides) */
    d.pad_r[j] = (c->out[2 + j] - 1) * c->stride[j] + (c->rhs[2 + j] - 1) * c->rdil[j] + 1
                 - c->lhs[2 + j] - c->pad_lo[j];
    if (d.pad_r[j] < 0) { d.src[2 + j] += d.pad_r[j]; d.pad_r[j] = 0; }
  }
  return disc_dnnl_conv(lib, &d, lhs, rhs, bias, out, msg, len, NULL);
}
#endif  /* DISC_HELPER_DECLARE_ONLY */
#endif
