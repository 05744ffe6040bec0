// DecodeRegistry: the eager decode's plan hit (see plan_launch.cpp).
#pragma once

#include "launch_common.h"

namespace flashrepro_native {

// Where a kernel parameter's per-call value comes from (Python's plan tail holds the rest).
enum Source : int {
  kQ = 0, kK, kV, kO,          // tensor addresses (the LSE and seqused_k slots take q's)
  kParts, kLocks,              // the stream's split buffers
  kStrideK0, kStrideK1, kStrideK2, kStrideK3,
  kMaxSeqlenK,
  kSources
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
    auto [qp, kp, vp] =
        registered_inputs("DecodeRegistry", q_obj, k_obj, v_obj, packed.size(), scale);
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

}  // namespace flashrepro_native
