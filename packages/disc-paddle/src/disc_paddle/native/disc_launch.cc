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
// Python side (disc_paddle_take_failures) and raised as an EnforceNotMet whose text has
// DISC_LAUNCH_FAILED: the bridge catches it, drops that cluster from the program (its
// original Paddle ops run from then on), warns once and records the reason.
//
// The accuracy guard: in the programs the bridge runs on the calls the guard checks, the
// cluster's original Paddle ops stay, and the launch op gets their results as extra inputs
// after the module's (one per module output: the expected values) together with each
// output's tolerances (check_rtol/check_atol, empty in a launch that does not check). It
// runs the module, compares every output with disc_launch::Compare and hands the module's
// outputs on when all match; a mismatch fails the op like any failure, with an
// "accuracy check: " record (the Python side reports accuracy_mismatch).
//
// disc_abi.h is generated at build time from disc_runtime.abi.ABI_TYPES, the one
// definition of the C contract between modules and their callers; disc_launch_support.h
// (disc-runtime's, shared with the other bridges' launch ops) loads and calls modules and
// keeps the failure and stats bookkeeping the Python side reads (disc_paddle_* entry points).

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "disc_abi.h"
#include "disc_launch_support.h"
#include "paddle/common/enforce.h"
#include "paddle/extension.h"

namespace {

struct Module {
  disc_launch::RunFn run = nullptr;
  std::string error;  // why run is null
};

std::mutex g_modules_mu;
std::unordered_map<std::string, Module> g_modules;  // by module path: kernels are functions

const Module &LoadModule(const std::string &path, int64_t abi) {
  std::lock_guard<std::mutex> lock(g_modules_mu);
  auto it = g_modules.find(path);
  if (it != g_modules.end()) return it->second;
  Module &m = g_modules[path];
  m.run = disc_launch::OpenModule(path, abi, &m.error);
  return m;
}

int KindOf(paddle::DataType dtype) {
  switch (dtype) {
    case paddle::DataType::FLOAT16: return disc_launch::kF16;
    case paddle::DataType::BFLOAT16: return disc_launch::kBF16;
    case paddle::DataType::FLOAT32: return disc_launch::kF32;
    case paddle::DataType::FLOAT64: return disc_launch::kF64;
    default: return disc_launch::kExact;
  }
}

[[noreturn]] void Fail(const std::string &key, const std::string &message) {
  disc_launch::RecordFailure(key, message);
  // Paddle's executor hands an EnforceNotMet on to Python as an error; any other
  // exception type (PD_THROW's) aborts the process when it crosses the executor
  PADDLE_THROW(common::errors::External("DISC_LAUNCH_FAILED cluster %s: %s", key.c_str(),
                                        message.c_str()));
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
  if (t.numel() == 0) return disc_launch::NonNull();
  return t.data();
}

// Test hook (disc_paddle_inject_wrong_results): adds 1 to the first element of the first
// float output, so the accuracy guard has something to catch.
void SkewFirstFloat(std::vector<paddle::Tensor> *outputs) {
  for (paddle::Tensor &t : *outputs) {
    if (t.numel() == 0) continue;
    if (t.dtype() == paddle::DataType::FLOAT32) {
      t.data<float>()[0] += 1.0f;
      return;
    }
    if (t.dtype() == paddle::DataType::FLOAT64) {
      t.data<double>()[0] += 1.0;
      return;
    }
  }
}

// The accuracy guard's comparison: each module output against the value the cluster's
// original Paddle ops computed; fails the op on the first output that differs.
void CheckOutputs(const std::string &key, const std::vector<paddle::Tensor> &got,
                  const std::vector<paddle::Tensor> &inputs, size_t first_expected,
                  const std::vector<float> &rtol, const std::vector<float> &atol) {
  for (size_t i = 0; i < got.size(); ++i) {
    paddle::Tensor want = inputs[first_expected + i];
    const paddle::Tensor &g = got[i];
    std::string where = "output #" + std::to_string(i);
    // an empty output has no values to differ in, often no buffer (reshape's xshape), and
    // its dtype is not always the one Paddle declares: batch_norm_'s reserve_space is
    // uint8 in the program, while Paddle 3.0's CPU kernel makes an empty float32 tensor
    if (g.numel() == 0 && want.numel() == 0 && g.shape() == want.shape()) continue;
    if (!want.initialized()) {  // not expected: conservatively, Paddle's ops run from now
      Fail(key, std::string(disc_launch::kAccuracyPrefix) + where +
                    ": the framework's value has no buffer to compare with");
    }
    if (g.dtype() != want.dtype() || g.shape() != want.shape()) {
      std::string gs, ws;
      for (int64_t d : g.shape()) gs += (gs.empty() ? "" : ", ") + std::to_string(d);
      for (int64_t d : want.shape()) ws += (ws.empty() ? "" : ", ") + std::to_string(d);
      Fail(key, std::string(disc_launch::kAccuracyPrefix) + where + " is " +
                    phi::DataTypeToString(g.dtype()) + " [" + gs + "], the framework gives " +
                    phi::DataTypeToString(want.dtype()) + " [" + ws + "]");
    }
    if (!want.is_contiguous()) want = want.contiguous();
    std::string why;
    if (!disc_launch::Compare(KindOf(g.dtype()), phi::SizeOf(g.dtype()), g.data(), want.data(),
                              g.numel(), rtol[i], atol[i], &why)) {
      std::string dims;
      for (int64_t d : g.shape()) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
      Fail(key, std::string(disc_launch::kAccuracyPrefix) + where + " (" +
                    phi::DataTypeToString(g.dtype()) + " [" + dims + "]) " + why);
    }
  }
}

std::vector<paddle::Tensor> Launch(const std::vector<paddle::Tensor> &inputs,
                                   const std::string &module_path, const std::string &key,
                                   int abi_version, const std::vector<int> &input_ranks,
                                   const std::vector<int> &out_ranks,
                                   const std::vector<int> &out_dtypes,
                                   const std::vector<int> &out_dims,
                                   const std::vector<float> &check_rtol,
                                   const std::vector<float> &check_atol, int num_outputs) {
  if (disc_launch::TakeInjected()) {
    Fail(key, "injected runtime failure (test hook)");
  }
  const Module &m = LoadModule(module_path, abi_version);
  if (m.run == nullptr) Fail(key, m.error);
  // a checking launch's inputs are the module's, then one expected value per output
  const bool check = !check_rtol.empty();
  const int n = static_cast<int>(input_ranks.size());
  const int expected = check ? num_outputs : 0;
  if (static_cast<int>(inputs.size()) != n + expected ||
      static_cast<int>(out_dtypes.size()) != num_outputs ||
      (check && (static_cast<int>(check_rtol.size()) != num_outputs ||
                 static_cast<int>(check_atol.size()) != num_outputs))) {
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
    if (!t.initialized()) {
      // a value Paddle keeps without its buffer (no_need_buffer: only its dims are used);
      // the bridge compiles such an input only into modules that never read its data
      dense.push_back(t);
      data[i] = static_cast<void *>(disc_launch::NonNull());
      for (int64_t d : t.shape()) dims.push_back(d);
      continue;
    }
    paddle::Tensor view = t;  // contiguous() is not const in Paddle 3.0
    dense.push_back(view.is_contiguous() ? view : view.contiguous());
    data[i] = dense.back().numel() == 0 ? static_cast<void *>(disc_launch::NonNull())
                                        : const_cast<void *>(dense.back().data());
    for (int64_t d : t.shape()) dims.push_back(d);
  }
  paddle::Place place = paddle::CPUPlace();
  for (int i = 0; i < n; ++i) {
    const paddle::Tensor &t = inputs[i];
    if (t.initialized()) {
      place = t.place();
      break;
    }
  }
  AllocState state{&out_dtypes, place, std::vector<paddle::Tensor>(num_outputs),
                   std::vector<bool>(num_outputs, false), ""};
  std::string run_error;
  auto start = std::chrono::steady_clock::now();
  bool ok = disc_launch::Run(m.run, data.data(), dims.data(), n, &Allocate, &state, &run_error);
  auto nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(
                   std::chrono::steady_clock::now() - start).count();
  if (!state.error.empty()) Fail(key, state.error);
  if (!ok) Fail(key, run_error);
  for (int i = 0; i < num_outputs; ++i) {
    if (!state.allocated[i]) Fail(key, "the module did not produce output " + std::to_string(i));
  }
  disc_launch::RecordCall(key, nanos);
  if (disc_launch::TakeInjectedWrong()) SkewFirstFloat(&state.outputs);
  if (check) CheckOutputs(key, state.outputs, inputs, static_cast<size_t>(n), check_rtol,
                          check_atol);
  return state.outputs;
}

// Result shapes as the program sees them: the static dims DISC knows, -1 for the others.
std::vector<std::vector<int64_t>> InferShapes(
    const std::vector<std::vector<int64_t>> &inputs, const std::string &module_path,
    const std::string &key, int abi_version, const std::vector<int> &input_ranks,
    const std::vector<int> &out_ranks, const std::vector<int> &out_dtypes,
    const std::vector<int> &out_dims, const std::vector<float> &check_rtol,
    const std::vector<float> &check_atol) {
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
    const std::vector<int> &out_dims, const std::vector<float> &check_rtol,
    const std::vector<float> &check_atol) {
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
                                    const std::vector<int> &out_dims,
                                    const std::vector<float> &check_rtol,
                                    const std::vector<float> &check_atol) {
  return Launch(inputs, module_path, key, abi_version, input_ranks, out_ranks, out_dtypes,
                out_dims, check_rtol, check_atol, N);
}

}  // namespace

#define DISC_LAUNCH_ATTRS                                                              \
  {"module_path: std::string", "cluster_key: std::string", "abi_version: int",         \
   "input_ranks: std::vector<int>", "out_ranks: std::vector<int>",                     \
   "out_dtypes: std::vector<int>", "out_dims: std::vector<int>",                      \
   "check_rtol: std::vector<float>", "check_atol: std::vector<float>"}

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

DISC_LAUNCH_EXPORTS(disc_paddle)
