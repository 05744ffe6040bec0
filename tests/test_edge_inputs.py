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
from tests.conftest import DEVICE
from tests.reference import assert_parity, random_qkv

SHAPE = (1, 2, 16, 16)


def _qkv(device: torch.device | str = DEVICE) -> tuple[torch.Tensor, ...]:
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
        other = torch.randn(SHAPE, dtype=torch.float16, device=DEVICE)
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


# --- 4. Inputs of 17b91dd: each test failed there for the reason its docstring gives -------

def test_out_write_bumps_the_version_counter() -> None:
    """The kernel writes ``out`` through its address, which torch's autograd cannot see: a
    tensor saved for a backward and then overwritten through ``out=`` gave a silently wrong
    gradient (torch's own out= ops bump the version and the backward raises). Also through a
    cached plan, and for ``out=q``."""
    q, k, v = _qkv()
    for out in (torch.empty_like(q), torch.empty_like(q), q):  # first call, plan, out=q
        x = torch.randn(SHAPE, dtype=torch.float16, device=DEVICE, requires_grad=True)
        y = (x * out).sum()  # saves out for the backward
        before = out._version
        flashrepro.attention(q, k, v, out=out)
        assert out._version > before
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.backward()


def test_wrapper_subclass_out_goes_through_the_operator() -> None:
    """An ``out`` that is a wrapper subclass (no storage) with plain q, k, v crashed in the
    launch ('Attempted to access the data pointer on an invalid python storage'); it now goes
    through the operator, whose output is copied in (``copy_`` bumps its version)."""
    from torch.testing._internal.two_tensor import TwoTensor

    q, k, v = _qkv()
    out = TwoTensor(torch.full_like(q, float("nan")), torch.full_like(q, float("nan")))
    before = out._version
    o = flashrepro.attention(q, k, v, out=out)
    assert o is out and out._version > before
    assert_parity(o.a, None, q, k, v, causal=False)
    assert_parity(o.b, None, q, k, v, causal=False)


@pytest.mark.parametrize("scale", [2.4e38, 1e39, 1e300])
def test_scale_beyond_float32(scale: float) -> None:
    """A finite float64 ``scale`` whose ``scale·log2(e)`` is infinite in float32 (the kernel's
    scale argument) made every output element NaN, even for q = 0 (0·inf), silently;
    SDPA's float64 answer is the mean of v there. Refused by name, eager and compiled."""
    q, k, v = _qkv()
    q = torch.zeros_like(q)
    with pytest.raises(ValueError, match=r"^scale must be .*float32"):
        flashrepro.attention(q, k, v, scale=scale)
    fn = _compiled(lambda q, k, v: flashrepro.attention(q, k, v, scale=scale))
    with pytest.raises(Exception, match=r"scale must be .*float32"):
        fn(q, k, v)


def test_largest_float32_scale_still_runs() -> None:
    """The boundary of the rule above: scale·log2(e) just inside float32 runs and, for q = 0
    (every score 0), gives the mean of v as the float64 reference."""
    q, k, v = _qkv()
    q = torch.zeros_like(q)
    scale = 2.3e38
    o = flashrepro.attention(q, k, v, scale=scale)
    assert_parity(o, None, q, k, v, causal=False, scale=scale)


def test_nested_inputs_are_refused_by_name() -> None:
    """A nested q (``torch.nested.nested_tensor``, layout strided) crashed in the plan key
    ('NestedTensorImpl doesn't support sizes'); a jagged one in the dispatcher
    ('Could not run flashrepro::attention ... AutogradNestedTensor')."""
    q, k, v = _qkv()
    for layout in (torch.strided, torch.jagged):
        nested = torch.nested.nested_tensor([q[0, 0], q[0, 1]], layout=layout)
        with pytest.raises(TypeError, match=r"^q must not be a nested tensor"):
            flashrepro.attention(nested, k, v)
        with pytest.raises(TypeError, match=r"^k must not be a nested tensor"):
            flashrepro.attention(q, nested, v)
        nested4 = torch.nested.nested_tensor([q[0], q[0]], layout=layout)  # 4-D
        with pytest.raises(TypeError, match=r"^q must not be a nested tensor"):
            launch.forward(nested4, k, v, causal=False, scale=None, enable_gqa=False,
                           causal_alignment="top_left", return_lse=False, config=None,
                           out=None, bshd=True)  # checked before its output is allocated


def test_subclass_k_v_with_a_plain_q() -> None:
    """Only q's type chose the operator path: a wrapper subclass k and v (no storage) with a
    plain q crashed in the launch ('Attempted to access the data pointer on an invalid python
    storage'), a fake k and v launched Triton on them. A wrapper subclass now goes through
    the operator (its own dispatch runs each component; checked element-wise), fake k/v get
    torch's error for mixing fake and real tensors."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.testing._internal.two_tensor import TwoTensor

    q, k, v = _qkv()
    k2, v2 = random_qkv(1, 2, 16, 16, 16, torch.float16, DEVICE)[1:]
    o = flashrepro.attention(q, TwoTensor(k, k2), TwoTensor(v, v2), causal=True)
    assert isinstance(o, TwoTensor)
    assert_parity(o.a, None, q, k, v, causal=True)
    assert_parity(o.b, None, q, k2, v2, causal=True)
    mode = FakeTensorMode()
    with pytest.raises(Exception, match=r"(?i)fake"):
        flashrepro.attention(q, mode.from_tensor(k), mode.from_tensor(v))


def test_subclass_k_v_in_the_transformers_prefill() -> None:
    """The transformers integration's eager prefill launches the plan path itself, so it must
    send a wrapper-subclass k and v (with a plain q) through the operator as
    flashrepro.attention does; it crashed in the launch ('invalid python storage')."""
    pytest.importorskip("transformers")
    from torch.testing._internal.two_tensor import TwoTensor

    from flashrepro.integrations import transformers as fr_tf

    q, k, v = _qkv()
    k2, v2 = random_qkv(1, 2, 16, 16, 16, torch.float16, DEVICE)[1:]
    with torch.no_grad():
        o = fr_tf._dense(q, TwoTensor(k, k2), TwoTensor(v, v2), True, None)
    assert isinstance(o, TwoTensor) and o.shape == (1, 16, 2, 16)
    assert_parity(o.a.transpose(1, 2), None, q, k, v, causal=True, bottom_right=True)
    assert_parity(o.b.transpose(1, 2), None, q, k2, v2, causal=True, bottom_right=True)


def test_vmap_goes_through_the_operator() -> None:
    """Under ``torch.vmap`` the inputs are functorch's batched tensors (type torch.Tensor, no
    storage): the eager launch crashed ('Cannot access data pointer of Tensor that doesn't
    have storage'). Batched over q only and over k, v only, checked element-wise."""
    q, k, v = random_qkv(3, 2, 16, 16, 16, torch.float16, DEVICE)

    def one(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return flashrepro.attention(q[None], k[None], v[None], causal=True)[0]

    o = torch.vmap(one)(q, k, v)
    assert_parity(o, None, q, k, v, causal=True)
    o = torch.vmap(one, in_dims=(None, 0, 0))(q[0], k, v)
    assert_parity(o, None, q[:1].expand_as(q), k, v, causal=True)
    o = torch.vmap(one, in_dims=(0, None, None))(q, k[0], v[0])
    assert_parity(o, None, q, k[:1].expand_as(k), v[:1].expand_as(v), causal=True)


def test_torch_func_derivatives_are_refused() -> None:
    """Routed through the operator under functorch transforms, grad of a vmapped call and jvp
    returned an all-zero gradient or tangent (torch's fallback for an op without a
    derivative formula), silently; eager calls refuse inputs that require grad. Each must
    now raise naming the input; an input the transform does not differentiate still runs."""
    q, k, v = random_qkv(2, 2, 16, 16, 16, torch.float16, DEVICE)

    def attend(x: torch.Tensor) -> torch.Tensor:
        return flashrepro.attention(x[None], k[:1], v[:1])[0]

    def batched_loss(x: torch.Tensor) -> torch.Tensor:
        return torch.vmap(attend)(x).float().sum()

    with pytest.raises(ValueError, match=r"^q is differentiated by a torch.func transform"):
        torch.func.grad(batched_loss)(q)
    with pytest.raises(ValueError, match=r"^q is differentiated by a torch.func transform"):
        torch.func.jvp(lambda x: flashrepro.attention(x, k, v), (q,), (torch.ones_like(q),))

    def loss_in_k(kk: torch.Tensor) -> torch.Tensor:  # q, v are constants of the transform
        o = torch.vmap(lambda x: flashrepro.attention(x[None], k[:1], v[:1])[0])(q)
        return o.float().sum() + kk.float().sum()

    assert torch.equal(torch.func.grad(loss_in_k)(k), torch.ones_like(k))


def test_forward_ad_tangents_are_refused() -> None:
    """A forward-mode AD dual (``torch.autograd.forward_ad.make_dual``) is a plain tensor to the
    eager path: its tangent was dropped and the output came back without one, silently, also
    from a cached launch plan. Each entry point now refuses it by name; a call without a dual
    inside the dual level still runs."""
    import torch.autograd.forward_ad as fwd_ad

    q, k, v = _qkv()
    flashrepro.attention(q, k, v, causal=True)  # a plan for this signature
    used = torch.full((q.shape[0],), k.shape[2], dtype=torch.int32)
    cu = torch.tensor([0, q.shape[2]], dtype=torch.int32)
    packed = [t[0].transpose(0, 1) for t in (q, k, v)]  # (L, H, D)
    with fwd_ad.dual_level():
        for name in ("q", "k", "v"):
            args = {"q": q, "k": k, "v": v}
            args[name] = fwd_ad.make_dual(args[name], torch.ones_like(args[name]))
            match = rf"^{name} carries a forward-mode AD tangent"
            with pytest.raises(ValueError, match=match):
                flashrepro.attention(args["q"], args["k"], args["v"], causal=True)
            with pytest.raises(ValueError, match=match):
                flashrepro.attention_kvcache(args["q"], args["k"], args["v"], used)
        dual = fwd_ad.make_dual(packed[0], torch.ones_like(packed[0]))
        with pytest.raises(ValueError, match=r"^q carries a forward-mode AD tangent"):
            flashrepro.attention_varlen(dual, packed[1], packed[2], cu, cu, q.shape[2],
                                        q.shape[2])
        o = flashrepro.attention(q, k, v, causal=True)
    assert_parity(o, None, q, k, v, causal=True)


def _kvcache_call(**change: Any) -> Callable[[], Any]:
    q, k, v = _qkv()
    args = dict(q=q[:, :, :1], k=k, v=v, seqused_k=torch.tensor([9], dtype=torch.int32,
                                                                 device=q.device), scale=None)
    args.update(change)
    return lambda: flashrepro.attention_kvcache(args.pop("q"), args.pop("k"), args.pop("v"),
                                                **args)


def _varlen_call(**change: Any) -> Callable[[], Any]:
    q, k, v = (t[0].transpose(0, 1) for t in _qkv())  # (total, H, D)
    cu = torch.tensor([0, 5, 16], dtype=torch.int32, device=q.device)
    args = dict(q=q, k=k, v=v, cu_seqlens_q=cu, cu_seqlens_k=cu, scale=None)
    args.update(change)
    return lambda: flashrepro.attention_varlen(
        args.pop("q"), args.pop("k"), args.pop("v"), args.pop("cu_seqlens_q"),
        args.pop("cu_seqlens_k"), 11, 11, **args)


@pytest.mark.parametrize("call,error,message", [
    (lambda: _kvcache_call(scale=True), TypeError, "scale must be None or a real number"),
    (lambda: _kvcache_call(scale="0.3"), TypeError, "scale must be None or a real number"),
    (lambda: _kvcache_call(seqused_k=[9]), TypeError, "seqused_k must be"),
    (lambda: _kvcache_call(k=[0.0]), TypeError, "k must be a torch.Tensor"),
    (lambda: _kvcache_call(out=torch.zeros(1, 2, 1, 16, dtype=torch.float16, device=DEVICE,
                                           requires_grad=True)), ValueError, "out requires grad"),
    (lambda: _varlen_call(scale=True), TypeError, "scale must be None or a real number"),
    (lambda: _varlen_call(cu_seqlens_q=[0, 5, 16]), TypeError, "cu_seqlens_q must be"),
    (lambda: _varlen_call(v=None), TypeError, "v must be a torch.Tensor"),
], ids=["kvcache-scale-bool", "kvcache-scale-str", "kvcache-seqused-list", "kvcache-k-list",
        "kvcache-out-grad", "varlen-scale-bool", "varlen-cu-list", "varlen-v-none"])
def test_operator_path_names_the_argument_as_eager(call: Callable[[], Callable[[], Any]],
                                                    error: type, message: str) -> None:
    """Under a dispatch mode (here the flop counter) the varlen and KV-cache calls go through
    their operators, whose schema coerced ``scale=True`` to 1.0 and failed on other types
    with the dispatcher's RuntimeError; they must refuse as the eager call does."""
    from torch.utils.flop_counter import FlopCounterMode

    with pytest.raises(error, match=message):
        call()()
    with FlopCounterMode(display=False), pytest.raises(error, match=message):
        call()()


def test_an_inference_out_outside_inference_mode_is_refused() -> None:
    """torch forbids writing an inference tensor in place outside inference mode: the eager
    call wrote it silently (on a plan hit too) and the operator path raised the dispatcher's
    RuntimeError. Inside inference mode it is written."""
    q, k, v = _qkv()
    flashrepro.attention(q, k, v, out=torch.empty_like(q))  # a plan for this signature
    with torch.inference_mode():
        out = torch.full_like(q, float("nan"))
    param = torch.nn.Parameter(q.clone(), requires_grad=False)  # the operator path
    for call in (lambda: flashrepro.attention(q, k, v, out=out),
                 lambda: flashrepro.attention(param, k, v, out=out),
                 lambda: flashrepro.attention_kvcache(q, k, v, out=out)):
        with pytest.raises(ValueError, match="out is an inference tensor"):
            call()
    with torch.inference_mode():
        assert flashrepro.attention(q, k, v, out=out) is out
    assert_parity(out, None, q, k, v, causal=False)


def test_a_self_overlapping_out_on_the_operator_path_is_refused_by_name() -> None:
    """The operator path writes ``out`` by ``copy_``: a self-overlapping one raised the
    dispatcher's RuntimeError instead of the eager call's ValueError."""
    q, k, v = _qkv()
    out = torch.empty(*SHAPE[:2], 1, SHAPE[3], dtype=q.dtype, device=q.device).expand(SHAPE)
    param = torch.nn.Parameter(q.clone(), requires_grad=False)
    for args in ((q, k, v), (param, k, v)):
        with pytest.raises(ValueError, match="out must not overlap itself"):
            flashrepro.attention(*args, out=out)


def test_compiled_calls_take_a_new_scale_and_refuse_a_bad_one() -> None:
    """A second scale makes torch.compile's float symbolic: the scale rule used
    ``math.isfinite``, which dynamo cannot trace (fullgraph failed; a graph break per layer
    otherwise). The rule now holds on the symbolic value: a negative scale is still refused."""
    q, k, v = _qkv()
    used = torch.tensor([9], dtype=torch.int32, device=q.device)
    cu = torch.tensor([0, 5, 16], dtype=torch.int32, device=q.device)
    qt, kt, vt = (t[0].transpose(0, 1) for t in (q, k, v))
    calls = {
        "attention": lambda s: flashrepro.attention(q, k, v, scale=s),
        "kvcache": lambda s: flashrepro.attention_kvcache(q[:, :, :1], k, v, used, scale=s),
        "varlen": lambda s: flashrepro.attention_varlen(qt, kt, vt, cu, cu, 11, 11, scale=s),
    }
    for name, call in calls.items():
        fn = _compiled(call)
        for scale in (0.25, 0.3):
            torch.testing.assert_close(fn(scale), call(scale), rtol=0, atol=0, msg=name)
        with pytest.raises(Exception, match="scale must be a finite number >= 0"):
            fn(-1.0)


def _zeros_without_memory(like: torch.Tensor) -> torch.Tensor:
    """A ZeroTensor (autograd's zeros with a null data pointer) of ``like``'s shape."""
    return torch._efficientzerotensor(like.shape, dtype=like.dtype, device=like.device)


@pytest.mark.parametrize("name", ["q", "k", "v", "out"])
def test_zero_tensor_is_refused_on_every_call(name: str) -> None:
    """A ZeroTensor has no memory (data pointer 0): launched, the kernel would read or write
    address 0 (an illegal access on a GPU). Refused by name, also when its plain twin's plan
    is cached (the plan's key reads only the pointer's alignment, which 0 passes)."""
    q, k, v = _qkv()
    args = {"q": q, "k": k, "v": v, "out": torch.empty_like(q)}
    flashrepro.attention(**args)
    args[name] = _zeros_without_memory(q)
    with pytest.raises(ValueError, match=f"{name} is a ZeroTensor"):
        flashrepro.attention(**args)


@pytest.mark.parametrize("name", ["q", "k", "v", "out", "seqused_k"])
def test_zero_tensor_is_refused_by_the_kvcache_call(name: str) -> None:
    """As above, for :func:`flashrepro.attention_kvcache`, after a call of the same shapes."""
    q = torch.randn(2, 4, 1, 16, dtype=torch.float16, device=DEVICE)
    k, v = (torch.randn(2, 2, 32, 16, dtype=torch.float16, device=DEVICE) for _ in range(2))
    used = torch.tensor([32, 7], dtype=torch.int32, device=DEVICE)
    args = {"q": q, "k": k, "v": v, "seqused_k": used, "out": torch.empty_like(q)}
    flashrepro.attention_kvcache(**args, enable_gqa=True)
    args[name] = _zeros_without_memory(args[name])
    with pytest.raises(ValueError, match=f"{name} is a ZeroTensor"):
        flashrepro.attention_kvcache(**args, enable_gqa=True)


@pytest.mark.parametrize("cached", [False, True], ids=["first-call", "plan-cached"])
def test_kvcache_out_sharing_memory_with_seqused_k_is_refused(cached: bool) -> None:
    """The kernel reads ``seqused_k`` while other programs write ``out``: an ``out`` over the
    lengths' bytes would change the lengths mid-launch. Refused by name, also when a call of
    the same shapes with apart buffers is cached (the per-call check looked at q, k and v)."""
    q = torch.randn(2, 4, 1, 16, dtype=torch.float16, device=DEVICE)
    k, v = (torch.randn(2, 2, 32, 16, dtype=torch.float16, device=DEVICE) for _ in range(2))
    if cached:
        flashrepro.attention_kvcache(q, k, v, torch.tensor([32, 7], dtype=torch.int32,
                                                           device=DEVICE),
                                     out=torch.empty_like(q), enable_gqa=True)
    buf = torch.zeros(q.numel() * q.element_size(), dtype=torch.uint8, device=DEVICE)
    out = buf.view(torch.float16).view(q.shape)
    used = buf[:8].view(torch.int32)
    used.copy_(torch.tensor([32, 7], dtype=torch.int32))
    with pytest.raises(ValueError, match="out must not share memory with seqused_k"):
        flashrepro.attention_kvcache(q, k, v, used, out=out, enable_gqa=True)
