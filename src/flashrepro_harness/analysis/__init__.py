"""Static analysis of the kernels' machine code: SASS counts, the analytic model, golden files.

Modules: :mod:`~flashrepro_harness.analysis.sass` (the ``sass`` subcommand and :func:`sass_report`),
:mod:`~flashrepro_harness.analysis.offline_compile` (compile a kernel for a target arch without a
GPU),
:mod:`~flashrepro_harness.analysis.disasm` (Triton's bundled cuobjdump, instruction classes),
:mod:`~flashrepro_harness.analysis.torch_sass` (torch's own FlashAttention-2 kernel),
:mod:`~flashrepro_harness.analysis.count_model` (the article's instruction-count model) and
:mod:`~flashrepro_harness.analysis.golden` (the committed counts).
"""
