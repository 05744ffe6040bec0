"""Kernel launch configurations: the article's, and the per-arch choice for the default launch.

A :class:`KernelConfig` is everything about a launch that is not the problem shape:
the tile sizes (BLOCK_M query rows and BLOCK_N key rows per program step), the warps
per program (``num_warps``) and the software-pipelining depth (``num_stages``).
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

_VALID_BLOCKS = (16, 32, 64, 128, 256)
WS_THREE_CONSUMERS = (192, 12)
"""(BLOCK_M, num_warps) of the warp-specialized kernel's three-consumer tile (FA3's for
D = 64): three consumer warpgroups of 64 rows."""
TUNED_TABLE = Path(__file__).resolve().parent / "tuned.json"
"""The tuned table, package data beside this module (installed with the wheel)."""


@dataclass(frozen=True)
class KernelConfig:
    """One launch configuration of the forward kernel.

    Attributes:
        block_m: query rows per program (BLOCK_M), a power of two in 16..256.
        block_n: key/value rows per inner-loop step (BLOCK_N), a power of two in 16..256.
        num_warps: warps per program (Triton ``num_warps``), a power of two in 1..16.
        num_stages: software-pipelining depth of the K/V loads (Triton ``num_stages``), 1..8.
        tma: load Q, K, V and store O through Hopper's tensor memory accelerator (4-D tensor
            descriptors; sm_90+, and inputs whose strides are 16-byte multiples). Where TMA
            cannot be used the launch falls back to pointer loads.
        overlap: run the Gluon kernel :mod:`flashrepro.kernels.fwd_gluon` (FlashAttention-3's
            softmax/wgmma overlap) where it applies: sm_90's wgmma path, fp16/bf16, D 64 or
            128, TMA-addressable inputs, no query row without keys. Needs ``tma``, at least 2
            stages, 4 or 8 warps (12 with BLOCK_M 192, see ``warp_specialize``) and
            BLOCK_M >= 16·num_warps. Elsewhere the launch runs the
            Triton kernel with the same tiles.
        warp_specialize: where ``overlap`` applies, run the warp-specialized, persistent Gluon
            kernel :mod:`flashrepro.kernels.fwd_gluon_ws` instead (FlashAttention-3's producer
            warp, register reallocation and ping-pong of consumer warpgroups of 64 rows).
            Needs ``overlap``, BLOCK_N 64 or 128, 2 or more stages, and either BLOCK_M = 128
            with 8 warps (two consumers; the producer warp comes on top) and
            BLOCK_N·num_stages <= 256, or FA3's D = 64 tile, BLOCK_M = 192 with 12 warps
            (three consumers), and BLOCK_N·num_stages <= 512: two Q buffers and an output
            tile per consumer (96 KiB at D = 128 with two, 72 KiB at D = 64 with three) and
            the K/V slots (stages·BLOCK_N·D·4 bytes) must fit sm_90's 227 KiB of shared
            memory. The 192-row tile is the one BLOCK_M that is no power of two; it runs at
            D = 64 only (three consumers' registers), and where the ws kernel cannot run it
            the launch runs :data:`TRITON_FALLBACK`.
        tile_grid: with ``warp_specialize``, launch one program per tile (FA3's single-tile
            scheduler) instead of the persistent grid of one program per SM: the hardware then
            hands the next tile to whichever SM frees first, a dynamic schedule, at the cost
            of the persistent kernel's overlap between a program's tiles (the next tile's
            loads, the output store). Long causal problems, whose tile costs vary, are where it
            wins: in the tuned table for causal L >= 8192 (10 % faster than the persistent
            grid at D = 128, L = 16384; lab/2026-11-29-tile-grid-long-causal/).

    Raises:
        TypeError: a size that is not an int, or a flag that is not a bool.
        ValueError: if a field breaks the rule stated above.
    """

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    tma: bool = False
    overlap: bool = False
    warp_specialize: bool = False
    tile_grid: bool = False

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "num_warps", "num_stages"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
        for name in ("tma", "overlap", "warp_specialize", "tile_grid"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
        three_consumers = self.three_consumers
        for name in ("block_m", "block_n"):
            value = getattr(self, name)
            if value not in _VALID_BLOCKS and not (name == "block_m" and three_consumers):
                also = " (or 192 with 12 warps, the ws kernel's three consumers)" * (
                    name == "block_m")
                raise ValueError(f"{name} must be one of {_VALID_BLOCKS}{also}, got {value}")
        if self.num_warps not in (1, 2, 4, 8, 16) and not three_consumers:
            raise ValueError(f"num_warps must be a power of two in 1..16, got {self.num_warps} "
                             "(12 only with block_m 192, the ws kernel's three consumers)")
        if three_consumers and not self.warp_specialize:
            raise ValueError("block_m 192 with 12 warps (three consumers) needs "
                             f"warp_specialize, got {self.label()}")
        if not 1 <= self.num_stages <= 8:
            raise ValueError(f"num_stages must be in 1..8, got {self.num_stages}")
        if self.overlap and not (self.tma and self.num_stages >= 2
                                 and (self.num_warps in (4, 8) or three_consumers)
                                 and self.block_m >= 16 * self.num_warps):
            raise ValueError("overlap needs tma, num_stages >= 2, num_warps 4 or 8 (12 with "
                             f"block_m 192) and block_m >= 16·num_warps, got {self.label()}")
        # K/V rows (stages·BLOCK_N) that fit beside the Q and output tiles, by (BLOCK_M, warps)
        kv_rows = {(128, 8): 256, WS_THREE_CONSUMERS: 512}.get((self.block_m, self.num_warps), 0)
        if self.warp_specialize and not (self.overlap and self.block_n in (64, 128)
                                         and self.num_stages * self.block_n <= kv_rows):
            raise ValueError("warp_specialize needs overlap, block_n 64 or 128, and block_m "
                             "128 with num_warps 8 and num_stages·block_n <= 256, or block_m "
                             "192 with num_warps 12 and num_stages·block_n <= 512 (shared "
                             f"memory), got {self.label()}")
        if self.tile_grid and not self.warp_specialize:
            raise ValueError("tile_grid needs warp_specialize (the other kernels always run "
                             f"one program per tile), got {self.label()}")

    @classmethod
    def parse(cls, text: str) -> KernelConfig:
        """The config of a :meth:`label` (``"128x64 w8 s3"``, ``"64x64 w4 s3 tma"``) or of a name
        in :data:`NAMED` (``"article"``, ``"p-in-registers"``).

        Raises:
            ValueError: text that is neither, or a field out of range (as the constructor).
        """
        text = text.strip()  # names and labels alike
        if text in NAMED:
            return NAMED[text]
        match = re.fullmatch(
            r"([0-9]+)x([0-9]+) w([0-9]+) s([0-9]+)( tma)?( overlap)?( ws)?( tilegrid)?", text)
        if match is None:
            raise ValueError(f"config must be a name in {sorted(NAMED)} or a label like "
                             f"'64x64 w4 s3' or '64x64 w4 s3 tma', got {text!r}")
        block_m, block_n, warps, stages = (int(g) for g in match.groups()[:4])
        return cls(block_m, block_n, warps, stages, tma=match.group(5) is not None,
                   overlap=match.group(6) is not None, warp_specialize=match.group(7) is not None,
                   tile_grid=match.group(8) is not None)

    @property
    def three_consumers(self) -> bool:
        """Whether this is the ws kernel's 192-row tile (:data:`WS_THREE_CONSUMERS`), which
        only the ws kernel runs, at D = 64 only."""
        return (self.block_m, self.num_warps) == WS_THREE_CONSUMERS

    @property
    def consumers(self) -> int:
        """Consumer warpgroups of the ws kernel at this config (``warp_specialize``): one per
        64 query rows and per 4 warps, 2 or 3."""
        return self.num_warps // 4

    def as_dict(self) -> dict[str, int | bool]:
        return asdict(self)

    def label(self) -> str:
        """Short text such as ``64x64 w4 s3 tma`` (BLOCK_M x BLOCK_N, warps, stages, flags:
        ``tma``, ``overlap``, ``ws`` for warp_specialize, ``tilegrid``)."""
        return (f"{self.block_m}x{self.block_n} w{self.num_warps} s{self.num_stages}"
                + " tma" * self.tma + " overlap" * self.overlap + " ws" * self.warp_specialize
                + " tilegrid" * self.tile_grid)


ARTICLE = KernelConfig(block_m=64, block_n=64, num_warps=4, num_stages=3)
"""The article's launch: BLOCK_M = BLOCK_N = 64 and 4 warps (seed ``000_5de0d8ad12f287ab.txt``).

The article does not state num_stages; 3 is Triton's tutorial default and what
``docs/article.md`` measured on the H200.
"""

P_IN_REGISTERS = KernelConfig(block_m=128, block_n=64, num_warps=8, num_stages=3)
"""A launch that keeps P in registers on the mma.sync path (sm_80/86/89, sm_90 with
``DISABLE_MMA_V3=1``), the layout torch's FlashAttention-2 uses.

With BLOCK_M = 128 >= HEAD_DIM (D <= 128), Triton 3.6 splits the 8 warps over S's rows
(``warpsPerCTA = [8, 1]``), so each warp's rows of P are already the A operand of P·V and no
shared-memory round trip (LDSM of P) is needed; with the article's 64x64, 4 warps it splits them
over S's columns ([1, 4]) and P goes through shared memory. Static SASS at the article problem
on sm_80: 256 HMMA, 88 LDSM, 64 LDSM.MT, against torch's 256 / 80 / 64 and the article launch's
256 / 112 / 16 (``python -m flashrepro_harness sass``; lab/2026-11-29-p-in-registers/). 96 KiB of
shared memory: fits sm_86/89's 99 KiB. The default launch's choice on the mma.sync path for
64 < D <= 128 (:func:`default_config`); timed only on the H200's mma.sync path: 0.762x torch
flash's time at the article problem, against 0.904x for 64x64 w4 (lab/2026-11-29-p-in-registers/,
lab/2026-11-29-mma-sync-default/)."""

FA3_OVERLAP = KernelConfig(block_m=64, block_n=64, num_warps=4, num_stages=3, tma=True,
                           overlap=True)
"""The Gluon kernel with FlashAttention-3's softmax/wgmma overlap at the tuned 64x64 tiles.

On the H200 at the article problem: 29.1 µs = 0.475x torch flash causal, against 31.2 µs for the
Triton default in the same rounds; 45.6 µs non-causal (Triton 46.1, cuDNN 35.9) and slower at
B=4, L=4096 non-causal (1137 µs against 1106) (lab/2026-11-29-gluon-softmax-overlap/). Since the
experiment lab/2026-11-29-persistent-tile-boundary/ no tuned-table entry picks it: :data:`FA3_WS`
beats it at every D=128 point (at the
article problem causal 27.2 against 29.2 µs, lab/2026-11-29-persistent-tile-boundary/)."""

FA3_WS = KernelConfig(block_m=128, block_n=128, num_warps=8, num_stages=2, tma=True,
                      overlap=True, warp_specialize=True)
"""The warp-specialized, persistent Gluon kernel at FA3's 128x128 tiles (two K/V stages: three
do not fit 227 KiB beside the Q and output tiles).

On the H200, in interleaved rounds with torch's cuDNN backend
(lab/2026-11-29-warp-specialization/): 37.4 µs at the article problem non-causal (1.04x cuDNN's
time, 0.63x torch flash; the Triton default 46.0), 865 µs at B=4, L=4096 non-causal (1.02x cuDNN),
494 µs there causal (0.99x cuDNN; the Gluon default 566). With two Q buffers per consumer and the
snake tile order (lab/2026-11-29-persistent-tile-boundary/): 36.7 µs non-causal (1.02x cuDNN,
0.618x torch flash) and 27.4 µs causal (0.78x cuDNN, 0.449x torch flash) in the gated run. With the
turn on named barriers and a cheaper epilogue (lab/2026-11-29-turn-next-q-epilogue/): 36.0 µs
non-causal (1.00x cuDNN, 0.609x torch flash) and 26.3 µs causal (0.75x cuDNN, 0.434x torch flash)
in the gated run; at aedc0ba (lab/2026-11-29-three-consumer-tile/) 35.7 µs (0.99x cuDNN, 0.605x)
and 26.2 µs (0.74x cuDNN, 0.431x), at fc12e65 35.8 µs (0.99x cuDNN, 0.606x) and 26.3 µs (0.75x
cuDNN, 0.431x). With FA4's conditional rescaling and the row sums kept per thread
(lab/2026-11-30-per-thread-row-sums/), at 560b613: 34.7 µs (0.97x cuDNN, 0.585x) and 25.7 µs (0.73x
cuDNN, 0.422x). In the tuned table for 13 of the 24 sm_90 entries (11 as it is, 2 with
``tile_grid``), :data:`FA3_WS3` for 10 more."""

FA3_WS3 = KernelConfig(block_m=192, block_n=128, num_warps=12, num_stages=3, tma=True,
                       overlap=True, warp_specialize=True)
"""The warp-specialized kernel with three consumer warpgroups (160 registers each), FA3's
192x128 tile for D = 64; D = 64 only (elsewhere the launch runs :data:`TRITON_FALLBACK`).

A consumer's GEMMs shrink with D but its softmax does not, so at D = 64 with two consumers one
consumer's softmax outlasts the other's GEMMs; with three, each softmax has two others' GEMMs to
hide behind. On the H200 at D = 64, fp16, side by side with :data:`FA3_WS`
(lab/2026-11-29-three-consumer-tile/): non-causal 552 against 614 µs at B=4, L=4096 (0.96x cuDNN's
time, against 1.06x), 176 against 179 at B=16, L=1024, 102 against 104 at B=32, L=512; causal 25-27
% slower at L <= 1024 (111 against 89 µs at B=32, L=512; 159 against 126 at B=16, L=1024: a
192-row tile walks the key range of its last row, so its first consumers also compute blocks
that are masked for all their rows) and equal at L = 4096 and 16384. Since then each consumer
computes only the blocks its own rows see (1.6-1.7 % faster non-causal at L <= 1024, 9-12 %
causal, still behind :data:`FA3_WS` there). The tuned table's choice at D = 64 non-causal, every
length (``tune --against-table`` at 421be72), and causal from L = 2048 (at 3cd8507; with
``tile_grid`` at L >= 8192). Causal, its consumers spill 80 bytes per thread (ptxas; 68
before the conditional rescaling) outside the loop over key blocks; the timings that
chose it include that."""

TRITON_FALLBACK = KernelConfig(block_m=64, block_n=64, num_warps=4, num_stages=3, tma=True)
"""The Triton kernel's launch where the tuned table picked a Gluon kernel that cannot run the
call (D other than 64 or 128, bottom-right causal with Lq > Lk, inputs TMA cannot address):
the table's tiles are the Gluon kernel's, not the Triton kernel's. On the H200, the Triton
kernel at all 24 points of the table (lab/2026-11-29-host-time-per-call/retune-200us/
tune.txt): this launch within 0-10 % of the best at every point, :data:`FA3_WS`'s tiles (128x128,
8 warps, 2 stages) 13-51 % slower than it. Re-timed on the H200 later
(lab/2026-11-29-turn-next-q-epilogue/): the default launch, which takes this config there, equals
it and is 10-16 % faster than 128x64 w8 s3 tma (D=96, D=80, bottom-right Lq > Lk)."""

NAMED: dict[str, KernelConfig] = {"article": ARTICLE, "p-in-registers": P_IN_REGISTERS,
                                  "fa3-overlap": FA3_OVERLAP, "fa3-ws": FA3_WS,
                                  "fa3-ws3": FA3_WS3}


MMA_V3_ARCHS = range(90, 100)
"""Archs where Triton 3.6 lowers ``tl.dot`` to wgmma (MMA v3), and where ``DISABLE_MMA_V3=1``
makes it build sm_80's mma.sync code instead: Hopper only. sm_100/103 get tcgen05 (MMA v5) with
or without it, sm_120/121 mma.sync (``getMMAVersionSafe`` in Triton's
lib/Dialect/TritonGPU/Transforms/AccelerateMatmul.cpp; checked by offline compiles)."""


def mma_sync_arch(arch: int | None) -> bool:
    """Whether Triton 3.6 lowers ``tl.dot`` for ``arch`` (a :func:`launch_arch` value) to
    mma.sync (MMA v2): below sm_90 and on consumer Blackwell (sm_120/121); False for None
    (interpreter). Source: as :data:`MMA_V3_ARCHS`."""
    return arch is not None and (arch < 90 or 120 <= arch < 130)


def launch_arch(device: torch.device | None = None) -> int | None:
    """The arch whose code Triton builds for ``device``: its compute capability as an int (90
    for sm_90), 80 on Hopper (:data:`MMA_V3_ARCHS`) when ``DISABLE_MMA_V3=1`` makes Triton
    build the sm_80 (mma.sync) code, None off a CUDA device (interpreter)."""
    if device is not None and device.type != "cuda":
        return None
    major, minor = torch.cuda.get_device_capability(device)
    arch = 10 * major + minor
    if arch in MMA_V3_ARCHS and os.environ.get("DISABLE_MMA_V3", "0") not in ("", "0"):
        return 80
    return arch


def length_bucket(seqlen_q: int) -> int:
    """The power of two nearest ``seqlen_q`` from below, clamped to 512..16384 (table buckets)."""
    bucket = 512
    while bucket * 2 <= seqlen_q and bucket < 16384:
        bucket *= 2
    return bucket


def table_key(arch: int, head_dim: int, causal: bool, bucket: int) -> str:
    """Key of the tuned table, e.g. ``sm90-d128-causal-l1024``."""
    return f"sm{arch}-d{head_dim}-{'causal' if causal else 'full'}-l{bucket}"


@functools.cache
def _tuned_table() -> dict[str, KernelConfig]:
    if not TUNED_TABLE.exists():
        return {}
    return {k: KernelConfig(**v) for k, v in json.loads(TUNED_TABLE.read_text()).items()}


def default_config(head_dim: int, causal: bool, seqlen_q: int, arch: int | None) -> KernelConfig:
    """The configuration the default launch uses (no tuning at call time).

    Looks up the committed table ``flashrepro/tuned.json`` (package data; written by
    ``python -m flashrepro_harness tune`` on the GPU it describes) by arch, head dim (padded to a
    power of two), causal and :func:`length_bucket`; off the table, a rule that fits every
    arch's shared memory: 64x64, 4 warps, 3 stages up to D = 64; for 64 < D <= 128 the same
    on wgmma and tcgen05 archs and in the interpreter, and :data:`P_IN_REGISTERS` on the
    mma.sync path
    (:func:`mma_sync_arch`: sm_80/86/89, sm_90 with ``DISABLE_MMA_V3=1``, sm_120/121);
    64x32, 2 stages above D = 128.

    The mma.sync rule is measured on the H200 with ``DISABLE_MMA_V3=1`` only
    (lab/2026-11-29-mma-sync-default/): at D = 128, 128x64 w8 s3 beat 64x64 w4 s3 at every length
    512..16384, causal and not, by 11-28 %; at D = 64, 64x64 w4 s3 won every point (0.2-16 %),
    since its BLOCK_M >= D already keeps P in registers.

    Args:
        head_dim: D of the problem.
        causal: whether the causal mask applies.
        seqlen_q: query length Lq, in rows.
        arch: compute capability as an int (``90`` for sm_90), or ``None`` when unknown
            (interpreter mode).

    Returns:
        A :class:`KernelConfig`.
    """
    padded = max(16, 1 << (head_dim - 1).bit_length())
    if arch is not None:
        key = table_key(arch, padded, causal, length_bucket(seqlen_q))
        if key in _tuned_table():
            return _tuned_table()[key]
    if padded <= 64 or (padded <= 128 and not mma_sync_arch(arch)):
        return KernelConfig(block_m=64, block_n=64, num_warps=4, num_stages=3)
    if padded <= 128:
        return P_IN_REGISTERS
    return KernelConfig(block_m=64, block_n=32, num_warps=4, num_stages=2)
