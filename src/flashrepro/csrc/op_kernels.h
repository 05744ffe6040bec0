// The forward ops' CUDA kernels: plan hits, else the ops' Python kernels.
#pragma once

#include <torch/csrc/Exceptions.h>
#include <torch/library.h>

#include "forward_registry.h"

namespace flashrepro_native {

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

inline Op& op_state() {
  static Op state;  // never destroyed: its Python objects outlive the interpreter's exit
  return state;
}

// The op's outputs: a plan hit's (o, lse), else its Python kernel's (lse undefined for the
// ops that return o alone).
inline std::pair<at::Tensor, at::Tensor> run_op(OpKind kind, const at::Tensor& q, const at::Tensor& k,
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

inline std::tuple<at::Tensor, at::Tensor> attention_lse_cuda(
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
inline void install_op(py::object registry, py::dict fallbacks) {
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

}  // namespace flashrepro_native
