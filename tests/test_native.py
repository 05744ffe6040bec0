"""flashrepro.native: the decode call's plan hit launched from C++ (csrc/decode_launch.cpp).

On the GPU: DynamicCache-like decodes (the cache grows by a key per call) through
transformers' attention function, where a call whose plan Python made before launches from
C++ (the registry's launch count says which did), each output against a float64 reference
with its memory NaN-poisoned first and bit for bit against the Python path's; and the calls
the extension must hand back to Python, each by name. On the CPU: the switch, a failed build,
registration of CPU tensors, and the extension's parameter names against the kernel's."""

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
