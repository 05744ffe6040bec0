"""Count the SASS of torch's own FlashAttention-2 forward kernel, read from ``libtorch_cuda.so``.

torch's SDPA flash backend is FlashAttention-2 compiled into ``libtorch_cuda.so`` (namespace
``pytorch_flash``). Its forward kernel is the template (torch source
``aten/src/ATen/native/transformers/cuda/flash_attn/flash_fwd_kernel.h`` and
``kernel_traits.h``)::

    flash_fwd_kernel<Flash_fwd_kernel_traits<kHeadDim, kBlockM, kBlockN, kNWarps,
                                             Is_Q_in_regs=false, Share_Q_K_smem=false, T>,
                     Is_dropout, Is_causal, Is_local, Has_alibi, Is_even_MN, Is_even_K,
                     Is_softcap, Return_softmax>

For D=128, causal, fp16, ``run_mha_fwd_hdim128`` (``flash_fwd_launch_template.h``) runs 64 x 64
tiles with 4 warps on sm_86/sm_89 and 128 x 64 on sm_80 and sm_90; the SASS article counts the
64 x 64 instance (80 LDSM, 64 LDSM.MT, 256 HMMA). Every instance is in every arch's cubin.

The function is disassembled alone (``cuobjdump -sass -res-usage -arch sm_XY -fun SYMBOL``). A
target without its own cubin uses the one the driver would load: the highest arch of the same
major not above it (sm_89 -> sm_86).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flashrepro_harness.analysis.disasm import (
    Resources,
    SassCounts,
    count_sass,
    cuobjdump,
    parse_resources,
)


@dataclass(frozen=True)
class TorchFlashInstance:
    """One instantiation of torch's FA2 forward kernel (fp16, no dropout/local/alibi/softcap):
    kHeadDim, kBlockM, kBlockN, kNWarps and the Is_causal, Is_even_MN, Is_even_K flags."""

    head_dim: int = 128
    block_m: int = 64
    block_n: int = 64
    num_warps: int = 4
    causal: bool = True
    even_mn: bool = True
    even_k: bool = True

    def label(self) -> str:
        return f"{self.block_m}x{self.block_n} w{self.num_warps}"

    def symbol(self) -> str:
        """The Itanium-mangled kernel name, as ``cuobjdump -fun`` expects it."""
        dims = f"ILi{self.head_dim}ELi{self.block_m}ELi{self.block_n}ELi{self.num_warps}E"
        flags = "".join(f"Lb{int(b)}E" for b in (
            False, self.causal, False, False, self.even_mn, self.even_k, False, False))
        return ("_ZN13pytorch_flash16flash_fwd_kernelI23Flash_fwd_kernel_traits"
                f"{dims}Lb0ELb0EN7cutlass6half_tE19Flash_kernel_traits{dims}S3_EE"
                f"{flags}EEvNS_16Flash_fwd_paramsE")

    def shared_bytes(self) -> int:
        """Dynamic shared memory of a launch, bytes: (kBlockM·D + 2·kBlockN·D)·2
        (``kernel_traits.h``, ``kSmemSize``); the cubin does not hold it."""
        return (self.block_m + 2 * self.block_n) * self.head_dim * 2


ARTICLE_INSTANCE = TorchFlashInstance()
"""The instance the article counts: D=128, 64 x 64, 4 warps, causal, even M/N and K."""


def dispatched_instance(arch: int) -> TorchFlashInstance:
    """The instance torch launches for D=128, causal, fp16 on ``arch`` (``run_mha_fwd_hdim128``):
    64 x 64 on sm8x with minor > 0 (sm_86, sm_89), else 128 x 64; 4 warps either way."""
    if arch // 10 == 8 and arch % 10 > 0:
        return ARTICLE_INSTANCE
    return TorchFlashInstance(block_m=128, block_n=64)


@dataclass(frozen=True)
class TorchKernelSass:
    """The counts of one instance for one target; ``cubin_arch``: ``sm_86`` for target sm_89."""

    instance: TorchFlashInstance
    cubin_arch: str
    counts: SassCounts
    resources: Resources


def installed_library() -> Path | None:
    """``libtorch_cuda.so`` of the installed torch, or None for a CPU build of torch."""
    import torch

    path = Path(torch.__file__).parent / "lib" / "libtorch_cuda.so"
    return path if path.is_file() else None


_CUBIN_ARCHS = (80, 86, 87, 89, 90)  # sm_8x/sm_90 archs cuobjdump's -arch accepts


def _cubin_candidates(arch: int) -> list[int]:
    """Archs whose cubin can run on ``arch``, best first: same major, not above it."""
    return sorted((a for a in _CUBIN_ARCHS if a // 10 == arch // 10 and a <= arch), reverse=True)


def torch_flash_sass(library: Path, arch: int,
                     instance: TorchFlashInstance = ARTICLE_INSTANCE) -> TorchKernelSass:
    """Disassemble one instance of torch's FA2 forward kernel for a target arch and count it.

    ``library``: a CUDA build's ``libtorch_cuda.so``; ``arch``: 80, 86, 89 or 90.

    Raises:
        FileNotFoundError: ``library`` does not exist.
        LookupError: no cubin of that arch family holds the instance's symbol.
        RuntimeError: cuobjdump failed.
    """
    if not library.is_file():
        raise FileNotFoundError(f"torch library not found: {library}")
    for cubin_arch in _cubin_candidates(arch):
        text = cuobjdump(["-sass", "-res-usage", "-arch", f"sm_{cubin_arch}",
                          "-fun", instance.symbol(), library])
        try:
            counts = count_sass(text)
        except ValueError:
            continue  # no cubin of this arch holds the function: try the next lower minor
        return TorchKernelSass(instance, f"sm_{cubin_arch}", counts, parse_resources(text))
    raise LookupError(f"{library} holds no cubin for sm_{arch} (or a lower sm_{arch // 10}x) "
                      f"with {instance.symbol()}")
