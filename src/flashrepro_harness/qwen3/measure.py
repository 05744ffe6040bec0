"""Forwards, regional compilation, timing and the profiled forward of the benchmark.

``compile`` is regional compilation (PyTorch's "regional compilation" recipe,
pytorch.org/tutorials/recipes/regional_compilation.html): every decoder layer
(``model.model.layers[i]``) is compiled, the embedding, the mask construction, the final norm
and the LM head stay eager (:func:`compile_layers`). The 28 layers of an implementation share
one code object (each implementation its own), and with their parameters as graph inputs
dynamo compiles one layer and reuses its graph for the other 27 (``graphs_compiled`` in each
row counts the graphs). ``fullgraph=True`` first; where that fails the layers are compiled
again with graph breaks allowed and the row says so (``fullgraph``, ``fullgraph_error``);
``compile_s`` is the wall time of the first forward. A compile row that timed eager layers is
flagged (:func:`~flashrepro_harness.qwen3.tables.not_compiled`). SDPA's backend is chosen
when the graph is traced, and dynamo does not guard on the ``sdpa_kernel`` state around a
compiled call, so a graph traced under one backend would be reused silently under another
(both SDPA copies would otherwise run one code object with equal guards).
The ``sdpa_kernel`` context is therefore traced inside each compiled layer call (dynamo bakes
it into the graph and guards on the backend, so each backend gets its own graph). The mask is
built eagerly, outside the compiled layers: transformers then skips it and passes
``is_causal=True`` as in the eager mode (whole-model compilation traced the mask construction,
where transformers materialises a boolean mask, which excludes the flash backend).

Timing: per forward, CUDA events recorded before and after it, forwards queued back to back
(no busy-wait, no synchronisation between them: host time that the GPU waits for is in the
interval, as in a user's program). ``--calls`` forwards per round, ``--rounds`` interleaved
rounds (order rotated each round), 2 warm-up forwards per implementation first. Each
implementation's logits are compared once per shape and mode with the eager ``sdpa-flash``
logits of the same weights (max |Δ|).

Which kernel ran: after the timing, one forward of every row is profiled (``torch.profiler``,
CUDA activity) and its kernels classified (:mod:`flashrepro_harness.qwen3.classify`).
"""

from __future__ import annotations

import contextlib
import statistics
import time
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

from flashrepro_harness.qwen3 import MODES, REFERENCE
from flashrepro_harness.qwen3.build import Shape, decoder_layers, make_forward, sdpa_backends
from flashrepro_harness.qwen3.classify import ATTENTION_KERNELS, kernel_events, kernel_summary
from flashrepro_harness.qwen3.tables import summarize, table

Timer = Callable[[Callable[[], object], int], list[float]]
"""``timer(fn, calls)`` -> per-call times in ms."""


def _layer_call(call: Callable[..., Any], backends: list[Any] | None) -> Callable[..., Any]:
    """``call``, inside ``sdpa_kernel(backends)`` unless ``backends`` is None: the context is
    traced with the call."""
    from torch.nn.attention import sdpa_kernel

    def layer_call(*args: Any, **kwargs: Any) -> Any:
        if backends is None:
            return call(*args, **kwargs)
        with sdpa_kernel(backends):
            return call(*args, **kwargs)

    return layer_call


_LAYER_CODES: dict[str, types.CodeType] = {}


def _own_code(fn: types.FunctionType, impl: str) -> types.FunctionType:
    """``fn`` under a code object of ``impl``'s own, shared by that implementation's layers.

    Dynamo keeps its compiled entries, and its recompile limit, per code object; past the
    limit it runs that code eagerly. With one code object for every implementation
    (``nn.Module._call_impl``, which every module call runs), one implementation's entries
    could send another's compiled layers to eager: in a run that compiled FA4's layers (graph
    breaks) after frepro's, frepro's compiled forwards ran aten's eager kernels, and alone
    inductor's (lab/2026-12-03-compiled-layers-fallback/)."""
    code = _LAYER_CODES.get(impl)
    if code is None:
        name = f"{fn.__code__.co_name}_{impl.replace('-', '_')}"
        names = {"co_name": name}
        if hasattr(fn.__code__, "co_qualname"):  # Python >= 3.11
            names["co_qualname"] = name
        code = fn.__code__.replace(**names)
        _LAYER_CODES[impl] = code
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__,
                              fn.__closure__)


def uncompile_layers(model: torch.nn.Module) -> None:
    """Undo :func:`compile_layers`: every decoder layer runs eagerly again."""
    for layer in decoder_layers(model):
        layer._compiled_call_impl = None


def compile_layers(model: torch.nn.Module, impl: str, fullgraph: bool,
                   backend: str | Callable[..., Any] = "inductor") -> None:
    """Regional compilation: each decoder layer's call compiled, the model's own forward not.

    What ``layer.compile(fullgraph=...)`` does (``nn.Module.compile`` sets
    ``_compiled_call_impl``, which ``nn.Module.__call__`` then runs), except that the compiled
    function calls the layer under a code object of ``impl``'s own (:func:`_own_code`), and
    for an SDPA implementation inside ``impl``'s ``sdpa_kernel`` context: dynamo traces that
    context into the graph (SDPAKernelVariable, torch/_dynamo/variables/ctx_manager.py), so
    the backend is fixed at trace time and guarded, whatever context surrounds the call later.
    Nothing is compiled until the first call.

    Args:
        model: a transformers decoder model
            (:func:`~flashrepro_harness.qwen3.build.decoder_layers`), attention already set.
        impl: one of :data:`~flashrepro_harness.qwen3.IMPLS`.
        fullgraph: passed to ``torch.compile``.
        backend: ``torch.compile``'s backend (tests pass "eager" or a graph-capturing one).
    """
    backends = sdpa_backends(impl)
    for layer in decoder_layers(model):
        layer._compiled_call_impl = None
        call = _own_code(_layer_call(layer._call_impl, backends), impl)
        layer._compiled_call_impl = torch.compile(call, fullgraph=fullgraph, backend=backend)


def _graphs_compiled() -> int:
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def compile_forward(model: torch.nn.Module, impl: str, ids: torch.Tensor,
                    backend: str | Callable[..., Any] = "inductor"
                    ) -> tuple[Callable[[torch.Tensor], torch.Tensor], dict[str, Any]]:
    """:func:`compile_layers` with ``fullgraph=True``, else with graph breaks allowed; compiled
    and run once on ``ids`` (B, L) int64 here.

    Returns:
        The forward (:func:`~flashrepro_harness.qwen3.build.make_forward`) and what happened:
        ``fullgraph``, ``compile_s`` (wall seconds of the first forward, compilation included),
        ``graphs_compiled`` (dynamo graphs compiled for it: 1 when the 28 layers share one
        graph) and ``fullgraph_error``.
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


def profile_forward(fn: Callable[[], object]) -> list[tuple[str, float]]:
    """One call of ``fn`` (warmed up already) under ``torch.profiler`` (CUDA activity only);
    its kernels as :func:`~flashrepro_harness.qwen3.classify.kernel_events` gives them."""
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


def max_abs_diff(a: torch.Tensor, b: torch.Tensor, chunk: int = 1024) -> float:
    """max |a - b| in float32, ``chunk`` tokens at a time (logits are B x L x 151936)."""
    a, b = a.flatten(0, -2), b.flatten(0, -2)
    return max((a[i:i + chunk].float() - b[i:i + chunk].float()).abs().max().item()
               for i in range(0, a.shape[0], chunk))


@contextlib.contextmanager
def recompile_room(limit: int = 64) -> Iterator[None]:
    """Raise dynamo's per-code-object recompile limit: each implementation's layers share one
    code object (:func:`_own_code`), whose entries grow with every shape and graph break."""
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
    """Rows of :func:`~flashrepro_harness.qwen3.tables.summarize` for every mode and shape, and the
    errors of variants that did not run ("mode B L impl" -> message); a failing variant is left out,
    never the run. ``checkpoint(rows, errors)`` is called after every (shape, mode), so that a run
    stopped by a time limit keeps what it measured. ``compile_impls``: the implementations timed in
    the compile mode (default: all of ``models``). Eager rows come first whatever the order of
    ``modes``.

    Which kernel ran: once every row is timed, each (mode, shape) is set up again and one forward of
    each row is profiled (``profiler``); :func:`~flashrepro_harness.qwen3.classify.kernel_summary`
    of it joins the row (``profile_error`` instead when profiling fails). Profiling comes last
    because a profiler session with CUDA activity leaves CUPTI attached after it ends
    (pytorch/pytorch#144455): in a run that profiled between shapes, the host-bound short prefill
    timed after it was twice as slow as in a run without the profiler
    (lab/2026-12-01-qwen3-prefill/)."""
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


def method(rounds: int, calls: int, tokens: int) -> dict[str, Any]:
    """The results' ``method`` block (timer, ``rounds`` of ``calls`` forwards, B·L =
    ``tokens``, compile and kernel-check methods)."""
    return {"timer": "cuda-events per forward, back to back, no busy-wait",
            "rounds": rounds, "calls_per_round": calls,
            "warmup": 2, "statistic": "median of per-round medians",
            "tokens": tokens, "reference": REFERENCE,
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
