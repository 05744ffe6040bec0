"""Edge inputs against the launch-plan cache, the torch.library ops and validation: each test
states an input that would break a promise of :func:`flashrepro.attention` (a cache hit that
skips a check, bad input without a clear error, a silently wrong result). Each failed at
a4bddb7 for the reason its docstring gives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from triton.backends.compiler import BaseBackend
from triton.runtime.jit import native_specialize_impl

import flashrepro
from flashrepro import launch
from tests.reference import assert_parity, random_qkv

SHAPE = (1, 2, 16, 16)


def _qkv(device: torch.device | str = "cpu") -> tuple[torch.Tensor, ...]:
    return random_qkv(*SHAPE[:3], SHAPE[2], SHAPE[3], torch.float16, torch.device(device))


def _offset_view(t: torch.Tensor, elements: int) -> torch.Tensor:
    """``t``'s values in a view of the same shape and strides, ``elements`` elements past the
    start of a larger buffer (a storage offset: the address moves by 2·elements bytes)."""
    buf = torch.empty(t.numel() + elements, dtype=t.dtype, device=t.device)
    view = buf[elements:].view(t.shape)
    view.copy_(t)
    return view


def _compiled(fn: Callable[..., Any]) -> Callable[..., Any]:
    torch._dynamo.reset()
    return torch.compile(fn, fullgraph=True, backend="aot_eager")


# --- 1. The plan cache: a hit that skips a check -------------------------------------------

class TestPlanKeyAlignment:
    """The key has one alignment bit for q, k and v together (``(q|k|v) & 15 == 0``), but
    Triton specializes each pointer argument on its own 16-byte divisibility, and on a GPU the
    plan relaunches the kernel compiled for its first call (``DirectLaunch``)."""

    def test_alignment_of_each_input_keys_the_plan(self) -> None:
        """q misaligned with k, v aligned, then q aligned with k misaligned: Triton's
        specialization of K differs between the two calls ('D' = divisible by 16, then not),
        yet both calls get the same plan key. On a GPU the second call then runs the kernel
        compiled with ``tt.divisibility=16`` on K with a K that is not 16-byte aligned
        (vectorized loads at a misaligned address: a CUDA error or wrong values)."""
        q, k, v = _qkv()
        q_mis, k_mis = _offset_view(q, 1), _offset_view(k, 1)
        first = (q_mis, k, v)
        second = (q, k_mis, v)
        spec = [tuple(native_specialize_impl(BaseBackend, t, False, True, True)
                      for t in call) for call in (first, second)]
        assert spec[0] != spec[1], "precondition: Triton compiles the two calls differently"
        keys = [launch._signature(*call, False, None, False, "top_left", False, None)
                for call in (first, second)]
        assert keys[0] != keys[1], ("two calls that Triton specializes differently share one "
                                    "launch plan (one alignment bit for q, k and v)")

    @pytest.mark.gpu
    def test_misaligned_k_after_misaligned_q_on_the_gpu(self) -> None:
        """The GPU consequence of the shared alignment bit: the plan made by a call with a
        misaligned q (K, V aligned: the kernel assumes 16-byte aligned K and V) is run for a
        call with a misaligned k. Expected: the right answer; with the bug a CUDA
        'misaligned address' error or a wrong output."""
        device = torch.device("cuda")
        q, k, v = random_qkv(1, 4, 300, 300, 128, torch.float16, device)
        flashrepro.attention(_offset_view(q, 1), k, v, causal=True)
        q2, k2, v2 = random_qkv(1, 4, 300, 300, 128, torch.float16, device)
        k2_mis = _offset_view(k2, 1)
        o = flashrepro.attention(q2, k2_mis, v2, causal=True)
        torch.cuda.synchronize()
        assert_parity(o, None, q2, k2_mis, v2, causal=True)


class TestPlanKeyDevice:
    """``Tensor.get_device()`` is -1 for the CPU and for the meta device alike, so under the
    interpreter a meta tensor finds the plan of a CPU call and skips the device check."""

    def test_meta_inputs_after_a_cpu_call(self) -> None:
        """After a valid CPU call, the same call on meta tensors must raise validation's
        ValueError (meta is not a device the kernels run on); it hits the CPU plan and fails
        inside Triton's interpreter with NotImplementedError 'Cannot copy out of meta
        tensor'."""
        q, k, v = _qkv()
        flashrepro.attention(q, k, v)
        meta = [t.to("meta") for t in (q, k, v)]
        with pytest.raises(ValueError, match="CUDA tensors"):
            flashrepro.attention(*meta)

    def test_meta_k_v_with_a_cpu_q_after_a_cpu_call(self) -> None:
        """q on the CPU, k and v on meta, after a valid CPU call: must raise 'q, k and v must
        be on one device' (as without a plan); the call hits the CPU plan instead."""
        q, k, v = _qkv()
        flashrepro.attention(q, k, v)
        with pytest.raises(ValueError, match="one device"):
            flashrepro.attention(q, k.to("meta"), v.to("meta"))


# --- 2. Validation: bad input without a clear error, or a silent wrong result --------------

class TestValidationGaps:
    def test_huge_integer_scale(self) -> None:
        """scale=10**400 (an int beyond float's range) must get validation's clear error
        naming scale; ``math.isfinite`` raises a raw OverflowError ('int too large to convert
        to float')."""
        q, k, v = _qkv()
        with pytest.raises((TypeError, ValueError), match="scale"):
            flashrepro.attention(q, k, v, scale=10**400)

    def test_sparse_q(self) -> None:
        """A sparse (COO) q must get a TypeError/ValueError naming q and the rule (strided
        tensors only); the plan key's ``q.stride()``/``data_ptr()`` raises a raw
        RuntimeError ('Cannot access data pointer of Tensor that doesn't have storage')
        before any check runs."""
        q, k, v = _qkv()
        with pytest.raises((TypeError, ValueError), match=r"\bq\b"):
            flashrepro.attention(q.to_sparse(), k, v)

    def test_out_that_requires_grad(self) -> None:
        """``out`` that requires grad, with autograd on: inputs that require grad are refused
        ("an output without a gradient would be a silent wrong result in training"), and
        torch's own out= ops refuse this too; here the kernel writes the leaf silently and no
        error is raised."""
        q, k, v = _qkv()
        out = torch.empty_like(q).requires_grad_()
        with pytest.raises((TypeError, ValueError, RuntimeError), match="out"):
            flashrepro.attention(q, k, v, out=out)

    def test_negative_bit_view_is_read_as_stored(self) -> None:
        """A float16 view with the negative bit set (``complex32.conj().imag``, public API:
        ``is_neg()`` is True, the memory holds the un-negated values) must be refused or
        resolved (``resolve_neg``); the kernel reads the raw memory, so the output is that
        of -q: silently wrong by O(1)."""
        q, k, v = _qkv()
        other = torch.randn(SHAPE, dtype=torch.float16)
        q_neg = torch.complex(other.float(), q.float()).to(torch.complex32).conj().imag
        assert q_neg.is_neg() and q_neg.dtype == torch.float16
        try:
            o = flashrepro.attention(q_neg, k, v)
        except (TypeError, ValueError):
            return  # a clear refusal is a fix too
        assert_parity(o, None, q_neg.resolve_neg(), k, v, causal=False)


# --- 3. torch.compile: flags the eager path refuses are accepted ---------------------------

class TestCompiledFlagTypes:
    """Eager ``attention`` refuses ``causal=1``, ``enable_gqa=1`` and ``scale=True``
    (TypeError: a bool is required / a bool is no scale). Under ``torch.compile`` the call
    goes through ``torch.ops.flashrepro.attention``, whose schema (``bool causal``, ``float?
    scale``) coerces them, and ``_traced`` checks only ``return_lse`` and ``config``: the same
    bad call runs."""

    @pytest.mark.parametrize("kwargs", [{"causal": 1}, {"causal": 2}, {"enable_gqa": 1},
                                        {"scale": True}],
                             ids=["causal=1", "causal=2", "enable_gqa=1", "scale=True"])
    def test_compiled_call_refuses_what_eager_refuses(self, kwargs: dict) -> None:
        """The eager error first (the precondition), then the compiled call must raise an
        error carrying the same message."""
        q, k, v = _qkv()
        with pytest.raises(TypeError) as eager:
            flashrepro.attention(q, k, v, **kwargs)
        rule = str(eager.value).split(",")[0]
        fn = _compiled(lambda q, k, v: flashrepro.attention(q, k, v, **kwargs))
        with pytest.raises(Exception, match=rule):
            fn(q, k, v)


def test_out_with_a_negation_bit_is_refused_on_every_call() -> None:
    """An ``out`` view with the negation bit would be written as stored (values negated on
    read): refused by name, also when its plain twin's plan is cached."""
    q, k, v = _qkv()
    plain = torch.empty_like(q)
    flashrepro.attention(q, k, v, out=plain)
    neg = torch.complex(torch.zeros_like(q, dtype=torch.float32),
                        torch.zeros_like(q, dtype=torch.float32)).to(torch.complex32).conj().imag
    assert neg.is_neg()
    with pytest.raises(ValueError, match="out must not carry torch's lazy negation bit"):
        flashrepro.attention(q, k, v, out=neg)


def test_compiled_call_refuses_the_config_strings_eager_refuses() -> None:
    """A label string ("64x64 w4 s3") or an unknown name is no config in eager mode; the
    traced call applies the same rule (its op would parse labels)."""
    q, k, v = _qkv()
    for config in ("64x64 w4 s3", "no-such-config"):
        with pytest.raises(ValueError, match="config must be a KernelConfig or one of"):
            flashrepro.attention(q, k, v, config=config)
        fn = _compiled(lambda q, k, v, config=config: flashrepro.attention(q, k, v,
                                                                          config=config))
        with pytest.raises(Exception, match="config must be a KernelConfig or one of"):
            fn(q, k, v)  # dynamo wraps the ValueError, its message kept
