"""The Qwen3 generate() benchmark (``flashrepro model --generate``): prefill and decode
tokens/s of greedy generation in transformers, flashrepro against torch SDPA's backends and
FlashAttention 4, and a packed-sequence prefill.

Generation is the loop transformers' ``generate()`` runs for greedy decoding, written out so
that the prefill and the decode loop are timed apart: one forward over the prompt (B sequences
of ``prompt`` random tokens, no padding, so no attention_mask) into a fresh cache, logits of
the last position only (``logits_to_keep=1``, as generate() asks), the first new token by
argmax; then ``new_tokens - 1`` forwards of one token each, each fed the previous argmax.
Modes (:data:`~flashrepro_harness.qwen3.generate_tables.GEN_MODES`):

- ``eager``: a ``DynamicCache`` per generation, every forward eager;
- ``static``: a ``StaticCache`` of prompt + new-token slots per implementation and B, reset
  between generations (as generate() reuses its cache); the prefill eager and the decode
  forward ``torch.compile(mode="reduce-overhead", fullgraph=True)`` (CUDA graphs; what
  generate() does with ``cache_implementation="static"``), falling back to graph breaks where
  fullgraph fails (the row says so). SDPA's backend is traced inside the compiled call.

Implementations: ``frepro``, ``sdpa-cudnn``, ``sdpa-flash``, ``sdpa-efficient`` (SDPA pinned
to one backend) and ``fa4`` (where it imports). Left out with the reason, not run: SDPA flash in
the static mode (transformers passes a boolean mask there, which that backend cannot take), and
FA4 there (transformers gives it no mask, so it would read a static cache's unwritten slots).

Timing: CUDA events around each forward (with its argmax); decode ms is the sum of a
generation's decode forwards. One warm-up generation per implementation first (eager: a few
decode steps; static: a whole one, which compiles and records the CUDA graphs); then
``rounds`` rounds and the median. In a round of the eager mode the implementations'
generations run in lockstep (:func:`lockstep`: every prefill, then every first decode step,
..., the order rotated at each forward, each forward started on an idle GPU by a sync), so
host drift, which moves a host-bound eager step by tens of percent within seconds, falls on
all of them alike; a round of the static mode is one generation of every implementation in
turn (order rotated, no sync between forwards), as CUDA-graph trees replay one compiled step
at a time. Tokens agree: the share of generated tokens before the first that differs from the
reference's (``sdpa-flash`` eager at the same B, else the first SDPA backend there).

Packed-sequence prefill: ``seqs`` sequences of random lengths in [lo, hi] (seed 0), one
forward each way with ``use_cache=False`` and last-position logits: ``packed``, concatenated in
one row with restarting position_ids and FlashAttention's ``cu_seq_lens_q/k``,
``max_length_q/k`` (frepro, FA4); ``padded``, one row each, right-padded with an
attention_mask (frepro, SDPA cuDNN and efficient; flash cannot take the mask). CUDA events
around each forward, ``calls`` per round, rounds interleaved; tokens/s of real tokens.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from flashrepro_harness.qwen3 import build
from flashrepro_harness.qwen3.generate_tables import (
    GEN_SDPA,
    summarize_generate,
    summarize_packed,
)

DEFAULT_IMPLS = {"eager": ("frepro", "sdpa-cudnn", "sdpa-flash", "fa4"),
                 "static": ("frepro", "sdpa-cudnn", "sdpa-efficient")}
"""The implementations each mode runs by default (``--gen-impls`` picks others)."""

PACKED_RUNS = (("packed", "frepro"), ("packed", "fa4"), ("padded", "frepro"),
               ("padded", "sdpa-cudnn"), ("padded", "sdpa-efficient"))
"""The packed-sequence prefill's (layout, implementation) pairs."""

EAGER_WARMUP_STEPS = 4
"""Decode steps of an eager warm-up generation (compiles launch plans, loads kernels)."""


def _event() -> Any:
    """A CUDA event that records time (tests put a host clock in its place)."""
    return torch.cuda.Event(enable_timing=True)


def _synchronize() -> None:
    torch.cuda.synchronize()


def skip_reason(impl: str, mode: str) -> str | None:
    """Why ``impl`` cannot run in ``mode`` (a generation mode or a prefill layout), or None."""
    if mode == "static" and impl == "sdpa-flash":
        return ("transformers passes SDPA a boolean mask in a static cache's decode step (no "
                "is_causal skip for compileable caches), which the flash backend cannot take")
    if mode == "static" and impl == "fa4":
        return ("transformers gives FA4 no mask (no mask function is registered for it), so "
                "it would attend to a static cache's unwritten slots")
    if mode == "padded" and impl == "sdpa-flash":
        return "the flash backend cannot take the padded batch's attention mask"
    return None


def sdpa_mask_probe(impl: str, device: str) -> str | None:
    """Why ``impl``'s pinned SDPA backend cannot take a boolean mask at a decode step's
    shape (what a static cache's compiled step would hit after minutes of compiling), or
    None: one small call, bf16 on CUDA (fp16 on the CPU), 16 heads, D = 128."""
    from torch.nn.attention import sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    dtype = torch.bfloat16 if device != "cpu" else torch.float16
    q = torch.zeros((2, 16, 1, 128), dtype=dtype, device=device)
    k = torch.zeros((2, 16, 40, 128), dtype=dtype, device=device)
    mask = torch.ones((2, 1, 1, 40), dtype=torch.bool, device=device)
    try:
        with sdpa_kernel(build.sdpa_backends(impl)):
            sdpa(q, k, k, attn_mask=mask)
    except RuntimeError as exc:
        return f"the backend refuses a boolean mask at a decode step's shape: {exc}"[:400]
    return None


def _in_backend(call: Callable[..., Any], impl: str) -> Callable[..., Any]:
    """``call`` inside ``impl``'s ``sdpa_kernel`` context (traced with it when compiled)."""
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with build.sdpa_context(impl):
            return call(*args, **kwargs)
    return wrapped


def compile_decode(model: torch.nn.Module, impl: str, fullgraph: bool) -> Callable[..., Any]:
    """The decode forward of ``model`` compiled with ``mode="reduce-overhead"``."""
    return torch.compile(_in_backend(model, impl), mode="reduce-overhead", fullgraph=fullgraph)


class Generation:
    """Greedy generation of ``new_tokens`` after ``ids`` (B, prompt) with one implementation.

    ``run(steps=None)`` generates (``steps`` decode forwards, default ``new_tokens - 1``) and
    returns (tokens (B, steps + 1), prefill ms, decode ms), synchronising once at the end.
    ``run(forced=tokens)`` feeds each decode step ``tokens``' token instead of its own argmax
    (teacher forcing), so its argmaxes can be compared with ``tokens`` step by step.
    """

    def __init__(self, model: torch.nn.Module, impl: str, mode: str, ids: torch.Tensor,
                 new_tokens: int) -> None:
        from transformers import StaticCache

        self.model, self.impl, self.mode, self.ids = model, impl, mode, ids
        self.steps = new_tokens - 1
        self.cache = None
        self.decode: Callable[..., Any] = _in_backend(model, impl)
        self.info: dict[str, Any] = {}
        model.set_attn_implementation(build.attn_name(impl))
        if mode == "static":
            self.cache = StaticCache(config=model.config,
                                     max_cache_len=ids.shape[1] + new_tokens)

    def compile(self) -> None:
        """Compile the decode step (static mode) and run one generation, which compiles and
        records the CUDA graphs: fullgraph first, graph breaks allowed where that fails."""
        for fullgraph in (True, False):
            self.decode = compile_decode(self.model, self.impl, fullgraph)
            t0 = time.perf_counter()
            try:
                self.run()
            except Exception as exc:
                if not fullgraph:
                    raise
                self.info["fullgraph_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                continue
            self.info.update(fullgraph=fullgraph, compile_s=time.perf_counter() - t0)
            return

    def run(self, steps: int | None = None, forced: torch.Tensor | None = None
            ) -> tuple[torch.Tensor, float, float]:
        generation = self.forwards(steps, forced)
        while (result := next(generation, None)) is None:
            pass
        return result

    def forwards(self, steps: int | None = None, forced: torch.Tensor | None = None,
                 settle: bool = False) -> Iterator[tuple[torch.Tensor, float, float] | None]:
        """:meth:`run` one forward at a time: None after the prefill and after each decode
        step (the caller may queue other work in between), then run()'s result. Each
        forward, with its argmax, sits between two CUDA events of its own; decode ms is the
        sum of the decode forwards' windows. No context stays entered between forwards.

        ``settle``: synchronise before each forward, so its window starts on an idle GPU and
        holds its own host and GPU time alone, not a share of work queued before it (another
        implementation's, in :func:`lockstep`). A step then no longer overlaps its host work
        with the previous step's last kernels: each step gains that tail, the same kernels
        (the model's last layers, the logits' argmax) for every implementation."""
        from transformers import DynamicCache

        steps = self.steps if steps is None else steps
        static = self.mode == "static"
        windows = [(_event(), _event()) for _ in range(steps + 1)]
        with torch.inference_mode():
            if static:
                self.cache.reset()
            cache = self.cache if static else DynamicCache(config=self.model.config)
            with build.sdpa_context(self.impl):
                if settle:
                    _synchronize()
                windows[0][0].record()
                logits = self.model(self.ids, past_key_values=cache, use_cache=True,
                                    logits_to_keep=1).logits
                token = logits[:, -1:].argmax(-1)
                windows[0][1].record()
        yield None
        tokens = [token]
        for step in range(steps):
            with torch.inference_mode():
                start, end = windows[step + 1]
                if settle:
                    _synchronize()
                start.record()
                if static:
                    torch.compiler.cudagraph_mark_step_begin()
                if forced is not None:
                    token = forced[:, step:step + 1]
                logits = self.decode(input_ids=token, past_key_values=cache, use_cache=True,
                                     logits_to_keep=1).logits
                token = logits[:, -1:].argmax(-1)
                end.record()
            tokens.append(token)
            yield None
        _synchronize()
        yield (torch.cat(tokens, dim=1), windows[0][0].elapsed_time(windows[0][1]),
               sum(s.elapsed_time(e) for s, e in windows[1:]))


def agreement(reference: torch.Tensor, tokens: torch.Tensor) -> float:
    """Mean over sequences of the share of tokens before the first that differs."""
    shares = []
    for a, b in zip(reference.tolist(), tokens.tolist(), strict=True):
        same = next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), len(a))
        shares.append(same / len(a))
    return sum(shares) / len(shares)


def step_agreement(reference: torch.Tensor, forced: torch.Tensor) -> float:
    """The share of positions where a teacher-forced generation (:meth:`Generation.run` with
    ``forced=reference``) picks the reference's token: each step judged on the reference's
    own prefix, so one near-tie does not decide every later token, as in :func:`agreement`."""
    return float((reference == forced).float().mean())


def interleave(runs: dict[str, Callable[[], Any]], rounds: int) -> dict[str, list[Any]]:
    """Each run's results over ``rounds`` rounds, one call of every run per round in an order
    rotated each round."""
    names = list(runs)
    out: dict[str, list[Any]] = {n: [] for n in names}
    for r in range(rounds if names else 0):
        for name in names[r % len(names):] + names[:r % len(names)]:
            out[name].append(runs[name]())
    return out


def lockstep(generations: dict[str, Generation], rounds: int
             ) -> dict[str, list[tuple[torch.Tensor, float, float]]]:
    """Each generation's :meth:`Generation.run` result over ``rounds`` rounds, the
    generations of a round run side by side: every implementation's prefill, then every
    implementation's first decode step, and so on, the order rotated at each forward. A
    forward of one implementation is timed seconds, not a whole generation, from the same
    forward of the others, so a host whose speed drifts moves them alike (eager steps are
    host-bound). Each forward starts on an idle GPU (``settle``): the order rotates
    cyclically, so each implementation would otherwise always follow the same other one, and
    its host work would hide behind that one's queued kernels.

    Every implementation's cache is alive at once: a round holds one generation's memory per
    implementation."""
    names = list(generations)
    out: dict[str, list[tuple[torch.Tensor, float, float]]] = {n: [] for n in names}
    for r in range(rounds if names else 0):
        running = {n: generations[n].forwards(settle=True) for n in names}
        turn = r
        while running:
            for name in names[turn % len(names):] + names[:turn % len(names)]:
                if name in running and (result := next(running[name])) is not None:
                    out[name].append(result)
                    del running[name]
            turn += 1
    return out


def measure_generate(models: dict[str, torch.nn.Module], modes: list[str], batches: list[int],
                     prompt: int, new_tokens: int, rounds: int,
                     impls: dict[str, list[str]], vocab: int,
                     progress: Callable[[str], None] = print,
                     checkpoint: Callable[[list[dict[str, Any]]], None] | None = None,
                     device: str = "cuda") -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Rows of every (mode, B) (:func:`summarize_generate`) and the errors of variants that
    failed ("mode B=b impl" -> message; a failing variant is left out, never the run).
    ``impls[mode]``: the implementations run there (those of ``models``). ``checkpoint(rows)``
    after each group, so a run stopped by a time limit keeps what it measured."""
    rows: list[dict[str, Any]] = []
    errors: dict[str, str] = {}
    reference: dict[int, torch.Tensor] = {}
    gen = torch.Generator(device).manual_seed(0)
    prompts = {b: torch.randint(0, vocab, (b, prompt), device=device, generator=gen)
               for b in batches}
    for mode in modes:
        for batch in batches:
            torch._dynamo.reset()
            runners: dict[str, Generation] = {}
            for impl in impls[mode]:
                key = f"{mode} B={batch} {impl}"
                if mode == "static" and impl in GEN_SDPA and (
                        why := sdpa_mask_probe(impl, device)):
                    errors[key] = why
                    progress(f"{key}: left out ({why[:200]})")
                    continue
                try:
                    g = Generation(models[impl], impl, mode, prompts[batch], new_tokens)
                    if mode == "static":
                        g.compile()
                        progress(f"{key}: compiled and recorded in {g.info['compile_s']:.1f} s "
                                 f"(fullgraph={g.info['fullgraph']})")
                    else:
                        g.run(EAGER_WARMUP_STEPS)
                    runners[impl] = g
                except Exception as exc:
                    errors[key] = f"{type(exc).__name__}: {str(exc)[:500]}"
                    progress(f"{key}: left out ({errors[key][:200]})")
            results = (lockstep(runners, rounds) if mode == "eager"
                       else interleave({n: g.run for n, g in runners.items()}, rounds))
            last = {n: res[-1][0] for n, res in results.items()}
            ref_impl = next((i for i in ("sdpa-flash", *GEN_SDPA) if i in last), None)
            if mode == "eager" and ref_impl is not None:
                reference.setdefault(batch, last[ref_impl])
            ref = reference.get(batch, last.get(ref_impl) if ref_impl else None)
            agree = {n: (agreement(ref, t) if ref is not None else None)
                     for n, t in last.items()}
            for g in runners.values():  # the same prefixes for every implementation
                g.info["step_agreement"] = (None if ref is None else
                                            step_agreement(ref, g.run(forced=ref)[0]))
            round_ms = {n: [(p, d) for _, p, d in res] for n, res in results.items()}
            rows += summarize_generate(mode, batch, prompt, new_tokens - 1, round_ms, agree,
                                       {n: g.info for n, g in runners.items()})
            for r in rows[-len(round_ms):]:
                progress(f"{mode} B={batch} {r['impl']}: prefill "
                         f"{r['prefill_tokens_per_s'] / 1e3:.1f} k tok/s, decode "
                         f"{r['decode_tokens_per_s']:.0f} tok/s, agree {r['agreement']}")
            if checkpoint is not None:
                checkpoint(rows)
            del runners
    return rows, errors


def packed_inputs(seqs: int, lo: int, hi: int, vocab: int, device: str = "cuda"
                  ) -> dict[str, Any]:
    """The packed and the padded batch of ``seqs`` sequences of lengths drawn uniformly from
    [lo, hi] (``random.Random(0)``), the same random tokens in both."""
    rng = random.Random(0)
    lengths = [rng.randint(lo, hi) for _ in range(seqs)]
    gen = torch.Generator(device).manual_seed(1)
    tokens = [torch.randint(0, vocab, (n,), device=device, generator=gen) for n in lengths]
    longest = max(lengths)
    padded = torch.zeros((seqs, longest), dtype=torch.long, device=device)
    mask = torch.zeros_like(padded)
    for i, t in enumerate(tokens):
        padded[i, :len(t)] = t
        mask[i, :len(t)] = 1
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32,
                      device=device)
    return {"lengths": lengths, "packed": torch.cat(tokens)[None],
            "positions": torch.cat([torch.arange(n, device=device) for n in lengths])[None],
            "cu": cu, "longest": longest, "padded": padded, "mask": mask}


def _time_calls(fn: Callable[[], object], calls: int) -> float:
    """Median ms of ``calls`` back-to-back calls, CUDA events around each."""
    marks = [(_event(), _event()) for _ in range(calls)]
    for start, end in marks:
        start.record()
        fn()
        end.record()
    _synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in marks)


def measure_packed(models: dict[str, torch.nn.Module], runs: list[tuple[str, str]], seqs: int,
                   lo: int, hi: int, rounds: int, calls: int, vocab: int,
                   progress: Callable[[str], None] = print, device: str = "cuda"
                   ) -> tuple[list[dict[str, Any]], dict[str, str], list[int]]:
    """Rows of the packed-sequence prefill (:func:`summarize_packed`), the errors of runs that
    failed, and the sequence lengths."""
    x = packed_inputs(seqs, lo, hi, vocab, device)
    fns: dict[tuple[str, str], Callable[[], object]] = {}
    errors: dict[str, str] = {}
    for layout, impl in runs:
        model = models[impl]

        def forward(layout: str = layout, impl: str = impl, model: Any = model) -> object:
            model.set_attn_implementation(build.attn_name(impl))
            with torch.inference_mode(), build.sdpa_context(impl):
                if layout == "packed":
                    return model(x["packed"], position_ids=x["positions"], use_cache=False,
                                 logits_to_keep=1, cu_seq_lens_q=x["cu"], cu_seq_lens_k=x["cu"],
                                 max_length_q=x["longest"], max_length_k=x["longest"])
                return model(x["padded"], attention_mask=x["mask"], use_cache=False,
                             logits_to_keep=1)

        try:
            forward()
            forward()
            _synchronize()
        except Exception as exc:
            errors[f"packed prefill {layout} {impl}"] = f"{type(exc).__name__}: {str(exc)[:500]}"
            progress(f"packed prefill {layout} {impl}: left out ({str(exc)[:200]})")
            continue
        fns[(layout, impl)] = forward
    per_round = interleave({k: (lambda f=f: _time_calls(f, calls)) for k, f in fns.items()},
                           rounds)
    rows = summarize_packed(per_round, sum(x["lengths"]), seqs * x["longest"])
    for r in rows:
        progress(f"packed prefill {r['layout']} {r['impl']}: {r['tokens_per_s'] / 1e3:.1f} k "
                 "tok/s")
    return rows, errors, x["lengths"]


def method(prompt: int, new_tokens: int, rounds: int, packed: dict[str, Any] | None
           ) -> dict[str, Any]:
    """The results' ``method`` block."""
    return {"timer": "cuda-events around each forward; decode: the sum of the decode "
                     "forwards",
            "interleaving": "eager: the implementations' generations in lockstep, the "
                            "order rotated at each forward, a sync before each forward; "
                            "static: one generation of each implementation in turn, order "
                            "rotated each round, no sync between forwards",
            "prompt": prompt, "new_tokens": new_tokens, "decode_steps": new_tokens - 1,
            "rounds": rounds, "statistic": "median of rounds", "reference": "sdpa-flash",
            "warmup": f"one generation per implementation (eager: {EAGER_WARMUP_STEPS} decode "
                      "steps; static: a whole one, compiling and recording CUDA graphs)",
            "compile": "static: StaticCache, decode step torch.compile(mode='reduce-overhead', "
                       "fullgraph=True) with SDPA's backend traced inside, prefill eager",
            "packed": "" if packed is None else (
                f"{packed['seqs']} sequences of random lengths {packed['lo']}-{packed['hi']} "
                "(seed 0): packed in one row (position_ids restarting, cu_seq_lens_q/k and "
                "max_length_q/k) or one row each right-padded with an attention_mask; one "
                "forward, use_cache=False, last-position logits; "
                f"{packed['calls']} calls per round, {packed['rounds']} interleaved rounds, "
                "median; tokens/s of real tokens")}


def registered(impls: list[str]) -> tuple[list[str], dict[str, str]]:
    """``impls`` that can run here (FA4 registered where it imports), and why others not."""
    skipped: dict[str, str] = {}
    out = list(impls)
    if "fa4" in out:
        if why := build.fa4_available():
            skipped["fa4"] = why
            out.remove("fa4")
        else:
            build.register_fa4()
    return out, skipped

