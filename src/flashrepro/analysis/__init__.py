"""Static analysis of the kernels' machine code: SASS counts, the analytic model, golden files.

Modules: :mod:`~flashrepro.analysis.sass` (the ``sass`` subcommand and :func:`sass_report`),
:mod:`~flashrepro.analysis.offline_compile` (compile a kernel for a target arch without a GPU),
:mod:`~flashrepro.analysis.disasm` (Triton's bundled cuobjdump, instruction classes),
:mod:`~flashrepro.analysis.torch_sass` (torch's own FlashAttention-2 kernel),
:mod:`~flashrepro.analysis.model` (the article's instruction-count model) and
:mod:`~flashrepro.analysis.golden` (the committed counts).
"""
