// Plan hits without Python: flashrepro.native's C++ half, for two calls a model makes per
// layer, where the call's Python is what the step waits on.
//
// DecodeRegistry: the eager decode of transformers' DynamicCache. It holds what Python's
// kvcache_forward fixed for a checked call: its signature (launch_varlen._kvcache_signature,
// narrowed to that decode: seqused_k, out and the LSE absent, output (B, Lq, H, D)) and, per
// split count and Triton specialization of the caches' strides and length, the compiled decode
// kernel with its packed arguments.
//
// ForwardRegistry: the equal-length forward with a new output, the call of
// torch.ops.flashrepro.attention, attention_lse and attention_bshd in a compiled graph (their
// CUDA kernels are then this file's: install_op) and of transformers' eager prefill. It holds
// Python's launch plans (launch.forward, keyed by launch._signature with config None and out
// None) whose kernel it can launch: the arguments packed once, each TMA descriptor encoded per
// base address as Triton's fill_tma_descriptor encodes it.
//
// A call that matches a plan in every fact Python's plan hit checks launches here: the checks,
// the outputs' allocation, the argument packing and cuLaunchKernelEx, with no Python frame.
// Anything else returns None and Python takes the call (its full checks name every refusal),
// then registers the plan it made.
//
// Rules mirrored from Python, each named where it lives there:
// - the signature's tensor facts: exact torch.Tensor, not nested, strided, not negated, not a
//   ZeroTensor, no grad needed, no forward-mode tangent (_kvcache_signature and
//   launch._signature; an open dual level whose tensors carry no tangent launches the same
//   kernel with the same arguments there); flags bools, scale None or a float;
// - Triton 3.6's specialization of an int (direct.int_class: int32 range, == 1, % 16 == 0)
//   and of a pointer (16-byte alignment);
// - the int32 tile offsets (launch_varlen.kvcache_forward's fits_int32 unrolled);
// - the split count (_DecodeShape.splits);
// - Triton's launch (its CUDA launcher's _launch: grid, 32 * num_warps threads, PDL and
//   cooperative attributes, a TMA descriptor passed by value, the two scratch pointers last,
//   null without scratch) and its descriptor encoding (driver.c's fillTMADescriptor);
// - Triton's launch hooks: a registered enter or exit hook (Proton) sends the call to Python;
// - no CUDA-graph capture (counters.stream_buffers gives a capture fresh buffers), a current
//   CUDA context, torch's current GPU the tensors' (Triton launches on the current GPU).
#include <torch/extension.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/library.h>

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

namespace {

constexpr int64_t kInt32Limit = int64_t{1} << 31;
constexpr int kMaxSlots = 64;  // flashrepro.native.MAX_SLOTS

// Triton 3.6's specialization of a non-constexpr int, as flashrepro.direct.int_class.
int int_class(int64_t v) {
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

const Driver& driver() {
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

// Where a kernel parameter's per-call value comes from (Python's plan tail holds the rest).
enum Source : int {
  kQ = 0, kK, kV, kO,          // tensor addresses (the LSE and seqused_k slots take q's)
  kParts, kLocks,              // the stream's split buffers
  kStrideK0, kStrideK1, kStrideK2, kStrideK3,
  kMaxSeqlenK,
  kSources
};

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

struct Plan {
  // match: the split count, the specialization of k's strides and L_max, and the alignments
  int64_t splits = 0;
  std::array<int, 5> classes{};  // int_class of L_max, then of k's four strides
  std::array<bool, 4> aligned{};  // q, k, v, o: 16-byte aligned
  Kernel kernel;
  int slots = 0;
  std::array<uint64_t, kMaxSlots> packed{};  // every parameter, this call's values patched in
  std::vector<Patch> patches;
  CUstream stream = nullptr;  // the split buffers' stream (none without splits)
  at::Tensor parts, locks;    // held: Python's stream cache may replace its buffers
  py::object owner;           // what keeps the compiled kernel (its CUfunction) alive
};

struct Entry {
  // the signature
  at::ScalarType dtype;
  int device;
  std::array<int64_t, 4> q_sizes, q_strides;
  std::array<int64_t, 3> k_dims, v_dims;  // B, H_kv, D of k and of v
  bool causal;
  bool has_scale;
  double scale;
  std::optional<std::string> mma_switch;  // DISABLE_MMA_V3 when registered
  // _DecodeShape.splits
  std::array<int64_t, 2> split_limits;
  int64_t long_cache_keys;
  int64_t block_n, block_d;  // the signature's key tile and head-dim block
  std::vector<Plan> plans;
};

std::optional<std::string> mma_switch() {
  const char* value = std::getenv("DISABLE_MMA_V3");
  return value == nullptr ? std::nullopt : std::optional<std::string>(value);
}

// A tensor the signatures accept: dense, strided, 4-D, on a GPU, not negated, not a
// ZeroTensor, no grad needed, no forward-mode tangent.
bool usable(const at::Tensor& t) {
  if (!t.defined() || t.is_nested() || t.layout() != at::kStrided || !t.is_cuda() || t.is_neg()
      || t._is_zerotensor() || t.dim() != 4)
    return false;
  if (t.requires_grad() && at::GradMode::is_enabled()) return false;
  return !t._fw_grad(/*level=*/0).defined();
}

// A plain torch.Tensor (no subclass) the signatures accept, or nullptr.
const at::Tensor* plain(PyObject* obj) {
  if (!THPVariable_CheckExact(obj)) return nullptr;
  const at::Tensor& t = THPVariable_Unpack(obj);
  return usable(t) ? &t : nullptr;
}

bool aligned16(const at::Tensor& t) {
  return (reinterpret_cast<uintptr_t>(t.data_ptr()) & 15) == 0;
}

// Triton's launch enter and exit hooks both do nothing: each None or an empty HookChain
// (flashrepro.direct.hooks_idle).
bool hooks_idle(const py::object& knobs) {
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
std::optional<CUstream> launch_stream(int device) {
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
void launch(const Kernel& kernel, CUstream stream, void** params, const char* what) {
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

Kernel kernel_of(uintptr_t function, std::array<unsigned, 3> grid, unsigned num_warps,
                 unsigned shared, bool pdl, bool cooperative) {
  TORCH_CHECK(function != 0, "the kernel has no function handle");
  return {reinterpret_cast<CUfunction>(function), grid, 32 * num_warps, shared, pdl, cooperative};
}

class DecodeRegistry {
 public:
  explicit DecodeRegistry(py::object runtime_knobs) : knobs_(std::move(runtime_knobs)) {}

  // The output (B, Lq, H, D) of a plan hit, launched on the current stream; None otherwise.
  // ``causal`` must be a bool and ``scale`` None or a float, as the Python signature's.
  py::object decode(py::handle q_obj, py::handle k_obj, py::handle v_obj,
                    py::handle causal_obj, py::handle scale) {
    if (entries_.empty() || !hooks_idle(knobs_)) return py::none();
    if (causal_obj.ptr() != Py_True && causal_obj.ptr() != Py_False) return py::none();
    bool causal = causal_obj.ptr() == Py_True;
    const at::Tensor* qp = plain(q_obj.ptr());
    const at::Tensor* kp = plain(k_obj.ptr());
    const at::Tensor* vp = plain(v_obj.ptr());
    if (qp == nullptr || kp == nullptr || vp == nullptr) return py::none();
    const at::Tensor &q = *qp, &k = *kp, &v = *vp;
    bool has_scale = !scale.is_none();
    double scale_value = 0.0;
    if (has_scale) {
      if (!PyFloat_CheckExact(scale.ptr())) return py::none();
      scale_value = PyFloat_AS_DOUBLE(scale.ptr());
    }
    Entry* entry = find(q, k, v, causal, has_scale, scale_value);
    if (entry == nullptr) return py::none();
    int64_t l_max = k.size(2);
    if (l_max < 1 || v.size(2) != l_max || k.strides() != v.strides()) return py::none();
    auto ks = k.strides();
    int64_t limit = entry->split_limits[l_max >= entry->long_cache_keys];
    int64_t splits = limit == 1 ? 1 : std::min(limit, (l_max + entry->block_n - 1) /
                                                      entry->block_n);
    std::array<int, 5> classes{int_class(l_max), int_class(ks[0]), int_class(ks[1]),
                               int_class(ks[2]), int_class(ks[3])};
    Plan* plan = nullptr;
    for (Plan& p : entry->plans) {
      if (p.splits == splits && p.classes == classes && p.aligned[0] == aligned16(q)
          && p.aligned[1] == aligned16(k) && p.aligned[2] == aligned16(v)) {
        plan = &p;
        break;
      }
    }
    if (plan == nullptr) return py::none();
    // the kernel's int32 tile offsets (a stride of 2^31 or more was specialized as int64)
    if (!(l_max <= 1 || ks[2] >= kInt32Limit || ks[2] * entry->block_n < kInt32Limit)
        || !(q.size(3) <= 1 || ks[3] >= kInt32Limit || ks[3] * entry->block_d < kInt32Limit))
      return py::none();
    std::optional<CUstream> current = launch_stream(q.get_device());
    if (!current) return py::none();
    CUstream stream = *current;
    if (plan->splits > 1 && stream != plan->stream) return py::none();
    at::Tensor o = at::empty({q.size(0), q.size(2), q.size(1), q.size(3)}, q.options());
    if (aligned16(o) != plan->aligned[3]) return py::none();  // a custom allocator's
    std::array<uint64_t, kMaxSlots> packed = plan->packed;
    std::array<uint64_t, kSources> values{};
    values[kQ] = reinterpret_cast<uintptr_t>(q.data_ptr());
    values[kK] = reinterpret_cast<uintptr_t>(k.data_ptr());
    values[kV] = reinterpret_cast<uintptr_t>(v.data_ptr());
    values[kO] = reinterpret_cast<uintptr_t>(o.data_ptr());
    values[kParts] = plan->parts.defined() ? reinterpret_cast<uintptr_t>(plan->parts.data_ptr())
                                           : values[kQ];
    values[kLocks] = plan->locks.defined() ? reinterpret_cast<uintptr_t>(plan->locks.data_ptr())
                                           : values[kQ];
    for (int i = 0; i < 4; ++i) values[kStrideK0 + i] = static_cast<uint64_t>(ks[i]);
    values[kMaxSeqlenK] = static_cast<uint64_t>(l_max);
    for (const Patch& p : plan->patches) {
      if (p.width == 4) {
        auto narrow = static_cast<uint32_t>(values[p.source]);
        std::memcpy(&packed[p.slot], &narrow, 4);
      } else {
        packed[p.slot] = values[p.source];
      }
    }
    std::array<void*, kMaxSlots> params{};
    for (int i = 0; i < plan->slots; ++i) params[i] = &packed[i];
    launch(plan->kernel, stream, params.data(), "decode");
    ++launches_;
    return py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(o)));
  }

  // Register a plan Python made for a call of these tensors (see decode's rules).
  void add(py::handle q_obj, py::handle k_obj, py::handle v_obj, bool causal,
           py::handle scale, std::array<int64_t, 2> split_limits, int64_t long_cache_keys,
           int64_t block_n, int64_t block_d, int64_t splits, uintptr_t function,
           std::array<unsigned, 3> grid, unsigned num_warps, unsigned shared, bool pdl,
           bool cooperative, std::vector<uint64_t> packed, std::vector<std::array<int, 3>> patches,
           uintptr_t stream, std::optional<at::Tensor> parts,
           std::optional<at::Tensor> locks, py::object owner) {
    const at::Tensor* qp = plain(q_obj.ptr());
    const at::Tensor* kp = plain(k_obj.ptr());
    const at::Tensor* vp = plain(v_obj.ptr());
    TORCH_CHECK(qp && kp && vp, "DecodeRegistry.add: q, k, v must be plain 4-D CUDA tensors");
    TORCH_CHECK(packed.size() <= static_cast<size_t>(kMaxSlots), "DecodeRegistry.add: ",
                packed.size(), " parameter slots, at most ", kMaxSlots);
    TORCH_CHECK(scale.is_none() || PyFloat_CheckExact(scale.ptr()),
                "DecodeRegistry.add: scale must be None or a float");
    const at::Tensor &q = *qp, &k = *kp, &v = *vp;
    bool has_scale = !scale.is_none();
    double scale_value = has_scale ? PyFloat_AS_DOUBLE(scale.ptr()) : 0.0;
    Entry* entry = find(q, k, v, causal, has_scale, scale_value);
    if (entry == nullptr) {
      if (entries_.size() >= kMaxEntries) entries_.clear();
      Entry e;
      e.dtype = q.scalar_type();
      e.device = q.get_device();
      for (int i = 0; i < 4; ++i) {
        e.q_sizes[i] = q.size(i);
        e.q_strides[i] = q.stride(i);
      }
      e.k_dims = {k.size(0), k.size(1), k.size(3)};
      e.v_dims = {v.size(0), v.size(1), v.size(3)};
      e.causal = causal;
      e.has_scale = has_scale;
      e.scale = scale_value;
      e.mma_switch = mma_switch();
      e.split_limits = split_limits;
      e.long_cache_keys = long_cache_keys;
      e.block_n = block_n;
      e.block_d = block_d;
      entries_.push_back(std::move(e));
      entry = &entries_.back();
    }
    Plan p;
    int64_t l_max = k.size(2);
    auto ks = k.strides();
    p.splits = splits;
    p.classes = {int_class(l_max), int_class(ks[0]), int_class(ks[1]), int_class(ks[2]),
                 int_class(ks[3])};
    p.aligned = {aligned16(q), aligned16(k), aligned16(v), true};
    p.kernel = kernel_of(function, grid, num_warps, shared, pdl, cooperative);
    p.slots = static_cast<int>(packed.size());
    std::copy(packed.begin(), packed.end(), p.packed.begin());
    for (const auto& [slot, source, width] : patches) {
      TORCH_CHECK(slot >= 0 && slot < p.slots && source >= 0 && source < kSources
                  && (width == 4 || width == 8), "DecodeRegistry.add: bad patch");
      p.patches.push_back({slot, source, width});
    }
    p.stream = reinterpret_cast<CUstream>(stream);
    if (parts) p.parts = *parts;
    if (locks) p.locks = *locks;
    p.owner = std::move(owner);
    for (Plan& old : entry->plans) {  // a plan of the same match: replaced (a new stream's)
      if (old.splits == p.splits && old.classes == p.classes && old.aligned == p.aligned) {
        old = std::move(p);
        return;
      }
    }
    if (entry->plans.size() >= kMaxPlans) entry->plans.clear();
    entry->plans.push_back(std::move(p));
  }

  void clear() { entries_.clear(); }
  int64_t launches() const { return launches_; }
  size_t plans() const {
    size_t n = 0;
    for (const Entry& e : entries_) n += e.plans.size();
    return n;
  }

 private:
  static constexpr size_t kMaxEntries = 64;
  static constexpr size_t kMaxPlans = 64;

  Entry* find(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
              bool has_scale, double scale) {
    std::optional<std::string> mma;
    bool mma_read = false;
    for (Entry& e : entries_) {
      if (e.dtype != q.scalar_type() || k.scalar_type() != e.dtype
          || v.scalar_type() != e.dtype || e.device != q.get_device()
          || k.get_device() != e.device || v.get_device() != e.device || e.causal != causal
          || e.has_scale != has_scale || (has_scale && e.scale != scale))
        continue;
      bool same = true;
      for (int i = 0; i < 4 && same; ++i)
        same = q.size(i) == e.q_sizes[i] && q.stride(i) == e.q_strides[i];
      if (!same || k.size(0) != e.k_dims[0] || k.size(1) != e.k_dims[1]
          || k.size(3) != e.k_dims[2] || v.size(0) != e.v_dims[0] || v.size(1) != e.v_dims[1]
          || v.size(3) != e.v_dims[2])
        continue;
      if (!mma_read) {
        mma = mma_switch();
        mma_read = true;
      }
      if (mma != e.mma_switch) continue;
      return &e;
    }
    return nullptr;
  }

  py::object knobs_;
  std::vector<Entry> entries_;
  int64_t launches_ = 0;
};


// Where a forward kernel parameter's per-call value comes from.
enum ForwardSource : int {
  kFwdQ = 0, kFwdK, kFwdV, kFwdO, kFwdLse,  // tensor addresses, or descriptor bases
  kFwdCounters, kFwdScratch,                // the stream's buffers
  kForwardSources
};

// A TMA descriptor parameter: what driver.c's fillTMADescriptor encodes, but the base.
struct Descriptor {
  int slot = 0;    // the parameter's index
  int source = 0;  // ForwardSource of its base address
  CUtensorMapDataType type{};
  cuuint32_t rank = 0;
  std::array<cuuint64_t, 5> dims{};     // innermost first
  std::array<cuuint64_t, 5> strides{};  // bytes, of dims 1 .. rank - 1
  std::array<cuuint32_t, 5> box{};
  CUtensorMapSwizzle swizzle{};
  CUtensorMapFloatOOBfill fill{};
  std::unordered_map<uintptr_t, CUtensorMap> encoded;  // by base address
};

struct ForwardPlan {
  // the signature: launch._signature's key with config None and out None
  std::array<at::ScalarType, 3> dtypes{};
  int device = 0;
  std::array<std::array<int64_t, 4>, 3> sizes{}, strides{};  // q, k, v
  std::array<bool, 3> aligned{};
  bool causal = false, enable_gqa = false, return_lse = false, bshd = false, has_scale = false;
  double scale = 0.0;
  std::string causal_alignment;
  std::optional<std::string> mma;
  // the outputs
  std::vector<int64_t> out_sizes, out_strides, lse_sizes;
  at::Tensor lse_dummy;  // the LSE argument where none is stored (else one per call)
  // the launch
  Kernel kernel;
  std::vector<uint64_t> packed;  // one 8-byte slot per parameter, descriptors' unused
  std::vector<Patch> patches;    // pointers (source: ForwardSource)
  std::vector<Descriptor> descriptors;
  bool bound = false;            // takes the stream buffers below, of ``stream`` only
  CUstream stream = nullptr;
  at::Tensor counters, scratch;  // held: Python's stream cache may replace its buffers
  py::object owner;              // what keeps the compiled kernel (its CUfunction) alive
};

bool same_tensor_facts(const ForwardPlan& p, int i, const at::Tensor& t) {
  if (t.scalar_type() != p.dtypes[i] || t.get_device() != p.device || aligned16(t) != p.aligned[i])
    return false;
  for (int d = 0; d < 4; ++d)
    if (t.size(d) != p.sizes[i][d] || t.stride(d) != p.strides[i][d]) return false;
  return true;
}

std::optional<bool> flag(py::handle obj) {
  if (obj.ptr() == Py_True) return true;
  if (obj.ptr() == Py_False) return false;
  return std::nullopt;
}

class ForwardRegistry {
 public:
  explicit ForwardRegistry(py::object runtime_knobs) : knobs_(std::move(runtime_knobs)) {}

  // o (B, H, Lq, D) with the plan's strides, launched on the current stream, for a plan hit
  // of launch.forward(q, k, v, causal=..., scale=..., enable_gqa=..., causal_alignment=...,
  // return_lse=..., config=None, out=None, bshd=True); None otherwise. The flags must be
  // bools, ``scale`` None or a float and ``causal_alignment`` a str, as the Python key's.
  py::object forward(py::handle q_obj, py::handle k_obj, py::handle v_obj,
                     py::handle causal_obj, py::handle scale, py::handle enable_gqa_obj,
                     py::handle alignment_obj, py::handle return_lse_obj) {
    if (plans_.empty()) return py::none();
    std::optional<bool> causal = flag(causal_obj), enable_gqa = flag(enable_gqa_obj);
    std::optional<bool> return_lse = flag(return_lse_obj);
    if (!causal || !enable_gqa || !return_lse || !PyUnicode_CheckExact(alignment_obj.ptr()))
      return py::none();
    if (!scale.is_none() && !PyFloat_CheckExact(scale.ptr())) return py::none();
    std::optional<double> scale_value;
    if (!scale.is_none()) scale_value = PyFloat_AS_DOUBLE(scale.ptr());
    const at::Tensor* qp = plain(q_obj.ptr());
    const at::Tensor* kp = plain(k_obj.ptr());
    const at::Tensor* vp = plain(v_obj.ptr());
    if (qp == nullptr || kp == nullptr || vp == nullptr) return py::none();
    Py_ssize_t length = 0;
    const char* text = PyUnicode_AsUTF8AndSize(alignment_obj.ptr(), &length);
    if (text == nullptr) {
      PyErr_Clear();
      return py::none();
    }
    std::optional<std::pair<at::Tensor, at::Tensor>> out =
        serve(*qp, *kp, *vp, *causal, scale_value, *enable_gqa,
              std::string_view(text, static_cast<size_t>(length)), *return_lse, true);
    if (!out) return py::none();
    return py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(out->first)));
  }

  // (o, lse) of a plan hit of launch.forward(..., config=None, out=None, bshd=bshd) for
  // tensors the caller found plain (the GIL held: Triton's hooks are read), lse the unwritten
  // dummy without return_lse; nullopt where it is not a plan hit.
  std::optional<std::pair<at::Tensor, at::Tensor>> serve(
      const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
      std::optional<double> scale, bool enable_gqa, std::string_view alignment,
      bool return_lse, bool bshd) {
    if (plans_.empty() || !hooks_idle(knobs_)) return std::nullopt;
    bool has_scale = scale.has_value();
    double scale_value = scale.value_or(0.0);
    ForwardPlan* plan = nullptr;
    std::optional<std::string> mma;
    bool mma_read = false;
    for (ForwardPlan& p : plans_) {
      if (p.causal != causal || p.enable_gqa != enable_gqa || p.return_lse != return_lse
          || p.bshd != bshd || p.has_scale != has_scale || (has_scale && p.scale != scale_value)
          || p.causal_alignment != alignment || !same_tensor_facts(p, 0, q)
          || !same_tensor_facts(p, 1, k) || !same_tensor_facts(p, 2, v))
        continue;
      if (!mma_read) {
        mma = mma_switch();
        mma_read = true;
      }
      if (p.mma != mma) continue;
      plan = &p;
      break;
    }
    if (plan == nullptr) return std::nullopt;
    std::optional<CUstream> current = launch_stream(q.get_device());
    if (!current || (plan->bound && *current != plan->stream)) return std::nullopt;
    at::Tensor o = at::empty_strided(plan->out_sizes, plan->out_strides, q.options());
    at::Tensor lse = plan->return_lse
                         ? at::empty(plan->lse_sizes, q.options().dtype(at::kFloat))
                         : plan->lse_dummy;
    // a custom allocator's unaligned buffer: Triton would have specialized (or refused) it
    if (!aligned16(o) || !aligned16(lse)) return std::nullopt;
    std::array<uintptr_t, kForwardSources> values{};
    values[kFwdQ] = reinterpret_cast<uintptr_t>(q.data_ptr());
    values[kFwdK] = reinterpret_cast<uintptr_t>(k.data_ptr());
    values[kFwdV] = reinterpret_cast<uintptr_t>(v.data_ptr());
    values[kFwdO] = reinterpret_cast<uintptr_t>(o.data_ptr());
    values[kFwdLse] = reinterpret_cast<uintptr_t>(lse.data_ptr());
    if (plan->counters.defined())
      values[kFwdCounters] = reinterpret_cast<uintptr_t>(plan->counters.data_ptr());
    if (plan->scratch.defined())
      values[kFwdScratch] = reinterpret_cast<uintptr_t>(plan->scratch.data_ptr());
    std::array<uint64_t, kMaxSlots> packed{};
    std::copy(plan->packed.begin(), plan->packed.end(), packed.begin());
    for (const Patch& p : plan->patches) packed[p.slot] = values[p.source];
    std::array<void*, kMaxSlots> params{};
    for (size_t i = 0; i < plan->packed.size(); ++i) params[i] = &packed[i];
    for (Descriptor& d : plan->descriptors) {
      const CUtensorMap* map = encode(d, values[d.source]);
      if (map == nullptr) return std::nullopt;  // Python's encode names the driver's error
      params[d.slot] = const_cast<CUtensorMap*>(map);
    }
    launch(plan->kernel, *current, params.data(), "forward");
    ++launches_;
    return std::make_pair(std::move(o), std::move(lse));
  }

  // Register a plan Python made for a call of these arguments (see forward's rules).
  void add(py::handle q_obj, py::handle k_obj, py::handle v_obj, bool causal, py::handle scale,
           bool enable_gqa, std::string causal_alignment, bool return_lse, bool bshd,
           std::vector<int64_t> out_sizes, std::vector<int64_t> out_strides,
           std::vector<int64_t> lse_sizes, std::optional<at::Tensor> lse_dummy,
           uintptr_t function, std::array<unsigned, 3> grid, unsigned num_warps,
           unsigned shared, bool pdl, bool cooperative, std::vector<uint64_t> packed,
           std::vector<std::array<int, 2>> pointers,
           std::vector<std::tuple<int, int, int, std::vector<uint64_t>, std::vector<uint64_t>,
                                  std::vector<uint32_t>, int, int>> descriptors,
           uintptr_t stream, std::optional<at::Tensor> counters,
           std::optional<at::Tensor> scratch, py::object owner) {
    const at::Tensor* qp = plain(q_obj.ptr());
    const at::Tensor* kp = plain(k_obj.ptr());
    const at::Tensor* vp = plain(v_obj.ptr());
    TORCH_CHECK(qp && kp && vp, "ForwardRegistry.add: q, k, v must be plain 4-D CUDA tensors");
    TORCH_CHECK(packed.size() <= static_cast<size_t>(kMaxSlots), "ForwardRegistry.add: ",
                packed.size(), " parameter slots, at most ", kMaxSlots);
    TORCH_CHECK(scale.is_none() || PyFloat_CheckExact(scale.ptr()),
                "ForwardRegistry.add: scale must be None or a float");
    TORCH_CHECK(return_lse || lse_dummy, "ForwardRegistry.add: no LSE argument");
    ForwardPlan p;
    const at::Tensor* inputs[3] = {qp, kp, vp};
    for (int i = 0; i < 3; ++i) {
      const at::Tensor& t = *inputs[i];
      p.dtypes[i] = t.scalar_type();
      p.aligned[i] = aligned16(t);
      for (int d = 0; d < 4; ++d) {
        p.sizes[i][d] = t.size(d);
        p.strides[i][d] = t.stride(d);
      }
    }
    p.device = qp->get_device();
    p.causal = causal;
    p.enable_gqa = enable_gqa;
    p.return_lse = return_lse;
    p.bshd = bshd;
    p.has_scale = !scale.is_none();
    p.scale = p.has_scale ? PyFloat_AS_DOUBLE(scale.ptr()) : 0.0;
    p.causal_alignment = std::move(causal_alignment);
    p.mma = mma_switch();
    p.out_sizes = std::move(out_sizes);
    p.out_strides = std::move(out_strides);
    p.lse_sizes = std::move(lse_sizes);
    if (!return_lse) p.lse_dummy = *lse_dummy;
    p.kernel = kernel_of(function, grid, num_warps, shared, pdl, cooperative);
    p.packed = std::move(packed);
    int slots = static_cast<int>(p.packed.size());
    for (const auto& [slot, source] : pointers) {
      TORCH_CHECK(slot >= 0 && slot < slots && source >= 0 && source < kForwardSources,
                  "ForwardRegistry.add: bad pointer slot");
      p.patches.push_back({slot, source, 8});
    }
    for (const auto& [slot, source, type, dims, strides, box, swizzle, fill] : descriptors) {
      size_t rank = box.size();
      TORCH_CHECK(slot >= 0 && slot < slots && source >= 0 && source < kForwardSources
                  && rank >= 1 && rank <= 5 && dims.size() == rank
                  && strides.size() + 1 == rank, "ForwardRegistry.add: bad descriptor");
      Descriptor d;
      d.slot = slot;
      d.source = source;
      d.type = static_cast<CUtensorMapDataType>(type);
      d.rank = static_cast<cuuint32_t>(rank);
      std::copy(dims.begin(), dims.end(), d.dims.begin());
      std::copy(strides.begin(), strides.end(), d.strides.begin());
      std::copy(box.begin(), box.end(), d.box.begin());
      d.swizzle = static_cast<CUtensorMapSwizzle>(swizzle);
      d.fill = static_cast<CUtensorMapFloatOOBfill>(fill);
      p.descriptors.push_back(std::move(d));
    }
    p.bound = counters.has_value() || scratch.has_value();
    p.stream = reinterpret_cast<CUstream>(stream);
    if (counters) p.counters = *counters;
    if (scratch) p.scratch = *scratch;
    p.owner = std::move(owner);
    for (ForwardPlan& old : plans_) {  // the same signature: replaced (a new stream's)
      if (old.dtypes == p.dtypes && old.device == p.device && old.sizes == p.sizes
          && old.strides == p.strides && old.aligned == p.aligned && old.causal == p.causal
          && old.enable_gqa == p.enable_gqa && old.return_lse == p.return_lse
          && old.bshd == p.bshd          && old.has_scale == p.has_scale && old.scale == p.scale
          && old.causal_alignment == p.causal_alignment && old.mma == p.mma) {
        old = std::move(p);
        return;
      }
    }
    if (plans_.size() >= kMaxPlans) plans_.clear();
    plans_.push_back(std::move(p));
  }

  void clear() { plans_.clear(); }
  int64_t launches() const { return launches_; }
  size_t plans() const { return plans_.size(); }
  int64_t encodes() const { return encodes_; }

 private:
  static constexpr size_t kMaxPlans = 64;
  static constexpr size_t kMaxAddresses = 256;  // as flashrepro.direct.MAX_ADDRESSES

  // d's tensor map at ``base``: cached, or encoded as fillTMADescriptor does; null on failure.
  const CUtensorMap* encode(Descriptor& d, uintptr_t base) {
    auto found = d.encoded.find(base);
    if (found != d.encoded.end()) return &found->second;
    const Driver& drv = driver();
    if (drv.encode == nullptr) return nullptr;
    CUtensorMap map;
    const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
    CUresult status = drv.encode(&map, d.type, d.rank, reinterpret_cast<void*>(base),
                                 d.dims.data(), d.strides.data(), d.box.data(),
                                 element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, d.swizzle,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_128B, d.fill);
    if (status != CUDA_SUCCESS) return nullptr;
    if (d.encoded.size() >= kMaxAddresses) d.encoded.clear();
    ++encodes_;
    return &d.encoded.emplace(base, map).first->second;
  }

  py::object knobs_;
  std::vector<ForwardPlan> plans_;
  int64_t launches_ = 0, encodes_ = 0;
};


// The CUDA kernels of torch.ops.flashrepro.attention, attention_lse and attention_bshd, once
// Python installs them (install_op): a plan hit of the forward registry launches here, with
// no Python frame; any other call goes to the op's Python kernel, which checks it, launches
// it and registers its plan. The Python kernels (CompositeExplicitAutograd) keep every other
// device. Their errors reach the caller as Python raised them (a ValueError stays one).
enum OpKind : int { kAttention = 0, kAttentionLse, kAttentionBshd, kOps };
constexpr const char* kOpNames[kOps] = {"attention", "attention_lse", "attention_bshd"};

struct Op {
  ForwardRegistry* registry = nullptr;
  py::object* owner = nullptr;                // the registry's Python object, kept alive
  std::array<py::object*, kOps> fallbacks{};  // the ops' Python kernels
};

Op& op_state() {
  static Op state;  // never destroyed: its Python objects outlive the interpreter's exit
  return state;
}

// The op's outputs: a plan hit's (o, lse), else its Python kernel's (lse undefined for the
// ops that return o alone).
std::pair<at::Tensor, at::Tensor> run_op(OpKind kind, const at::Tensor& q, const at::Tensor& k,
                                         const at::Tensor& v, bool causal,
                                         std::optional<double> scale, bool enable_gqa,
                                         c10::string_view causal_alignment,
                                         std::optional<c10::string_view> config) {
  py::gil_scoped_acquire gil;  // the registry reads Triton's hooks; the fallback is Python
  const Op& state = op_state();
  if (!config && usable(q) && usable(k) && usable(v)) {
    // every op stores the LSE (ops._forward)
    std::optional<std::pair<at::Tensor, at::Tensor>> out = state.registry->serve(
        q, k, v, causal, scale, enable_gqa,
        std::string_view(causal_alignment.data(), causal_alignment.size()), true,
        kind == kAttentionBshd);
    if (out) return std::move(*out);
  }
  try {
    std::optional<std::string> config_text;
    if (config) config_text = std::string(*config);
    py::object out = (*state.fallbacks[kind])(q, k, v, causal, scale, enable_gqa,
                                              std::string(causal_alignment), config_text);
    if (kind == kAttentionLse) return out.cast<std::pair<at::Tensor, at::Tensor>>();
    return {out.cast<at::Tensor>(), at::Tensor()};
  } catch (py::error_already_set& error) {
    error.restore();
    python_error raised;
    raised.persist();
    throw raised;
  }
}

template <OpKind kind>
at::Tensor output_op(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                     std::optional<double> scale, bool enable_gqa,
                     c10::string_view causal_alignment, std::optional<c10::string_view> config) {
  return run_op(kind, q, k, v, causal, scale, enable_gqa, causal_alignment, config).first;
}

std::tuple<at::Tensor, at::Tensor> attention_lse_cuda(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
    std::optional<double> scale, bool enable_gqa, c10::string_view causal_alignment,
    std::optional<c10::string_view> config) {
  auto [o, lse] = run_op(kAttentionLse, q, k, v, causal, scale, enable_gqa, causal_alignment,
                         config);
  return {std::move(o), std::move(lse)};
}

// Make this file's kernels the three ops' CUDA kernels, serving ``registry`` (a
// ForwardRegistry) and falling back to ``fallbacks`` (each op's Python kernel, by op name).
// Later calls replace both.
void install_op(py::object registry, py::dict fallbacks) {
  Op& state = op_state();
  std::array<py::object*, kOps> next{};
  for (int i = 0; i < kOps; ++i) {
    TORCH_CHECK(fallbacks.contains(kOpNames[i]), "install_op: no Python kernel of ",
                kOpNames[i]);
    next[i] = new py::object(fallbacks[kOpNames[i]]);
  }
  state.registry = registry.cast<ForwardRegistry*>();
  delete state.owner;
  state.owner = new py::object(std::move(registry));
  for (int i = 0; i < kOps; ++i) {
    delete state.fallbacks[i];
    state.fallbacks[i] = next[i];
  }
  static torch::Library* library = [] {  // never destroyed, as the dispatcher's own
    auto* lib = new torch::Library(torch::Library::IMPL, "flashrepro", c10::DispatchKey::CUDA,
                                   __FILE__, __LINE__);
    lib->impl("attention", TORCH_FN(output_op<kAttention>));
    lib->impl("attention_lse", TORCH_FN(attention_lse_cuda));
    lib->impl("attention_bshd", TORCH_FN(output_op<kAttentionBshd>));
    return lib;
  }();
  (void)library;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "flashrepro's plan hits launched without Python per call (flashrepro.native)";
  py::class_<DecodeRegistry>(m, "DecodeRegistry")
      .def(py::init<py::object>())
      .def("decode", &DecodeRegistry::decode)
      .def("add", &DecodeRegistry::add)
      .def("clear", &DecodeRegistry::clear)
      .def_property_readonly("launches", &DecodeRegistry::launches)
      .def_property_readonly("plans", &DecodeRegistry::plans);
  m.attr("SOURCES") = py::dict(
      py::arg("q") = static_cast<int>(kQ), py::arg("k") = static_cast<int>(kK),
      py::arg("v") = static_cast<int>(kV), py::arg("o") = static_cast<int>(kO),
      py::arg("parts") = static_cast<int>(kParts), py::arg("locks") = static_cast<int>(kLocks),
      py::arg("stride_kb") = static_cast<int>(kStrideK0),
      py::arg("stride_kh") = static_cast<int>(kStrideK1),
      py::arg("stride_kn") = static_cast<int>(kStrideK2),
      py::arg("stride_kd") = static_cast<int>(kStrideK3),
      py::arg("max_seqlen_k") = static_cast<int>(kMaxSeqlenK));
  py::class_<ForwardRegistry>(m, "ForwardRegistry")
      .def(py::init<py::object>())
      .def("forward", &ForwardRegistry::forward)
      .def("add", &ForwardRegistry::add)
      .def("clear", &ForwardRegistry::clear)
      .def_property_readonly("launches", &ForwardRegistry::launches)
      .def_property_readonly("plans", &ForwardRegistry::plans)
      .def_property_readonly("encodes", &ForwardRegistry::encodes);
  m.def("install_op", &install_op);
  m.attr("FORWARD_SOURCES") = py::dict(
      py::arg("q") = static_cast<int>(kFwdQ), py::arg("k") = static_cast<int>(kFwdK),
      py::arg("v") = static_cast<int>(kFwdV), py::arg("o") = static_cast<int>(kFwdO),
      py::arg("lse") = static_cast<int>(kFwdLse),
      py::arg("counters") = static_cast<int>(kFwdCounters),
      py::arg("scratch") = static_cast<int>(kFwdScratch));
}
