"""The Qwen3 prefill benchmark (``flashrepro model``): Qwen3-0.6B-shaped prefill tokens/s,
flashrepro against torch SDPA's backends and FlashAttention 4 in transformers.

The model: transformers' ``Qwen3ForCausalLM`` in Qwen3-0.6B's shape (28 layers, hidden 1024,
16 query heads, 8 KV heads, head_dim 128, intermediate 3072, vocab 151936), random bfloat16
weights, nothing downloaded; one forward is a prefill, ``model(input_ids, use_cache=False)``
under ``torch.inference_mode``, logits included. Each implementation (:data:`IMPLS`) runs on
its own deep copy of the same weights. Shapes: B·L = ``--tokens`` (16384) for each L in
``--lengths`` (1024, 4096, 16384), plus the short prefill B=1, L=1024 where host cost shows.
Modes (:data:`MODES`): ``eager`` and ``compile`` (each decoder layer compiled).

Modules, one job each:

- :mod:`~flashrepro_harness.qwen3.build`: the config, the shapes, the model and its copies,
  the attention implementations (FA4's registered here);
- :mod:`~flashrepro_harness.qwen3.measure`: forwards, regional compilation, interleaved timing,
  the profiled forward;
- :mod:`~flashrepro_harness.qwen3.classify`: which attention kernel a profiled forward ran;
- :mod:`~flashrepro_harness.qwen3.tables`: rows, ratios, the table, the plot, ``model.md``,
  merging runs, the results files;
- :mod:`~flashrepro_harness.qwen3.generate` and
  :mod:`~flashrepro_harness.qwen3.generate_tables`: the generate() benchmark (``--generate``:
  prefill and decode tokens/s, packed-sequence prefill) and its rows, tables and files.

This module holds only the names the others share, so that the command's options load
without torch.
"""

from __future__ import annotations

IMPLS = ["frepro", "sdpa-cudnn", "sdpa-flash", "fa4"]
"""Every implementation the benchmark knows, in table order."""

SDPA_IMPLS = ("sdpa-cudnn", "sdpa-flash")
"""The torch SDPA backends; each row's ratio is to the fastest of them at that shape and mode."""

REFERENCE = "sdpa-flash"
"""Whose eager logits every implementation's are compared with."""

MODES = ("eager", "compile")
