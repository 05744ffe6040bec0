"""``python -m flashrepro_harness model``: Qwen3-0.6B-shaped prefill, tokens/s, flashrepro against
peers.

The model: transformers' ``Qwen3ForCausalLM`` built from :func:`qwen3_0_6b_config` in code
(28 layers, hidden 1024, 16 query heads, 8 KV heads, head_dim 128, intermediate 3072, vocab
151936: the shape of Qwen/Qwen3-0.6B's ``config.json``), random bfloat16 weights, nothing
downloaded. One forward is a prefill, ``model(input_ids, use_cache=False)`` under
``torch.inference_mode``, logits included.

Implementations (:data:`IMPLS`), each on its own deep copy of the same weights:
``frepro`` (:mod:`flashrepro.integrations.transformers`), ``sdpa-cudnn`` and ``sdpa-flash``
(``attn_implementation="sdpa"`` inside ``sdpa_kernel(CUDNN_ATTENTION)`` /
``sdpa_kernel(FLASH_ATTENTION)``), and ``fa4`` (``flash_attn.cute.flash_attn_func``, the CuTe
DSL FlashAttention-4, where it imports; registered here as :data:`FA4_NAME`).

Shapes: B·L = ``--tokens`` (16384) for each L in ``--lengths`` (1024, 4096, 16384), plus the
short prefill B=1, L=1024 where host cost shows. Modes: ``eager`` and ``compile``.

``compile`` is regional compilation (PyTorch's "regional compilation" recipe,
pytorch.org/tutorials/recipes/regional_compilation.html): every decoder layer
(``model.model.layers[i]``) is compiled, the embedding, the mask construction, the final norm
and the LM head stay eager (:func:`compile_layers`). The 28 layers share one code object, and
with their parameters as graph inputs dynamo compiles one layer and reuses its graph for the
other 27 (``graphs_compiled`` in each row counts the graphs). ``fullgraph=True`` first; where
that fails the layers are compiled again with graph breaks allowed and the row says so
(``fullgraph``, ``fullgraph_error``); ``compile_s`` is the wall time of the first forward.
SDPA's backend is chosen when the graph is traced, and dynamo does not guard on the
``sdpa_kernel`` state around a compiled call, so a graph traced under one backend would be
reused silently under another (both SDPA copies run the same layer code with equal guards).
The ``sdpa_kernel`` context is therefore traced inside each compiled layer call (dynamo bakes
it into the graph and guards on the backend, so each backend gets its own graph). The mask is
built eagerly, outside the compiled layers: transformers then skips it and passes
``is_causal=True`` as in the eager mode (whole-model compilation traced the mask construction,
where transformers materialises a boolean mask, which excludes the flash backend).

Which kernel ran: after the timing, one forward of every row is profiled
(``torch.profiler``, CUDA activity) and its kernels classified by :func:`attention_label`
(flashrepro's Triton/Gluon kernels, cuDNN, torch flash, mem-efficient, FA4's CuTe kernels,
math's softmax); the row records the attention kernels seen (µs per forward, calls), the top 5
kernels by GPU time, and ``backend_mismatch`` when the attention kernel is not the one the row
is named after (listed under the table, the row kept).

Timing: per forward, CUDA events recorded before and after it, forwards queued back to back
(no busy-wait, no synchronisation between them: host time that the GPU waits for is in the
interval, as in a user's program). ``--calls`` forwards per round, ``--rounds`` interleaved
rounds (order rotated each round), 2 warm-up forwards per implementation first; the reported
time is the median of the per-round medians, the ratio to the best SDPA backend that of the
medians, with the range of the ratios of each round's medians beside it (round r of every
implementation ran within seconds of each other): a ratio whose range holds 1 is a tie.
``GPU busy`` (:func:`gpu_busy`) says whether a row measures the GPU or the host. Each
implementation's logits are compared once per shape and mode with the eager ``sdpa-flash``
logits of the same weights (max |Δ|).

Outputs under ``--out`` (default ``reproduce/results/<gpu-key>/``): ``model.json`` (with
:func:`flashrepro_harness.env.capture`), ``model.md`` (tabulate) and ``model.png`` (matplotlib).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from tabulate import tabulate

from flashrepro_harness import env
from flashrepro_harness.bench.reproduce import SCHEMA, results_dir
from flashrepro_harness.outputs import replaced_on_success, write_atomic

IMPLS = ["frepro", "sdpa-cudnn", "sdpa-flash", "fa4"]
"""Every implementation the benchmark knows, in table order."""
SDPA_IMPLS = ("sdpa-cudnn", "sdpa-flash")
"""The torch SDPA backends; each row's ratio is to the fastest of them at that shape and mode."""
REFERENCE = "sdpa-flash"
"""Whose eager logits every implementation's are compared with."""
MODES = ("eager", "compile")
FA4_NAME = "fa4_cute"
"""The ``attn_implementation`` name of the FA4 peer (no "flash" in it: transformers 5.17 treats
such names as FlashAttention builds to import)."""

Timer = Callable[[Callable[[], object], int], list[float]]
"""``timer(fn, calls)`` -> per-call times in ms."""


@dataclass(frozen=True)
class Shape:
    """One prefill: ``batch`` sequences of ``seqlen`` tokens."""

    batch: int
    seqlen: int

    @property
    def tokens(self) -> int:
        return self.batch * self.seqlen


def qwen3_0_6b_config(num_layers: int = 28) -> Any:
    """Qwen3-0.6B's architecture as a ``transformers.Qwen3Config`` (values from
    Qwen/Qwen3-0.6B's ``config.json``); ``num_layers`` < 28 only for quick runs."""
    from transformers import Qwen3Config

    return Qwen3Config(vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                       num_hidden_layers=num_layers, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                       rms_norm_eps=1e-6, rope_theta=1_000_000.0, tie_word_embeddings=True,
                       attention_bias=False, use_sliding_window=False)


def shapes(lengths: list[int], tokens: int, short: bool) -> list[Shape]:
    """B = tokens / L for each L (B >= 1), then B=1, L=1024 when ``short`` (if not listed).

    Raises:
        ValueError: an L that does not divide ``tokens`` (B·L would not be ``tokens``).
    """
    out = []
    for length in lengths:
        if length > tokens or tokens % length:
            raise ValueError(f"--lengths: every L must divide --tokens={tokens}, got {length}")
        out.append(Shape(tokens // length, length))
    if short and Shape(1, 1024) not in out:
        out.append(Shape(1, 1024))
    return out


def fa4_available() -> str | None:
    """None when ``flash_attn.cute.flash_attn_func`` imports, else why not."""
    try:
        from flash_attn.cute import flash_attn_func  # noqa: F401
    except Exception as exc:  # ImportError, or a CUDA/CuTe DSL error at import
        return f"flash_attn.cute does not import: {type(exc).__name__}: {exc}"
    return None


def fa4_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                          value: torch.Tensor, attention_mask: torch.Tensor | None,
                          dropout: float = 0.0, scaling: float | None = None,
                          is_causal: bool | None = None, **kwargs: Any
                          ) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature, computed by FA4's ``flash_attn_func``.

    query (B, H, L_q, D), key/value (B, H_kv, L_k, D) arrive as transposed views of (B, L, H,
    D) tensors; FA4 takes that layout (and GQA, H_kv < H) directly:
    ``flash_attn_func(q, k, v, softmax_scale=..., causal=...)`` returns ``(out, lse)`` with out
    (B, L_q, H, D) (flash-attention ``flash_attn/cute/interface.py``; older versions return
    out alone). Returns (out, None).

    Raises:
        ValueError: an attention mask or dropout (the benchmark passes neither).
    """
    from flash_attn.cute import flash_attn_func

    if attention_mask is not None or dropout:
        raise ValueError(f"{FA4_NAME}: the benchmark's FA4 peer takes no mask and no dropout")
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    res = flash_attn_func(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                          softmax_scale=scaling, causal=query.shape[2] > 1 and bool(causal))
    return (res[0] if isinstance(res, tuple) else res), None


def register_fa4() -> None:
    """Register :func:`fa4_attention_forward` as :data:`FA4_NAME` (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register(FA4_NAME, fa4_attention_forward)


def _attn_name(impl: str) -> str:
    from flashrepro.integrations import transformers as fr_tf

    return {"frepro": fr_tf.NAME, "fa4": FA4_NAME}.get(impl, "sdpa")


SDPA_BACKENDS = {"sdpa-cudnn": "CUDNN_ATTENTION", "sdpa-flash": "FLASH_ATTENTION"}
"""The ``torch.nn.attention.SDPBackend`` member each SDPA implementation is pinned to."""


def _sdpa_backends(impl: str) -> list[Any] | None:
    """The ``sdpa_kernel`` backends of an SDPA implementation, None for the others."""
    from torch.nn.attention import SDPBackend

    name = SDPA_BACKENDS.get(impl)
    return None if name is None else [getattr(SDPBackend, name)]


def _context(impl: str) -> contextlib.AbstractContextManager:
    from torch.nn.attention import sdpa_kernel

    backends = _sdpa_backends(impl)
    return sdpa_kernel(backends) if backends is not None else contextlib.nullcontext()


def make_forward(model: torch.nn.Module, impl: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """``f(input_ids) -> logits`` of ``model`` (its own copy, attention set to ``impl``'s),
    inside ``impl``'s ``sdpa_kernel`` context. Compiled layers (:func:`compile_layers`) run
    compiled through it; the rest of the model runs eagerly."""
    model.set_attn_implementation(_attn_name(impl))

    def forward(input_ids: torch.Tensor) -> torch.Tensor:
        with _context(impl):
            return model(input_ids, use_cache=False).logits

    return forward


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """``model.model.layers`` (transformers' decoder models: Qwen3, Llama, ...).

    Raises:
        ValueError: ``model`` has no ``model.layers`` ModuleList.
    """
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ValueError(f"model: expected a decoder model with model.model.layers, got "
                         f"{type(model).__name__}")
    return layers


def _in_backend(call: Callable[..., Any], backends: list[Any]) -> Callable[..., Any]:
    """``call`` inside ``sdpa_kernel(backends)``: the context is traced with the call."""
    from torch.nn.attention import sdpa_kernel

    def call_in_backend(*args: Any, **kwargs: Any) -> Any:
        with sdpa_kernel(backends):
            return call(*args, **kwargs)

    return call_in_backend


def uncompile_layers(model: torch.nn.Module) -> None:
    """Undo :func:`compile_layers`: every decoder layer runs eagerly again."""
    for layer in decoder_layers(model):
        layer._compiled_call_impl = None


def compile_layers(model: torch.nn.Module, impl: str, fullgraph: bool,
                   backend: str | Callable[..., Any] = "inductor") -> None:
    """Regional compilation: each decoder layer's call compiled, the model's own forward not.

    What ``layer.compile(fullgraph=...)`` does (``nn.Module.compile`` sets
    ``_compiled_call_impl``, which ``nn.Module.__call__`` then runs), except that for an SDPA
    implementation the compiled function is the layer's call inside ``impl``'s
    ``sdpa_kernel`` context: dynamo traces that context into the graph (SDPAKernelVariable,
    torch/_dynamo/variables/ctx_manager.py), so the backend is fixed at trace time and guarded,
    whatever context surrounds the call later. Nothing is compiled until the first call.

    Args:
        model: a transformers decoder model (:func:`decoder_layers`), attention already set.
        impl: one of :data:`IMPLS`.
        fullgraph: passed to ``torch.compile``.
        backend: ``torch.compile``'s backend (tests pass "eager" or a graph-capturing one).
    """
    backends = _sdpa_backends(impl)
    for layer in decoder_layers(model):
        layer._compiled_call_impl = None
        call = layer._call_impl if backends is None else _in_backend(layer._call_impl, backends)
        layer._compiled_call_impl = torch.compile(call, fullgraph=fullgraph, backend=backend)


def _graphs_compiled() -> int:
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def compile_forward(model: torch.nn.Module, impl: str, ids: torch.Tensor,
                    backend: str | Callable[..., Any] = "inductor"
                    ) -> tuple[Callable[[torch.Tensor], torch.Tensor], dict[str, Any]]:
    """:func:`compile_layers` with ``fullgraph=True``, else with graph breaks allowed; compiled
    and run once on ``ids`` (B, L) int64 here.

    Returns:
        The forward (:func:`make_forward`) and what happened: ``fullgraph``, ``compile_s`` (wall
        seconds of the first forward, compilation included), ``graphs_compiled`` (dynamo graphs
        compiled for it: 1 when the 28 layers share one graph) and ``fullgraph_error``.
    """
    info: dict[str, Any] = {"compiled": "decoder layers (regional)"}
    fwd = make_forward(model, impl)
    for fullgraph in (True, False):
        compile_layers(model, impl, fullgraph, backend)
        graphs = _graphs_compiled()
        t0 = time.perf_counter()
        try:
            with torch.inference_mode():
                fwd(ids)
            if ids.is_cuda:
                torch.cuda.synchronize()
        except Exception as exc:
            if not fullgraph:
                raise
            # No dynamo reset here: it would drop the variants compiled before this one.
            info["fullgraph_error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
            continue
        info.update(fullgraph=fullgraph, compile_s=time.perf_counter() - t0,
                    graphs_compiled=_graphs_compiled() - graphs)
        return fwd, info
    raise AssertionError("unreachable")


ATTENTION_KERNELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("flashrepro-ws", ("attn_fwd_gluon_ws_kernel",)),
    ("flashrepro-gluon", ("attn_fwd_gluon_kernel",)),
    ("flashrepro-triton", ("attn_fwd_kernel",)),
    ("flashrepro-article", ("article_fwd_kernel",)),
    ("fa4", ("flash_attncute", "flash_attn.cute", "flashattentionforwardsm", "flash_attn_cute")),
    ("cudnn", ("cudnn", "sm90_flash", "sm100_flash", "fort_native_sdpa", "fmha_fprop")),
    ("flash", ("pytorch_flash", "flash_fwd")),
    ("efficient", ("fmha_cutlass", "efficient_attention", "attentionkernel")),
    ("math", ("softmax",)),
)
"""The attention-kernel classifier: (label, substrings of the lower-cased CUDA kernel name), the
first label with a matching substring wins, so the order matters (FA4's CuTe names contain
"flash_fwd", flashrepro's Gluon names contain neither). Sources of the names: flashrepro's own
kernels (``attn_fwd_gluon_ws_kernel`` in kernels/fwd_gluon_ws.py, ``attn_fwd_gluon_kernel``
in kernels/fwd_gluon.py, ``attn_fwd_kernel`` in kernels/fwd.py, ``article_fwd_kernel`` in
kernels/article.py); FA4's CuTe DSL kernels are named after the module and class
(``..._flash_attncuteflash_fwd_sm90FlashAttentionForwardSm90_...``); cuDNN's runtime-compiled
SDPA kernels (``cudnn_generated_fort_native_sdpa_sm90_...``, ``sm90_flash_fprop_wgmma_...``);
torch's FlashAttention-2 (``pytorch_flash::flash_fwd_kernel<...>``); the mem-efficient
backend's xFormers kernels (``fmha_cutlassF_bf16_aligned_64x128_rf_sm80``,
``attention_kernel_batched_impl<AttentionKernel<...>>``); the math backend is seen by its
softmax (``softmax_warp_forward``, ``cunn_SoftMaxForward``, inductor's
``triton_..._safe_softmax...``), the model having no other softmax: its bmm kernels are
GEMMs like the projections' and are not attributed, so a math row's attention µs are its
softmax's alone."""

EXPECTED_KERNEL = {"frepro": "flashrepro", "sdpa-cudnn": "cudnn", "sdpa-flash": "flash",
                   "fa4": "fa4"}
"""The label each implementation's attention must have (frepro: any ``flashrepro-*``)."""


def attention_label(name: str) -> str | None:
    """The :data:`ATTENTION_KERNELS` label of a CUDA kernel name, None when it is not an
    attention kernel (a GEMM, a norm, an elementwise kernel)."""
    low = name.lower()
    for label, needles in ATTENTION_KERNELS:
        if any(n in low for n in needles):
            return label
    return None


def kernel_summary(kernels: list[tuple[str, float]], impl: str, top: int = 5) -> dict[str, Any]:
    """Which attention kernels one profiled forward ran, and its ``top`` kernels by GPU time.

    Args:
        kernels: (CUDA kernel name, GPU µs) per kernel launch of one forward
            (:func:`kernel_events`).
        impl: the row's implementation (:data:`EXPECTED_KERNEL`).
        top: how many of the heaviest kernels to list.

    Returns:
        ``attention_kernel``: the labels seen, heaviest first, joined by "+" ("none" when no
        kernel matched); ``attention_kernels``: per kernel name matched, its label, ``us``
        (GPU µs in the forward) and ``calls``; ``attention_us``; ``gpu_us`` (every kernel);
        ``top_kernels``: name, µs, calls; ``backend_mismatch``: True when the labels seen are
        not exactly the expected one (for frepro: not only ``flashrepro-*`` labels).

    Raises:
        ValueError: ``impl`` not in :data:`EXPECTED_KERNEL`.
    """
    if impl not in EXPECTED_KERNEL:
        raise ValueError(f"impl: expected one of {', '.join(EXPECTED_KERNEL)}, got {impl!r}")
    by_name: dict[str, list[float]] = {}
    for name, us in kernels:
        by_name.setdefault(name, []).append(us)
    totals = sorted(((n, sum(v), len(v)) for n, v in by_name.items()), key=lambda t: -t[1])
    attention = [{"label": label, "name": n, "us": us, "calls": c} for n, us, c in totals
                 if (label := attention_label(n)) is not None]
    label_us: dict[str, float] = {}
    for a in attention:
        label_us[a["label"]] = label_us.get(a["label"], 0.0) + a["us"]
    labels = sorted(label_us, key=lambda k: -label_us[k])
    expected = EXPECTED_KERNEL[impl]
    ok = bool(labels) and all(lab == expected or lab.startswith(expected + "-")
                              for lab in labels)
    return {"attention_kernel": "+".join(labels) or "none", "attention_kernels": attention,
            "attention_us": sum(label_us.values()), "gpu_us": sum(t[1] for t in totals),
            "top_kernels": [{"name": n, "us": us, "calls": c} for n, us, c in totals[:top]],
            "backend_mismatch": not ok}


def kernel_events(events: Any) -> list[tuple[str, float]]:
    """(name, GPU µs) of the CUDA-side events of a profile (``prof.events()``: FunctionEvents
    whose ``device_type`` is CUDA are kernels, memcpys and memsets; their
    ``device_time_total`` is the µs the GPU spent in them)."""
    from torch.autograd import DeviceType

    return [(e.name, float(e.device_time_total)) for e in events
            if e.device_type == DeviceType.CUDA]


def profile_forward(fn: Callable[[], object]) -> list[tuple[str, float]]:
    """One call of ``fn`` (warmed up already) under ``torch.profiler`` (CUDA activity only);
    its kernels as :func:`kernel_events` gives them."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return kernel_events(prof.events())


def time_forwards(fn: Callable[[], object], calls: int) -> list[float]:
    """``calls`` back-to-back calls of ``fn``, CUDA events before and after each; ms per call."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
    torch.cuda.synchronize()
    for start, end in zip(starts, ends, strict=True):
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]


def interleave(fns: dict[str, Callable[[], object]], rounds: int, calls: int,
               timer: Timer = time_forwards) -> dict[str, list[float]]:
    """Each implementation's per-round median ms, rounds interleaved with rotated order."""
    names = list(fns)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            out[name].append(statistics.median(timer(fns[name], calls)))
    return out


def summarize(mode: str, shape: Shape, round_ms: dict[str, list[float]],
              max_abs_diff: dict[str, float], extra: dict[str, dict[str, Any]]
              ) -> list[dict[str, Any]]:
    """One row per implementation: ms (median of round medians), tokens/s, ratio to the best
    SDPA backend's tokens/s (None when no SDPA backend ran), max |Δ| to the reference."""
    rows = []
    for name, samples in round_ms.items():
        ms = statistics.median(samples)
        rows.append({"mode": mode, **asdict(shape), "impl": name, "ms": ms,
                     "round_medians_ms": samples, "tokens_per_s": shape.tokens / (ms * 1e-3),
                     "max_abs_diff_vs_ref": max_abs_diff.get(name), **extra.get(name, {})})
    best = best_sdpa(rows)
    for r in rows:
        r["ratio_to_best_sdpa"] = r["tokens_per_s"] / best["tokens_per_s"] if best else None
    return rows


def best_sdpa(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The SDPA backend's row with the most tokens/s among ``rows`` (one mode and shape), or
    None when no SDPA backend ran there."""
    sdpa = [r for r in rows if r["impl"] in SDPA_IMPLS]
    return max(sdpa, key=lambda r: r["tokens_per_s"]) if sdpa else None


def ratio_round_range(row: dict[str, Any], best: dict[str, Any] | None) -> list[float] | None:
    """[min, max] over rounds of ``row``'s tokens/s over ``best``'s in the same round (the
    ratio of ``best``'s round-median ms to ``row``'s), from the rows' ``round_medians_ms``.
    Round r of every implementation ran within seconds of the others (:func:`interleave`), so
    each round's ratio is a side-by-side measurement and their range is the ratio's noise: a
    slow phase of the host that falls on one round moves every implementation in it alike.
    None without ``best`` or rounds."""
    if best is None or not row.get("round_medians_ms"):
        return None
    paired = [b / m for b, m in zip(best["round_medians_ms"], row["round_medians_ms"],
                                    strict=True)]
    return [min(paired), max(paired)]


def ratio_round_ranges(rows: list[dict[str, Any]]) -> dict[tuple[Any, ...], list[float] | None]:
    """:func:`ratio_round_range` of every row against the best SDPA backend of its mode and
    shape, keyed by (mode, batch, seqlen, impl): what the tables show beside each ratio."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["mode"], r["batch"], r["seqlen"]), []).append(r)
    return {(*key, r["impl"]): ratio_round_range(r, best_sdpa(group))
            for key, group in groups.items() for r in group}


def gpu_busy(row: dict[str, Any]) -> float | None:
    """The fraction of a forward's wall time the GPU spent in kernels: the profiled forward's
    kernel µs (``gpu_us``, one stream, so kernels do not overlap) over the row's ms per
    forward. Near 1 the row measures the GPU; far below it the host, which the GPU waits for
    (the short prefill). None when the row was not profiled."""
    gpu_us = row.get("gpu_us")
    return None if gpu_us is None or not row.get("ms") else gpu_us / (row["ms"] * 1e3)


def table(rows: list[dict[str, Any]], fmt: str) -> str:
    """The results table: one line per (mode, shape, implementation)."""
    def num(v: float | None, spec: str) -> str:
        return "n/a" if v is None else format(v, spec)

    def kernel(r: dict[str, Any]) -> str:
        label = r.get("attention_kernel", "not profiled")
        return f"{label} (MISMATCH)" if r.get("backend_mismatch") else label

    ranges = ratio_round_ranges(rows)

    def spread(r: dict[str, Any]) -> str:
        lo_hi = ranges[(r["mode"], r["batch"], r["seqlen"], r["impl"])]
        return "n/a" if not lo_hi else f"{lo_hi[0]:.3f}-{lo_hi[1]:.3f}"

    body = [[r["mode"], r["batch"], r["seqlen"], r["impl"], kernel(r), num(r["ms"], ".2f"),
             num(r["tokens_per_s"] / 1e3, ".0f"), num(r["ratio_to_best_sdpa"], ".3f"),
             spread(r), num(gpu_busy(r), ".2f"), num(r["max_abs_diff_vs_ref"], ".3g")]
            for r in rows]
    headers = ["mode", "B", "L", "implementation", "attention kernel", "ms / forward",
               "k tokens/s", "/ best SDPA", "per-round range", "GPU busy",
               f"max |Δ logits| vs {REFERENCE}"]
    return tabulate(body, headers, tablefmt=fmt)


def mismatch_notes(rows: list[dict[str, Any]]) -> list[str]:
    """One line per row whose profiled attention kernel is not the one it is named after."""
    return [f"{r['mode']} B={r['batch']} L={r['seqlen']} {r['impl']}: timed "
            f"{r['attention_kernel']!r}, not {EXPECTED_KERNEL[r['impl']]!r} "
            f"(kernels: {', '.join(a['name'][:80] for a in r['attention_kernels']) or 'none'})"
            for r in rows if r.get("backend_mismatch")]


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    """Grouped bars: tokens/s per shape, one bar per implementation, one panel per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = [m for m in MODES if any(r["mode"] == m for r in rows)]
    fig, axes = plt.subplots(1, len(modes), figsize=(6.5 * len(modes), 4), squeeze=False)
    impls = [i for i in IMPLS if any(r["impl"] == i for r in rows)]
    for ax, mode in zip(axes.flat, modes, strict=True):
        sel = [r for r in rows if r["mode"] == mode]
        labels = list(dict.fromkeys(f"B={r['batch']} L={r['seqlen']}" for r in sel))
        width = 0.8 / max(1, len(impls))
        for i, impl in enumerate(impls):
            vals = {f"B={r['batch']} L={r['seqlen']}": r["tokens_per_s"] / 1e3
                    for r in sel if r["impl"] == impl}
            xs = [j + i * width for j, lab in enumerate(labels) if lab in vals]
            ax.bar(xs, [vals[lab] for lab in labels if lab in vals], width, label=impl)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(labels))], labels, fontsize=8)
        ax.set_ylabel("k tokens/s (prefill)")
        ax.set_title(mode)
        ax.grid(axis="y", alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    with replaced_on_success(path) as tmp:
        fig.savefig(tmp, dpi=110)


def max_abs_diff(a: torch.Tensor, b: torch.Tensor, chunk: int = 1024) -> float:
    """max |a - b| in float32, ``chunk`` tokens at a time (logits are B x L x 151936)."""
    a, b = a.flatten(0, -2), b.flatten(0, -2)
    return max((a[i:i + chunk].float() - b[i:i + chunk].float()).abs().max().item()
               for i in range(0, a.shape[0], chunk))


@contextlib.contextmanager
def _recompile_room(limit: int = 64) -> Iterator[None]:
    """Raise dynamo's per-code-object recompile limit (every implementation compiles the one
    decoder-layer code object, and graph breaks add entries)."""
    cfg = torch._dynamo.config
    attr = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
    old = getattr(cfg, attr)
    setattr(cfg, attr, max(old, limit))
    try:
        yield
    finally:
        setattr(cfg, attr, old)


def _forwards(models: dict[str, torch.nn.Module], mode: str, shape: Shape, ids: torch.Tensor,
              compile_impls: list[str] | None, progress: Callable[[str], None],
              errors: dict[str, str], ref: torch.Tensor | None = None
              ) -> tuple[dict[str, Callable[[], object]], dict[str, float], dict[str, Any]]:
    """Each implementation's forward on ``ids`` for ``mode`` (compiled where it says), run
    twice (the second call warm); with ``ref``, also each one's max |Δ| to it. A variant that
    fails is recorded in ``errors`` and left out. Returns (forwards, diffs, extra info)."""
    fns: dict[str, Callable[[], object]] = {}
    diffs: dict[str, float] = {}
    extra: dict[str, dict[str, Any]] = {}
    for impl, model in models.items():
        key = f"{mode} B={shape.batch} L={shape.seqlen} {impl}"
        if mode == "compile" and compile_impls is not None and impl not in compile_impls:
            continue
        try:
            fwd = make_forward(model, impl)
            if mode == "compile":
                fwd, extra[impl] = compile_forward(model, impl, ids)
                progress(f"{key}: layers compiled in {extra[impl]['compile_s']:.1f} s "
                         f"(fullgraph={extra[impl]['fullgraph']}, "
                         f"{extra[impl]['graphs_compiled']} graph(s))")
            with torch.inference_mode():
                out = fwd(ids)
                if ref is not None:
                    diffs[impl] = max_abs_diff(out, ref)
                del out
                fwd(ids)
            torch.cuda.synchronize()
        except Exception as exc:
            errors[key] = f"{type(exc).__name__}: {str(exc)[:500]}"
            progress(f"{key}: left out ({errors[key][:200]})")
            continue
        fns[impl] = (lambda f=fwd, x=ids: f(x))
    return fns, diffs, extra


def measure(models: dict[str, torch.nn.Module], modes: list[str], shape_list: list[Shape],
            rounds: int, calls: int, vocab: int, progress: Callable[[str], None] = print,
            checkpoint: Callable[[list[dict[str, Any]], dict[str, str]], None] | None = None,
            compile_impls: list[str] | None = None,
            profiler: Callable[[Callable[[], object]], list[tuple[str, float]]] = profile_forward
            ) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Rows of :func:`summarize` for every mode and shape, and the errors of variants that did
    not run ("mode B L impl" -> message); a failing variant is left out, never the run.
    ``checkpoint(rows, errors)`` is called after every (shape, mode), so that a run stopped by a
    time limit keeps what it measured. ``compile_impls``: the implementations timed in the
    compile mode (default: all of ``models``). Eager rows come first whatever the order of
    ``modes``.

    Which kernel ran: once every row is timed, each (mode, shape) is set up again and one
    forward of each row is profiled (``profiler``); :func:`kernel_summary` of it joins the row
    (``profile_error`` instead when profiling fails). Profiling comes last because a profiler
    session with CUDA activity leaves CUPTI attached after it ends (pytorch/pytorch#144455):
    in a run that profiled between shapes, the host-bound short prefill timed after it was
    twice as slow as in a run without the profiler (lab/2026-12-01-qwen3-prefill/)."""
    rows: list[dict[str, Any]] = []
    errors: dict[str, str] = {}
    gen = torch.Generator("cuda").manual_seed(0)
    inputs = {shape: torch.randint(0, vocab, (shape.batch, shape.seqlen), device="cuda",
                                   generator=gen) for shape in shape_list}
    order = [(mode, shape, ids) for mode in MODES if mode in modes  # eager first
             for shape, ids in inputs.items()]
    for mode, shape, ids in order:
        for model in models.values():
            uncompile_layers(model)  # the reference's logits and the eager rows: eager
        with torch.inference_mode():
            ref = make_forward(models[REFERENCE], REFERENCE)(ids)
        torch._dynamo.reset()
        fns, diffs, extra = _forwards(models, mode, shape, ids, compile_impls, progress, errors,
                                      ref=ref)
        del ref
        with torch.inference_mode():
            round_ms = interleave(fns, rounds, calls) if fns else {}
        rows += summarize(mode, shape, round_ms, diffs, extra)
        progress(table([r for r in rows if r["mode"] == mode
                        and (r["batch"], r["seqlen"]) == (shape.batch, shape.seqlen)], "simple"))
        if checkpoint is not None:
            checkpoint(rows, errors)
    by_key = {(r["mode"], r["batch"], r["seqlen"], r["impl"]): r for r in rows}
    for mode, shape, ids in order:  # the profiling pass (docstring)
        for model in models.values():
            uncompile_layers(model)
        torch._dynamo.reset()
        fns, _, _ = _forwards(models, mode, shape, ids, compile_impls, lambda _: None, {})
        with torch.inference_mode():
            for impl, fn in fns.items():
                row = by_key.get((mode, shape.batch, shape.seqlen, impl))
                if row is None:
                    continue
                try:
                    row.update(kernel_summary(profiler(fn), impl))
                except Exception as exc:
                    row["profile_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        if checkpoint is not None:
            checkpoint(rows, errors)
    return rows, errors


def _csv(choices: tuple[str, ...] | list[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        bad = [t for t in items if t not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated subset of {','.join(choices)}, got {text!r}")
        return list(dict.fromkeys(items))
    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--modes", type=_csv(MODES), default=list(MODES),
                        help="comma-separated: eager,compile (default: both; eager runs "
                             "first). compile: regional, torch.compile of each decoder layer "
                             "(one graph shared by the layers), the rest eager")
    parser.add_argument("--impls", type=_csv(IMPLS), default=list(IMPLS),
                        help=f"comma-separated subset of {','.join(IMPLS)} (default: all; fa4 "
                             "only where flash_attn.cute imports)")
    parser.add_argument("--compile-impls", type=_csv(IMPLS), default=None,
                        help="the implementations compiled in the compile mode (default: "
                             "those of --impls)")
    parser.add_argument("--lengths", type=env.positive_int, nargs="+",
                        default=[1024, 4096, 16384],
                        help="sequence lengths L, each dividing --tokens (default: %(default)s)")
    parser.add_argument("--tokens", type=env.positive_int, default=16384,
                        help="B·L per shape (default: %(default)s)")
    parser.add_argument("--no-short", dest="short", action="store_false",
                        help="leave out the single short prefill B=1, L=1024")
    parser.add_argument("--layers", type=env.positive_int, default=28,
                        help="decoder layers (default: %(default)s, Qwen3-0.6B's)")
    parser.add_argument("--rounds", type=env.positive_int, default=10,
                        help="interleaved rounds (default: %(default)s)")
    parser.add_argument("--calls", type=env.positive_int, default=3,
                        help="timed forwards per implementation per round (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=None, help="results folder")
    parser.add_argument("--merge", nargs="+", metavar="MODEL_JSON", default=None,
                        help="measure nothing: join these model.json files of one machine "
                             "and setup (e.g. an eager and a compile run) into one table")


def caption(environment: dict[str, Any], layers: int) -> str:
    """The table's and the plot's caption: GPU, versions, date, model and method."""
    gpu = environment["gpu"] or {}
    return (f"{gpu.get('name', 'no GPU')}, torch {environment['torch']}, transformers "
            f"{environment.get('transformers', '?')}, {environment['date']}; Qwen3-0.6B shape "
            f"({layers} layers, GQA 16/8, head_dim 128), random bf16 weights, prefill "
            "model(input_ids, use_cache=False); compile: each decoder layer compiled "
            "(regional); CUDA events per forward, back to back, median of per-round medians; "
            "attention kernel: the one torch.profiler saw in a forward of the row.")


def method(args: argparse.Namespace) -> dict[str, Any]:
    """The results' ``method`` block (timer, rounds, compile and kernel-check methods)."""
    return {"timer": "cuda-events per forward, back to back, no busy-wait",
            "rounds": args.rounds, "calls_per_round": args.calls,
            "warmup": 2, "statistic": "median of per-round medians",
            "tokens": args.tokens, "reference": REFERENCE,
            "compile": "regional: torch.compile of each decoder layer's "
                       "call (model.model.layers[i]), fullgraph=True, else "
                       "with graph breaks; SDPA rows trace sdpa_kernel inside "
                       "the compiled call; embedding, mask, final norm and "
                       "LM head eager; compile_s: first forward's wall s",
            "kernels": "one forward per row after the timing under "
                       "torch.profiler (CUDA activity); attention kernels "
                       "named by ATTENTION_KERNELS; backend_mismatch when "
                       "not the row's own",
            "attention_classifier": [[lab, list(n)] for lab, n in ATTENTION_KERNELS]}


def results_caption(results: dict[str, Any]) -> str:
    """:func:`caption` of a results dict, with the runs a merged one joins."""
    text = caption(results["env"], results["model"]["num_hidden_layers"])
    timing = results.get("method") or {}
    if timing.get("rounds"):
        text += (f" {timing['rounds']} interleaved rounds of {timing.get('calls_per_round', '?')}"
                 " forwards per implementation; per-round range: the ratio to the best SDPA "
                 "backend in each round; GPU busy: the profiled forward's kernel time over the "
                 "row's ms.")
    if results.get("merged_from"):
        text += " Rows from runs " + "; ".join(
            f"{m['modes']} at {m['date']} (commit {m.get('git_commit') or '?'})"
            for m in results["merged_from"]) + "."
    return text


def markdown(results: dict[str, Any]) -> str:
    """``model.md``: caption, table, backend mismatches, what was left out."""
    rows, errors, skipped = results["rows"], results["errors"], results["skipped"]
    notes = "".join(f"\n- {k}: {v}" for k, v in {**skipped, **errors}.items())
    mismatches = "".join(f"\n- **{n}**" for n in mismatch_notes(rows))
    return (f"# Qwen3 prefill\n\n{results_caption(results)}\n\n{table(rows, 'github')}\n"
            + (f"\n**Backend mismatch** (the row timed another attention kernel than its name "
               f"says):{mismatches}\n" if mismatches else "")
            + (f"\nLeft out:{notes}\n" if notes else ""))


def write_results(out_dir: Path, results: dict[str, Any]) -> None:
    """``model.json``, ``model.md`` (:func:`markdown`) and ``model.png`` (:func:`plot`, needs
    matplotlib: the ``plot`` extra) under ``out_dir`` from a results dict (what :func:`run`
    measures or :func:`merge` joins)."""
    write_atomic(out_dir / "model.json", json.dumps(results, indent=1, default=str) + "\n")
    write_atomic(out_dir / "model.md", markdown(results))
    if results["rows"]:
        plot(results["rows"], out_dir / "model.png", results_caption(results))


def _setup(env_block: dict[str, Any]) -> dict[str, Any]:
    """What runs must share to be merged into one table: the GPU model and the software."""
    return {"gpu": (env_block.get("gpu") or {}).get("name"),
            **{k: env_block.get(k) for k in ("torch", "triton", "transformers")}}


MERGE_KEYS = {"env": dict, "model": dict, "method": dict, "rows": list, "errors": dict,
              "skipped": dict}
"""Top-level keys of a ``model.json`` that :func:`merge` reads, with their JSON types."""
ROW_KEYS = ("mode", "batch", "seqlen", "impl")


def _check_part(part: Any, name: str) -> None:
    """Raise ValueError naming ``name`` where ``part`` is not a model results dict that
    :func:`merge` can read (schema, kind, :data:`MERGE_KEYS`, a GPU, rows of known modes)."""
    if not isinstance(part, dict) or part.get("schema") != SCHEMA or part.get("kind") != "model":
        got = ((part.get("schema"), part.get("kind")) if isinstance(part, dict)
               else type(part).__name__)
        raise ValueError(f"--merge: {name} is not a model results JSON (schema {SCHEMA!r}, "
                         f"kind 'model'; got {got!r})")
    for key, kind in MERGE_KEYS.items():
        if not isinstance(part.get(key), kind):
            raise ValueError(f"--merge: {name} has no {key!r} {kind.__name__}")
    if not isinstance(part["env"].get("gpu"), dict) or not part["env"]["gpu"].get("key"):
        raise ValueError(f"--merge: {name} has no env.gpu with a 'key' (a run without a GPU)")
    for n, r in enumerate(part["rows"]):
        if not isinstance(r, dict) or any(k not in r for k in ROW_KEYS):
            raise ValueError(f"--merge: {name} row {n} lacks one of {list(ROW_KEYS)}")
        if r["mode"] not in MODES:
            raise ValueError(f"--merge: {name} row {n} has mode {r['mode']!r}, not one of "
                             f"{list(MODES)}")


def merge(parts: list[dict[str, Any]], names: list[str] | None = None) -> dict[str, Any]:
    """Join the rows of several ``model.json`` results of one machine and setup (e.g. the
    eager and the compiled rows, measured in separate runs to fit a time limit) into one.

    Args:
        parts: the parsed ``model.json`` files.
        names: what the messages call each part (its path); default ``file <i>``.

    Raises:
        ValueError: not model results (a key of :data:`MERGE_KEYS` or of a row missing, an
            unknown mode), fewer than two, another GPU, software, model config or timing
            method, or a (mode, B, L, implementation) row in two of them; each names its file.
    """
    if len(parts) < 2:
        raise ValueError("--merge needs at least two model.json files")
    if names is not None and len(names) != len(parts):
        raise ValueError(f"merge: {len(names)} names for {len(parts)} parts")
    label = names or [f"file {i}" for i in range(len(parts))]
    for i, part in enumerate(parts):
        _check_part(part, label[i])
    first = parts[0]
    for i, part in enumerate(parts):
        want, got = _setup(first["env"]), _setup(part["env"])
        key = next((k for k in want if got[k] != want[k]), None)
        if key is not None:
            raise ValueError(f"--merge: {label[i]} has {key} {got[key]!r}, {label[0]} "
                             f"{want[key]!r}")
        if part["model"] != first["model"]:
            raise ValueError(f"--merge: {label[i]} has another model config than {label[0]}")
        if part["method"] != first["method"]:
            raise ValueError(f"--merge: {label[i]} has another timing method than {label[0]}")
    rows: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    for i, part in enumerate(parts):
        for r in part["rows"]:
            key = (r["mode"], r["batch"], r["seqlen"], r["impl"])
            if key in seen:
                raise ValueError(f"--merge: row {key} is in more than one file ({label[i]})")
            seen.add(key)
            rows.append(r)
    order = {m: i for i, m in enumerate(MODES)}
    rows.sort(key=lambda r: order[r["mode"]])  # stable: each run's shape order is kept
    return {**first, "rows": rows,
            "errors": {k: v for p in parts for k, v in p["errors"].items()},
            "skipped": {k: v for p in parts for k, v in p["skipped"].items()},
            "merged_from": [{"date": p["env"].get("date"), "git_commit": p["env"].get(
                "git_commit"), "modes": sorted({r["mode"] for r in p["rows"]})}
                for p in parts]}


def run(args: argparse.Namespace) -> int:
    if args.merge:
        try:
            parts = []
            for p in args.merge:
                try:
                    parts.append(json.loads(Path(p).read_text()))
                except (OSError, ValueError) as exc:  # JSONDecodeError is a ValueError
                    raise ValueError(f"--merge: {p}: {exc}") from exc
            merged = merge(parts, names=[str(p) for p in args.merge])
        except ValueError as exc:
            print(f"model: {exc}")
            return 2
        out_dir = results_dir(args.out, merged["env"]["gpu"]["key"])
        out_dir.mkdir(parents=True, exist_ok=True)
        write_results(out_dir, merged)
        print(table(merged["rows"], "simple"))
        print(f"model: wrote {env.shown_path(out_dir)}/model.{{json,md,png}}")
        return 0
    try:
        shape_list = shapes(args.lengths, args.tokens, args.short)
    except ValueError as exc:
        print(f"model: {exc}")
        return 2
    if not torch.cuda.is_available():
        print("model: the benchmark needs a CUDA GPU (torch sees none)")
        return 1 if env.require_gpu() else 0
    try:
        import transformers
        from transformers import Qwen3ForCausalLM

        import flashrepro.integrations.transformers  # noqa: F401  (registers "frepro")
    except ImportError as exc:
        print(f"model: needs transformers (pip install 'flashrepro[models]'): {exc}")
        return 2
    environment = env.capture()
    environment["transformers"] = transformers.__version__
    impls = list(args.impls)
    skipped: dict[str, str] = {}
    if "fa4" in impls and (why := fa4_available()):
        skipped["fa4"] = why
        impls.remove("fa4")
    elif "fa4" in impls:
        register_fa4()
    if REFERENCE not in impls:
        impls.append(REFERENCE)  # the logits reference runs (and is timed) always
    config = qwen3_0_6b_config(args.layers)
    torch.manual_seed(0)
    with torch.device("cuda"):
        base = Qwen3ForCausalLM(config).to(torch.bfloat16).eval()
    models = {impl: copy.deepcopy(base) for impl in impls}
    del base
    out_dir = results_dir(args.out, environment["gpu"]["key"])
    out_dir.mkdir(parents=True, exist_ok=True)
    text = caption(environment, args.layers)

    def write(rows: list[dict[str, Any]], errors: dict[str, str]) -> None:
        results = {"schema": SCHEMA, "kind": "model", "env": environment,
                   "model": config.to_dict(), "method": method(args),
                   "skipped": skipped, "errors": errors, "rows": rows}
        write_results(out_dir, results)

    with _recompile_room():
        rows, errors = measure(models, args.modes, shape_list, args.rounds, args.calls,
                               config.vocab_size, checkpoint=write,
                               compile_impls=args.compile_impls)
    write(rows, errors)
    print(table(rows, "simple"))
    print(text)
    for note in mismatch_notes(rows):
        print(f"BACKEND MISMATCH: {note}")
    for k, v in {**skipped, **errors}.items():
        print(f"left out: {k}: {v[:300]}")
    print(f"model: wrote {env.shown_path(out_dir)}/model.{{json,md,png}}")
    return 0
