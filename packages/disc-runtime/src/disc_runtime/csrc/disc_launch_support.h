// What every framework's launch op shares (disc-tf's DiscLaunch, disc-paddle's
// disc_launch_<N>): loading a DISC module, calling it with the process's BLAS, and the
// process-wide bookkeeping the bridge reads from Python (failures, per-cluster stats, a
// test hook). A launch op's source includes this header after "disc_abi.h" (generated
// from disc_runtime.abi.ABI_TYPES) and instantiates the C entry points under its own
// prefix with DISC_LAUNCH_EXPORTS(prefix); disc_core.bridge.launch.LaunchLibrary wraps them.

#pragma once

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace disc_launch {

typedef int64_t (*RunFn)(void *const *, const int64_t *, int64_t, const disc_env *, char *,
                         int64_t);
typedef int64_t (*AbiFn)(void);

struct Stats {
  int64_t calls = 0, fallback_calls = 0;
  double seconds = 0.0;
};

inline std::mutex &Mutex() {
  static std::mutex mu;
  return mu;
}
inline std::string &Failures() {  // "key\tmessage\n" records not yet taken
  static std::string failures;
  return failures;
}
inline std::unordered_map<std::string, Stats> &StatsByKey() {
  static std::unordered_map<std::string, Stats> stats;
  return stats;
}
// cluster key -> the profile slots its module adds step times to (native.py's profile
// layout), registered by the Python side when profiling is on; read once per op instance
inline std::unordered_map<std::string, int64_t *> &ProfileBuffers() {
  static std::unordered_map<std::string, int64_t *> buffers;
  return buffers;
}
inline int64_t *ProfileBuffer(const std::string &key) {
  std::lock_guard<std::mutex> lock(Mutex());
  auto it = ProfileBuffers().find(key);
  return it == ProfileBuffers().end() ? nullptr : it->second;
}
inline std::atomic<int64_t> &Injected() {  // test hook: fail this many next runs
  static std::atomic<int64_t> n{0};
  return n;
}
// totals over every key, read on each eager call (one lock-free read, no map lookups)
inline std::atomic<int64_t> &FailureCount() {
  static std::atomic<int64_t> n{0};
  return n;
}
inline std::atomic<int64_t> &DiscNanos() {
  static std::atomic<int64_t> n{0};
  return n;
}
// the BLAS entry points modules call (disc_runtime.native.blas_functions)
struct Blas {
  void *sgemm = nullptr, *dgemm = nullptr, *threads_local = nullptr, *sgemm_rowmajor = nullptr;
};
inline Blas &TheBlas() {
  static Blas blas;
  return blas;
}
// An LP64 CBLAS sgemm behind the row-major GEMM slot: a framework whose own GEMM is an
// LP64 library (Paddle's bundled MKL, libmklml_intel.so, exports cblas_sgemm with 32-bit
// sizes) hands it over with <prefix>_use_cblas, so DISC's f32 GEMMs run the same code as
// the framework's. The slot's contract is oneDNN's dnnl_sgemm (row-major, 64-bit sizes).
typedef void (*CblasSgemmFn)(int layout, int ta, int tb, int m, int n, int k, float alpha,
                             const float *a, int lda, const float *b, int ldb, float beta,
                             float *c, int ldc);
typedef void (*FortranSgemmFn)(const char *, const char *, const int64_t *, const int64_t *,
                               const int64_t *, const float *, const float *, const int64_t *,
                               const float *, const int64_t *, const float *, float *,
                               const int64_t *, size_t, size_t);
struct Cblas {
  CblasSgemmFn sgemm = nullptr;
  int (*threads_local)(int) = nullptr;  // mkl_set_num_threads_local
};
inline Cblas &TheCblas() {
  static Cblas cblas;
  return cblas;
}
// A module calls GEMMs from its own OpenMP team, one at a time per member: the library
// runs each on one thread (a second thread pool next to OpenMP's halves throughput).
// Sizes beyond 32 bits go to the ILP64 Fortran sgemm instead (C' = B' A').
inline int CblasRowMajorSgemm(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha,
                              const float *a, int64_t lda, const float *b, int64_t ldb,
                              float beta, float *c, int64_t ldc) {
  const Cblas &cb = TheCblas();
  const int64_t lim = 0x7fffffff;
  if (m > lim || n > lim || k > lim || lda > lim || ldb > lim || ldc > lim) {
    auto f = reinterpret_cast<FortranSgemmFn>(TheBlas().sgemm);
    if (f == nullptr) return 1;
    const char opa[2] = {ta, 0}, opb[2] = {tb, 0};
    f(opb, opa, &n, &m, &k, &alpha, b, &ldb, a, &lda, &beta, c, &ldc, 1, 1);
    return 0;
  }
  const int prev = cb.threads_local ? cb.threads_local(1) : 0;
  const int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
  cb.sgemm(kRowMajor, ta == 'T' ? kTrans : kNoTrans, tb == 'T' ? kTrans : kNoTrans,
           static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
           static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
  if (cb.threads_local) cb.threads_local(prev);
  return 0;
}
inline char *NonNull() {  // the address handed out for zero-size buffers
  static char byte[1];
  return byte;
}

inline void RecordFailure(const std::string &key, const std::string &message) {
  std::string clean = message;
  for (char &ch : clean) {
    if (ch == '\n' || ch == '\t') ch = ' ';
  }
  std::lock_guard<std::mutex> lock(Mutex());
  Failures() += key + "\t" + clean + "\n";
  FailureCount().fetch_add(1);
}

inline void RecordCall(const std::string &key, int64_t nanos) {
  DiscNanos().fetch_add(nanos);
  std::lock_guard<std::mutex> lock(Mutex());
  Stats &st = StatsByKey()[key];
  st.calls += 1;
  st.seconds += 1e-9 * static_cast<double>(nanos);
}

inline void RecordFallback(const std::string &key) {
  std::lock_guard<std::mutex> lock(Mutex());
  StatsByKey()[key].fallback_calls += 1;
}

// True once per injected failure (the test hook).
inline bool TakeInjected() { return Injected().load() > 0 && Injected().fetch_sub(1) > 0; }

inline std::atomic<int64_t> &InjectedWrong() {  // test hook: skew this many next results
  static std::atomic<int64_t> n{0};
  return n;
}
// True once per injected wrong result: the caller adds 1 to its first float output, so the
// accuracy guard has something to catch (the test hook).
inline bool TakeInjectedWrong() {
  return InjectedWrong().load() > 0 && InjectedWrong().fetch_sub(1) > 0;
}

// -- the accuracy guard (disc_core.bridge.accuracy says the same in Python) -------------

// How a failure record says the compiled cluster computed other values than the framework
// (disc_core.bridge.accuracy.ACCURACY_PREFIX): the Python side reports accuracy_mismatch.
constexpr const char *kAccuracyPrefix = "accuracy check: ";

// Element kinds the guard compares: floats within tolerance, the rest bit for bit.
enum ValueKind { kExact = 0, kF16 = 1, kBF16 = 2, kF32 = 3, kF64 = 4 };

inline double HalfToDouble(uint16_t h) {
  int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exp == 0) return sign * std::ldexp(static_cast<double>(mant), -24);
  if (exp == 31) return mant ? NAN : sign * INFINITY;
  return sign * std::ldexp(static_cast<double>(mant | 0x400), exp - 25);
}

inline double LoadAsDouble(int kind, const void *data, int64_t i) {
  switch (kind) {
    case kF16: return HalfToDouble(static_cast<const uint16_t *>(data)[i]);
    case kBF16: {
      uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t *>(data)[i]) << 16;
      float f;
      std::memcpy(&f, &bits, sizeof(f));
      return f;
    }
    case kF32: return static_cast<const float *>(data)[i];
    default: return static_cast<const double *>(data)[i];
  }
}

// Whether n elements of got match want: for floats |g - w| <= atol * scale + rtol * |w|
// (scale: want's largest finite magnitude, at least 1), NaN only where want has NaN and an
// infinity only where want has the same one; other kinds byte for byte. On a mismatch,
// *detail says how many elements differ and by how much.
inline bool Compare(int kind, int64_t elem_size, const void *got, const void *want, int64_t n,
                    double rtol, double atol, std::string *detail) {
  if (kind == kExact) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      bad += std::memcmp(static_cast<const char *>(got) + i * elem_size,
                         static_cast<const char *>(want) + i * elem_size, elem_size) != 0;
    }
    if (bad == 0) return true;
    *detail = "differs in " + std::to_string(bad) + " of " + std::to_string(n) + " elements";
    return false;
  }
  double scale = 1.0;
  for (int64_t i = 0; i < n; ++i) {
    double w = LoadAsDouble(kind, want, i);
    if (std::isfinite(w) && std::fabs(w) > scale) scale = std::fabs(w);
  }
  int64_t bad = 0;
  double worst = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    double g = LoadAsDouble(kind, got, i), w = LoadAsDouble(kind, want, i);
    bool ok;
    if (std::isnan(w) || std::isnan(g)) {
      ok = std::isnan(w) && std::isnan(g);
    } else if (!std::isfinite(w)) {
      ok = g == w;
    } else {
      ok = std::fabs(g - w) <= atol * scale + rtol * std::fabs(w);
    }
    if (!ok) {
      ++bad;
      double err = std::isfinite(g - w) ? std::fabs(g - w) : INFINITY;
      if (err > worst) worst = err;
    }
  }
  if (bad == 0) return true;
  char text[160];
  std::snprintf(text, sizeof(text),
                "differs from the framework in %lld of %lld elements, by up to %.3g "
                "(rtol %g, atol %g x %.3g)",
                static_cast<long long>(bad), static_cast<long long>(n), worst, rtol, atol,
                scale);
  *detail = text;
  return false;
}

// Which calls the guard compares: the first `first`, then every `every`-th (0: never).
inline bool CheckDue(int64_t call, int64_t first, int64_t every) {
  return call < first || (every > 0 && (call - first) % every == every - 1);
}

// Opens a module and checks its ABI; on failure returns null and says why in *error.
// The handle stays open: modules are shared by every op instance that names them.
inline RunFn OpenModule(const std::string &path, int64_t abi, std::string *error) {
  if (path.empty()) {
    *error = "no compiled module";
    return nullptr;
  }
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char *e = dlerror();
    *error = std::string("cannot load ") + path + ": " + (e ? e : "unknown error");
    return nullptr;
  }
  auto version = reinterpret_cast<AbiFn>(dlsym(handle, "disc_abi_version"));
  auto run = reinterpret_cast<RunFn>(dlsym(handle, "disc_run"));
  if (version == nullptr || run == nullptr) {
    *error = path + " is not a DISC module (no disc_run / disc_abi_version)";
    return nullptr;
  }
  if (version() != abi) {
    *error = "module ABI " + std::to_string(version()) + ", expected " + std::to_string(abi);
    return nullptr;
  }
  return run;
}

// Calls a module on n inputs (their data and, flattened, their dims) with the process's
// BLAS; outputs come from alloc(alloc_ctx, ...). Returns false and says why in *error.
inline bool Run(RunFn run, void *const *data, const int64_t *dims, int64_t n,
                disc_alloc_fn alloc, void *alloc_ctx, std::string *error,
                int64_t *profile = nullptr) {
  disc_env env;
  std::memset(&env, 0, sizeof(env));
  env.alloc = alloc;
  env.alloc_ctx = alloc_ctx;
  const Blas &blas = TheBlas();
  env.sgemm = blas.sgemm;
  env.dgemm = blas.dgemm;
  env.counters = nullptr;
  env.blas_threads_local = reinterpret_cast<int (*)(int)>(blas.threads_local);
  env.sgemm_rowmajor = blas.sgemm_rowmajor;
  env.profile = profile;
  char err[512] = {0};
  int64_t rc = run(data, dims, n, &env, err, sizeof(err));
  if (rc != 0) {
    *error = err[0] ? std::string(err) : "disc_run returned " + std::to_string(rc);
    return false;
  }
  return true;
}

}  // namespace disc_launch

// The C entry points a bridge's Python side calls, named <prefix>_set_blas and so on.
#define DISC_LAUNCH_EXPORTS(prefix)                                                       \
  extern "C" {                                                                            \
  void prefix##_set_blas(void *sgemm, void *dgemm, void *threads_local, void *rowmajor) {  \
    disc_launch::Blas &b = disc_launch::TheBlas();                                        \
    b.sgemm = sgemm;                                                                      \
    b.dgemm = dgemm;                                                                      \
    b.threads_local = threads_local;                                                      \
    b.sgemm_rowmajor = rowmajor;                                                          \
  }                                                                                       \
  /* f32 GEMMs through an LP64 cblas_sgemm from now on (set_blas again undoes it).    */ \
  void prefix##_use_cblas(void *cblas_sgemm, void *threads_local) {                       \
    disc_launch::Cblas &c = disc_launch::TheCblas();                                      \
    c.sgemm = reinterpret_cast<disc_launch::CblasSgemmFn>(cblas_sgemm);                   \
    c.threads_local = reinterpret_cast<int (*)(int)>(threads_local);                      \
    disc_launch::TheBlas().sgemm_rowmajor =                                               \
        cblas_sgemm ? reinterpret_cast<void *>(&disc_launch::CblasRowMajorSgemm) : nullptr; \
  }                                                                                       \
  /* Copies the queued failure records into buf and clears the queue; returns the     */ \
  /* length needed (call again with a larger buffer when it is not below len).         */ \
  int64_t prefix##_take_failures(char *buf, int64_t len) {                                \
    std::lock_guard<std::mutex> lock(disc_launch::Mutex());                               \
    std::string &f = disc_launch::Failures();                                             \
    int64_t need = static_cast<int64_t>(f.size());                                        \
    if (need < len) {                                                                     \
      std::memcpy(buf, f.data(), f.size());                                               \
      buf[need] = 0;                                                                      \
      f.clear();                                                                          \
    }                                                                                     \
    return need;                                                                          \
  }                                                                                       \
  /* Calls, fallback calls and seconds in DISC of one cluster key (0: never ran). */      \
  int64_t prefix##_stats(const char *key, int64_t *calls, int64_t *fallback_calls,        \
                         double *seconds) {                                               \
    std::lock_guard<std::mutex> lock(disc_launch::Mutex());                               \
    auto &all = disc_launch::StatsByKey();                                                \
    auto it = all.find(key);                                                              \
    if (it == all.end()) return 0;                                                        \
    *calls = it->second.calls;                                                            \
    *fallback_calls = it->second.fallback_calls;                                          \
    *seconds = it->second.seconds;                                                        \
    return 1;                                                                             \
  }                                                                                       \
  /* Failures recorded and nanoseconds spent in DISC modules so far, over every key. */   \
  void prefix##_totals(int64_t *failures, int64_t *disc_nanos) {                          \
    *failures = disc_launch::FailureCount().load();                                       \
    *disc_nanos = disc_launch::DiscNanos().load();                                        \
  }                                                                                       \
  /* Profile slots for the modules of one cluster key (NULL: off); op instances made   */ \
  /* after this call time their steps into them (see disc_launch::ProfileBuffer).       */ \
  void prefix##_set_profile(const char *key, void *buffer) {                              \
    std::lock_guard<std::mutex> lock(disc_launch::Mutex());                               \
    disc_launch::ProfileBuffers()[key] = static_cast<int64_t *>(buffer);                  \
  }                                                                                       \
  /* Test hook: the next n module runs fail as if the module had reported an error. */    \
  void prefix##_inject_failures(int64_t n) { disc_launch::Injected().store(n); }          \
  /* Test hook: the next n module runs return a skewed first output (the guard's prey). */ \
  void prefix##_inject_wrong_results(int64_t n) { disc_launch::InjectedWrong().store(n); } \
  }
