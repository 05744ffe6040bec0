// ForwardRegistry: the equal-length forward's plan hit (see plan_launch.cpp).
#pragma once

#include "launch_common.h"

namespace flashrepro_native {

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

inline bool same_tensor_facts(const ForwardPlan& p, int i, const at::Tensor& t) {
  if (t.scalar_type() != p.dtypes[i] || t.get_device() != p.device || aligned16(t) != p.aligned[i])
    return false;
  for (int d = 0; d < 4; ++d)
    if (t.size(d) != p.sizes[i][d] || t.stride(d) != p.strides[i][d]) return false;
  return true;
}

inline std::optional<bool> flag(py::handle obj) {
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
    std::array<const at::Tensor*, 3> inputs =
        registered_inputs("ForwardRegistry", q_obj, k_obj, v_obj, packed.size(), scale);
    TORCH_CHECK(return_lse || lse_dummy, "ForwardRegistry.add: no LSE argument");
    ForwardPlan p;
    for (int i = 0; i < 3; ++i) {
      const at::Tensor& t = *inputs[i];
      p.dtypes[i] = t.scalar_type();
      p.aligned[i] = aligned16(t);
      for (int d = 0; d < 4; ++d) {
        p.sizes[i][d] = t.size(d);
        p.strides[i][d] = t.stride(d);
      }
    }
    p.device = inputs[0]->get_device();
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

}  // namespace flashrepro_native
