"""Static analysis of the kernels' machine code: SASS counts, the analytic model, golden files.

Modules: :mod:`~flashrepro.analysis.disasm` (Triton's bundled cuobjdump, instruction classes),
:mod:`~flashrepro.analysis.sass` (compile a kernel for a target arch without a GPU),
:mod:`~flashrepro.analysis.torch_sass` (torch's own FlashAttention-2 kernel),
:mod:`~flashrepro.analysis.model` (the article's instruction-count model),
:mod:`~flashrepro.analysis.golden` (the committed counts) and
:mod:`~flashrepro.analysis.sass_report` (the ``sass`` subcommand).
"""
