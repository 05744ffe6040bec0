"""What inductor makes of a wrap_triton launch of each flashrepro kernel, without a GPU.

For the Qwen3-0.6B layer shape (q (1, 16, 1024, 128), k and v (1, 8, 1024, 128), bf16, GQA,
causal) and each launch -- the Triton kernel with pointer loads, the Triton kernel with host
TMA descriptors, the Gluon overlap kernel, the Gluon ws kernel -- on an sm_90 stand-in
(tests/offline_inductor.py):

1. a naive ``torch.library.triton_op`` whose body hands select()'s call to ``wrap_triton``
   whatever it is: the AOT graph (is the kernel's wrapper in it, which tensors it takes, what
   the kernel side table holds), wrap_triton's mutation analysis (the warning it logs when
   Triton's frontend cannot build TTIR), inductor's wrapper code (kernels it launches, flashrepro
   ops it calls);
2. the library's ``flashrepro::attention_triton`` on the same launches;
3. the pointer-load kernel's source as inductor re-emits it, compiled for sm_90 and counted
   beside the library's own compile of the same call (the same SASS?).

Run from the repository root, no GPU, without TRITON_INTERPRET (about a minute):
``env -u TRITON_INTERPRET PYTHONPATH=src:. python \
  lab/2026-12-02-compiled-op-host-cost/offline_trace.py``
"""

from __future__ import annotations

import importlib.util
import logging
import re
import sys
import tempfile
from pathlib import Path

import torch

from tests import offline_inductor

offline_inductor.install()

from flashrepro import ops  # noqa: E402
from flashrepro.configs import KernelConfig  # noqa: E402
from flashrepro.select import select  # noqa: E402

Q = ((1, 16, 1024, 128), torch.bfloat16)
KV = ((1, 8, 1024, 128), torch.bfloat16)
LAUNCHES = ["64x64 w4 s3", "64x64 w4 s3 tma", "fa3-overlap", "fa3-ws"]
FACTS = dict(arch=90, mma_v3=True, num_sms=132, l2_bytes=60 * 2**20)


@torch.library.triton_op("lab::attention_naive", mutates_args=())
def attention_naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    config: str) -> torch.Tensor:
    """select()'s call for ``config`` handed to wrap_triton as it is (descriptors included)."""
    o = q.new_empty(q.shape)
    lse = q.new_empty(q.shape[:3], dtype=torch.float32)
    chosen = select(*map(ops._stand_in, (q, k, v, o, lse)), causal=True, scale=None,
                    causal_alignment="top_left", return_lse=True,
                    config=KernelConfig.parse(config), **FACTS)
    call = chosen.bind((q, k, v, o, lse))
    torch.library.wrap_triton(call.kernel)[call.grid](*call.args, **call.kwargs)
    return o


class Warnings(logging.Handler):
    """wrap_triton's mutation-analysis warnings, first line of each exception."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None:
            self.seen.append(record.getMessage())
            return
        chain = [exc]
        while chain[-1].__cause__ is not None:
            chain.append(chain[-1].__cause__)
        # the innermost frontend error: its position and the source line above the caret
        where = [str(e).strip().splitlines() for e in chain if type(e).__name__ ==
                 "CompilationError"][-1:]
        line = ""
        if where:
            lines = where[0]
            carets = [i for i, text in enumerate(lines) if text.strip() == "^"]
            line = f"{lines[0]} {lines[carets[0] - 1].strip()}" if carets else lines[0]
        self.seen.append(f"{record.getMessage()}; innermost: {type(chain[-1]).__name__} "
                         f"in Triton's frontend {line}")


def naive_fn(config: str):
    def fn(q, k, v):
        return (torch.ops.lab.attention_naive(q, k, v, config),)
    return fn


def aot_graph(config: str) -> str:
    """The AOT graph of the naive op, and the side table's constant arguments."""
    from torch._functorch.aot_autograd import aot_export_joint_simple
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table
    from torch._subclasses.fake_tensor import FakeTensorMode

    kernel_side_table.reset_table()
    with FakeTensorMode():
        q = torch.empty(Q[0], dtype=Q[1], device="cuda")
        k = torch.empty(KV[0], dtype=KV[1], device="cuda")
        graph = aot_export_joint_simple(naive_fn(config), [q, k, k], trace_joint=False)
    lines = []
    for node in graph.graph.nodes:
        if node.op != "call_function":
            continue
        name = getattr(node.target, "__name__", str(node.target))
        if "triton_kernel_wrapper" in name:
            kw = node.kwargs["kwargs"]
            tensors = [key for key, value in kw.items() if isinstance(value, torch.fx.Node)]
            lines.append(f"  {name}: tensor kwargs {tensors}, tensors_to_clone "
                         f"{node.kwargs.get('tensors_to_clone')}")
        else:
            lines.append(f"  {name}")
    for index, constants in kernel_side_table.constant_args.items():
        described = {key: type(value).__name__ + (
            f"(base={type(value.base).__name__})" if hasattr(value, "base") else "")
            for key, value in constants.items() if not isinstance(value, (int, float, bool))}
        lines.append(f"  side table constant_args[{index}], non-scalars: {described}")
    return "\n".join(lines)


def compile_inlined(code: str) -> str:
    """The attn_fwd_kernel source inductor wrote, compiled for sm_90, beside the library's
    compile of the same call: SASS counts and resources of each."""
    from flashrepro_harness.analysis.disasm import disassemble_cubin

    source = re.search(r"async_compile\.triton\('attn_fwd_kernel', '''(.*?)''', device_str",
                       code, re.S).group(1)
    source = re.sub(r"@triton_heuristics\.user_autotune\(.*?\n\)\n", "", source, flags=re.S)
    workdir = Path(tempfile.mkdtemp())
    (workdir / "inlined.py").write_text(source)
    spec = importlib.util.spec_from_file_location("inlined", workdir / "inlined.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    meta = [torch.empty(s, dtype=d, device="meta") for s, d in (Q, KV, KV, Q)]
    lse = torch.empty(Q[0][:3], dtype=torch.float32, device="meta")
    config = ops.inline_config(128, True, 1024, 90)
    call = select(*meta, lse, causal=True, scale=None, causal_alignment="top_left",
                  return_lse=True, config=config, **FACTS).bind((*meta, lse))
    lines = [f"  config {config.label()}"]
    for name, kernel in (("inductor's source", module.attn_fwd_kernel),
                         ("library", call.kernel)):
        compiled = kernel.warmup(*call.args, grid=call.grid, **call.kwargs)
        counts, res = disassemble_cubin(compiled.asm["cubin"], workdir)
        wanted = {c: counts.classes.get(c, 0) for c in sorted(counts.classes)}
        lines.append(f"  {name}: registers {res.registers}, shared "
                     f"{compiled.metadata.shared} B, SASS classes {wanted}")
    return "\n".join(lines)


def main() -> int:
    handler = Warnings()
    logging.getLogger("torch._dynamo").addHandler(handler)  # triton_kernel_wrap logs here
    print(f"torch {torch.__version__}, q {Q[0]}, k/v {KV[0]}, bf16, causal, sm_90 stand-in\n")
    print("== 1. naive triton_op: select()'s call handed to wrap_triton as it is")
    for config in LAUNCHES:
        handler.seen.clear()
        print(f"-- {config}")
        print(aot_graph(config))
        for warning in dict.fromkeys(handler.seen):
            print(f"  mutation analysis: {warning}")
        code = offline_inductor.generated_code(
            naive_fn(config), [offline_inductor.contiguous(*Q), offline_inductor.contiguous(*KV),
                               offline_inductor.contiguous(*KV)])
        print(f"  inductor code: {offline_inductor.summary(code)}")
    print("\n== 2. flashrepro::attention_triton (bshd=False)")
    inlined = ""
    for config in [None, *LAUNCHES]:
        code = offline_inductor.attention_triton_code(config, bshd=False)
        inlined = inlined or code
        print(f"-- {config or 'None (inline_config)'}: {offline_inductor.summary(code)}")
    print("\n== 3. the inlined kernel's source compiled for sm_90")
    print(compile_inlined(inlined))
    return 0


if __name__ == "__main__":
    sys.exit(main())
