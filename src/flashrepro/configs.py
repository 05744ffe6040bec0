"""Launch configurations of the forward kernels, and the default launch's choice per arch."""

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
"""(BLOCK_M, num_warps) of FA3's D = 64 tile: three consumer warpgroups of 64 rows."""
TUNED_TABLE = Path(__file__).resolve().parent / "tuned.json"
"""The tuned table, package data beside this module."""


@dataclass(frozen=True)
class KernelConfig:
    """One launch configuration: everything about a launch that is not the problem shape.

    Attributes:
        block_m: query rows per program (BLOCK_M): a power of two in 16..256, or 192 (below).
        block_n: key/value rows per inner-loop step (BLOCK_N): a power of two in 16..256.
        num_warps: warps per program: a power of two in 1..16, or 12 (below).
        num_stages: software-pipelining depth of the K/V loads, 1..8.
        tma: load and store through TMA descriptors (sm_90+, strides that are 16-byte
            multiples); pointer loads where TMA cannot be used.
        overlap: run :mod:`flashrepro.kernels.fwd_gluon` (FA3's softmax/wgmma overlap) on
            sm_90's wgmma path for fp16/bf16, D 64 or 128, TMA-addressable inputs and rows that
            all see a key; elsewhere the Triton kernel at these tiles. Needs ``tma``,
            num_stages >= 2, 4 or 8 warps (or 12) and block_m >= 16·num_warps.
        warp_specialize: where ``overlap`` applies, run the persistent warp-specialized kernel
            :mod:`flashrepro.kernels.fwd_gluon_ws` instead. Needs ``overlap``, block_n 64 or
            128, and block_m 128 with 8 warps and num_stages·block_n <= 256 (two consumer
            warpgroups), or block_m 192 with 12 warps and num_stages·block_n <= 512 (three;
            D = 64 only, else :data:`TRITON_FALLBACK` runs): sm_90's 227 KiB of shared memory.
        tile_grid: with ``warp_specialize``, one program per tile (FA3's single-tile scheduler)
            instead of one per SM; wins on long causal problems
            (lab/2026-11-29-tile-grid-long-causal/).
        dynamic_schedule: with ``warp_specialize`` and not ``tile_grid``, each program of the
            persistent grid claims its next tile from an atomic counter (FA3's dynamic
            persistent scheduler) instead of taking the static snake order's; the kernel resets
            the counter, so launches of one cached call must not run concurrently.
        split_tail: with ``warp_specialize``, neither ``tile_grid`` nor ``dynamic_schedule``,
            and no causal mask: the persistent programs share the last two rounds' tiles out
            as equal runs of key blocks (stream-K's hybrid), whose parts of a tile merge
            through a stream counter and the stream's scratch; on the H200 1.2-2.9 % faster
            from 2048 (D = 128) and 8192 (D = 64) query rows at B·L = 16384, slower below
            (lab/2026-12-03-split-tail/).

    Raises:
        TypeError: a size that is not an int, or a flag that is not a bool.
        ValueError: a field that breaks a rule above.
    """

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    tma: bool = False
    overlap: bool = False
    warp_specialize: bool = False
    tile_grid: bool = False
    dynamic_schedule: bool = False
    split_tail: bool = False

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "num_warps", "num_stages"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
        for name in ("tma", "overlap", "warp_specialize", "tile_grid", "dynamic_schedule",
                     "split_tail"):
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
        # K/V rows (stages·BLOCK_N) that fit in shared memory beside Q and O, by (BLOCK_M, warps)
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
        if self.dynamic_schedule and not (self.warp_specialize and not self.tile_grid):
            raise ValueError("dynamic_schedule needs warp_specialize without tile_grid (it "
                             f"schedules the persistent grid), got {self.label()}")
        if self.split_tail and not (self.warp_specialize and not self.tile_grid
                                    and not self.dynamic_schedule):
            raise ValueError("split_tail needs warp_specialize without tile_grid or "
                             "dynamic_schedule (it splits the static persistent grid's last "
                             f"rounds), got {self.label()}")

    @classmethod
    def parse(cls, text: str) -> KernelConfig:
        """The config of a :meth:`label` (``"64x64 w4 s3 tma"``) or a name in :data:`NAMED`.
        Raises ValueError for text that is neither, or as the constructor does."""
        text = text.strip()  # names and labels alike
        if text in NAMED:
            return NAMED[text]
        match = re.fullmatch(
            r"([0-9]+)x([0-9]+) w([0-9]+) s([0-9]+)( tma)?( overlap)?( ws)?( tilegrid)?"
            r"( dynamic)?( split)?", text)
        if match is None:
            raise ValueError(f"config must be a name in {sorted(NAMED)} or a label like "
                             f"'64x64 w4 s3' or '64x64 w4 s3 tma', got {text!r}")
        block_m, block_n, warps, stages = (int(g) for g in match.groups()[:4])
        return cls(block_m, block_n, warps, stages, tma=match.group(5) is not None,
                   overlap=match.group(6) is not None, warp_specialize=match.group(7) is not None,
                   tile_grid=match.group(8) is not None,
                   dynamic_schedule=match.group(9) is not None,
                   split_tail=match.group(10) is not None)

    @property
    def three_consumers(self) -> bool:
        """Whether this is the 192-row tile (:data:`WS_THREE_CONSUMERS`; ws kernel, D = 64)."""
        return (self.block_m, self.num_warps) == WS_THREE_CONSUMERS

    @property
    def consumers(self) -> int:
        """Consumer warpgroups of the ws kernel (``warp_specialize``): 2 or 3."""
        return self.num_warps // 4

    def as_dict(self) -> dict[str, int | bool]:
        return asdict(self)

    def label(self) -> str:
        """Short text such as ``64x64 w4 s3 tma`` (BLOCK_M x BLOCK_N, warps, stages, flags:
        ``tma``, ``overlap``, ``ws`` for warp_specialize, ``tilegrid``, ``dynamic`` for
        dynamic_schedule, ``split`` for split_tail)."""
        return (f"{self.block_m}x{self.block_n} w{self.num_warps} s{self.num_stages}"
                + " tma" * self.tma + " overlap" * self.overlap + " ws" * self.warp_specialize
                + " tilegrid" * self.tile_grid + " dynamic" * self.dynamic_schedule
                + " split" * self.split_tail)


ARTICLE = KernelConfig(block_m=64, block_n=64, num_warps=4, num_stages=3)
"""The article's launch, 64x64 tiles and 4 warps (docs/article.md); num_stages, which it does
not state, is Triton's tutorial default."""

P_IN_REGISTERS = KernelConfig(block_m=128, block_n=64, num_warps=8, num_stages=3)
"""128x64, 8 warps: with BLOCK_M >= D, Triton 3.6 splits the warps over S's rows and P stays in
registers for P·V on the mma.sync path, as in torch's FA2; its 96 KiB of shared memory fits
sm_86/89. The mma.sync default for 64 < D <= 128 (lab/2026-11-29-p-in-registers/,
lab/2026-11-29-mma-sync-default/)."""

FA3_OVERLAP = KernelConfig(block_m=64, block_n=64, num_warps=4, num_stages=3, tma=True,
                           overlap=True)
"""The Gluon softmax/wgmma overlap kernel at 64x64 tiles (``fa3-overlap``). No tuned-table entry
picks it: :data:`FA3_WS` is faster at every D = 128 point (lab/2026-11-29-gluon-softmax-overlap/,
lab/2026-11-29-persistent-tile-boundary/)."""

FA3_WS = KernelConfig(block_m=128, block_n=128, num_warps=8, num_stages=2, tma=True,
                      overlap=True, warp_specialize=True)
"""The warp-specialized, persistent Gluon kernel at FA3's 128x128 tiles (``fa3-ws``); two K/V
stages, as three do not fit 227 KiB beside the Q and output tiles. The tuned choice on sm_90 at
D = 128 and some D = 64 causal lengths (lab/2026-11-29-warp-specialization/)."""

FA3_WS3 = KernelConfig(block_m=192, block_n=128, num_warps=12, num_stages=3, tma=True,
                       overlap=True, warp_specialize=True)
"""FA3's 192x128 tile for D = 64 (``fa3-ws3``): three consumer warpgroups, so that each softmax
hides behind two others' GEMMs. D = 64 only (else :data:`TRITON_FALLBACK` runs); the tuned
choice on sm_90 at D = 64 non-causal and causal from L = 2048
(lab/2026-11-29-three-consumer-tile/)."""

TRITON_FALLBACK = KernelConfig(block_m=64, block_n=64, num_warps=4, num_stages=3, tma=True)
"""The Triton kernel's launch where the tuned table picked a Gluon kernel that cannot run the
call (D other than 64 or 128, bottom-right causal with Lq > Lk, inputs TMA cannot address): the
table's tiles suit the Gluon kernel, and the Triton kernel runs them 13-51 % slower than these
(lab/2026-11-29-host-time-per-call/retune-200us/tune.txt, lab/2026-11-29-turn-next-q-epilogue/)."""

NAMED: dict[str, KernelConfig] = {"article": ARTICLE, "p-in-registers": P_IN_REGISTERS,
                                  "fa3-overlap": FA3_OVERLAP, "fa3-ws": FA3_WS,
                                  "fa3-ws3": FA3_WS3}


MMA_V3_ARCHS = range(90, 100)
"""Archs where Triton 3.6 lowers ``tl.dot`` to wgmma and ``DISABLE_MMA_V3=1`` selects mma.sync
instead: Hopper only (``getMMAVersionSafe`` in Triton's AccelerateMatmul.cpp)."""


def mma_sync_arch(arch: int | None) -> bool:
    """Whether Triton 3.6 lowers ``tl.dot`` for ``arch`` (a :func:`launch_arch` value) to
    mma.sync: below sm_90 and sm_120/121; False for None (interpreter)."""
    return arch is not None and (arch < 90 or 120 <= arch < 130)


def launch_arch(device: torch.device | None = None) -> int | None:
    """The arch whose code Triton builds for ``device``: its compute capability as an int (90
    for sm_90), 80 on Hopper under ``DISABLE_MMA_V3=1``, None off a CUDA device."""
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


def block_dim(n: int) -> int:
    """The tile size that covers ``n`` >= 1 elements: the next power of two (``tl.arange``
    needs one), at least 16 (``tl.dot``'s smallest K and N)."""
    return max(16, 1 << (n - 1).bit_length())


def default_config(head_dim: int, causal: bool, seqlen_q: int, arch: int | None) -> KernelConfig:
    """The configuration of the default launch (no tuning at call time).

    The committed :data:`TUNED_TABLE` (written by ``flashrepro tune`` on the GPU it
    describes) at :func:`table_key` of D padded to a power of two and :func:`length_bucket` of
    Lq; off the table, a rule that fits every arch's shared memory: 64x64 w4 s3 up to D = 128,
    but :data:`P_IN_REGISTERS` on the mma.sync path (:func:`mma_sync_arch`) for 64 < D <= 128;
    64x32 w4 s2 above D = 128.

    ``arch`` is a :func:`launch_arch` value; None (the interpreter) skips the table.
    """
    padded = block_dim(head_dim)
    if arch is not None:
        key = table_key(arch, padded, causal, length_bucket(seqlen_q))
        if key in _tuned_table():
            return _tuned_table()[key]
    if padded <= 64 or (padded <= 128 and not mma_sync_arch(arch)):
        return KernelConfig(block_m=64, block_n=64, num_warps=4, num_stages=3)
    if padded <= 128:
        return P_IN_REGISTERS
    return KernelConfig(block_m=64, block_n=32, num_warps=4, num_stages=2)
