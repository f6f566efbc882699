// DiscLaunch: runs one DISC-compiled cluster inside TensorFlow's executor.
//
// The kernel dlopens the cluster's compiled module (an artifact's native/module.so), hands
// it the input tensors' buffers as they are (zero copy) and allocates every output with
// TensorFlow's allocator when the module asks for it (the disc_env alloc callback), so the
// results are ordinary TensorFlow tensors written in place by the generated code.
//
// Any failure (the module does not load, a dim check fails, the allocator fails) makes this
// kernel run the cluster's original TensorFlow subgraph instead, the function named by the
// `fallback` attr, now and on every later call; the failure is queued for the Python side
// (disc_tf_take_failures), which warns once and records it in the coverage report.
//
// The accuracy guard (check_* attrs, set when the user asks for it): on the calls
// disc_launch::CheckDue picks, the kernel runs the fallback function too and compares each
// output with the dtype's tolerance (check_rtol/check_atol); a mismatch hands the cluster
// to the fallback for good, exactly like a failure, with an "accuracy check: " record.
//
// disc_abi.h is generated at build time from disc_runtime.abi.ABI_TYPES, the one
// definition of the C contract between modules and their callers; disc_launch_support.h
// (disc-runtime's, shared with the other bridges' launch ops) loads and calls modules and
// keeps the failure and stats bookkeeping the Python side reads (disc_tf_* entry points).

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "disc_abi.h"
#include "disc_launch_support.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace {

using tensorflow::AsyncOpKernel;
using tensorflow::FunctionLibraryRuntime;
using tensorflow::NameAttrList;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::DataType;
using tensorflow::Tensor;
using tensorflow::TensorShape;

int KindOf(DataType dtype) {
  switch (dtype) {
    case tensorflow::DT_HALF: return disc_launch::kF16;
    case tensorflow::DT_BFLOAT16: return disc_launch::kBF16;
    case tensorflow::DT_FLOAT: return disc_launch::kF32;
    case tensorflow::DT_DOUBLE: return disc_launch::kF64;
    default: return disc_launch::kExact;
  }
}

// Outputs are allocated as temporaries and handed to TensorFlow only once the module
// has succeeded: a module that fails after allocating some outputs (a run-time dim check
// in a later kernel) leaves them unset, so the fallback can set every output itself
// (setting an output twice is a fatal CHECK in TensorFlow).
struct AllocState {
  OpKernelContext *ctx;
  std::vector<Tensor> outputs;
  std::vector<bool> allocated;
  std::string error;
};

void *Allocate(void *opaque, int64_t index, int64_t rank, const int64_t *shape) {
  auto *state = static_cast<AllocState *>(opaque);
  TensorShape ts;
  for (int64_t i = 0; i < rank; ++i) {
    auto s = ts.AddDimWithStatus(shape[i]);
    if (!s.ok()) {
      state->error = std::string(s.message());
      return nullptr;
    }
  }
  if (index < 0 || index >= static_cast<int64_t>(state->outputs.size())) {
    state->error = "output index " + std::to_string(index) + " out of range";
    return nullptr;
  }
  Tensor *out = &state->outputs[index];
  auto s = state->ctx->allocate_temp(state->ctx->expected_output_dtype(static_cast<int>(index)),
                                     ts, out);
  if (!s.ok()) {
    state->error = "allocating output " + std::to_string(index) + ": " + std::string(s.message());
    return nullptr;
  }
  state->allocated[index] = true;
  if (out->NumElements() == 0) return disc_launch::NonNull();
  return const_cast<char *>(out->tensor_data().data());
}

class DiscLaunchOp : public AsyncOpKernel {
 public:
  explicit DiscLaunchOp(OpKernelConstruction *c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("module_path", &path_));
    OP_REQUIRES_OK(c, c->GetAttr("cluster_key", &key_));
    OP_REQUIRES_OK(c, c->GetAttr("fallback", &fallback_));
    OP_REQUIRES_OK(c, c->GetAttr("num_module_inputs", &num_module_inputs_));
    OP_REQUIRES_OK(c, c->GetAttr("input_ranks", &input_ranks_));
    OP_REQUIRES_OK(c, c->GetAttr("check_first", &check_first_));
    OP_REQUIRES_OK(c, c->GetAttr("check_every", &check_every_));
    OP_REQUIRES_OK(c, c->GetAttr("check_rtol", &check_rtol_));
    OP_REQUIRES_OK(c, c->GetAttr("check_atol", &check_atol_));
    int64_t abi = 0;
    OP_REQUIRES_OK(c, c->GetAttr("abi_version", &abi));
    run_ = disc_launch::OpenModule(path_, abi, &load_error_);
    profile_ = disc_launch::ProfileBuffer(key_);  // DISC_PROFILE: registered before the op
  }

  void ComputeAsync(OpKernelContext *ctx, DoneCallback done) override {
    if (!failed_.load(std::memory_order_acquire)) {
      std::string error;
      if (run_ == nullptr) {
        error = load_error_;
      } else {
        auto start = std::chrono::steady_clock::now();
        auto *outputs = new std::vector<Tensor>();
        if (RunModule(ctx, outputs, &error)) {
          disc_launch::RecordCall(key_, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                            std::chrono::steady_clock::now() - start).count());
          bool check = check_first_ > 0 || check_every_ > 0;
          if (check && disc_launch::CheckDue(calls_.fetch_add(1), check_first_, check_every_)) {
            RunChecked(ctx, outputs, std::move(done));
            return;
          }
          for (int i = 0; i < ctx->num_outputs(); ++i) ctx->set_output(i, (*outputs)[i]);
          delete outputs;
          done();
          return;
        }
        delete outputs;
      }
      if (!failed_.exchange(true)) disc_launch::RecordFailure(key_, error);
    }
    disc_launch::RecordFallback(key_);
    InvokeFallback(ctx, [ctx, done](const absl::Status &s, std::vector<Tensor> *rets) {
      if (!s.ok()) {
        ctx->SetStatus(s);
      } else {
        for (size_t i = 0; i < rets->size(); ++i) ctx->set_output(static_cast<int>(i), (*rets)[i]);
      }
      done();
    });
  }

 private:
  // The accuracy guard's call: the fallback runs too, each output is compared, and the
  // module's outputs are handed on when they all match, the framework's otherwise (and the
  // cluster runs its fallback from now on).
  void RunChecked(OpKernelContext *ctx, std::vector<Tensor> *outputs, DoneCallback done) {
    InvokeFallback(ctx, [this, ctx, outputs, done](const absl::Status &s,
                                                   std::vector<Tensor> *rets) {
      if (!s.ok()) {  // the framework's own ops failed: its error is the user's to see
        ctx->SetStatus(s);
        delete outputs;
        done();
        return;
      }
      std::string detail;
      for (int i = 0; i < ctx->num_outputs() && detail.empty(); ++i) {
        const Tensor &got = (*outputs)[i], &want = (*rets)[i];
        if (got.dtype() != want.dtype() || got.shape() != want.shape()) {
          detail = "output #" + std::to_string(i) + " is " + got.DebugString(0) +
                   ", the framework gives " + want.DebugString(0);
          break;
        }
        size_t k = static_cast<size_t>(i);
        double rtol = k < check_rtol_.size() ? check_rtol_[k] : 0.0;
        double atol = k < check_atol_.size() ? check_atol_[k] : 0.0;
        std::string why;
        if (!disc_launch::Compare(KindOf(got.dtype()), tensorflow::DataTypeSize(got.dtype()),
                                  got.tensor_data().data(), want.tensor_data().data(),
                                  got.NumElements(), rtol, atol, &why)) {
          detail = "output #" + std::to_string(i) + " (" +
                   tensorflow::DataTypeString(got.dtype()) + " " + got.shape().DebugString() +
                   ") " + why;
        }
      }
      const std::vector<Tensor> &chosen = detail.empty() ? *outputs : *rets;
      if (!detail.empty() && !failed_.exchange(true)) {
        disc_launch::RecordFailure(key_, disc_launch::kAccuracyPrefix + detail);
      }
      for (int i = 0; i < ctx->num_outputs(); ++i) ctx->set_output(i, chosen[i]);
      delete outputs;
      done();
    });
  }

  bool RunModule(OpKernelContext *ctx, std::vector<Tensor> *outputs, std::string *error) {
    if (disc_launch::TakeInjected()) {
      *error = "injected runtime failure (test hook)";
      return false;
    }
    const int n = static_cast<int>(num_module_inputs_);
    if (n > ctx->num_inputs() || static_cast<int>(input_ranks_.size()) != n) {
      *error = "num_module_inputs exceeds the op's inputs or input_ranks";
      return false;
    }
    // the module reads every input's dims from one flat list: a rank it does not expect
    // would shift the dims of every later input, so it is an error here, not there
    for (int i = 0; i < n; ++i) {
      if (ctx->input(i).dims() != input_ranks_[i]) {
        *error = "input #" + std::to_string(i) + " has shape " +
                 ctx->input(i).shape().DebugString() + ", expected rank " +
                 std::to_string(input_ranks_[i]);
        return false;
      }
    }
    std::vector<void *> data(n);
    std::vector<int64_t> dims;
    for (int i = 0; i < n; ++i) {
      const Tensor &t = ctx->input(i);
      data[i] = t.NumElements() == 0 ? static_cast<void *>(disc_launch::NonNull())
                                     : const_cast<char *>(t.tensor_data().data());
      for (int d = 0; d < t.dims(); ++d) dims.push_back(t.dim_size(d));
    }
    AllocState state{ctx, std::vector<Tensor>(ctx->num_outputs()),
                     std::vector<bool>(ctx->num_outputs(), false), ""};
    std::string run_error;
    bool ok = disc_launch::Run(run_, data.data(), dims.data(), n, &Allocate, &state, &run_error,
                               profile_);
    if (!state.error.empty()) {
      *error = state.error;
      return false;
    }
    if (!ok) {
      *error = run_error;
      return false;
    }
    for (int i = 0; i < ctx->num_outputs(); ++i) {
      if (!state.allocated[i]) {
        *error = "the module did not produce output " + std::to_string(i);
        return false;
      }
    }
    if (disc_launch::TakeInjectedWrong()) {  // test hook: a wrong first float element
      for (Tensor &t : state.outputs) {
        if (t.dtype() == tensorflow::DT_FLOAT && t.NumElements() > 0) {
          t.flat<float>()(0) += 1.0f;
          break;
        }
      }
    }
    *outputs = std::move(state.outputs);
    return true;
  }

  // Runs the cluster's original subgraph (the `fallback` function) on this call's inputs
  // and hands its status and results to `then` (which owns nothing of them).
  template <typename Then>
  void InvokeFallback(OpKernelContext *ctx, Then then) {
    FunctionLibraryRuntime *lib = ctx->function_library();
    if (lib == nullptr) {
      std::vector<Tensor> none;
      then(tensorflow::errors::Internal("DiscLaunch: no function library"), &none);
      return;
    }
    FunctionLibraryRuntime::Handle handle;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = handles_.find(lib);
      if (it == handles_.end()) {
        auto s = lib->Instantiate(fallback_.name(), tensorflow::AttrSlice(&fallback_.attr()),
                                  &handle);
        if (!s.ok()) {
          std::vector<Tensor> none;
          then(s, &none);
          return;
        }
        handles_[lib] = handle;
      } else {
        handle = it->second;
      }
    }
    std::vector<Tensor> args;
    args.reserve(ctx->num_inputs());
    for (int i = 0; i < ctx->num_inputs(); ++i) args.push_back(ctx->input(i));
    auto *rets = new std::vector<Tensor>();
    FunctionLibraryRuntime::Options opts;
    opts.rendezvous = ctx->rendezvous();
    opts.cancellation_manager = ctx->cancellation_manager();
    opts.collective_executor = ctx->collective_executor();
    opts.step_container = ctx->step_container();
    opts.runner = ctx->runner();
    lib->Run(opts, handle, args, rets, [rets, then](const absl::Status &s) {
      then(s, rets);
      delete rets;
    });
  }

  std::string path_, key_, load_error_;
  int64_t num_module_inputs_ = 0;
  std::vector<int64_t> input_ranks_;
  int64_t check_first_ = 0, check_every_ = 0;
  std::vector<float> check_rtol_, check_atol_;
  std::atomic<int64_t> calls_{0};
  NameAttrList fallback_;
  disc_launch::RunFn run_ = nullptr;
  int64_t *profile_ = nullptr;  // the module's step-time slots when profiling, else null
  std::atomic<bool> failed_{false};
  std::mutex mu_;
  std::unordered_map<FunctionLibraryRuntime *, FunctionLibraryRuntime::Handle> handles_;
};

}  // namespace

REGISTER_OP("DiscLaunch")
    .Input("args: Tin")
    .Output("results: Tout")
    .Attr("Tin: list(type) >= 0")
    .Attr("Tout: list(type) >= 0")
    .Attr("output_shapes: list(shape) >= 0")
    .Attr("module_path: string")
    .Attr("abi_version: int")
    .Attr("cluster_key: string")
    .Attr("fallback: func")
    .Attr("num_module_inputs: int >= 0")
    .Attr("input_ranks: list(int) >= 0")
    .Attr("check_first: int = 0")
    .Attr("check_every: int = 0")
    .Attr("check_rtol: list(float) = []")
    .Attr("check_atol: list(float) = []")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext *c) {
      std::vector<tensorflow::PartialTensorShape> shapes;
      TF_RETURN_IF_ERROR(c->GetAttr("output_shapes", &shapes));
      for (size_t i = 0; i < shapes.size(); ++i) {
        tensorflow::shape_inference::ShapeHandle h;
        TF_RETURN_IF_ERROR(c->MakeShapeFromPartialTensorShape(shapes[i], &h));
        c->set_output(static_cast<int>(i), h);
      }
      return absl::OkStatus();
    })
    .Doc("Runs a DISC-compiled cluster; on any failure, its original subgraph `fallback`.");

REGISTER_KERNEL_BUILDER(Name("DiscLaunch").Device(tensorflow::DEVICE_CPU), DiscLaunchOp);

DISC_LAUNCH_EXPORTS(disc_tf)
