"""Torch parity: flashrepro's kernels against a high-precision reference and torch's SDPA.

Rule: on the same fresh random inputs, flashrepro's max error against the reference
is at most 2x torch SDPA's max error plus a small absolute floor. The output buffer is poisoned
with NaN before each launch and every element is compared.

Without a GPU the kernels run under Triton's interpreter against a float64 reference on small
shapes (fp16 only: the interpreter's bf16 ``tl.dot`` is wrong upstream, triton issue 11584).
On a GPU the full matrix runs against a float32 reference.
"""

from __future__ import annotations

import itertools

import pytest
import torch

import flashrepro
from flashrepro import KernelConfig
from tests.conftest import HAS_GPU
from tests.reference import check_parity, compiled_kernels, random_qkv

# -- interpreter (CPU) matrix: small, every block shape class, ragged lengths --
CPU_LENGTHS = [(1, 1), (17, 17), (1, 33), (33, 1), (47, 70), (70, 47), (64, 64)]
CPU_CONFIGS = [KernelConfig(16, 16, 4, 1), KernelConfig(32, 16, 4, 1), KernelConfig(16, 32, 4, 1),
               KernelConfig(32, 16, 4, 1, tma=True)]


@pytest.mark.skipif(HAS_GPU, reason="interpreter matrix; the GPU matrix covers this")
@pytest.mark.parametrize("config", CPU_CONFIGS, ids=KernelConfig.label)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("lq,lk", CPU_LENGTHS)
@pytest.mark.parametrize("d", [16, 40, 64])
def test_interpreter_parity(d: int, lq: int, lk: int, causal: bool, config: KernelConfig,
                            device: torch.device) -> None:
    # B != H, so a batch/head index mix-up cannot map one-to-one
    q, k, v = random_qkv(2, 3, lq, lk, d, torch.float16, device)
    check_parity(q, k, v, causal=causal, config=config)


@pytest.mark.parametrize(("config", "d"), [(KernelConfig(16, 16, 4, 1), 16), ("fa3-overlap", 64),
                                           ("fa3-ws", 64), ("fa3-ws3", 64)],
                         ids=["triton", "gluon", "gluon-ws", "gluon-ws3"])
@pytest.mark.parametrize("heads_per_group", [1, 4, 6])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_head_groups(heads_per_group: int, causal: bool, config: KernelConfig | str, d: int,
                     device: torch.device, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every (batch, head, query block) is computed once whatever the group size, including
    a last group with fewer heads (B·H = 6 with groups of 4), and B != H; for the Triton
    kernel and (on sm_90) the Gluon kernels, which repeat its program order."""
    monkeypatch.setattr(flashrepro.select, "heads_per_group",
                        lambda *args, **kwargs: heads_per_group)
    q, k, v = random_qkv(3, 2, 40 if d == 16 else 130, 40 if d == 16 else 130, d,
                         torch.float16, device)
    check_parity(q, k, v, causal=causal, config=config)


@pytest.mark.skipif(HAS_GPU, reason="interpreter matrix; the GPU matrix covers this")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("lq,lk", [(17, 17), (47, 70), (70, 47)])
def test_interpreter_article_parity(lq: int, lk: int, causal: bool,
                                    device: torch.device) -> None:
    q, k, v = random_qkv(1, 2, lq, lk, 32, torch.float16, device)
    check_parity(q, k, v, causal=causal, config=KernelConfig(32, 16, 4, 1), article=True)


# -- GPU matrix: dtype x causal x D x (Lq, Lk) x block shapes --
GPU_LENGTHS = [(1, 1), (17, 17), (113, 113), (1000, 1000), (1023, 1023), (1024, 1024),
               (1025, 1025), (113, 203), (203, 113), (1, 1024), (1024, 1), (1000, 1025),
               (1025, 1000)]
GPU_CONFIGS = {
    32: [None, "article", "p-in-registers", KernelConfig(32, 64, 4, 2),
         KernelConfig(128, 32, 4, 2)],
    64: [None, "article", "p-in-registers", "fa3-overlap", "fa3-ws", "fa3-ws3",
         KernelConfig(32, 64, 4, 2), KernelConfig(128, 32, 4, 2),
         KernelConfig(128, 128, 8, 2, tma=True, overlap=True),
         KernelConfig(128, 64, 8, 4, tma=True, overlap=True, warp_specialize=True),
         KernelConfig(192, 64, 12, 4, tma=True, overlap=True, warp_specialize=True),
         KernelConfig(192, 128, 12, 3, tma=True, overlap=True, warp_specialize=True,
                      tile_grid=True)],
    # fa3-ws3 at D = 128: the launch runs TRITON_FALLBACK
    128: [None, "article", "p-in-registers", "fa3-overlap", "fa3-ws", "fa3-ws3",
          KernelConfig(32, 64, 4, 2), KernelConfig(128, 32, 4, 2),
          KernelConfig(128, 128, 8, 2, tma=True, overlap=True),
          KernelConfig(128, 64, 8, 4, tma=True, overlap=True, warp_specialize=True),
          KernelConfig(128, 128, 8, 2, tma=True, overlap=True, warp_specialize=True,
                       tile_grid=True)],
    256: [None, KernelConfig(64, 32, 4, 2), KernelConfig(32, 64, 4, 2),
          KernelConfig(128, 32, 8, 1), KernelConfig(64, 64, 4, 1)],
}
GPU_CASES = [
    (dtype, causal, d, lq, lk, cfg)
    for dtype, causal, d, (lq, lk) in itertools.product(
        [torch.float16, torch.bfloat16], [False, True], sorted(GPU_CONFIGS), GPU_LENGTHS)
    for cfg in GPU_CONFIGS[d]
]


def _case_id(case: tuple) -> str:
    dtype, causal, d, lq, lk, cfg = case
    cfg_label = cfg.label() if isinstance(cfg, KernelConfig) else str(cfg or "default")
    name = str(dtype).removeprefix("torch.")
    return f"{name}-{'causal' if causal else 'full'}-d{d}-{lq}x{lk}-{cfg_label}"


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=_case_id)
def test_gpu_parity(case: tuple, device: torch.device) -> None:
    dtype, causal, d, lq, lk, cfg = case
    q, k, v = random_qkv(2, 3, lq, lk, d, dtype, device)
    check_parity(q, k, v, causal=causal, config=cfg)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("lq,lk", [(1024, 1024), (1000, 1025), (1025, 1000), (17, 113)])
@pytest.mark.parametrize("d", [64, 128])
def test_gpu_article_parity(d: int, lq: int, lk: int, causal: bool, dtype: torch.dtype,
                            device: torch.device) -> None:
    q, k, v = random_qkv(2, 3, lq, lk, d, dtype, device)
    check_parity(q, k, v, causal=causal, config=flashrepro.ARTICLE, article=True)


def _tuned_entries() -> list[tuple[str, KernelConfig]]:
    from flashrepro.configs import _tuned_table
    return sorted(_tuned_table().items())


@pytest.mark.gpu
@pytest.mark.parametrize("key,cfg", _tuned_entries(), ids=[k for k, _ in _tuned_entries()])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_gpu_tuned_table_parity(key: str, cfg: KernelConfig, dtype: torch.dtype,
                                device: torch.device) -> None:
    """Every config the default launch can pick (flashrepro/tuned.json) passes parity, on its
    bucket's length plus a ragged tail: named, and as the default launch, which with one batch
    of two heads (far below 3 tiles per program) runs a dynamic entry's tiles in the snake
    order (rule 7 of flashrepro.select)."""
    _, d, mask, bucket = key.split("-")
    length = int(bucket.removeprefix("l")) + 37
    q, k, v = random_qkv(1, 2, length, length, int(d.removeprefix("d")), dtype, device)
    check_parity(q, k, v, causal=mask == "causal", config=cfg)
    check_parity(q, k, v, causal=mask == "causal")


def _gluon_ptx(jit_function, config: str, device: torch.device) -> list[str] | None:
    """The PTX (whitespace runs as one space) of the kernels ``jit_function`` compiled, after
    a launch with ``config``: on sm_90's wgmma path it must have compiled some; elsewhere none
    (None is returned)."""
    from flashrepro.configs import launch_arch
    kernels = compiled_kernels(jit_function)
    if launch_arch(device) != 90:
        assert not kernels, f"config {config} ran {jit_function.__name__} off sm_90's wgmma path"
        return None
    assert kernels, f"config {config} did not launch {jit_function.__name__}"
    return [" ".join(kernel.asm["ptx"].split()) for kernel in kernels]


def _ws_launch_ptx(shape: tuple[int, ...], causal: bool, config: str,
                   device: torch.device) -> list[str] | None:
    """Parity of ``config`` on fresh fp16 inputs of ``shape`` (B, H, Lq, Lk, D), then
    :func:`_gluon_ptx` of the warp-specialized kernel."""
    from flashrepro.kernels.fwd_gluon_ws import attn_fwd_gluon_ws_kernel
    b, h, lq, lk, d = shape
    q, k, v = random_qkv(b, h, lq, lk, d, torch.float16, device)
    check_parity(q, k, v, causal=causal, config=config)
    return _gluon_ptx(attn_fwd_gluon_ws_kernel, config, device)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_overlap_runs_the_gluon_kernel(causal: bool, device: torch.device) -> None:
    """config.overlap launches the Gluon kernel on sm_90's wgmma path (and only there): its JIT
    cache gains a kernel whose PTX keeps a wgmma group in flight (wait_group 1)."""
    from flashrepro.kernels.fwd_gluon import attn_fwd_gluon_kernel
    before = len(compiled_kernels(attn_fwd_gluon_kernel))
    q, k, v = random_qkv(1, 2, 300, 300, 128, torch.float16, device)
    check_parity(q, k, v, causal=causal, config="fa3-overlap")
    ptx = _gluon_ptx(attn_fwd_gluon_kernel, "fa3-overlap", device)
    if ptx is None:
        return
    assert len(ptx) >= before
    assert any("wgmma.wait_group.sync.aligned 1;" in p for p in ptx)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", [(1, 2, 300, 300, 128), (3, 64, 900, 1000, 64)],
                         ids=["one-tile-per-program", "several-tiles-per-program"])
def test_gpu_warp_specialize_runs_the_persistent_kernel(shape: tuple[int, ...], causal: bool,
                                                        device: torch.device) -> None:
    """config.warp_specialize launches the warp-specialized Gluon kernel on sm_90's wgmma path
    (and only there): its JIT cache gains a kernel whose PTX reallocates registers
    (setmaxnreg) and keeps a wgmma group in flight. The second shape has 3·64·8 = 1536 tiles,
    so each of the H200's 132 programs runs 11 or 12 of them (ragged, causal or not)."""
    ptx = _ws_launch_ptx(shape, causal, "fa3-ws", device)
    if ptx is None:
        return
    assert any("setmaxnreg.dec.sync.aligned.u32 24;" in p
               and "setmaxnreg.inc.sync.aligned.u32 240;" in p
               and "wgmma.wait_group.sync.aligned 1;" in p for p in ptx)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", [(1, 2, 300, 300, 64), (3, 64, 900, 1000, 64)],
                         ids=["one-tile-per-program", "several-tiles-per-program"])
def test_gpu_three_consumers_run_at_d64(shape: tuple[int, ...], causal: bool,
                                        device: torch.device) -> None:
    """fa3-ws3 launches the ws kernel with three consumer warpgroups (setmaxnreg 160) at
    D = 64 on sm_90's wgmma path; the second shape has 3·64·5 = 960 tiles of 192 rows, 7 or 8
    per program on the H200. At D = 128 the same config runs the Triton kernel at
    TRITON_FALLBACK's tiles, and no ws kernel of 160 registers is compiled for it."""
    from flashrepro.kernels.fwd_gluon_ws import attn_fwd_gluon_ws_kernel
    ptx = _ws_launch_ptx(shape, causal, "fa3-ws3", device)
    if ptx is None:
        return
    assert any("setmaxnreg.inc.sync.aligned.u32 160;" in p
               and "wgmma.wait_group.sync.aligned 1;" in p for p in ptx)
    wide = random_qkv(1, 2, 300, 300, 128, torch.float16, device)
    before = len(compiled_kernels(attn_fwd_gluon_ws_kernel))
    check_parity(*wide, causal=causal, config="fa3-ws3")
    assert len(compiled_kernels(attn_fwd_gluon_ws_kernel)) == before


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("name,d", [("fa3-ws", 128), ("fa3-ws3", 64)])
def test_gpu_dynamic_schedule_streams_and_graphs(name: str, d: int, causal: bool,
                                                 device: torch.device) -> None:
    """The dynamic tile schedule (programs claim tiles from their stream's counter,
    flashrepro.counters): 3·64·8 tiles of 128 rows (5 of 192 at D = 64), so each of the H200's
    132 programs claims several; three launches of one plan on each of two streams at once, and
    a CUDA graph captured once and replayed on new inputs, all pass parity (NaN-poisoned
    outputs); every counter of the two streams is back at 0 afterwards."""
    import dataclasses

    from flashrepro.configs import NAMED

    cfg = dataclasses.replace(NAMED[name], dynamic_schedule=True)
    _check_streams_and_graph(cfg, d, torch.float16, causal, False, device)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name,d", [("fa3-ws", 128), ("fa3-ws3", 64)])
def test_gpu_split_tail_streams_and_graphs(name: str, d: int, dtype: torch.dtype,
                                           device: torch.device) -> None:
    """The split tail (the last two rounds' tiles shared out as runs of key blocks, parts
    merged through a stream counter and scratch; KernelConfig.split_tail): 3·64·8 tiles of 128
    rows (3·64·5 of 192) on 132 programs leave a remainder, Lq = 900 and Lk = 1000 are ragged.
    Three launches of one plan on each of two streams at once, with the LSE, and a CUDA graph
    replayed on new inputs all pass parity (NaN-poisoned outputs); the streams' counters are
    back at 0 afterwards. In the graph a tensor of 7s is made right after the call: the
    capture's counters are exactly the launch's tickets, so tickets past them would read and
    clear its memory on the next replay."""
    import dataclasses

    from flashrepro.configs import NAMED

    cfg = dataclasses.replace(NAMED[name], split_tail=True)
    _check_streams_and_graph(cfg, d, dtype, False, True, device)


def _check_streams_and_graph(cfg: KernelConfig, d: int, dtype: torch.dtype, causal: bool,
                             return_lse: bool, device: torch.device) -> None:
    """The ws kernel's counters (flashrepro.counters) at ``cfg`` on 3 x 64 heads, Lq = 900,
    Lk = 1000: three launches of one plan on each of two streams at once pass parity
    (NaN-poisoned outputs, the LSE with ``return_lse``) and leave both streams' counters at 0;
    then a CUDA graph, with a tensor of 7s made right after the captured call (a capture's
    counters are exactly what the launch asks for, so counters past them would read and clear
    its memory), replayed twice on new inputs, passes parity and leaves the 7s alone."""
    from flashrepro import counters
    from tests.reference import assert_parity, poisoned_like

    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    cases = [random_qkv(3, 64, 900, 1000, d, dtype, device) for _ in streams]
    outs = [[poisoned_like(q) for _ in range(3)] for q, _, _ in cases]
    lses: list[list[torch.Tensor | None]] = [[None] * 3 for _ in streams]
    torch.cuda.synchronize()
    for i in range(3):
        for j, (stream, (q, k, v), out) in enumerate(zip(streams, cases, outs, strict=True)):
            with torch.cuda.stream(stream):
                result = flashrepro.attention(q, k, v, causal=causal, config=cfg, out=out[i],
                                              return_lse=return_lse)
                if return_lse:
                    lses[j][i] = result[1]
    torch.cuda.synchronize()
    for (q, k, v), out, lse in zip(cases, outs, lses, strict=True):
        for o, m in zip(out, lse, strict=True):
            assert_parity(o, m, q, k, v, causal=causal)
    mine = [t for key, t in counters._BUFFERS.items()
            if key[1] in {s.cuda_stream for s in streams}]
    assert len(mine) == 2 and all(int(t.abs().max()) == 0 for t in mine)

    q, k, v = (t.clone() for t in cases[0])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(streams[0]):  # warm-up (the plan) outside the capture
        flashrepro.attention(q, k, v, causal=causal, config=cfg)
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        o = flashrepro.attention(q, k, v, causal=causal, config=cfg)
        sevens = torch.full((1 << 16,), 7, dtype=torch.int32, device=device)
    for _ in range(2):
        for t, new in zip((q, k, v), random_qkv(3, 64, 900, 1000, d, dtype, device),
                          strict=True):
            t.copy_(new)
        o.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert_parity(o, None, q, k, v, causal=causal)
        assert bool((sevens == 7).all())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("mask", ["full", "top-left", "bottom-right"])
@pytest.mark.parametrize("shape", [(1, 2, 2, 100, 300), (2, 48, 16, 330, 460),
                                   (3, 6, 2, 450, 300), (1, 4, 1, 1000, 1025)],
                         ids=["last-consumer-skips", "gqa-several-tiles", "lq-over-lk",
                              "gqa-ragged"])
def test_gpu_three_consumers_skip(shape: tuple[int, ...], mask: str, dtype: torch.dtype,
                                  device: torch.device) -> None:
    """fa3-ws3's per-consumer skip (each consumer computes only the key blocks its rows see,
    then hands the rest back; kernels/fwd_gluon_ws.py) under the masks and shapes that reach
    it: bottom-right offsets > 0 (Lk > Lq), ragged tiles with consumers past Lq (Lq = 100: in
    every tile the last consumer skips, so each program's final turn is in the skip loop),
    GQA, and 2 x 48 x 2 = 192 tiles for 132 programs (runs across tiles). Lq > Lk
    bottom-right leaves rows without keys: the launch runs TRITON_FALLBACK. The protocol
    itself is checked on the CPU (tests/test_ws_protocol.py)."""
    b, h, h_kv, lq, lk = shape
    q, k, v = random_qkv(b, h, lq, lk, 64, dtype, device, h_kv=h_kv)
    check_parity(q, k, v, causal=mask != "full", bottom_right=mask == "bottom-right",
                 enable_gqa=h != h_kv, config="fa3-ws3")
