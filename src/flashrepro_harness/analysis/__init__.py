"""Static analysis of the kernels' machine code: SASS counts (:mod:`.sass`), compiles without a
GPU (:mod:`.offline_compile`), disassembly (:mod:`.disasm`), torch's FA2 kernel
(:mod:`.torch_sass`), the count model (:mod:`.count_model`), golden files (:mod:`.golden`),
Nsight Compute (:mod:`.ncu`)."""
