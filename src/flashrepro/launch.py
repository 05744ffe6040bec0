"""The eager forward: validate, select, launch; and a cache of launch plans.

:func:`forward` checks a call (:mod:`flashrepro.validation`), asks
:func:`flashrepro.select.select` which kernel runs it and with what arguments (passing the
GPU's compute capability, SM count and L2 size), and launches that
:class:`~flashrepro.kernels.call.KernelCall`.

Host cost. Validation, the selection and Triton's argument binding cost several times the
kernel's time at the article problem (lab/2026-12-01-host-path/). So the first call of each
*signature* (every input property that validation or the selection reads: shapes, strides,
dtype, device, 16-byte alignment, flags, scale, config, the ``DISABLE_MMA_V3`` switch) records
a :class:`LaunchPlan`; a later call with the same signature has passed the same checks, so it
finds its plan with one dict lookup, allocates the output (or takes ``out``, whose layout is
part of the signature and whose memory is checked against q, k and v on every call: a
comparison of byte ranges, the exact check where they meet) and launches Triton's compiled
kernel directly (:mod:`flashrepro.direct`). A call that could fail a check the signature does
not cover (grad-requiring inputs, a flag or argument of another type) takes the full path.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
import triton
from torch.autograd.graph import increment_version
from triton.compiler import CompiledKernel

from flashrepro.configs import KernelConfig
from flashrepro.counters import stream_counters, stream_scratch
from flashrepro.direct import DirectLaunch
from flashrepro.kernels.call import IO_ARGS, KernelCall, rebind_io
from flashrepro.select import (
    STAND_IN_L2_BYTES,
    STAND_IN_NUM_SMS,
    Selection,
    check_config,
    select,
)
from flashrepro.validation import (
    _check_flag,
    byte_span,
    check_out,
    forward_ad_active,
    interpreter_mode,
    validate,
)

MAX_PLANS = 1024
"""Plans kept before the cache starts over (a model has a handful of attention signatures)."""


def _on_device(device: torch.device) -> contextlib.AbstractContextManager:
    """Launch on the tensors' GPU, not on torch's current one (Triton uses the current one)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


_STRIDED = torch.strided
_ENVIRON = getattr(os.environ, "_data", None)
_MMA_V3_KEY = os.environ.encodekey("DISABLE_MMA_V3") if _ENVIRON is not None else None


def _mma_v3_switch() -> object:
    """The ``DISABLE_MMA_V3`` environment variable (Triton's switch from wgmma to mma.sync on
    sm_90), read on every call: from os.environ's own dict where it has one (CPython's
    ``_Environ``, which ``os.environ[...] =`` and pytest's ``monkeypatch.setenv`` update),
    which skips the key encoding ``os.environ.get`` does on each call."""
    if _ENVIRON is None:  # pragma: no cover - another Python's os.environ
        return os.environ.get("DISABLE_MMA_V3")
    return _ENVIRON.get(_MMA_V3_KEY)


def _gpu_facts(device: torch.device) -> dict[str, Any]:
    """:func:`~flashrepro.select.select`'s GPU arguments for tensors on ``device``: arch,
    mma_v3, num_sms, l2_bytes; off a GPU (the interpreter) arch None and the stand-ins."""
    mma_v3 = os.environ.get("DISABLE_MMA_V3", "0") in ("", "0")
    if device.type != "cuda":
        return dict(arch=None, mma_v3=mma_v3, num_sms=STAND_IN_NUM_SMS,
                    l2_bytes=STAND_IN_L2_BYTES)
    props = torch.cuda.get_device_properties(device)
    return dict(arch=10 * props.major + props.minor, mma_v3=mma_v3,
                num_sms=props.multi_processor_count, l2_bytes=props.L2_cache_size)


@dataclass(frozen=True)
class LaunchPlan:
    """What a call signature launches, fixed by its first call (see the module docstring).

    Attributes:
        call: the recorded launch; its Q, K, V, O, LSE slots are rebound per call.
        direct: Triton's compiled kernel behind a :class:`~flashrepro.direct.DirectLaunch`;
            None under the interpreter, where the plan relaunches ``call`` through Triton's
            JIT path.
        grid: ``call.grid`` as three ints.
        out_shape: O's shape, (B, H, Lq, D), allocated in q's dtype.
        out_stride: O's strides: contiguous, or (B, Lq, H, D) in memory for a plan keyed
            with ``bshd`` (see :func:`forward`).
        lse_shape: LSE's shape, (B, H, Lq), allocated when the caller asked for it.
        lse_dummy: the LSE argument when it is not stored (the kernels never touch it then).
        contiguous_q, contiguous_kv: read q (k and v) through contiguous copies.
        spans: bytes from the first to one past the last element of q, k, v and ``out`` (fixed
            by the signature's shapes, strides and dtypes), for plans keyed with an ``out``:
            see :meth:`out_is_apart`.
        counter_slot: where the kernel takes a stream counter
            (:data:`~flashrepro.kernels.call.STREAM_COUNTER`), its index in ``direct.tail``;
            each launch passes the current stream's.
        scratch_slot: where the kernel takes float32 scratch
            (:data:`~flashrepro.kernels.call.SCRATCH`), its index in ``direct.tail``; each
            launch passes the current stream's (``call.scratch`` elements).
    """

    call: KernelCall
    direct: DirectLaunch | None
    grid: tuple[int, int, int]
    out_shape: tuple[int, ...]
    out_stride: tuple[int, ...]
    lse_shape: tuple[int, ...]
    lse_dummy: torch.Tensor | None
    contiguous_q: bool
    contiguous_kv: bool
    spans: tuple[int, int, int, int] | None = None
    counter_slot: int | None = None
    scratch_slot: int | None = None

    def out_is_apart(self, out: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                     v: torch.Tensor) -> bool:
        """True when ``out``'s bytes meet none of q's, k's or v's and ``out`` may be written
        in place (no grad wanted): what :func:`~flashrepro.validation.check_out` would accept
        without looking further. Its other rules (type, layout, shape, dtype, device, no
        self-overlap, no negation bit) depend only on what the plan's key holds. False sends
        the call through the full check (``out = q``, interleaved views of one buffer)."""
        if out.requires_grad and torch.is_grad_enabled():
            return False
        q_span, k_span, v_span, o_span = self.spans  # type: ignore[misc]
        o0 = out.data_ptr()
        o1 = o0 + o_span
        for t, span in ((q, q_span), (k, k_span), (v, v_span)):
            t0 = t.data_ptr()
            if t0 < o1 and o0 < t0 + span:
                return False
        return True

    def launch(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Run the plan on new inputs of its signature (``out``: the caller's output, already
        checked against them); returns (o, lse or None)."""
        if self.contiguous_q:
            q = q.contiguous()
        if self.contiguous_kv:
            k, v = k.contiguous(), v.contiguous()
        o = (torch.empty_strided(self.out_shape, self.out_stride, dtype=q.dtype, device=q.device)
             if out is None else out)
        lse = (torch.empty(self.lse_shape, dtype=torch.float32, device=q.device)
               if self.lse_dummy is None else self.lse_dummy)
        if self.direct is None:
            io = rebind_io(self.call.args[:IO_ARGS], (q, k, v, o, lse))
            with _on_device(q.device):
                _with_stream_buffers(self.call.with_io(io), q.device).run()
        elif self.counter_slot is None:
            self.direct.on_stream(self.grid, q.get_device(), (q, k, v, o, lse))
        else:
            tail = list(self.direct.tail)
            tail[self.counter_slot], scratch = _stream_buffers(self.call, q.device)
            if self.scratch_slot is not None:
                tail[self.scratch_slot] = scratch
            self.direct.on_stream(self.grid, q.get_device(), (q, k, v, o, lse), tail)
        return o, (None if self.lse_dummy is not None else lse)


def _with_stream_buffers(call: KernelCall, device: torch.device) -> KernelCall:
    """``call`` with the current stream's counter and scratch where the kernel takes
    them (:data:`~flashrepro.kernels.call.STREAM_COUNTER`,
    :data:`~flashrepro.kernels.call.SCRATCH`); other calls unchanged, nothing fetched."""
    if call.counter_slot() is None:
        return call
    counters, scratch = _stream_buffers(call, device)
    call = call.with_counter(counters)
    return call if scratch is None else call.with_scratch(scratch)


def _stream_buffers(call: KernelCall, device: torch.device
                    ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A launch's buffers of ``call``: its count of the current stream's counters
    (:func:`~flashrepro.counters.stream_counters`), and its size of the stream's float32
    scratch (:func:`~flashrepro.counters.stream_scratch`; None where it takes none)."""
    scratch = stream_scratch(device, call.scratch) if call.scratch else None
    return stream_counters(device, call.counters), scratch


_PLANS: dict[tuple[Any, ...], LaunchPlan] = {}
CLEAR_HOOKS: dict[str, Callable[[], None]] = {}
"""What :func:`clear_plans` calls besides: caches of plans made here kept elsewhere
(:mod:`flashrepro.native`'s registries), by owner."""


def clear_plans() -> None:
    """Forget every launch plan, those :data:`CLEAR_HOOKS` keep too: the next call of each
    signature takes the full path (and a kernel choice changed since is consulted)."""
    _PLANS.clear()
    for hook in CLEAR_HOOKS.values():
        hook()


def plan_count() -> int:
    """How many launch plans are cached."""
    return len(_PLANS)


def _signature(q: Any, k: Any, v: Any, causal: Any, scale: Any, enable_gqa: Any,
               causal_alignment: Any, return_lse: Any, config: Any,
               out: Any = None, bshd: bool = False) -> tuple[Any, ...] | None:
    """The plan-cache key of a call, or None where the call must take the full path: inputs
    (or an ``out``) that are not plain dense tensors (or carry a negation bit, or are
    ZeroTensors), flags that are not bools, arguments of other types, tensors on neither a GPU
    nor the interpreter's CPU, inputs that require grad while autograd is on, calls inside a
    forward-AD dual level, tensors without sizes or storage (nested).
    ``out``'s layout keys the plan; its memory is checked against q, k and v on every call
    (:meth:`LaunchPlan.out_is_apart`)."""
    tensor = torch.Tensor
    if not (type(q) is tensor and type(k) is tensor and type(v) is tensor
            and causal.__class__ is bool and enable_gqa.__class__ is bool
            and return_lse.__class__ is bool and causal_alignment.__class__ is str
            and (config is None or config.__class__ in (str, KernelConfig))
            and (scale is None or scale.__class__ in (float, int))):
        return None
    if not (q.is_cuda or (q.device.type == "cpu" and interpreter_mode())):
        return None
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return None
    if forward_ad_active():  # an input may carry a tangent: the full checks refuse it
        return None
    if (q.layout is not _STRIDED or k.layout is not _STRIDED or v.layout is not _STRIDED
            or q.is_neg() or k.is_neg() or v.is_neg()
            or q._is_zerotensor() or k._is_zerotensor() or v._is_zerotensor()):
        return None
    try:
        # Triton specializes each pointer on its own 16-byte alignment: one bit per tensor
        key = (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), q.dtype, k.dtype,
               v.dtype, q.device, k.device, v.device, q.data_ptr() & 15 == 0,
               k.data_ptr() & 15 == 0, v.data_ptr() & 15 == 0, causal, scale, scale.__class__,
               enable_gqa, causal_alignment, return_lse, config, _mma_v3_switch(), bshd)
        if out is None:
            return key
        if (type(out) is not tensor or out.layout is not _STRIDED or out.is_neg()
                or out._is_zerotensor()
                or (out.is_inference() and not torch.is_inference_mode_enabled())):
            return None
        return (*key, out.shape, out.stride(), out.dtype, out.device, out.data_ptr() & 15 == 0)
    except RuntimeError:  # no sizes or storage (a nested tensor): validation names the rule
        return None


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
            scale: float | None, enable_gqa: bool, causal_alignment: str, return_lse: bool,
            config: KernelConfig | str | None, out: torch.Tensor | None,
            bshd: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The forward pass behind :func:`flashrepro.attention`: validate, select, launch, return
    (o, lse), lse None unless ``return_lse``. Arguments, shapes, dtypes and errors are
    :func:`flashrepro.attention`'s. A written ``out`` gets its version counter bumped, as by
    torch's own out= ops, so autograd sees the in-place write (a tensor saved for a backward
    and overwritten here makes that backward raise instead of computing a wrong gradient).

    ``bshd`` (``out`` None): o (B, H, Lq, D) is allocated with (B, Lq, H, D) memory, the
    layout transformers' attention functions return, as through an ``out=`` view of such a
    buffer but without its per-call checks (the buffer is new)."""
    key = _signature(q, k, v, causal, scale, enable_gqa, causal_alignment, return_lse, config,
                     out, bshd)
    plan = _PLANS.get(key) if key is not None else None
    if plan is not None:
        if out is not None:
            if not plan.out_is_apart(out, q, k, v):
                check_out(out, q, q=q, k=k, v=v)  # the exact rules (and their errors)
            increment_version(out)
        return plan.launch(q, k, v, out)
    o, lse, plan = _forward_full(q, k, v, causal=causal, scale=scale, enable_gqa=enable_gqa,
                                 causal_alignment=causal_alignment, return_lse=return_lse,
                                 config=config, out=out, bshd=bshd and out is None)
    if out is not None:
        increment_version(out)
    if key is not None and plan is not None:
        if out is not None:
            plan = replace(plan, spans=(byte_span(q), byte_span(k), byte_span(v),
                                        byte_span(out)))
        _keep(key, plan)
    return o, lse


def _keep(key: tuple[Any, ...], plan: LaunchPlan) -> None:
    if len(_PLANS) >= MAX_PLANS:
        _PLANS.clear()
    _PLANS[key] = plan


def _forward_full(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                  scale: float | None, enable_gqa: bool, causal_alignment: str,
                  return_lse: bool, config: KernelConfig | str | None,
                  out: torch.Tensor | None, bshd: bool = False,
                  ) -> tuple[torch.Tensor, torch.Tensor | None, LaunchPlan | None]:
    """Every check, the selection and the launch; also the plan that repeats the launch
    (None where there is nothing to repeat: empty sizes, an ``out`` written through a
    buffer). ``bshd``: a new output with (B, Lq, H, D) memory, allocated once the inputs
    have passed the checks."""
    validate(q, k, v, causal=causal, scale=scale, enable_gqa=enable_gqa,
             causal_alignment=causal_alignment)
    _check_flag("return_lse", return_lse)
    b, h, lq, d = q.shape
    if bshd:
        o = torch.empty((b, lq, h, d), dtype=q.dtype, device=q.device).transpose(1, 2)
    else:
        o = check_out(out, q, q=q, k=k, v=v)
    check_config(config)
    lse_shape = (b, h, lq)
    if o.numel() == 0 or k.shape[2] == 0:  # SDPA's zeros (the kernels need Lk >= 1)
        lse = torch.full(lse_shape, float("-inf"), dtype=torch.float32, device=q.device)
        if o.numel():
            o.zero_()
        return o, (lse if return_lse else None), None
    lse = torch.empty(lse_shape if return_lse else (1,), dtype=torch.float32, device=q.device)
    if not return_lse:  # never written: one element, with a full buffer's strides (the same
        lse = lse.as_strided((1, 1, 1), (h * lq, lq, 1))  # specialization as with return_lse)
    chosen = select(q, k, v, o, lse, causal=causal, scale=scale,
                    causal_alignment=causal_alignment, return_lse=return_lse, config=config,
                    **_gpu_facts(q.device))
    io = chosen.operands(q, k, v, o, lse)
    try:
        with _on_device(q.device):
            compiled = _with_stream_buffers(chosen.bind(io), q.device).run()
    except triton.runtime.errors.OutOfResources as exc:
        raise ValueError(f"config {chosen.config.label()} does not fit this GPU for "
                         f"D={q.shape[3]}: {exc}") from exc
    if io[3] is not o:
        o.copy_(io[3])
        return o, (lse if return_lse else None), None
    plan = _plan(chosen, compiled, tuple(o.shape), o.stride(), lse_shape,
                 None if return_lse else lse)
    return o, (lse if return_lse else None), plan


def _plan(chosen: Selection, compiled: CompiledKernel | None, out_shape: tuple[int, ...],
          out_stride: tuple[int, ...], lse_shape: tuple[int, ...],
          lse_dummy: torch.Tensor | None) -> LaunchPlan:
    """The plan that repeats ``chosen``'s launch: through ``compiled`` directly on a GPU."""
    call = chosen.call
    direct = None
    if isinstance(compiled, CompiledKernel):
        values = call.ordered_values()
        if values is not None:
            direct = DirectLaunch.bind(compiled, call.args[:IO_ARGS], values[IO_ARGS:])
    slot, scratch = call.counter_slot(), call.scratch_slot()
    return LaunchPlan(call=call, direct=direct, grid=(*call.grid, 1, 1)[:3], out_shape=out_shape,
                      out_stride=out_stride, lse_shape=lse_shape, lse_dummy=lse_dummy,
                      contiguous_q=chosen.contiguous_q, contiguous_kv=chosen.contiguous_kv,
                      counter_slot=None if slot is None else slot - IO_ARGS,
                      scratch_slot=None if scratch is None else scratch - IO_ARGS)
