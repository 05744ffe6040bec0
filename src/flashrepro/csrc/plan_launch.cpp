// Plan hits without Python: flashrepro.native's C++ half, for two calls a model makes per
// layer, where the call's Python is what the step waits on. This file binds the module; the
// registries and the ops' kernels are in the headers beside it.
//
// DecodeRegistry: the eager decode of transformers' DynamicCache. It holds what Python's
// kvcache_forward fixed for a checked call: its signature (launch_varlen._kvcache_signature,
// narrowed to that decode: seqused_k, out and the LSE absent, output (B, Lq, H, D)) and, per
// split count and Triton specialization of the caches' strides and length, the compiled decode
// kernel with its packed arguments.
//
// ForwardRegistry: the equal-length forward with a new output, the call of
// torch.ops.flashrepro.attention, attention_lse and attention_bshd in a compiled graph (their
// CUDA kernels are then op_kernels.h's: install_op) and of transformers' eager prefill. It holds
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
#include "decode_registry.h"
#include "forward_registry.h"
#include "op_kernels.h"

using namespace flashrepro_native;  // NOLINT: the module binds the headers' classes

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
