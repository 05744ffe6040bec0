"""flashrepro.attention_kvcache: short queries over a KV cache with per-sequence lengths
(the split-KV decode kernel, :mod:`flashrepro.kernels.decode`).

Parity against a float64 reference per sequence, with SDPA on the equivalent boolean mask as
the peer (tests/varlen_reference.py). Cache rows past each sequence's length hold NaN, and
every allocation inside the call (output, LSE, the split parts) starts as NaN, so a key read
past its sequence or an element never written fails. Under the interpreter at tiny sizes;
on the GPU at real sizes, bf16 included, and at the Qwen3 decode shape.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import flashrepro
from flashrepro import counters, launch_varlen, ops
from flashrepro.kernels.call import KernelCall
from flashrepro.kernels.decode import decode_fwd_kernel
from tests.conftest import HAS_GPU, ON_EACH_MACHINE
from tests.reference import compiled_kernels
from tests.varlen_reference import (
    assert_parity,
    kvcache_reference,
    kvcache_sdpa,
    poisoned_allocations,
)

BACKEND = "inductor" if HAS_GPU else "aot_eager"


def random_lengths(b: int, l_max: int, generator: torch.Generator | None = None) -> list[int]:
    """B lengths in [0, L_max]: the first L_max, the last 0 (when B > 1), the rest random."""
    lengths = torch.randint(0, l_max + 1, (b,), generator=generator).tolist()
    lengths[0] = l_max
    if b > 1:
        lengths[-1] = 0
    return lengths


def make_cache(b: int, h: int, h_kv: int, lq: int, l_max: int, d: int, dtype: torch.dtype,
               device: torch.device, seqused: list[int]):
    """Fresh standard-normal q (B, H, Lq, D) and caches (B, H_kv, L_max, D) whose rows past
    each sequence's length are NaN."""
    q = torch.randn(b, h, lq, d, device=device, dtype=dtype)
    k, v = (torch.randn(b, h_kv, l_max, d, device=device, dtype=dtype) for _ in range(2))
    past = torch.arange(l_max, device=device) >= torch.tensor(seqused, device=device)[:, None]
    for t in (k, v):
        t.masked_fill_(past[:, None, :, None], float("nan"))
    return q, k, v


def check_kvcache(q, k, v, seqused: list[int], *, causal: bool, scale: float | None = None,
                  num_splits: int | None = None, out: torch.Tensor | None = None,
                  full_cache: bool = False) -> None:
    """Run attention_kvcache with poisoned allocations (and a NaN ``out``) and assert parity
    of o and lse. ``full_cache``: every length is L_max, passed as ``seqused_k=None``."""
    used = torch.tensor(seqused, dtype=torch.int32, device=q.device)
    if full_cache:
        assert set(seqused) == {k.shape[2]}, seqused
        used = None
    if out is not None:
        out.fill_(float("nan"))
    with poisoned_allocations():
        o, lse = flashrepro.attention_kvcache(q, k, v, used, causal=causal, scale=scale,
                                              enable_gqa=q.shape[1] != k.shape[1],
                                              num_splits=num_splits, return_lse=True, out=out)
    if out is not None:
        assert o is out
    ref, ref_lse = kvcache_reference(q, k, v, seqused, causal=causal, scale=scale)
    peer = kvcache_sdpa(q, k, v, seqused, causal=causal, scale=scale)
    assert_parity(o, lse, ref, ref_lse, peer)


# -- interpreter: tiny sizes, every path --

@pytest.mark.interpreter
@pytest.mark.parametrize("num_splits", [None, 1, 3])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("h,h_kv,lq", [(16, 8, 1), (16, 8, 3), (4, 1, 1), (4, 1, 9), (3, 3, 3),
                                       (8, 1, 9)])
def test_interpreter_parity(h: int, h_kv: int, lq: int, causal: bool,
                            num_splits: int | None) -> None:
    """GQA 16/8 and 4/1, MHA, 8/1 at Lq = 9 (72 packed rows: two row blocks); Lq 1 and more
    (causal rows that see no key where a length is below Lq); lengths 0, L_max and between;
    L_max = 70 (a ragged last block of 64; 3 splits of 2 blocks leave one empty), D = 40
    (padded to 64)."""
    seqused = [70, 2, 65, 0]
    q, k, v = make_cache(4, h, h_kv, lq, 70, 40, torch.float16, torch.device("cpu"), seqused)
    check_kvcache(q, k, v, seqused, causal=causal, num_splits=num_splits)


@pytest.mark.interpreter
@pytest.mark.parametrize("num_splits", [None, 1, 3])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("h,h_kv,lq", [(16, 8, 1), (4, 1, 9), (3, 3, 3)])
def test_interpreter_full_cache(h: int, h_kv: int, lq: int, causal: bool,
                                num_splits: int | None) -> None:
    """``seqused_k=None``: every sequence holds all L_max = 70 keys (a ragged last block;
    3 splits)."""
    q, k, v = make_cache(2, h, h_kv, lq, 70, 40, torch.float16, torch.device("cpu"), [70, 70])
    check_kvcache(q, k, v, [70, 70], causal=causal, num_splits=num_splits, full_cache=True)


@pytest.mark.interpreter
@pytest.mark.parametrize("num_splits", [3, launch_varlen.MERGE_BLOCK_S + 4])
def test_interpreter_every_split_has_keys(num_splits: int) -> None:
    """Splits that each hold key blocks of the longest sequence (the cases above fit in one or
    two blocks, so most of their splits are empty), and more splits than the merge combines at
    a time (MERGE_BLOCK_S: the rescale that carries one group of parts into the next runs only
    then). A kernel whose later splits do no work, or whose merge drops that rescale, passes
    the cases above and fails here."""
    check_every_split(num_splits, 4, 2, 16, torch.float16, torch.device("cpu"))


def check_every_split(num_splits: int, h: int, h_kv: int, d: int, dtype: torch.dtype,
                      device: torch.device) -> None:
    """:func:`check_kvcache` at Lq = 1 with two key blocks of the longest sequence a split
    (the last block ragged), a second sequence shorter by a block and more."""
    q = torch.empty(2, h, 1, d, dtype=dtype, device=device)
    k = torch.empty(2, h_kv, 1, d, dtype=dtype, device=device)
    block_n = launch_varlen._decode_shape(q, k).config.block_n
    l_max = block_n * (2 * num_splits) - 5
    seqused = [l_max, l_max - block_n - 37]
    q, k, v = make_cache(2, h, h_kv, 1, l_max, d, dtype, device, seqused)
    check_kvcache(q, k, v, seqused, causal=True, num_splits=num_splits)


@pytest.mark.interpreter
@pytest.mark.parametrize("num_splits", [1, 4])
def test_interpreter_strided_inputs_and_out(num_splits: int) -> None:
    """Caches as (B, L, H_kv, D) buffers seen transposed (a sequence-major cache), q a
    transposed (B, Lq, H, D) view, a strided ``out``, a non-default scale."""
    b, h, h_kv, lq, l_max, d = 3, 4, 2, 2, 50, 32
    seqused = [50, 17, 1]
    q, k, v = make_cache(b, h, h_kv, lq, l_max, d, torch.float16, torch.device("cpu"), seqused)
    q_bshd = q.transpose(1, 2).contiguous().transpose(1, 2)
    k_bshd, v_bshd = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (k, v))
    out = torch.empty(b, lq, h, d, dtype=q.dtype).transpose(1, 2)
    check_kvcache(q_bshd, k_bshd, v_bshd, seqused, causal=True, scale=0.3,
                  num_splits=num_splits, out=out)


@pytest.mark.interpreter
def test_interpreter_k_and_v_of_different_strides() -> None:
    """k sequence-major, v head-major: read through contiguous copies, same answer."""
    seqused = [33, 9]
    q, k, v = make_cache(2, 4, 2, 1, 40, 16, torch.float16, torch.device("cpu"), seqused)
    k = k.transpose(1, 2).contiguous().transpose(1, 2)
    check_kvcache(q, k, v, seqused, causal=True, num_splits=2)


@pytest.mark.interpreter
def test_interpreter_lengths_outside_the_cache_are_clamped() -> None:
    """seqused_k below 0 reads no key, above L_max reads L_max keys (on the device, no
    host check)."""
    q, k, v = make_cache(3, 2, 2, 1, 20, 16, torch.float16, torch.device("cpu"), [20, 20, 20])
    used = torch.tensor([-5, 1000, 7], dtype=torch.int32)
    o, lse = flashrepro.attention_kvcache(q, k, v, used, causal=True, num_splits=2,
                                          return_lse=True)
    ref, ref_lse = kvcache_reference(q, k, v, [0, 20, 7], causal=True)
    assert_parity(o, lse, ref, ref_lse, kvcache_sdpa(q, k, v, [0, 20, 7], causal=True))


@pytest.mark.interpreter
def test_interpreter_cache_that_grows_keeps_answers_and_rules() -> None:
    """A decode loop whose caches grow by one token per call (transformers' DynamicCache):
    every call after the first skips the checks its signature passed (L_max apart), and each
    answer is still right; an input that breaks a rule after that (v of another length, an
    ``out`` that meets k) is still refused by name."""
    launch_varlen._CHECKED_KVCACHE.clear()
    b, h, h_kv, d = 2, 4, 2, 16
    q, k, v = make_cache(b, h, h_kv, 1, 40, d, torch.float16, torch.device("cpu"), [40, 40])
    out = torch.empty(b, 1, h, d, dtype=q.dtype).transpose(1, 2)
    for l_max in (33, 34, 48, 49):
        seqused = [l_max, l_max - 7]
        check_kvcache(q, k[:, :, :l_max].contiguous(), v[:, :, :l_max].contiguous(), seqused,
                      causal=True, num_splits=None if l_max % 2 else 3, out=out)
    assert len(launch_varlen._CHECKED_KVCACHE) == 2  # one signature per num_splits
    used = torch.tensor([30, 30], dtype=torch.int32)
    with pytest.raises(ValueError, match="v must have k's shape"):
        flashrepro.attention_kvcache(q, k[:, :, :33], v[:, :, :34], used, causal=True,
                                     enable_gqa=True, out=out)
    shared = torch.empty(b, h, 41, d, dtype=q.dtype)
    with pytest.raises(ValueError, match="out must not share memory with k"):
        flashrepro.attention_kvcache(q, shared[:, :2, :33], v[:, :, :33], used, causal=True,
                                     enable_gqa=True, out=shared[:, :, 32:33])


def test_cached_calls_launch_what_the_full_path_launches() -> None:
    """tests/plan_fuzz.py: 400 random calls (layouts, alignments, lengths, split counts, lse,
    out), each through the checked signatures and decode plans and again with them cleared,
    give the same launches and arguments, and each cached launch matches Triton's own
    specialization of its arguments. Without the interpreter (kernels as JITFunctions, the
    launches recorded and never run), hence a process of its own."""
    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), str(root)])
    code = "import sys, tests.plan_fuzz as f; sys.exit(min(f.main(0, 400), 1))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, cwd=root, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


class _Recorder:
    """Stands in for a DirectLaunch: records each launch."""

    def __init__(self) -> None:
        self.launches: list[tuple] = []

    def on_stream(self, grid, device, io, tail=None) -> None:
        self.launches.append((grid, io, tail))


@pytest.mark.parametrize("splits", [1, 4])
def test_plan_puts_each_calls_strides_and_length_in(splits: int) -> None:
    """A decode plan launches with the plan's arguments but this call's key/value strides and
    L_max (a cache grown by torch.cat), its tensors in the kernel's order, and with splits
    fresh float32 parts of the plan's size and counters at 0."""
    decode = _Recorder()
    names = launch_varlen._PARAMS[launch_varlen._IO:]
    parts = 16 * splits * 9 if splits > 1 else 0
    plan = launch_varlen._DecodePlan(decode, (8, 1, splits), tuple(range(len(names))), parts,
                                     8)
    q = torch.zeros(1, 16, 1, 8)
    k, v = torch.zeros(1, 8, 37, 8), torch.zeros(1, 8, 37, 8)
    used, o = torch.zeros(1, dtype=torch.int32), torch.zeros(1, 16, 1, 8)
    launch_varlen._launch_plan(plan, q, k, v, used, o, None, k.stride(), 37)
    ((grid, io, tail),) = decode.launches
    assert grid == (8, 1, splits) and io[:4] == (q, k, v, o) and io[5] is used
    values = dict(zip(names, tail, strict=True))
    assert [values[n] for n in ("stride_kb", "stride_kh", "stride_kn", "stride_kd")] == list(
        k.stride())
    assert values["max_seqlen_k"] == 37 and values["stride_qb"] == names.index("stride_qb")
    if splits == 1:
        assert io[6] is q and io[7] is used  # never touched without splits
    else:
        assert io[6].shape == (parts,) and io[6].dtype == torch.float32
        assert io[7].dtype == torch.int32 and io[7].numel() >= 8 and not io[7].any()


@pytest.mark.parametrize("device", ON_EACH_MACHINE)
def test_empty_sizes(device: str) -> None:
    """B, H or Lq of 0 give empty outputs; L_max = 0 gives o = 0 and lse = -inf."""
    dev = torch.device(device)
    for b, h, lq, l_max in [(0, 2, 1, 8), (2, 0, 1, 8), (2, 2, 0, 8), (2, 2, 3, 0)]:
        q = torch.randn(b, h, lq, 16, device=dev).half()
        k = torch.randn(b, h, l_max, 16, device=dev).half()
        used = torch.zeros(b, dtype=torch.int32, device=dev)
        o, lse = flashrepro.attention_kvcache(q, k, k, used, causal=True, return_lse=True)
        assert o.shape == q.shape and lse.shape == (b, h, lq)
        assert (o == 0).all() and (lse == float("-inf")).all()


def test_return_lse_false_returns_the_output_alone(device: torch.device) -> None:
    q, k, v = make_cache(2, 4, 2, 1, 24, 16, torch.float16, device, [24, 3])
    used = torch.tensor([24, 3], dtype=torch.int32, device=device)
    o = flashrepro.attention_kvcache(q, k, v, used, enable_gqa=True)
    assert isinstance(o, torch.Tensor) and o.shape == q.shape


# -- input rules --

@pytest.mark.parametrize("bad,error,match", [
    (dict(seqused_k=[3, 4]), TypeError, "seqused_k must be an int32 torch.Tensor"),
    (dict(seqused_k="int64"), TypeError, "seqused_k must have dtype int32"),
    (dict(seqused_k="shape"), ValueError, r"seqused_k must have shape \(B,\)"),
    (dict(seqused_k="meta"), ValueError, "seqused_k must be on q's device"),
    (dict(seqused_k="nested"), TypeError, "seqused_k must not be a nested tensor"),
    (dict(seqused_k="neg"), ValueError, "seqused_k must not carry torch's lazy negation bit"),
    (dict(num_splits=0), ValueError, "num_splits must be in 1..65535"),
    (dict(num_splits=True), TypeError, "num_splits must be None or an int"),
    (dict(num_splits=2.0), TypeError, "num_splits must be None or an int"),
    (dict(enable_gqa=False), ValueError, "enable_gqa"),
    (dict(return_lse=1), TypeError, "return_lse must be a bool"),
    (dict(causal=1), TypeError, "causal must be a bool"),
    (dict(scale=-1.0), ValueError, "scale must be a finite number"),
])
def test_bad_input_is_refused_by_name(bad: dict, error: type, match: str,
                                      device: torch.device) -> None:
    """Refused by name, also after a whole-cache call (``seqused_k`` None) of the same
    shapes: its checked signature must not let a bad ``seqused_k`` through."""
    q, k, v = make_cache(2, 4, 2, 1, 16, 16, torch.float16, device, [16, 16])
    flashrepro.attention_kvcache(q, k, v, None, causal=True, enable_gqa=True)
    args = dict(seqused_k=torch.tensor([16, 5], dtype=torch.int32, device=device),
                causal=True, enable_gqa=True)
    args.update(bad)
    used = args.pop("seqused_k")
    if isinstance(used, str):
        one = torch.tensor([16], dtype=torch.int32, device=device)
        used = {"int64": torch.tensor([16, 5], device=device),
                "shape": torch.tensor([16, 5, 1], dtype=torch.int32, device=device),
                "meta": torch.empty(2, dtype=torch.int32, device="meta"),
                "nested": torch.nested.nested_tensor([one, one]),
                "neg": torch._neg_view(torch.tensor([-16, -5], dtype=torch.int32,
                                                    device=device))}[used]
    with pytest.raises(error, match=match):
        flashrepro.attention_kvcache(q, k, v, used, **args)


@pytest.mark.parametrize("seqused", [None, "tensor"])
def test_whole_cache_launch_reads_no_lengths(seqused: str | None, device: torch.device,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """``seqused_k`` None launches the kernel with HAS_SEQUSED off and no int32 lengths in
    its SEQUSED_K slot; a tensor with it on and that tensor's data there. (A whole-cache call
    turned into a full-length ``seqused_k`` would pass every parity test.)"""
    calls: list = []
    monkeypatch.setattr(launch_varlen, "launch",
                        lambda call, *args: calls.append(call))  # recorded, never run
    # no checked signature or plan of an earlier test: this call takes the full path
    monkeypatch.setattr(launch_varlen, "_CHECKED_KVCACHE", {})  # and with it their plans
    q, k, v = make_cache(2, 4, 2, 1, 16, 16, torch.float16, device, [16, 16])
    used = None if seqused is None else torch.tensor([16, 7], dtype=torch.int32, device=device)
    launch_varlen.kvcache_forward(q, k, v, used, causal=True, scale=None, enable_gqa=True,
                                  num_splits=None, return_lse=False)
    (call,) = calls
    slot = call.args[launch_varlen._PARAMS.index("SEQUSED_K")]
    assert call.kwargs["HAS_SEQUSED"] is (used is not None)
    if used is None:
        assert slot.dtype != torch.int32
    else:
        assert slot.data_ptr() == used.data_ptr()


def test_split_count_gives_one_program_per_sm() -> None:
    """The split choice (shapes only): num_SMs // programs splits, at most MAX_SPLITS and the
    key blocks; two for a grid of 64-key programs, fewer than 1.5 per SM, over a long cache;
    one beyond, and one for 128-key programs."""
    choose, long = launch_varlen.num_kv_splits, launch_varlen.LONG_CACHE_KEYS
    assert choose(8, 32768, 64, 132) == 16  # B=1, H_kv=8: 128 programs
    assert choose(8, 1024, 64, 132) == 16 and choose(8, 512, 64, 132) == 8  # key blocks cap
    assert choose(8, 1024, 128, 132) == 8  # 8 blocks of 128 keys
    assert choose(128, long - 1, 64, 132) == 1 and choose(128, long, 64, 132) == 2
    assert choose(192, long, 64, 132) == 2 and choose(198, long, 64, 132) == 1
    assert choose(128, 32768, 128, 132) == 1 and choose(80, 32768, 128, 132) == 1
    assert choose(256, 32768, 64, 132) == 1  # B=32: two splits 12-20 % slower
    assert choose(264, 32768, 128, 132) == 1 and choose(512, 32768, 128, 132) == 1
    assert choose(1, 1 << 20, 64, 1000) == launch_varlen.MAX_SPLITS
    for programs in range(1, 600, 7):
        for seqlen_k in (1, 63, 4096, 32768):
            for block_n in (64, 128):
                splits = choose(programs, seqlen_k, block_n, 132)
                assert 1 <= splits <= min(launch_varlen.MAX_SPLITS, -(-seqlen_k // block_n))
                assert programs * splits <= max(132, 2 * programs), (programs, seqlen_k)


H200_SHARED, SM86_SHARED = 227 * 1024, 99 * 1024


def test_decode_tiles_follow_the_grid() -> None:
    """128-key tiles with 2 stages once the grid holds two programs per SM; 128 keys with 3
    stages for at most one program per SM of at most 16 rows where the GPU's shared memory
    holds them (not sm_86/89's 99 KiB at D = 128); 64-key tiles otherwise; 32 keys above
    D = 128."""
    cfg, config = launch_varlen.decode_config, launch_varlen.DecodeConfig
    assert cfg(128, 16, 264, 132, H200_SHARED) == config(128, 4, 2)
    assert cfg(128, 64, 264, 132, H200_SHARED) == config(128, 4, 2)
    assert cfg(128, 16, 263, 132, H200_SHARED) == config(64, 4, 3)  # B=32 at H_kv=8
    assert cfg(128, 16, 133, 132, H200_SHARED) == config(64, 4, 3)
    assert cfg(128, 16, 132, 132, H200_SHARED) == config(128, 4, 3)  # B=16: one per SM
    assert cfg(64, 16, 8, 132, H200_SHARED) == config(128, 4, 3)  # B=1, split below
    assert cfg(128, 32, 128, 132, H200_SHARED) == config(64, 4, 3)  # 32 rows spill at 128
    assert cfg(128, 16, 128, 84, SM86_SHARED) == config(64, 4, 3)  # 136 KiB > 99 KiB
    assert cfg(64, 16, 64, 84, SM86_SHARED) == config(128, 4, 3)  # 70 KiB at D = 64
    assert cfg(256, 16, 10_000, 132, H200_SHARED) == config(32, 4, 2)


@pytest.mark.parametrize(("lq", "block_m", "expected"), [
    (1, 16, launch_varlen.DEEP_DECODE), (8, 16, launch_varlen.DEEP_DECODE),
    (16, 32, launch_varlen.DecodeConfig(64, 4, 3)), (32, 64, launch_varlen.DecodeConfig(64, 4, 3))])
def test_decode_shape_passes_the_tile_rows(lq: int, block_m: int,
                                           expected: launch_varlen.DecodeConfig) -> None:
    """The launch's own tile (G·L_q packed rows, G = 2 here) reaches decode_config: 16 rows
    take the 128-key tile, 32 and 64 the 64-key one; and the device's shared memory does."""
    q = torch.empty(16, 16, lq, 128, dtype=torch.bfloat16, device="meta")
    k = torch.empty(16, 8, 4096, 128, dtype=torch.bfloat16, device="meta")
    shape = launch_varlen._decode_shape(q, k, num_sms=132, max_shared=H200_SHARED)
    assert (shape.block_m, shape.config) == (block_m, expected)
    small = launch_varlen._decode_shape(q, k, num_sms=132, max_shared=SM86_SHARED)
    assert small.config == launch_varlen.DecodeConfig(64, 4, 3)


def test_pipeline_bytes_bounds_the_compiled_kernels() -> None:
    """pipeline_bytes at most 4 KiB above Triton 3.6's shared memory for the decode kernel at
    16 rows, never below (lab/2026-12-03-decode-tma-tiles/resources-sm_90.txt)."""
    config = launch_varlen.DecodeConfig
    compiled = {(config(128, 4, 3), 128): 139264, (config(128, 4, 2), 128): 73728,
                (config(64, 4, 3), 128): 71680, (config(128, 4, 3), 64): 71680,
                (config(64, 4, 3), 64): 36864}
    for (cfg, block_d), used in compiled.items():
        assert 0 <= launch_varlen.pipeline_bytes(cfg, block_d) - used <= 4096, (cfg, block_d)


def test_lengths_are_not_specialized() -> None:
    """The kernel's length and split arguments are runtime ints (do_not_specialize): Triton
    would otherwise compile anew for a value of 1 or one divisible by 16."""
    names = getattr(decode_fwd_kernel, "do_not_specialize", None)
    if names is None:  # the interpreter's function keeps the decorator's arguments
        names = decode_fwd_kernel.kwargs["do_not_specialize"]
    assert {"kv_group", "seqlen_q", "max_seqlen_k", "num_splits"} <= set(names)


# -- torch ops: opcheck, compile, export --

def _case(device: torch.device, seqused: tuple[int, ...] = (24, 0, 9)):
    seqused = list(seqused)
    q, k, v = make_cache(3, 4, 2, 2, 24, 16, torch.float16, device, seqused)
    return q, k, v, torch.tensor(seqused, dtype=torch.int32, device=device), seqused


@pytest.mark.parametrize("num_splits", [None, 3])
def test_opcheck(num_splits: int | None, device: torch.device) -> None:
    q, k, v, used, _ = _case(device)
    torch.library.opcheck(ops.attention_kvcache, (q, k, v, used, True, None, True, num_splits))
    torch.library.opcheck(ops.attention_kvcache, (q, k, v, used, False, 0.2, True, None))
    q, k, v, _, _ = _case(device, (24, 24, 24))  # whole caches: no NaN past a length
    torch.library.opcheck(ops.attention_kvcache, (q, k, v, None, True, None, True, num_splits))


def test_fake_refuses_bad_input(device: torch.device) -> None:
    q, k, v, used, _ = _case(device)
    with torch._subclasses.FakeTensorMode() as mode:
        fq, fk, fv, fused = (mode.from_tensor(t) for t in (q, k, v, used))
        with pytest.raises(TypeError, match="seqused_k must have dtype int32"):
            ops.attention_kvcache(fq, fk, fv, fused.long(), True, None, True, None)
        o, lse = ops.attention_kvcache(fq, fk, fv, fused, True, None, True, None)
        assert o.shape == q.shape and lse.shape == q.shape[:3]


def test_compile_fullgraph(device: torch.device) -> None:
    """torch.compile(fullgraph=True): no graph break, the right answer on fresh inputs and
    new lengths (one compile: the lengths are tensor data), out= written by a copy."""
    torch._dynamo.reset()
    compiles = []

    def backend(gm, example_inputs):
        compiles.append(gm)
        return torch._dynamo.backends.registry.lookup_backend(BACKEND)(gm, example_inputs)

    def f(q, k, v, used, out):
        return flashrepro.attention_kvcache(q * 1.0, k, v, used, causal=True, enable_gqa=True,
                                            return_lse=True, out=out)

    compiled = torch.compile(f, fullgraph=True, backend=backend)
    for lengths in ((24, 0, 9), (1, 24, 13)):
        q, k, v, used, seqused = _case(device, lengths)
        out = torch.full_like(q, float("nan"))
        o, lse = compiled(q, k, v, used, out)
        assert o is out
        ref, ref_lse = kvcache_reference(q, k, v, seqused, causal=True)
        assert_parity(o, lse, ref, ref_lse, kvcache_sdpa(q, k, v, seqused, causal=True))
    assert len(compiles) == 1


def test_export(device: torch.device) -> None:
    class Decode(torch.nn.Module):
        def forward(self, q, k, v, used):
            return flashrepro.attention_kvcache(q, k, v, used, causal=True, enable_gqa=True)

    q, k, v, used, _ = _case(device)
    program = torch.export.export(Decode(), (q, k, v, used))
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert "flashrepro.attention_kvcache.default" in targets, targets
    q, k, v, used, seqused = _case(device)
    ref, ref_lse = kvcache_reference(q, k, v, seqused, causal=True)
    assert_parity(program.module()(q, k, v, used), None, ref, ref_lse,
                  kvcache_sdpa(q, k, v, seqused, causal=True))


# -- GPU: real sizes --

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("lq", [1, 4, 16])
@pytest.mark.parametrize("h,h_kv,d", [(16, 8, 128), (4, 1, 64), (32, 8, 256), (8, 8, 80)])
@pytest.mark.parametrize("num_splits", [None, 1, 5])
def test_gpu_parity(h: int, h_kv: int, d: int, lq: int, causal: bool, dtype: torch.dtype,
                    num_splits: int | None) -> None:
    generator = torch.Generator().manual_seed(h * 1000 + lq)
    seqused = random_lengths(6, 1000, generator)
    q, k, v = make_cache(6, h, h_kv, lq, 1000, d, dtype, torch.device("cuda"), seqused)
    check_kvcache(q, k, v, seqused, causal=causal, num_splits=num_splits)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("num_splits", [3, launch_varlen.MERGE_BLOCK_S + 4])
def test_gpu_every_split_has_keys(num_splits: int, dtype: torch.dtype) -> None:
    """:func:`test_interpreter_every_split_has_keys` at Qwen3's GQA 16/8, D = 128 (the GPU
    cases' automatic split counts stay at or below MERGE_BLOCK_S on 132 SMs)."""
    check_every_split(num_splits, 16, 8, 128, dtype, torch.device("cuda"))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("lq", [1, 16])
@pytest.mark.parametrize("h,h_kv,d", [(16, 8, 128), (4, 1, 64)])
@pytest.mark.parametrize("num_splits", [None, 5])
def test_gpu_full_cache_parity(h: int, h_kv: int, d: int, lq: int, causal: bool,
                               dtype: torch.dtype, num_splits: int | None) -> None:
    """``seqused_k=None`` (the kernel reads no length) at L_max = 1000."""
    q, k, v = make_cache(6, h, h_kv, lq, 1000, d, dtype, torch.device("cuda"), [1000] * 6)
    check_kvcache(q, k, v, [1000] * 6, causal=causal, num_splits=num_splits, full_cache=True)


@pytest.mark.gpu
@pytest.mark.parametrize("l_max", [1024, 32768])
@pytest.mark.parametrize("b", [1, 16, 64])
def test_gpu_qwen3_full_cache(b: int, l_max: int) -> None:
    """Qwen3's decode over whole caches, ``seqused_k=None``: the launch
    :func:`flashrepro.integrations.transformers.attention_forward` takes for a DynamicCache."""
    q, k, v = make_cache(b, 16, 8, 1, l_max, 128, torch.bfloat16, torch.device("cuda"),
                         [l_max] * b)
    check_kvcache(q, k, v, [l_max] * b, causal=True, full_cache=True)


@pytest.mark.gpu
@pytest.mark.parametrize("l_max", [1024, 8192, 32768])
@pytest.mark.parametrize("b", [1, 16, 64])
def test_gpu_qwen3_decode_shape(b: int, l_max: int) -> None:
    """Qwen3's decode: H = 16, H_kv = 8, D = 128, bf16, Lq = 1, the split count chosen from
    the shapes; lengths L_max, 0 and random."""
    seqused = random_lengths(b, l_max)
    q, k, v = make_cache(b, 16, 8, 1, l_max, 128, torch.bfloat16, torch.device("cuda"),
                         seqused)
    check_kvcache(q, k, v, seqused, causal=True)


@pytest.mark.gpu
def test_gpu_new_lengths_and_cache_sizes_compile_nothing() -> None:
    """After a first call, new seqused_k values and new L_max (same B, H, D, dtype and split
    regime) launch the kernels already compiled."""
    device = torch.device("cuda")

    def call(l_max: int, seqused: list[int]) -> None:
        q, k, v = make_cache(2, 16, 8, 1, l_max, 128, torch.bfloat16, device, seqused)
        used = torch.tensor(seqused, dtype=torch.int32, device=device)
        flashrepro.attention_kvcache(q, k, v, used, causal=True, enable_gqa=True,
                                     return_lse=True)

    call(4096, [4096, 17])
    before = len(compiled_kernels(decode_fwd_kernel))
    for l_max, seqused in [(4096, [1, 4000]), (4097, [4097, 0]), (5000, [33, 4999]),
                           (8192, [8192, 1])]:
        call(l_max, seqused)
    assert len(compiled_kernels(decode_fwd_kernel)) == before


@pytest.mark.gpu
@pytest.mark.parametrize("b", [1, 16])
def test_gpu_cache_grown_by_cat_relaunches_without_triton(b: int,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Caches that grow by one token per call (a new shape and new strides each time, as
    DynamicCache's torch.cat makes them), B = 1 (16 splits, merged in the launch) and 16
    (one split): right at every step, and after the first steps of each specialization no
    call goes through Triton's launch path (flashrepro.direct.launch relaunches the compiled
    kernels)."""
    device = torch.device("cuda")
    runs: list[object] = []
    jit_run = KernelCall.run

    def counted(call: KernelCall) -> object:
        runs.append(call.kernel)
        return jit_run(call)

    monkeypatch.setattr(KernelCall, "run", counted)
    planned: list[int] = []
    plan_launch = launch_varlen._launch_plan
    monkeypatch.setattr(launch_varlen, "_launch_plan",
                        lambda *a: (planned.append(1), plan_launch(*a))[1])
    start = 1000
    q, k, v = make_cache(b, 16, 8, 1, start + 40, 128, torch.bfloat16, device, [start + 40] * b)
    out = torch.empty(b, 1, 16, 128, dtype=q.dtype, device=device).transpose(1, 2)
    for step in range(40):
        l_max = start + step
        if step == 20:
            runs.clear()
        seqused = [l_max] * b if b == 1 else [l_max - i for i in range(b)]
        check_kvcache(q, k[:, :, :l_max].contiguous(), v[:, :, :l_max].contiguous(), seqused,
                      causal=True, out=out)
    assert runs == [] and len(planned) >= 30  # from its plan after the first of each class


@pytest.mark.gpu
def test_gpu_plans_of_one_specialization_keep_their_own_arguments() -> None:
    """Two signatures whose kernels share a Triton specialization (H 16 and 32, both
    divisible by 16; 16 splits each) each launch from a plan with their own arguments: the
    second signature's launch must not reuse the first one's head count."""
    device = torch.device("cuda")
    for h, h_kv in ((16, 8), (32, 16), (16, 8), (32, 16)):
        seqused = [1000]
        q, k, v = make_cache(1, h, h_kv, 1, 1000, 128, torch.bfloat16, device, seqused)
        check_kvcache(q, k, v, seqused, causal=True, num_splits=16)


@pytest.mark.gpu
def test_gpu_cuda_graph_replay_with_new_lengths() -> None:
    """The call syncs nothing (sync debug mode "error"), is captured in a CUDA graph, and a
    replay after new lengths are copied into seqused_k gives the new answer."""
    device = torch.device("cuda")
    seqused = [4096, 100]
    q, k, v = make_cache(2, 16, 8, 1, 4096, 128, torch.bfloat16, device, [4096, 4096])
    used = torch.tensor(seqused, dtype=torch.int32, device=device)

    def call():
        return flashrepro.attention_kvcache(q, k, v, used, causal=True, enable_gqa=True,
                                            return_lse=True)

    torch.cuda.set_sync_debug_mode("error")
    try:
        call()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o, lse = call()
    for seqused in ([7, 4096], [0, 2500]):
        used.copy_(torch.tensor(seqused, dtype=torch.int32))
        o.fill_(float("nan"))
        graph.replay()
        ref, ref_lse = kvcache_reference(q, k, v, seqused, causal=True)
        assert_parity(o, lse, ref, ref_lse, kvcache_sdpa(q, k, v, seqused, causal=True))


@pytest.mark.gpu
def test_gpu_split_counters_per_stream_end_at_zero() -> None:
    """Split launches on two streams at once, each over many tiles: right on both, each
    stream has counters of its own, and every counter is back at 0 afterwards."""
    device = torch.device("cuda")
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    cases = []
    for stream in streams:
        seqused = random_lengths(8, 3000)
        q, k, v = make_cache(8, 16, 8, 1, 3000, 128, torch.bfloat16, device, seqused)
        cases.append((stream, q, k, v, seqused))
    # made before the launches: a host-to-device copy inside the stream waits for its work
    lengths = [torch.tensor(seqused, dtype=torch.int32, device=device)
               for *_, seqused in cases]
    torch.cuda.synchronize()
    outs = []
    for _ in range(3):
        for (stream, q, k, v, seqused), used in zip(cases, lengths, strict=True):
            with torch.cuda.stream(stream):
                outs.append((used, q, k, v, seqused, flashrepro.attention_kvcache(
                    q, k, v, used, causal=True, enable_gqa=True, num_splits=7)))
    torch.cuda.synchronize()
    for _, q, k, v, seqused, o in outs:
        ref, ref_lse = kvcache_reference(q, k, v, seqused, causal=True)
        assert_parity(o, None, ref, ref_lse, kvcache_sdpa(q, k, v, seqused, causal=True))
    handles = {s.cuda_stream for s in streams}
    mine = {key: t for key, t in counters._BUFFERS.items() if key[1] in handles}
    assert len(mine) == 2 and all(int(t.abs().max()) == 0 for t in mine.values())
    scratch = [t.data_ptr() for key, t in counters._SCRATCH.items() if key[1] in handles]
    assert len(scratch) == 2 and scratch[0] != scratch[1]


@pytest.mark.gpu
def test_gpu_stream_buffers_are_the_streams_own() -> None:
    """``counters.stream_buffers`` (one lookup for a split launch) gives the current stream's
    own counters and scratch, the tensors ``stream_counters`` and ``stream_scratch`` keep;
    grows the scratch for a larger request; gives no scratch for none; and in a CUDA-graph
    capture gives fresh tensors of exactly the request."""
    device = torch.device("cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        locks, parts = counters.stream_buffers(device, 64, 1000)
        assert locks is counters.stream_counters(device, 64)
        assert parts is counters.stream_scratch(device, 1000)
        locks2, grown = counters.stream_buffers(device, 64, 10**6)
        assert locks2 is locks and grown is not None and grown.numel() >= 10**6
        assert grown is counters.stream_scratch(device, 1)
        same, none = counters.stream_buffers(device, 8, 0)
        assert same is locks and none is None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fresh, scratch = counters.stream_buffers(device, 8, 16)
    assert fresh.numel() == 8 and scratch is not None and scratch.numel() == 16
    assert fresh is not locks and scratch is not grown


@pytest.mark.gpu
def test_gpu_split_scratch_grows_under_queued_launches() -> None:
    """Split launches of growing size queued on one stream without a sync, so the stream's
    scratch is replaced by a larger one while earlier launches that use it are still queued
    (behind a busy-wait, checked): every output is right, and the stream keeps the largest."""
    device = torch.device("cuda")
    stream = torch.cuda.Stream()
    cases = []
    for b in (1, 4, 16, 2):
        seqused = random_lengths(b, 4000)
        cases.append((*make_cache(b, 16, 8, 1, 4000, 128, torch.bfloat16, device, seqused),
                      seqused))
    # made before the launches: a host-to-device copy inside the stream waits for its work
    lengths = [torch.tensor(seqused, dtype=torch.int32, device=device)
               for *_, seqused in cases]
    for (q, k, v, _), used in zip(cases, lengths, strict=True):  # compiled before the wait
        flashrepro.attention_kvcache(q, k, v, used, causal=True, enable_gqa=True, num_splits=9)
    counters._SCRATCH.pop((torch.cuda.current_device(), stream.cuda_stream), None)  # pooled
    torch.cuda.synchronize()
    outs = []
    with torch.cuda.stream(stream):
        torch.cuda._sleep(200_000_000)  # the launches below queue behind ~100 ms of waiting
        for (q, k, v, _), used in zip(cases, lengths, strict=True):
            outs.append((used, flashrepro.attention_kvcache(q, k, v, used, causal=True,
                                                            enable_gqa=True, num_splits=9)))
        queued = not stream.query()
    torch.cuda.synchronize()
    assert queued, "the launches did not queue behind the busy-wait"
    grown = [t for key, t in counters._SCRATCH.items() if key[1] == stream.cuda_stream]
    assert len(grown) == 1 and grown[0].numel() >= 16 * 16 * 9 * 129
    for (q, k, v, seqused), (_, o) in zip(cases, outs, strict=True):
        ref, ref_lse = kvcache_reference(q, k, v, seqused, causal=True)
        assert_parity(o, None, ref, ref_lse, kvcache_sdpa(q, k, v, seqused, causal=True))


@pytest.mark.gpu
def test_gpu_compile_reduce_overhead() -> None:
    """mode="reduce-overhead" (CUDA graphs): replays on new inputs and lengths are right."""
    torch._dynamo.reset()
    device = torch.device("cuda")

    def f(q, k, v, used):
        return flashrepro.attention_kvcache(q, k, v, used, causal=True, enable_gqa=True) * 2.0

    compiled = torch.compile(f, mode="reduce-overhead", fullgraph=True)
    for _ in range(4):  # warm-up, record, replays
        seqused = random_lengths(4, 2048)
        q, k, v = make_cache(4, 16, 8, 1, 2048, 128, torch.bfloat16, device, seqused)
        used = torch.tensor(seqused, dtype=torch.int32, device=device)
        o = compiled(q, k, v, used).clone() / 2.0
        ref, ref_lse = kvcache_reference(q, k, v, seqused, causal=True)
        assert_parity(o, None, ref, ref_lse, kvcache_sdpa(q, k, v, seqused, causal=True))
