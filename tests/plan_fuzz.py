"""Random eager ``attention_kvcache`` calls, each run through the caches (checked signatures,
decode plans) and again with them cleared: both must launch the same kernels with the same
arguments, and each launch from a cache must match the Triton specialization of its own
arguments (``native_specialize_impl``, as ``JITFunction.run`` computes it). Raise or fail
alike. Tensor arguments compare by what a launch reads of them (:func:`extent`); each family
of shapes mostly repeats its own flags, so that later calls hit the plans of earlier ones.

Runs on CPU tensors with the kernels as JITFunctions (no ``TRITON_INTERPRET``): the launches
are recorded, never run. ``tests/test_decode.py`` runs :func:`main` in a subprocess.
"""

from __future__ import annotations

import random
from typing import Any

import torch
from triton._C.libtriton import native_specialize_impl
from triton.backends.compiler import BaseBackend

from flashrepro import launch_varlen, validation
from flashrepro.kernels.call import KernelCall
from flashrepro.validation import byte_span


def triton_key(kernel: Any, values: list[Any]) -> tuple[Any, ...]:
    """Triton 3.6's specialization of ``values`` for ``kernel``."""
    return tuple(
        ("constexpr", type(v), v) if p.is_constexpr else native_specialize_impl(
            BaseBackend, v, p.is_const, not p.do_not_specialize,
            not p.do_not_specialize_on_alignment)
        for p, v in zip(kernel.params, values, strict=True))


class Recorder:
    """Stands in for a DirectLaunch compiled for ``compiled``: records each launch."""

    def __init__(self, kernel: Any, compiled: tuple[Any, ...], log: list[dict[str, Any]]):
        self.kernel, self.compiled, self.log = kernel, compiled, log

    def on_stream(self, grid: tuple[int, ...], device: int, io: tuple[Any, ...],
                  tail: list[Any] | None = None) -> None:
        assert tail is not None, "a shared launch must be given its arguments"
        values = [*io, *tail]
        self.log.append(dict(kernel=self.kernel, grid=tuple(grid), values=values,
                             compiled=self.compiled, actual=triton_key(self.kernel, values)))


def fake_launch(log: list[dict[str, Any]], compiled: dict[Any, Recorder]) -> Any:
    """``direct.launch`` with a Recorder per Triton specialization."""
    def launch(call: KernelCall, io_count: int, extra_key: tuple[Any, ...] = ()) -> Recorder:
        values = call.ordered_values()
        assert values is not None
        key = (id(call.kernel), tuple(call.kwargs.items()), extra_key,
               triton_key(call.kernel, values))
        rec = compiled.get(key)
        if rec is None:
            rec = compiled[key] = Recorder(call.kernel, key[-1], log)
        rec.on_stream((*call.grid, 1, 1)[:3], -1, tuple(values[:io_count]),
                      values[io_count:])
        return rec
    return launch


def tensor(shape: tuple[int, ...], rng: random.Random, dtype: torch.dtype = torch.float16
           ) -> torch.Tensor:
    """Zeros of ``shape`` in one of several layouts: contiguous, dims 1 and 2 swapped in
    memory, padded rows, or at an offset that breaks 16-byte alignment."""
    kind = rng.choice(["contiguous", "swapped", "padded", "offset"])
    if kind == "swapped":
        return torch.zeros(shape[0], shape[2], shape[1], shape[3], dtype=dtype).transpose(1, 2)
    if kind == "padded":
        return torch.zeros(*shape[:3], shape[3] + 8, dtype=dtype)[..., :shape[3]]
    numel = 1
    for n in shape:
        numel *= n
    offset = 1 if kind == "offset" else 0
    return torch.zeros(numel + offset, dtype=dtype)[offset:].view(shape)


def random_call(rng: random.Random, family: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
    """A call of ``family``'s shapes: mostly its own layouts (so plans are hit), sometimes
    others, with a random cache length, split count, ``return_lse``, and ``out`` or an
    output born (B, Lq, H, D)."""
    b, h, h_kv, lq, d = (family[n] for n in ("b", "h", "h_kv", "lq", "d"))
    l_max = rng.choice([1, 15, 16, 17, 100, 1000, 1001, 4096, 5000, 70000])
    layout = random.Random(family["seed"]) if rng.random() < 0.8 else rng
    q = tensor((b, h, lq, d), layout)
    k = tensor((b, h_kv, l_max, d), layout)
    v = k if layout.random() < 0.2 else tensor((b, h_kv, l_max, d), layout)
    used = layout.choice([
        None,  # the whole cache
        torch.full((b,), l_max, dtype=torch.int32),
        torch.full((b + 1,), l_max, dtype=torch.int32)[1:],
        torch.full((2 * b,), l_max, dtype=torch.int32)[::2]])
    # the family's own flags most of the time, so that calls repeat signatures and hit plans
    flags = family["flags"] if rng.random() < 0.7 else random_flags(rng)
    num_splits, return_lse, with_out, bshd = flags
    out = tensor((b, h, lq, d), layout) if with_out else None
    return (q, k, v, used), dict(causal=family["causal"], scale=family["scale"],
                                 enable_gqa=h != h_kv, num_splits=num_splits,
                                 return_lse=return_lse, out=out, bshd=bshd)


def random_flags(rng: random.Random) -> tuple[int | None, bool, bool, bool]:
    """(num_splits, return_lse, an ``out``, ``bshd``) of a call."""
    with_out = rng.random() < 0.5
    return (rng.choice([None, None, 1, 3]), rng.random() < 0.5, with_out,
            not with_out and rng.random() < 0.4)


def extent(t: torch.Tensor) -> tuple[Any, ...]:
    """What a launch reads of a tensor argument: its dtype, the bytes it spans and its
    16-byte alignment (a kernel gets the address; strides go in as ints). A (B, Lq, H, D)
    output and its (B, H, Lq, D) view are the same argument."""
    return t.dtype, byte_span(t) if t.numel() else 0, t.data_ptr() % 16 == 0


def run(args: tuple, kwargs: dict[str, Any], log: list[dict[str, Any]]
        ) -> tuple[list[dict[str, Any]], str | None]:
    log.clear()
    try:
        launch_varlen.kvcache_forward(*args, **kwargs)
        error = None
    except (TypeError, ValueError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    return list(log), error


def main(seed: int, calls: int) -> int:
    """Returns the number of calls whose cached and uncached runs differed (printed)."""
    launch_varlen.interpreter_mode = lambda: True  # CPU tensors pass the device rules
    validation.interpreter_mode = lambda: True
    validation.attn_fwd_kernel = None  # not a JITFunction: no "set after import" refusal
    log: list[dict[str, Any]] = []
    compiled: dict[Any, Recorder] = {}
    launch_varlen.launch = fake_launch(log, compiled)
    rng = random.Random(seed)
    bad = 0
    families: list[dict[str, Any]] = []
    for i in range(calls):
        if i % 25 == 0:
            families = [dict(b=rng.choice([1, 2, 3]), h_kv=(h_kv := rng.choice([1, 2, 4])),
                             h=h_kv * rng.choice([1, 2, 8]), lq=rng.choice([1, 1, 3]),
                             d=rng.choice([16, 64, 80, 128]), causal=rng.random() < 0.5,
                             scale=rng.choice([None, 0.125, 2]), seed=rng.random(),
                             flags=random_flags(rng))
                        for _ in range(3)]
        args, kwargs = random_call(rng, rng.choice(families))
        cached = run(args, kwargs, log)
        checked = dict(launch_varlen._CHECKED_KVCACHE)  # the signatures, with their plans
        launch_varlen._CHECKED_KVCACHE.clear()
        full = run(args, kwargs, log)
        launch_varlen._CHECKED_KVCACHE.clear()
        launch_varlen._CHECKED_KVCACHE.update(checked)
        problems = [f"error {cached[1]!r} against {full[1]!r}"] if cached[1] != full[1] else []
        problems += [f"{e['kernel'].fn.__name__}: compiled for another specialization"
                     for e in cached[0] if e["compiled"] != e["actual"]]
        if [(e["kernel"], e["grid"], len(e["values"])) for e in cached[0]] != [
                (e["kernel"], e["grid"], len(e["values"])) for e in full[0]]:
            problems.append("other launches")
        else:
            for mine, ref in zip(cached[0], full[0], strict=True):
                for j, (a, r) in enumerate(zip(mine["values"], ref["values"], strict=True)):
                    same = (extent(a) == extent(r) if isinstance(a, torch.Tensor)
                            else (type(a), a) == (type(r), r))
                    if not same:
                        shown = [extent(t) if isinstance(t, torch.Tensor) else t
                                 for t in (a, r)]
                        problems.append(f"{mine['kernel'].fn.__name__} argument {j}: "
                                        f"{shown[0]!r} against {shown[1]!r}")
        if problems:
            bad += 1
            print(f"call {i}: {problems[:3]}")
    return bad
