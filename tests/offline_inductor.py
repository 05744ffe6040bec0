"""Inductor's generated code for CUDA inputs on a machine without a GPU (nothing is launched).

:func:`install` stands in for what inductor asks of a GPU while it traces and writes code: a
Triton driver that names sm_90 (as ``flashrepro_harness.analysis.offline_compile``'s), an
H100/H200-like ``torch.cuda.get_device_properties``, Triton counted as present, and the
joint-graph pattern passes skipped (their set-up allocates CUDA tensors). :func:`generated_code`
then runs ``torch._inductor.compile_fx`` on fake CUDA inputs and returns the wrapper module's
source just before inductor would load it (loading needs ``torch._C._cuda_*``). AOT tracing
runs as under ``torch.compile``: functionalization, a ``triton_op``'s decomposition and
``wrap_triton``'s mutation analysis (Triton's frontend to TTIR for sm_90).

Run in a process of its own without ``TRITON_INTERPRET`` (the kernels must be JITFunctions);
:func:`install` changes torch and Triton for the rest of the process. Used by
``tests/test_triton_op.py`` (``python -m tests.offline_inductor``, see :func:`main`) and the
lab record ``lab/2026-12-02-compiled-op-host-cost/``.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch

PROPS = types.SimpleNamespace(
    name="offline sm_90", major=9, minor=0, multi_processor_count=132, L2_cache_size=60 * 2**20,
    total_memory=140 * 2**30, warp_size=32, max_threads_per_multi_processor=2048,
    max_threads_per_block=1024, regs_per_multiprocessor=65536,
    shared_memory_per_block_optin=232448, shared_memory_per_multiprocessor=233472,
    clock_rate=1980000, gcnArchName="", uuid="offline")
"""The device properties reported: an H200's (132 SMs, 60 MiB L2, sm_90)."""


class _Driver:
    """Enough of a Triton driver for TTIR generation and inductor's code: sm_90, device 0."""

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: object = None) -> int:
        del device
        return 0

    def get_current_target(self) -> Any:
        from triton.backends.compiler import GPUTarget
        return GPUTarget("cuda", 90, 32)

    def get_device_interface(self) -> Any:
        return torch.cuda


def install() -> None:
    """Make this process look like one with an sm_90 GPU to torch's inductor and Triton."""
    from torch._dynamo.device_interface import CudaInterface
    from torch._inductor import scheduler
    from torch._inductor.fx_passes import joint_graph
    from torch.utils import _triton
    from triton.runtime.driver import driver

    driver.set_active(_Driver())
    torch.cuda.get_device_properties = lambda *args, **kwargs: PROPS
    torch.cuda.get_device_capability = lambda *args, **kwargs: (PROPS.major, PROPS.minor)
    torch.cuda.device_count = lambda: 1
    torch.cuda.current_device = lambda: 0
    CudaInterface.get_device_properties = staticmethod(lambda *args, **kwargs: PROPS)
    CudaInterface.Worker.get_device_properties = staticmethod(lambda *args, **kwargs: PROPS)
    CudaInterface.get_compute_capability = staticmethod(lambda *args, **kwargs: 90)
    CudaInterface.is_bf16_supported = staticmethod(lambda *args, **kwargs: True)
    _triton.has_triton = scheduler.has_triton = lambda: True
    joint_graph.lazy_init = lambda *args, **kwargs: None


class _Written(Exception):
    """Raised in place of loading the generated module."""


def generated_code(fn: Callable[..., tuple[torch.Tensor, ...]],
                   inputs: Sequence[tuple[tuple[int, ...], tuple[int, ...], torch.dtype]]) -> str:
    """The source of inductor's wrapper module for ``fn`` (a function of tensors returning a
    tuple of tensors, traceable by ``torch.fx.symbolic_trace``) on fake CUDA tensors of
    ``inputs`` (shape, strides, dtype each). Call :func:`install` first."""
    from torch._inductor import codecache
    from torch._inductor.compile_fx import compile_fx
    from torch._subclasses.fake_tensor import FakeTensorMode

    written: list[str] = []

    def grab(key: str, path: str, *args: Any, **kwargs: Any) -> Any:
        with open(path) as f:
            written.append(f.read())
        raise _Written

    gm = torch.fx.symbolic_trace(fn)
    load = codecache.PyCodeCache.load_by_key_path
    codecache.PyCodeCache.load_by_key_path = staticmethod(grab)
    try:
        with FakeTensorMode():
            fakes = [torch.empty_strided(shape, stride, dtype=dtype, device="cuda")
                     for shape, stride, dtype in inputs]
            compile_fx(gm, fakes)
    except Exception:
        if not written:
            raise
    finally:
        codecache.PyCodeCache.load_by_key_path = load
    return written[-1]


def contiguous(shape: tuple[int, ...], dtype: torch.dtype
               ) -> tuple[tuple[int, ...], tuple[int, ...], torch.dtype]:
    """(shape, contiguous strides, dtype): an entry of :func:`generated_code`'s inputs."""
    return shape, torch.empty(shape, device="meta").stride(), dtype


def attention_triton_code(config: str | None, bshd: bool, causal: bool = True,
                          q_shape: tuple[int, ...] = (1, 16, 1024, 128),
                          kv_shape: tuple[int, ...] = (1, 8, 1024, 128),
                          dtype: torch.dtype = torch.bfloat16) -> str:
    """Inductor's code for ``torch.ops.flashrepro.attention_triton`` on contiguous q, k, v
    (GQA when the head counts differ), causal top-left, default scale."""
    import flashrepro.ops  # noqa: F401  (registers the op)

    gqa = q_shape[1] != kv_shape[1]

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        o, lse = torch.ops.flashrepro.attention_triton(q, k, v, causal, None, gqa, "top_left",
                                                       config, bshd)
        return o, lse

    return generated_code(fn, [contiguous(q_shape, dtype), contiguous(kv_shape, dtype),
                               contiguous(kv_shape, dtype)])


def summary(code: str) -> dict[str, Any]:
    """What a wrapper module launches: the user Triton kernels it defines and runs (``name``,
    ``runs``), the ``torch.ops.flashrepro`` calls it makes, and its copies."""
    import re

    kernels = re.findall(r"^(\w+) = async_compile\.triton\('(\w+)'", code, re.M)
    return {
        "kernels": {name: {"source": src, "runs": len(re.findall(rf"\b{name}\.run\(", code))}
                    for name, src in kernels},
        "flashrepro_ops": sorted(set(re.findall(r"torch\.ops\.flashrepro\.(\w+)", code))),
        "copies": len(re.findall(r"\.copy_\(|aten\.copy", code)),
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.offline_inductor [--config LABEL ...] [--bshd] [--code]``: for each
    config (``default`` for None) print one JSON line, ``{"config": ..., "summary": ...}``, of
    :func:`summary` of :func:`attention_triton_code` (``--code``: the code itself)."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--config", action="append", default=None,
                        help="a KernelConfig label or name, or 'default'; repeatable")
    parser.add_argument("--bshd", action="store_true")
    parser.add_argument("--code", action="store_true")
    args = parser.parse_args(argv)
    install()
    for label in args.config or ["default"]:
        code = attention_triton_code(None if label == "default" else label, args.bshd)
        print(code if args.code else json.dumps({"config": label, "summary": summary(code)},
                                                sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
