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
TUNED_TABLE = Path(__file__).resolve().parents[2] / "reproduce" / "tuned.json"


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
            stages, 4 or 8 warps and BLOCK_M >= 16·num_warps. Elsewhere the launch runs the
            Triton kernel with the same tiles.
        warp_specialize: where ``overlap`` applies, run the warp-specialized, persistent Gluon
            kernel :mod:`flashrepro.kernels.fwd_gluon_ws` instead (FlashAttention-3's producer
            warp, register reallocation and ping-pong of two consumer warpgroups). Needs
            ``overlap``, BLOCK_M = 128 and 8 warps (two consumer warpgroups; the producer
            warp comes on top), BLOCK_N 64 or 128, and 2 or more stages with
            BLOCK_N·num_stages <= 256: two Q buffers and an output tile per consumer (96 KiB
            at D = 128) and the K/V slots (stages·BLOCK_N·D·4 bytes) must fit sm_90's 227 KiB
            of shared memory.

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

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "num_warps", "num_stages"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
        for name in ("tma", "overlap", "warp_specialize"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
        for name in ("block_m", "block_n"):
            value = getattr(self, name)
            if value not in _VALID_BLOCKS:
                raise ValueError(f"{name} must be one of {_VALID_BLOCKS}, got {value}")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"num_warps must be a power of two in 1..16, got {self.num_warps}")
        if not 1 <= self.num_stages <= 8:
            raise ValueError(f"num_stages must be in 1..8, got {self.num_stages}")
        if self.overlap and not (self.tma and self.num_stages >= 2 and self.num_warps in (4, 8)
                                 and self.block_m >= 16 * self.num_warps):
            raise ValueError("overlap needs tma, num_stages >= 2, num_warps 4 or 8 and "
                             f"block_m >= 16·num_warps, got {self.label()}")
        if self.warp_specialize and not (self.overlap and self.block_m == 128
                                         and self.num_warps == 8 and self.block_n in (64, 128)
                                         and self.num_stages * self.block_n <= 256):
            raise ValueError("warp_specialize needs overlap, block_m 128, num_warps 8, "
                             "block_n 64 or 128 and num_stages·block_n <= 256 (shared "
                             f"memory), got {self.label()}")

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
        match = re.fullmatch(r"([0-9]+)x([0-9]+) w([0-9]+) s([0-9]+)( tma)?( overlap)?( ws)?",
                             text)
        if match is None:
            raise ValueError(f"config must be a name in {sorted(NAMED)} or a label like "
                             f"'64x64 w4 s3' or '64x64 w4 s3 tma', got {text!r}")
        block_m, block_n, warps, stages = (int(g) for g in match.groups()[:4])
        return cls(block_m, block_n, warps, stages, tma=match.group(5) is not None,
                   overlap=match.group(6) is not None, warp_specialize=match.group(7) is not None)

    def as_dict(self) -> dict[str, int | bool]:
        return asdict(self)

    def label(self) -> str:
        """Short text such as ``64x64 w4 s3 tma`` (BLOCK_M x BLOCK_N, warps, stages, flags:
        ``tma``, ``overlap``, ``ws`` for warp_specialize)."""
        return (f"{self.block_m}x{self.block_n} w{self.num_warps} s{self.num_stages}"
                + " tma" * self.tma + " overlap" * self.overlap + " ws" * self.warp_specialize)


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
256 / 112 / 16 (``python -m flashrepro sass``; reproduce/NOTES.md, experiment 9). 96 KiB of
shared memory: fits sm_86/89's 99 KiB. The default launch's choice on the mma.sync path for
64 < D <= 128 (:func:`default_config`); timed only on the H200's mma.sync path: 0.762x torch
flash's time at the article problem, against 0.904x for 64x64 w4 (reproduce/NOTES.md,
experiments 9 and 11)."""

FA3_OVERLAP = KernelConfig(block_m=64, block_n=64, num_warps=4, num_stages=3, tma=True,
                           overlap=True)
"""The Gluon kernel with FlashAttention-3's softmax/wgmma overlap at the tuned 64x64 tiles.

On the H200 at the article problem: 29.1 µs = 0.475x torch flash causal, against 31.2 µs for the
Triton default in the same rounds; 45.6 µs non-causal (Triton 46.1, cuDNN 35.9) and slower at
B=4, L=4096 non-causal (1137 µs against 1106) (reproduce/NOTES.md, experiment 14). Since
session 8 no tuned-table entry picks it: :data:`FA3_WS` beats it at every D=128 point (at the
article problem causal 27.2 against 29.2 µs, experiment 16)."""

FA3_WS = KernelConfig(block_m=128, block_n=128, num_warps=8, num_stages=2, tma=True,
                      overlap=True, warp_specialize=True)
"""The warp-specialized, persistent Gluon kernel at FA3's 128x128 tiles (two K/V stages: three
do not fit 227 KiB beside the Q and output tiles).

On the H200, in interleaved rounds with torch's cuDNN backend (reproduce/NOTES.md, experiment
15): 37.4 µs at the article problem non-causal (1.04x cuDNN's time, 0.63x torch flash; the
Triton default 46.0), 865 µs at B=4, L=4096 non-causal (1.02x cuDNN), 494 µs there causal
(0.99x cuDNN; the Gluon default 566). With two Q buffers per consumer and the snake tile
order (experiment 16): 36.7 µs non-causal (1.02x cuDNN, 0.618x torch flash) and 27.4 µs causal
(0.78x cuDNN, 0.449x torch flash) in the gated run. With the turn on named barriers and a
cheaper epilogue (experiment 17): 36.0 µs non-causal (1.00x cuDNN, 0.609x torch flash) and
26.3 µs causal (0.75x cuDNN, 0.434x torch flash) in the gated run; the tuned default for 20 of
the 24 sm_90 table entries."""

TRITON_FALLBACK = KernelConfig(block_m=64, block_n=64, num_warps=4, num_stages=3, tma=True)
"""The Triton kernel's launch where the tuned table picked a Gluon kernel that cannot run the
call (D other than 64 or 128, bottom-right causal with Lq > Lk, inputs TMA cannot address):
the table's tiles are the Gluon kernel's, not the Triton kernel's. On the H200, the Triton
kernel at all 24 points of the table (reproduce/results/nvidia-h200/session5/retune-200us/
tune.txt): this launch within 0-10 % of the best at every point, :data:`FA3_WS`'s tiles (128x128,
8 warps, 2 stages) 13-51 % slower than it. Re-timed on the H200 in session 9 (NOTES, experiment
17): the default launch, which takes this config there, equals it and is 10-16 % faster than
128x64 w8 s3 tma (D=96, D=80, bottom-right Lq > Lk)."""

NAMED: dict[str, KernelConfig] = {"article": ARTICLE, "p-in-registers": P_IN_REGISTERS,
                                  "fa3-overlap": FA3_OVERLAP, "fa3-ws": FA3_WS}


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

    Looks up the committed table ``reproduce/tuned.json`` (written by ``python -m flashrepro
    tune`` on the GPU it describes) by arch, head dim (padded to a power of two), causal and
    :func:`length_bucket`; off the table, a rule that fits every arch's shared memory:
    64x64, 4 warps, 3 stages up to D = 64; for 64 < D <= 128 the same on wgmma and tcgen05 archs
    and in the interpreter, and :data:`P_IN_REGISTERS` on the mma.sync path
    (:func:`mma_sync_arch`: sm_80/86/89, sm_90 with ``DISABLE_MMA_V3=1``, sm_120/121);
    64x32, 2 stages above D = 128.

    The mma.sync rule is measured on the H200 with ``DISABLE_MMA_V3=1`` only (reproduce/NOTES.md,
    experiment 11): at D = 128, 128x64 w8 s3 beat 64x64 w4 s3 at every length 512..16384, causal
    and not, by 11-28 %; at D = 64, 64x64 w4 s3 won every point (0.2-16 %), since its BLOCK_M
    >= D already keeps P in registers.

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
