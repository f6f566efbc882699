// disc_launch_<N>: runs one DISC-compiled cluster inside Paddle's executor.
//
// Paddle custom operators cannot declare a variable number of outputs (a paddle::Vec
// output needs an in-place input), so the library registers one op per output count,
// disc_launch_1 ... disc_launch_<DISC_MAX_OUTPUTS>, all backed by the one kernel below. The
// inputs are one paddle::Vec.
//
// The kernel dlopens the cluster's compiled module (an artifact's native/module.so) once
// per process, hands it the input tensors' buffers as they are (zero copy; a strided view
// is made contiguous first) and allocates every output with paddle::empty when the
// module asks (the disc_env alloc callback), so results are ordinary Paddle tensors
// written in place by the generated code.
//
// A failure (the module does not load, a run-time dim check fails) is queued for the
// Python side (disc_paddle_take_failures) and raised as an error whose text starts with
// DISC_LAUNCH_FAILED: the bridge catches it, drops that cluster from the program (its
// original Paddle ops run from then on), warns once and records the reason.
//
// disc_abi.h is generated at build time from disc_runtime.native.ABI_TYPES, the one
// definition of the C contract between modules and their callers.

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "disc_abi.h"
#include "paddle/extension.h"

namespace {

typedef int64_t (*disc_run_fn)(void *const *, const int64_t *, int64_t, const disc_env *,
                               char *, int64_t);
typedef int64_t (*disc_abi_fn)(void);

struct Module {
  disc_run_fn run = nullptr;
  std::string error;  // why run is null
};

struct Stats {
  int64_t calls = 0;
  double seconds = 0.0;
};

std::mutex g_mu;
std::unordered_map<std::string, Module> g_modules;  // by module path
std::unordered_map<std::string, Stats> g_stats;     // by cluster key
std::string g_failures;                             // "key\tmessage\n" not yet taken
std::atomic<int64_t> g_inject{0};                   // test hook: fail this many runs
void *g_sgemm = nullptr, *g_dgemm = nullptr, *g_blas_local = nullptr, *g_sgemm_rm = nullptr;
char g_nonnull[1];                                  // address for zero-size buffers

const Module &LoadModule(const std::string &path, int64_t abi) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_modules.find(path);
  if (it != g_modules.end()) return it->second;
  Module &m = g_modules[path];
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // kept open: modules are shared
  if (handle == nullptr) {
    const char *e = dlerror();
    m.error = "cannot load " + path + ": " + (e ? e : "unknown error");
    return m;
  }
  auto version = reinterpret_cast<disc_abi_fn>(dlsym(handle, "disc_abi_version"));
  auto run = reinterpret_cast<disc_run_fn>(dlsym(handle, "disc_run"));
  if (version == nullptr || run == nullptr) {
    m.error = path + " is not a DISC module (no disc_run / disc_abi_version)";
  } else if (version() != abi) {
    m.error = "module ABI " + std::to_string(version()) + ", expected " + std::to_string(abi);
  } else {
    m.run = run;
  }
  return m;
}

[[noreturn]] void Fail(const std::string &key, const std::string &message) {
  std::string clean = message;
  for (char &ch : clean) {
    if (ch == '\n' || ch == '\t') ch = ' ';
  }
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_failures += key + "\t" + clean + "\n";
  }
  PD_THROW("DISC_LAUNCH_FAILED cluster ", key, ": ", clean);
}

struct AllocState {
  const std::vector<int> *dtypes;
  paddle::Place place;
  std::vector<paddle::Tensor> outputs;
  std::vector<bool> allocated;
  std::string error;
};

void *Allocate(void *opaque, int64_t index, int64_t rank, const int64_t *shape) {
  auto *state = static_cast<AllocState *>(opaque);
  if (index < 0 || index >= static_cast<int64_t>(state->outputs.size())) {
    state->error = "output index " + std::to_string(index) + " out of range";
    return nullptr;
  }
  std::vector<int64_t> dims(shape, shape + rank);
  auto dtype = static_cast<paddle::DataType>((*state->dtypes)[index]);
  paddle::Tensor t = paddle::empty(dims, dtype, state->place);
  state->outputs[index] = t;
  state->allocated[index] = true;
  if (t.numel() == 0) return g_nonnull;
  return t.data();
}

std::vector<paddle::Tensor> Launch(const std::vector<paddle::Tensor> &inputs,
                                   const std::string &module_path, const std::string &key,
                                   int abi_version, const std::vector<int> &input_ranks,
                                   const std::vector<int> &out_ranks,
                                   const std::vector<int> &out_dtypes,
                                   const std::vector<int> &out_dims, int num_outputs) {
  if (g_inject.load() > 0 && g_inject.fetch_sub(1) > 0) {
    Fail(key, "injected runtime failure (test hook)");
  }
  const Module &m = LoadModule(module_path, abi_version);
  if (m.run == nullptr) Fail(key, m.error);
  const int n = static_cast<int>(inputs.size());
  if (static_cast<int>(input_ranks.size()) != n ||
      static_cast<int>(out_dtypes.size()) != num_outputs) {
    Fail(key, "the launch op's attributes do not match its inputs and outputs");
  }
  std::vector<paddle::Tensor> dense;  // keeps contiguous copies alive during the call
  dense.reserve(n);
  std::vector<void *> data(n);
  std::vector<int64_t> dims;
  for (int i = 0; i < n; ++i) {
    const paddle::Tensor &t = inputs[i];
    // the module reads every input's dims from one flat list: a rank it does not expect
    // would shift the dims of every later input, so it is an error here, not there
    if (static_cast<int>(t.shape().size()) != input_ranks[i]) {
      Fail(key, "input #" + std::to_string(i) + " has rank " +
                    std::to_string(t.shape().size()) + ", expected rank " +
                    std::to_string(input_ranks[i]));
    }
    dense.push_back(t.is_contiguous() ? t : t.contiguous());
    data[i] = dense.back().numel() == 0 ? static_cast<void *>(g_nonnull)
                                        : const_cast<void *>(dense.back().data());
    for (int64_t d : t.shape()) dims.push_back(d);
  }
  paddle::Place place = n > 0 ? inputs[0].place() : paddle::CPUPlace();
  AllocState state{&out_dtypes, place, std::vector<paddle::Tensor>(num_outputs),
                   std::vector<bool>(num_outputs, false), ""};
  disc_env env;
  std::memset(&env, 0, sizeof(env));
  env.alloc = &Allocate;
  env.alloc_ctx = &state;
  env.sgemm = g_sgemm;
  env.dgemm = g_dgemm;
  env.blas_threads_local = reinterpret_cast<int (*)(int)>(g_blas_local);
  env.sgemm_rowmajor = g_sgemm_rm;
  char err[512] = {0};
  auto start = std::chrono::steady_clock::now();
  int64_t rc = m.run(data.data(), dims.data(), n, &env, err, sizeof(err));
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!state.error.empty()) Fail(key, state.error);
  if (rc != 0) Fail(key, err[0] ? std::string(err) : "disc_run returned " + std::to_string(rc));
  for (int i = 0; i < num_outputs; ++i) {
    if (!state.allocated[i]) Fail(key, "the module did not produce output " + std::to_string(i));
  }
  {
    std::lock_guard<std::mutex> lock(g_mu);
    Stats &st = g_stats[key];
    st.calls += 1;
    st.seconds += secs;
  }
  return state.outputs;
}

// Result shapes as the program sees them: the static dims DISC knows, -1 for the others.
std::vector<std::vector<int64_t>> InferShapes(
    const std::vector<std::vector<int64_t>> &inputs, const std::string &module_path,
    const std::string &key, int abi_version, const std::vector<int> &input_ranks,
    const std::vector<int> &out_ranks, const std::vector<int> &out_dtypes,
    const std::vector<int> &out_dims) {
  std::vector<std::vector<int64_t>> shapes;
  size_t at = 0;
  for (int rank : out_ranks) {
    std::vector<int64_t> s;
    for (int d = 0; d < rank; ++d) s.push_back(at < out_dims.size() ? out_dims[at++] : -1);
    shapes.push_back(s);
  }
  return shapes;
}

std::vector<paddle::DataType> InferDtypes(
    const std::vector<paddle::DataType> &inputs, const std::string &module_path,
    const std::string &key, int abi_version, const std::vector<int> &input_ranks,
    const std::vector<int> &out_ranks, const std::vector<int> &out_dtypes,
    const std::vector<int> &out_dims) {
  std::vector<paddle::DataType> dtypes;
  for (int d : out_dtypes) dtypes.push_back(static_cast<paddle::DataType>(d));
  return dtypes;
}

template <int N>
std::vector<paddle::Tensor> LaunchN(const std::vector<paddle::Tensor> &inputs,
                                    const std::string &module_path, const std::string &key,
                                    int abi_version, const std::vector<int> &input_ranks,
                                    const std::vector<int> &out_ranks,
                                    const std::vector<int> &out_dtypes,
                                    const std::vector<int> &out_dims) {
  return Launch(inputs, module_path, key, abi_version, input_ranks, out_ranks, out_dtypes,
                out_dims, N);
}

}  // namespace

#define DISC_LAUNCH_ATTRS                                                              \
  {"module_path: std::string", "cluster_key: std::string", "abi_version: int",         \
   "input_ranks: std::vector<int>", "out_ranks: std::vector<int>",                     \
   "out_dtypes: std::vector<int>", "out_dims: std::vector<int>"}

#define DISC_LAUNCH_OP(N, ...)                                                         \
  PD_BUILD_OP(disc_launch_##N)                                                         \
      .Inputs({paddle::Vec("X")})                                                      \
      .Outputs({__VA_ARGS__})                                                          \
      .Attrs(DISC_LAUNCH_ATTRS)                                                        \
      .SetKernelFn(PD_KERNEL(LaunchN<N>))                                              \
      .SetInferShapeFn(PD_INFER_SHAPE(InferShapes))                                    \
      .SetInferDtypeFn(PD_INFER_DTYPE(InferDtypes));

// generated at build time: one DISC_LAUNCH_OP line per output count
#include "disc_launch_ops.inc"

extern "C" {

// The BLAS entry points modules call (disc_runtime.native.blas_functions).
void disc_paddle_set_blas(void *sgemm, void *dgemm, void *threads_local, void *sgemm_rowmajor) {
  g_sgemm = sgemm;
  g_dgemm = dgemm;
  g_blas_local = threads_local;
  g_sgemm_rm = sgemm_rowmajor;
}

// Copies the queued failure records ("key\tmessage\n"...) into buf and clears the queue;
// returns the length needed (call again with a larger buffer when it exceeds len).
int64_t disc_paddle_take_failures(char *buf, int64_t len) {
  std::lock_guard<std::mutex> lock(g_mu);
  int64_t need = static_cast<int64_t>(g_failures.size());
  if (need < len) {
    std::memcpy(buf, g_failures.data(), g_failures.size());
    buf[need] = 0;
    g_failures.clear();
  }
  return need;
}

// Calls and seconds in DISC of one cluster key so far (0 when it never ran).
int64_t disc_paddle_stats(const char *key, int64_t *calls, double *seconds) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_stats.find(key);
  if (it == g_stats.end()) return 0;
  *calls = it->second.calls;
  *seconds = it->second.seconds;
  return 1;
}

// Test hook: the next n module runs fail as if the module had reported an error.
void disc_paddle_inject_failures(int64_t n) { g_inject.store(n); }

}  // extern "C"
