"""flashrepro.native: plan hits launched from C++ (csrc/plan_launch.cpp).

On the GPU: DynamicCache-like decodes (the cache grows by a key per call) through
transformers' attention function, and equal-length prefills through it and through
``torch.ops.flashrepro.attention_bshd`` (eager and in a compiled graph), where a call whose
plan Python made before launches from C++ (the registries' launch counts say which did), each
output against a reference with its memory NaN-poisoned first and bit for bit against the
Python path's; the calls the extension must hand back to Python, each by name; the op's
Python errors through its C++ kernel. On the CPU: the switch, a failed build, registration of
CPU tensors, the decode's parameter names against the kernel's, and the argument packing and
TMA descriptor arguments against Triton 3.6's launcher and driver"""

from __future__ import annotations

import warnings

import pytest
import torch

from flashrepro import launch_varlen, native
from flashrepro.integrations import transformers as fr_tf
from tests.conftest import REQUIRE_GPU
from tests.varlen_reference import assert_parity, kvcache_reference, kvcache_sdpa


@pytest.fixture(scope="module")
def registry():
    """The built extension's registry. Where it does not build (no C++ compiler or ninja) the
    tests skip, but on a GPU runner (``FLASHREPRO_REQUIRE_GPU=1``: the image has both) they
    fail."""
    saved = native._REGISTRY
    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings():
        warnings.simplefilter("error")  # a failed build: its warning, as an error
        mp.setenv(native.SWITCH, "1")
        native._REGISTRY = native._UNTRIED
        try:
            built = native.registry()
        except RuntimeWarning as error:
            if REQUIRE_GPU:
                pytest.fail(f"the extension does not build on this GPU runner: {error}")
            pytest.skip(f"the extension does not build here: {error}")
        finally:
            native._REGISTRY = saved
    built.clear()
    return built


@pytest.fixture
def use(registry, monkeypatch):
    """The registry, switched on for the test; emptied after it."""
    monkeypatch.setattr(native, "_REGISTRY", registry)
    yield registry
    registry.clear()


def test_switch_off_means_none(monkeypatch):
    monkeypatch.delenv(native.SWITCH, raising=False)
    monkeypatch.setattr(native, "_REGISTRY", native._UNTRIED)
    assert native.registry() is None


def test_failed_build_warns_and_falls_back(monkeypatch):
    import torch.utils.cpp_extension as cpp

    def broken(*args, **kwargs):
        raise OSError("no compiler")

    monkeypatch.setenv(native.SWITCH, "1")
    monkeypatch.setattr(native, "_REGISTRY", native._UNTRIED)
    monkeypatch.setattr(cpp, "load", broken)
    with pytest.warns(RuntimeWarning, match="did not build.*no compiler"):
        assert native.registry() is None


def test_sources_name_kernel_parameters(registry):
    """Every per-call source is a decode-kernel parameter or a pointer slot the registration
    maps (a renamed parameter would otherwise be packed as its first call's value)."""
    assert set(native._IO_SOURCES) == set(launch_varlen._PARAMS[:launch_varlen._IO])
    scalars = set(native._SOURCES) - set(native._IO_SOURCES.values())
    assert scalars == {"stride_kb", "stride_kh", "stride_kn", "stride_kd", "max_seqlen_k"}
    assert scalars <= set(launch_varlen._PARAMS)


def _decode_signature(stride_type: str = "i32") -> dict[str, str]:
    """A decode kernel's ``src.signature`` as Triton 3.6 writes it for a bf16 call at
    Lq = 1 with k's last stride 1 (those two ints specialized as constexprs)."""
    params = launch_varlen._PARAMS
    io = params[:launch_varlen._IO]
    pointer = {"LSE": "*fp32", "SEQUSED_K": "*i32", "PARTS": "*fp32", "LOCKS": "*i32"}
    signature = {name: pointer.get(name, "*bf16") for name in io}
    for name in params[launch_varlen._IO:]:
        if name in ("stride_kd", "stride_qd", "stride_od", "seqlen_q") or name.isupper():
            signature[name] = "constexpr"
        elif name == "qk_scale":
            signature[name] = "fp32"
        elif name.startswith("stride_k") or name == "max_seqlen_k":
            signature[name] = stride_type
        else:
            signature[name] = "i32"
    return signature


@pytest.mark.parametrize("stride_type", ["i32", "i64"])
def test_pack_parameters_as_tritons_launcher(stride_type):
    """One slot per passed parameter in order, then two null scratch pointers; scalars in
    their storage; pointers, k's strides and L_max patched per call at their width."""
    import struct

    signature = _decode_signature(stride_type)
    values = {name: 1000 + i for i, name in enumerate(launch_varlen._PARAMS)}
    values["qk_scale"] = 0.12751743
    sources = {"q": 0, "k": 1, "v": 2, "o": 3, "parts": 4, "locks": 5, "stride_kb": 6,
               "stride_kh": 7, "stride_kn": 8, "stride_kd": 9, "max_seqlen_k": 10}
    packed, patches = native.pack_parameters(signature, values, sources)
    passed = [name for name, ty in signature.items() if ty != "constexpr"]
    assert len(packed) == len(passed) + 2 and packed[-2:] == [0, 0]
    by_slot = {slot: (source, width) for slot, source, width in patches}
    width = 4 if stride_type == "i32" else 8
    for slot, name in enumerate(passed):
        if signature[name].startswith("*"):
            want = {"LSE": "q", "SEQUSED_K": "q"}.get(name, native._IO_SOURCES[name])
            assert by_slot[slot] == (sources[want], 8), name
        elif name in ("stride_kb", "stride_kh", "stride_kn", "max_seqlen_k"):
            assert by_slot[slot] == (sources[name], width), name
        elif name == "qk_scale":
            assert packed[slot] == int.from_bytes(struct.pack("<f", values[name]), "little")
        else:
            assert slot not in by_slot and packed[slot] == values[name], name
    assert native.pack_parameters({**signature, "qk_scale": "fp16"}, values, sources) is None
    assert native.pack_parameters({**signature, "max_seqlen_k": "fp32"}, values,
                                  sources) is None


def test_add_refuses_cpu_tensors(registry):
    q = torch.randn(1, 16, 1, 128)
    k = v = torch.randn(1, 8, 64, 128)
    with pytest.raises(RuntimeError, match="plain 4-D CUDA tensors"):
        registry.add(q, k, v, True, None, [1, 1], 4096, 64, 128, 1, 1, [1, 1, 1], 4, 0, False,
                     False, [0], [], 0, None, None, None)


def _grow(k: torch.Tensor, v: torch.Tensor, new: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """The caches after a DynamicCache step: a new tensor, ``new`` keys longer."""
    b, h_kv, _, d = k.shape
    return tuple(torch.cat([t, torch.randn(b, h_kv, new, d, device=t.device, dtype=t.dtype)],
                           dim=2) for t in (k, v))


def _poison_next(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    """NaN into the caching allocator's block that the next allocation of ``shape`` gets."""
    torch.empty(shape, dtype=dtype, device="cuda").fill_(float("nan"))


def _python(q, k, v) -> torch.Tensor:
    """The Python path's output of the call the extension serves."""
    return launch_varlen.kvcache_forward(q, k, v, None, causal=True, scale=None,
                                         enable_gqa=True, num_splits=None, return_lse=False,
                                         bshd=True)[0]


def _check(o: torch.Tensor, q, k, v) -> None:
    b = q.shape[0]
    ref, ref_lse = kvcache_reference(q, k, v, [k.shape[2]] * b, causal=True)
    peer = kvcache_sdpa(q, k, v, [k.shape[2]] * b, causal=True)
    assert o.shape == (b, 1, q.shape[1], q.shape[3])
    assert_parity(o.transpose(1, 2), None, ref, ref_lse, peer)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("b", "l_start"), [(1, 1020), (16, 200), (2, 4090)])
def test_growing_cache_launches_natively(use, dtype, b, l_start):
    """Two decodes over the same cache lengths: the first call takes Python's path and
    registers its plan, later ones launch natively but where Triton specializes the new
    length or strides differently (a multiple of 16 or not; from 4096 keys another split
    count), which Python takes and registers; the second decode launches every call. Each
    native output equals the Python path's bit for bit (the same kernel and arguments).
    B=1 splits the keys (the merge's stream buffers), B=16 at a short cache does not."""
    for decode in range(2):
        k, v = (torch.randn(b, 8, l_start, 128, device="cuda", dtype=dtype) for _ in range(2))
        served = 0
        for step in range(10):
            q = torch.randn(b, 16, 1, 128, device="cuda", dtype=dtype)
            before = use.launches
            _poison_next((b, 1, 16, 128), dtype)
            with torch.inference_mode():
                o = fr_tf._kvcache(q, k, v, None, True, None)
            served += use.launches - before
            _check(o, q, k, v)
            if use.launches > before:
                assert torch.equal(o, _python(q, k, v)), "native and Python outputs differ"
            if decode == 0 and step == 0:
                assert use.launches == before, "the first call must take Python's path"
            k, v = _grow(k, v)
        if decode == 0:
            assert served >= 7, f"the extension launched {served} of 9 calls after the first"
        else:
            assert served == 10, f"the extension launched {served} of 10 calls"


@pytest.mark.gpu
def test_calls_handed_back_to_python(use, monkeypatch):
    """The extension serves none of these calls of a registered signature (each returns
    None: Python takes it), and serves the registered call itself after each."""
    import torch.autograd.forward_ad as fw_ad
    from triton import knobs

    k, v = (torch.randn(1, 8, 300, 128, device="cuda", dtype=torch.float16) for _ in range(2))
    q = torch.randn(1, 16, 1, 128, device="cuda", dtype=torch.float16)
    fr_tf._kvcache(q, k, v, None, True, None)  # registers a split plan, default stream
    assert use.decode(q, k, v, True, None) is not None
    launches = use.launches

    refused = {
        "q needs grad": (q.clone().requires_grad_(), k, v, True, None),
        "not causal": (q, k, v, False, None),
        "another scale": (q, k, v, True, 0.5),
        "an int scale": (q, k, v, True, 1),
        "causal an int": (q, k, v, 1, None),
        "causal None": (q, k, v, None, None),
        "causal a string": (q, k, v, "x", None),
        "causal a tensor": (q, k, v, torch.tensor(True), None),
        "float64 q": (q.double(), k, v, True, None),
        "another head dim": (q[..., :64], k[..., :64], v[..., :64], True, None),
        "lengths differ": (q, k, v[:, :, :-1], True, None),
        "strides differ": (q, k, v.transpose(2, 3).contiguous().transpose(2, 3), True, None),
        "no key": (q, k[:, :, :0], v[:, :, :0], True, None),
        "q unaligned": (torch.empty(q.numel() + 1, device="cuda", dtype=q.dtype)[1:]
                        .view(q.shape).copy_(q), k, v, True, None),
        "cpu tensors": (q.cpu(), k.cpu(), v.cpu(), True, None),
        "nested k": (q, torch.nested.nested_tensor([k[0], k[0, :, :7]]), v, True, None),
    }
    for name, args in refused.items():
        assert use.decode(*args) is None, name
    monkeypatch.setenv("DISABLE_MMA_V3", "1")
    assert use.decode(q, k, v, True, None) is None, "another DISABLE_MMA_V3"
    monkeypatch.delenv("DISABLE_MMA_V3")
    with fw_ad.dual_level():
        dual = fw_ad.make_dual(q, torch.randn_like(q))
        assert use.decode(dual, k, v, True, None) is None, "a tangent"
    with torch.cuda.stream(torch.cuda.Stream()):
        assert use.decode(q, k, v, True, None) is None, "a split plan on another stream"
    hook = knobs.runtime.launch_enter_hook
    hook.add(print)
    try:
        assert use.decode(q, k, v, True, None) is None, "a launch hook (Proton's HookChain)"
    finally:
        hook.remove(print)
    knobs.runtime.launch_enter_hook = print
    try:
        assert use.decode(q, k, v, True, None) is None, "a launch hook (a callable)"
    finally:
        knobs.runtime.launch_enter_hook = hook
    assert use.launches == launches
    assert use.decode(q, k, v, True, None) is not None


@pytest.mark.gpu
def test_capture_is_handed_back(use):
    """A CUDA-graph capture takes Python's path (fresh split buffers, the graph's memory),
    even on the stream of a plan without splits that the extension serves outside it."""
    k, v = (torch.randn(16, 8, 200, 128, device="cuda", dtype=torch.float16) for _ in range(2))
    q = torch.randn(16, 16, 1, 128, device="cuda", dtype=torch.float16)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fr_tf._kvcache(q, k, v, None, True, None)  # registers
        assert use.decode(q, k, v, True, None) is not None
        stream.synchronize()
        launches = use.launches
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            assert use.decode(q, k, v, True, None) is None
        assert use.launches == launches


# --- the equal-length forward (ForwardRegistry) ------------------------------------------


@pytest.fixture
def use_forward(use):
    """The forward registry, switched on with the decode one; emptied after the test."""
    yield native._FORWARD
    native._FORWARD.clear()


def test_forward_sources_name_the_io(registry):
    assert native._FORWARD_SOURCES.keys() == {"q", "k", "v", "o", "lse", "counters", "scratch"}


class _Desc:
    """A TMA descriptor template: what pack_forward reads of one."""

    def __init__(self, shape, strides, padding="zero"):
        self.shape, self.strides, self.padding, self.base = shape, strides, padding, None


_META = {"swizzle": 3, "elem_size": 2, "elem_type": 10, "block_size": [1, 1, 64, 64],
         "fp4_padded": False}


def test_tensor_map_arguments_as_fill_tma_descriptor():
    """driver.c's fillTMADescriptor: dims and box innermost first, byte strides of the outer
    dims innermost first, Triton's data type (bf16's 10 is the driver's 9), NaN fill."""
    q = _Desc([2, 16, 1024, 128], [2097152, 128, 2048, 1])
    assert native.tensor_map_arguments(q, _META) == (
        9, [128, 1024, 16, 2], [4096, 256, 4194304], [64, 64, 1, 1], 3, 0)
    assert native.tensor_map_arguments(_Desc(q.shape, q.strides, "nan"), _META)[-1] == 1
    assert native.tensor_map_arguments(q, {**_META, "fp4_padded": True}) is None
    assert native.tensor_map_arguments(_Desc(q.shape, [1, 1, 1, 2]), _META) is None


def test_pack_forward_as_tritons_launcher():
    """A descriptor: its map's slot, then its shape as i32 and strides as i64; a pointer: a
    slot patched from its source; scalars in their storage; constexprs not passed; two null
    scratch pointers last. Anything it cannot pack: None."""
    import struct

    q = _Desc([1, 16, 1024, 128], [2097152, 128, 2048, 1])
    signature = {"q_desc": "tensordesc<bf16[1, 1, 64, 128],x>", "LSE": "*fp32",
                 "n": "i32", "HEAD_DIM": "constexpr", "wide": "i64", "qk_scale": "fp32",
                 "flag": "i1", "counter": "*i32"}
    values = [q, None, 7, 128, -3, 0.125, True, None]
    sources = {0: 0, 1: 4, 7: 5}
    packed, pointers, descriptors = native.pack_forward(signature, values, [_META], sources)
    assert packed == [0, 1, 16, 1024, 128, 2097152, 128, 2048, 1, 0, 7,
                      (-3) % 2**64, int.from_bytes(struct.pack("<f", 0.125), "little"), 1,
                      0, 0, 0]
    assert pointers == [(9, 4), (14, 5)]
    assert descriptors == [(0, 0, *native.tensor_map_arguments(q, _META))]
    assert native.pack_forward(signature, values, [None], sources) is None  # not lowered
    assert native.pack_forward(signature, values, [_META], {0: 0, 1: 4}) is None
    assert native.pack_forward({**signature, "n": "fp16"}, values, [_META], sources) is None
    assert native.pack_forward(signature, values[:-1], [_META], sources) is None


def test_forward_add_refuses_cpu_tensors(registry):
    q = torch.randn(1, 16, 64, 128)
    with pytest.raises(RuntimeError, match="plain 4-D CUDA tensors"):
        native._FORWARD.add(q, q, q, True, None, True, "top_left", True, True, [1], [1], [1], None,
                            1, [1, 1, 1], 4, 0, False, False, [0], [], [], 0, None, None, None)


def _prefill(b: int, h: int, h_kv: int, length: int, d: int, dtype: torch.dtype):
    """q, k, v as transformers passes them: (B, H, L, D) views of (B, L, H, D) projections."""
    q = torch.randn(b, length, h, d, device="cuda", dtype=dtype).transpose(1, 2)
    k, v = (torch.randn(b, length, h_kv, d, device="cuda", dtype=dtype).transpose(1, 2)
            for _ in range(2))
    return q, k, v


def _forward_python(q, k, v, causal, alignment="bottom_right", return_lse=False, bshd=True,
                    lse=False):
    """The Python path's o (with ``lse``: (o, lse)) of the call the extension serves."""
    from flashrepro import launch

    out = launch.forward(q, k, v, causal=causal, scale=None, enable_gqa=True,
                         causal_alignment=alignment, return_lse=return_lse, config=None,
                         out=None, bshd=bshd)
    return out if lse else out[0]


_FORWARD_CASES = [  # Qwen3's prefill shapes (the ws kernel; 4x4096 with its tile counter),
    (1, 16, 8, 1024, 128, torch.bfloat16, True),  # a D=64 one, a non-causal one
    (4, 16, 8, 4096, 128, torch.bfloat16, True),
    (2, 16, 16, 500, 64, torch.float16, True),
    (2, 16, 8, 300, 128, torch.float16, False),
]


@pytest.mark.gpu
@pytest.mark.parametrize(("b", "h", "h_kv", "length", "d", "dtype", "causal"), _FORWARD_CASES)
def test_forward_launches_natively(use_forward, b, h, h_kv, length, d, dtype, causal):
    """transformers' prefill (eager) and the compiled graph's op: the first call of each takes
    Python's path and registers its plan, later calls on fresh inputs launch from C++, each
    output (its memory NaN-poisoned first) against a float64 reference and bit for bit against
    the Python path's."""
    from tests.reference import assert_parity as assert_dense_parity

    for call in range(4):
        q, k, v = _prefill(b, h, h_kv, length, d, dtype)
        before = use_forward.launches
        _poison_next((b, length, h, d), dtype)
        with torch.inference_mode():
            o = fr_tf._dense(q, k, v, causal, None)  # (B, L, H, D)
        assert use_forward.launches == before + (call > 0), call
        assert o.shape == (b, length, h, d) and o.is_contiguous()
        assert torch.equal(o, _forward_python(q, k, v, causal).transpose(1, 2))
        assert_dense_parity(o.transpose(1, 2), None, q, k, v, causal=causal, bottom_right=True)
        before = use_forward.launches
        o = torch.ops.flashrepro.attention_bshd(q, k, v, causal, None, True, "top_left", None)
        assert use_forward.launches == before + (call > 0), call
        assert o.stride() == _forward_python(q, k, v, causal, "top_left", True).stride()
        assert torch.equal(o, _forward_python(q, k, v, causal, "top_left", True))
        want = _forward_python(q, k, v, causal, "top_left", True, bshd=False, lse=True)
        for name in ("attention", "attention_lse"):  # one plan: o (B, H, L, D), the LSE stored
            before = use_forward.launches
            got = getattr(torch.ops.flashrepro, name)(q, k, v, causal, None, True, "top_left",
                                                      None)
            assert use_forward.launches == before + (call > 0 or name != "attention"), name
            if name == "attention":
                assert got.is_contiguous() and torch.equal(got, want[0])
            else:
                assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.gpu
def test_forward_calls_handed_back_to_python(use_forward, monkeypatch):
    """The extension serves none of these calls of a registered signature (each returns
    None: Python takes it), and serves the registered call itself after each. The plan takes
    its stream's tile counter (Qwen3's 4x4096 prefill), so another stream is refused."""
    import torch.autograd.forward_ad as fw_ad
    from triton import knobs

    from flashrepro import launch

    q, k, v = _prefill(4, 16, 8, 4096, 128, torch.bfloat16)
    fr_tf._dense(q, k, v, True, None)  # registers, default stream
    flags = (True, "bottom_right", False)
    assert use_forward.forward(q, k, v, True, None, *flags) is not None
    key = launch._signature(q, k, v, True, None, True, "bottom_right", False, None, None, True)
    assert launch._PLANS[key].counter_slot is not None, "the case no longer takes a counter"
    launches = use_forward.launches
    unaligned = torch.empty(q.numel() + q.stride(1) * q.shape[1], device="cuda",
                            dtype=q.dtype)[1:].as_strided(q.shape, q.stride()).copy_(q)
    refused = {
        "q needs grad": (q.clone().requires_grad_(), k, v, True, None, *flags),
        "not causal": (q, k, v, False, None, *flags),
        "another scale": (q, k, v, True, 0.5, *flags),
        "an int scale": (q, k, v, True, 1, *flags),
        "causal an int": (q, k, v, 1, None, *flags),
        "enable_gqa None": (q, k, v, True, None, None, "bottom_right", False),
        "another alignment": (q, k, v, True, None, True, "top_left", False),
        "alignment bytes": (q, k, v, True, None, True, b"bottom_right", False),
        "the LSE stored": (q, k, v, True, None, True, "bottom_right", True),
        "float16 q": (q.half(), k, v, True, None, *flags),
        "contiguous q": (q.contiguous(), k, v, True, None, *flags),
        "shorter v": (q, k, v[:, :, :-1], True, None, *flags),
        "q unaligned": (unaligned, k, v, True, None, *flags),
        "cpu tensors": (q.cpu(), k.cpu(), v.cpu(), True, None, *flags),
        "nested k": (q, torch.nested.nested_tensor([k[0], k[0, :, :7]]), v, True, None, *flags),
    }
    for name, args in refused.items():
        assert use_forward.forward(*args) is None, name
    monkeypatch.setenv("DISABLE_MMA_V3", "1")
    assert use_forward.forward(q, k, v, True, None, *flags) is None, "another DISABLE_MMA_V3"
    monkeypatch.delenv("DISABLE_MMA_V3")
    with fw_ad.dual_level():
        dual = fw_ad.make_dual(q, torch.randn_like(q))
        assert use_forward.forward(dual, k, v, True, None, *flags) is None, "a tangent"
    with torch.cuda.stream(torch.cuda.Stream()):
        assert use_forward.forward(q, k, v, True, None, *flags) is None, "another stream"
    hook = knobs.runtime.launch_enter_hook
    hook.add(print)
    try:
        assert use_forward.forward(q, k, v, True, None, *flags) is None, "a launch hook"
    finally:
        hook.remove(print)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            assert use_forward.forward(q, k, v, True, None, *flags) is None, "a capture"
    assert use_forward.launches == launches
    assert use_forward.forward(q, k, v, True, None, *flags) is not None
    launch.clear_plans()  # a changed kernel choice must be consulted: no plan outlives it
    assert use_forward.plans == 0 and use_forward.forward(q, k, v, True, None, *flags) is None


def test_clear_plans_empties_the_registries(registry):
    """launch.clear_plans() calls the hook the build registered (both registries' clear)."""
    from flashrepro import launch

    cleared = []
    hook = launch.CLEAR_HOOKS["native"]
    assert hook.__closure__ is not None and native._FORWARD in [
        c.cell_contents for c in hook.__closure__]
    launch.CLEAR_HOOKS["spy"] = lambda: cleared.append(True)
    try:
        launch.clear_plans()
    finally:
        del launch.CLEAR_HOOKS["spy"]
    assert cleared == [True] and native._FORWARD.plans == 0


@pytest.mark.gpu
def test_compiled_op_launches_natively(use_forward):
    """In a compiled graph ``torch.ops.flashrepro.attention_bshd`` (transformers' call) and
    ``flashrepro.attention`` (``torch.ops.flashrepro.attention``) dispatch to the extension's
    CUDA kernels: after the op's Python kernel registered the plan (its first call), the
    graph's calls launch from C++, bit for bit the Python path's output."""
    import flashrepro

    torch._dynamo.reset()

    def layer(q, k, v):
        o = torch.ops.flashrepro.attention_bshd(q * 1.0, k, v, True, None, True,
                                                "bottom_right", None)
        return o.transpose(1, 2) + 1.0

    def public(q, k, v):
        return flashrepro.attention(q * 1.0, k, v, causal=True, enable_gqa=True) + 1.0

    for fn, bshd in ((layer, True), (public, False)):
        compiled = torch.compile(fn, fullgraph=True, dynamic=False)
        served = 0
        for _ in range(4):
            q, k, v = _prefill(1, 16, 8, 1024, 128, torch.bfloat16)
            before = use_forward.launches
            out = compiled(q, k, v)
            served += use_forward.launches - before
            want = _forward_python(q * 1.0, k, v, True, "bottom_right" if bshd else "top_left",
                                   True, bshd=bshd)
            assert torch.equal(out, (want.transpose(1, 2) if bshd else want) + 1.0)
        assert served >= 3, f"{fn.__name__}: the extension launched {served} of 4 calls"


@pytest.mark.gpu
def test_op_kernel_passes_python_errors_through(use_forward):
    """A call the extension's CUDA kernel of the op does not serve goes to the op's Python
    kernel, whose errors reach the caller with their type and message."""
    q, k, v = _prefill(1, 16, 8, 256, 128, torch.float16)
    op = torch.ops.flashrepro.attention_bshd
    op(q, k, v, True, None, True, "top_left", None)  # registers
    with pytest.raises(TypeError, match=r"q has dtype torch\.float32"):
        op(q.float(), k, v, True, None, True, "top_left", None)
    with pytest.raises(ValueError, match="causal_alignment"):
        op(q, k, v, True, None, True, "middle", None)
    with pytest.raises(ValueError, match="config"):
        op(q, k, v, True, None, True, "top_left", "no-such-config")


@pytest.mark.parametrize("name", ["attention", "attention_lse", "attention_bshd"])
def test_op_kernels_fall_back_to_python(registry, device, name):
    """The extension's CUDA kernel of each op, reached by redispatching CPU tensors to it:
    no plan serves them, so the op's Python kernel runs (the interpreter here) and its
    outputs come back, equal to the Python kernel's own; its errors keep their type."""
    if device.type != "cpu":
        pytest.skip("the interpreter's case: a GPU runs the kernels natively")
    op = getattr(torch.ops.flashrepro, name).default
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"flashrepro::{name}", "CUDA")
    cuda = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
    q = torch.randn(1, 2, 16, 16, dtype=torch.float16)
    args = (q, q.clone(), q.clone(), True, None, False, "top_left", None)
    got, want = op.redispatch(cuda, *args), op(*args)
    if name != "attention_lse":
        got, want = (got,), (want,)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.stride() == w.stride() and torch.equal(g, w)
    with pytest.raises(TypeError, match="q has dtype"):
        op.redispatch(cuda, q.float(), *args[1:])
    with pytest.raises(ValueError, match="causal_alignment"):
        op.redispatch(cuda, *args[:6], "middle", None)
