// What both registries share: Triton 3.6's int specialization, the driver's entry points,
// the tensor facts of a plan's signature, the launch environment and the launch itself.
#pragma once

#include <torch/extension.h>
#include <torch/csrc/autograd/python_variable.h>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <cuda.h>
#include <dlfcn.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace py = pybind11;

namespace flashrepro_native {

constexpr int64_t kInt32Limit = int64_t{1} << 31;
constexpr int kMaxSlots = 64;  // flashrepro.native.MAX_SLOTS

// Triton 3.6's specialization of a non-constexpr int, as flashrepro.direct.int_class.
inline int int_class(int64_t v) {
  return (v >= -kInt32Limit && v < kInt32Limit) + 4 * (v == 1) + 8 * (v % 16 == 0);
}

using LaunchEx = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);
using IsCapturing = CUresult (*)(CUstream, CUstreamCaptureStatus*);
using ErrorString = CUresult (*)(CUresult, const char**);
using CurrentContext = CUresult (*)(CUcontext*);
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

struct Driver {
  LaunchEx launch = nullptr;
  IsCapturing capturing = nullptr;
  ErrorString error = nullptr;
  CurrentContext context = nullptr;
  EncodeTiled encode = nullptr;
};

inline const Driver& driver() {
  static const Driver d = [] {
    Driver out;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (lib == nullptr) lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (lib != nullptr) {
      out.launch = reinterpret_cast<LaunchEx>(dlsym(lib, "cuLaunchKernelEx"));
      out.capturing = reinterpret_cast<IsCapturing>(dlsym(lib, "cuStreamIsCapturing"));
      out.error = reinterpret_cast<ErrorString>(dlsym(lib, "cuGetErrorString"));
      out.context = reinterpret_cast<CurrentContext>(dlsym(lib, "cuCtxGetCurrent"));
      out.encode = reinterpret_cast<EncodeTiled>(dlsym(lib, "cuTensorMapEncodeTiled"));
    }
    return out;
  }();
  return d;
}

struct Patch {
  int slot;    // the parameter's 8-byte slot
  int source;  // Source
  int width;   // 4 or 8 bytes
};

// How a compiled Triton kernel launches (its CUDA launcher's _launch).
struct Kernel {
  CUfunction function = nullptr;
  std::array<unsigned, 3> grid{};
  unsigned threads = 0, shared = 0;
  bool pdl = false, cooperative = false;
};

inline std::optional<std::string> mma_switch() {
  const char* value = std::getenv("DISABLE_MMA_V3");
  return value == nullptr ? std::nullopt : std::optional<std::string>(value);
}

// A tensor the signatures accept: dense, strided, 4-D, on a GPU, not negated, not a
// ZeroTensor, no grad needed, no forward-mode tangent.
inline bool usable(const at::Tensor& t) {
  if (!t.defined() || t.is_nested() || t.layout() != at::kStrided || !t.is_cuda() || t.is_neg()
      || t._is_zerotensor() || t.dim() != 4)
    return false;
  if (t.requires_grad() && at::GradMode::is_enabled()) return false;
  return !t._fw_grad(/*level=*/0).defined();
}

// A plain torch.Tensor (no subclass) the signatures accept, or nullptr.
inline const at::Tensor* plain(PyObject* obj) {
  if (!THPVariable_CheckExact(obj)) return nullptr;
  const at::Tensor& t = THPVariable_Unpack(obj);
  return usable(t) ? &t : nullptr;
}

inline bool aligned16(const at::Tensor& t) {
  return (reinterpret_cast<uintptr_t>(t.data_ptr()) & 15) == 0;
}

// A registry's add(): q, k, v plain tensors, the packed slots within kMaxSlots, the scale
// None or a float; ``who`` names the registry in the errors.
inline std::array<const at::Tensor*, 3> registered_inputs(const char* who, py::handle q,
                                                          py::handle k, py::handle v,
                                                          size_t slots, py::handle scale) {
  std::array<const at::Tensor*, 3> inputs{plain(q.ptr()), plain(k.ptr()), plain(v.ptr())};
  TORCH_CHECK(inputs[0] && inputs[1] && inputs[2], who,
              ".add: q, k, v must be plain 4-D CUDA tensors");
  TORCH_CHECK(slots <= static_cast<size_t>(kMaxSlots), who, ".add: ", slots,
              " parameter slots, at most ", kMaxSlots);
  TORCH_CHECK(scale.is_none() || PyFloat_CheckExact(scale.ptr()), who,
              ".add: scale must be None or a float");
  return inputs;
}

// Triton's launch enter and exit hooks both do nothing: each None or an empty HookChain
// (flashrepro.direct.hooks_idle).
inline bool hooks_idle(const py::object& knobs) {
  for (const char* name : {"launch_enter_hook", "launch_exit_hook"}) {
    py::object hook = knobs.attr(name);
    if (hook.is_none()) continue;
    py::object calls = py::getattr(hook, "calls", py::none());
    if (calls.is_none() || py::len(calls) != 0) return false;
  }
  return true;
}

// torch's current stream of GPU ``device`` where a launch may go from here: ``device`` is
// torch's current GPU (Triton launches on the current GPU), a CUDA context is current (a
// thread that made no CUDA runtime call yet has none: Python's path, whose Triton launcher
// makes the device's primary context current), and the stream is not capturing (a capture
// takes fresh stream buffers: counters.stream_buffers); nullopt otherwise.
inline std::optional<CUstream> launch_stream(int device) {
  const auto* guard = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  if (guard->getDevice().index() != device) return std::nullopt;
  auto stream = static_cast<CUstream>(guard->getStreamNativeHandle(
      guard->getStream(c10::Device(c10::DeviceType::CUDA, device))));
  const Driver& drv = driver();
  if (drv.launch == nullptr || drv.capturing == nullptr || drv.context == nullptr)
    return std::nullopt;
  CUcontext context = nullptr;
  if (drv.context(&context) != CUDA_SUCCESS || context == nullptr) return std::nullopt;
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (drv.capturing(stream, &capture) != CUDA_SUCCESS || capture != CU_STREAM_CAPTURE_STATUS_NONE)
    return std::nullopt;
  return stream;
}

// Launch with the GIL held (released around the driver call).
inline void launch(const Kernel& kernel, CUstream stream, void** params, const char* what) {
  CUlaunchAttribute attrs[2];
  unsigned count = 0;
  if (kernel.pdl) {
    attrs[count].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attrs[count++].value.programmaticStreamSerializationAllowed = 1;
  }
  if (kernel.cooperative) {
    attrs[count].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attrs[count++].value.cooperative = 1;
  }
  CUlaunchConfig config{};
  config.gridDimX = kernel.grid[0];
  config.gridDimY = kernel.grid[1];
  config.gridDimZ = kernel.grid[2];
  config.blockDimX = kernel.threads;
  config.blockDimY = 1;
  config.blockDimZ = 1;
  config.sharedMemBytes = kernel.shared;
  config.hStream = stream;
  config.attrs = attrs;
  config.numAttrs = count;
  const Driver& drv = driver();
  CUresult status;
  {
    py::gil_scoped_release release;  // as Triton's launcher: the launch may wait for room
    status = drv.launch(&config, kernel.function, params, nullptr);
  }
  if (status != CUDA_SUCCESS) {
    const char* text = "unknown error";
    if (drv.error != nullptr) drv.error(status, &text);
    throw std::runtime_error(std::string("flashrepro ") + what + " launch: " + text);
  }
}

inline Kernel kernel_of(uintptr_t function, std::array<unsigned, 3> grid, unsigned num_warps,
                 unsigned shared, bool pdl, bool cooperative) {
  TORCH_CHECK(function != 0, "the kernel has no function handle");
  return {reinterpret_cast<CUfunction>(function), grid, 32 * num_warps, shared, pdl, cooperative};
}

}  // namespace flashrepro_native
