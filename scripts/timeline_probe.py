"""Where a tile's time goes in the warp-specialized kernel: an intra-kernel timeline with
Triton's Proton instrumentation (measurements: lab/2026-11-29-three-consumer-tile/).

Proton's instrumentation backend records a clock, per warp, at the scope boundaries a Gluon
kernel marks with ``triton.profiler.language.enter_scope``/``exit_scope``, and writes a Chrome
trace. :func:`variant_source` generates the instrumented kernel from
:mod:`flashrepro.kernels.fwd_gluon_ws` (scopes around each consumer's phases of a tile:
waiting for its Q and K_0, block 0, the loop, the last P·V, the epilogue), so the production
kernel carries no profiling code. From the repository root, on an H200:

    PYTHONPATH=src python scripts/timeline_probe.py OUT_DIR [PROBLEM ...]

and, on any machine (no GPU), ``timeline_probe.py --offline`` compiles the instrumented kernel
for sm_90 with the same Proton settings (tests/test_timeline_probe.py runs it).

For each PROBLEM (default: the article problem non-causal and causal, and B=16 L=1024 D=128
non-causal; also B=16 L=1024 at D=128 causal and D=64 either way), with the kernel's 128x128,
two-stage, one-program-per-SM launch (LSE stored): three launches in one Proton session (the
first compiles), the trace saved as ``OUT_DIR/<problem>.chrome_trace.json.gz`` and a table per
phase and tile (median and max over the consumer warps of all programs) of the second and
third launch printed. Exits naming an edit that no longer matches the kernel exactly once, or
an unknown problem.

Units: Proton converts clock cycles at a nominal 1000 MHz (the trace's ``Frequency (MHz)``), so
a trace µs is 1000 SM cycles. Proton's host work separates the launches, and its counters cost
the consumers a few spilled registers: compare phases with each other, not with the timed
kernel.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
import shutil
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import torch
import triton.profiler as proton
from tabulate import tabulate

from flashrepro.kernels import LOG2_E, fwd_gluon_ws
from flashrepro.select import heads_per_group
from flashrepro_harness.problem import Problem, load_article

EDITS = [  # (text in the kernel, replacement): each must occur exactly once
    ("import torch\nimport triton\n",
     "import torch\nimport triton\nimport triton.profiler.language as pl\n"),
    ("    # -- the first block: S and its softmax, nothing to overlap with yet --\n",
     "    # -- the first block: S and its softmax, nothing to overlap with yet --\n"
     "    pl.enter_scope(\"wait_q_k0\")\n"),
    ("    mbarrier.wait(k_ready.index(slot), (it // NUM_STAGES) & 1)\n    # Ping-pong",
     "    mbarrier.wait(k_ready.index(slot), (it // NUM_STAGES) & 1)\n"
     "    pl.exit_scope(\"wait_q_k0\")\n    pl.enter_scope(\"block0\")\n"
     "    # Ping-pong"),
    ("    p = gl.convert_layout(p.to(dtype), p_layout)\n\n    # -- steady",
     "    p = gl.convert_layout(p.to(dtype), p_layout)\n    pl.exit_scope(\"block0\")\n"
     "    pl.enter_scope(\"loop\")\n\n    # -- steady"),
    ("    # Every Q·Kᵀ of this tile has finished",
     "    pl.exit_scope(\"loop\")\n    pl.enter_scope(\"last_pv\")\n"
     "    # Every Q·Kᵀ of this tile has finished"),
    ("    tma.store_wait(pendings=0)  # the previous tile's output has left o_tile\n",
     "    pl.exit_scope(\"last_pv\")\n    pl.enter_scope(\"epilogue\")\n"
     "    tma.store_wait(pendings=0)  # the previous tile's output has left o_tile\n"),
    ("    return base + kb1\n",
     "    pl.exit_scope(\"epilogue\")\n    return base + kb1\n"),
]
PHASES = ["wait_q_k0", "block0", "loop", "last_pv", "epilogue"]
# Per CTA, a global buffer split evenly over the kernel's 12 warps; each share must be a power
# of two (64 KiB is refused): 4 KiB, 512 records of 8 bytes, 160 per launch at B=16.
MODE = proton.mode.Default(buffer_type="global", granularity="warp", buffer_size=12 * 4096)
SM90_MAX_SHARED = 232448  # bytes per block on sm_90 (227 KiB), what Proton's hook reads


def variant_source() -> str:
    """:mod:`flashrepro.kernels.fwd_gluon_ws`'s source with :data:`EDITS` applied; exits naming
    an edit whose text does not occur exactly once."""
    src = Path(fwd_gluon_ws.__file__).read_text()
    for old, new in EDITS:
        if src.count(old) != 1:
            raise SystemExit(f"edit does not match the kernel exactly once: {old!r}")
        src = src.replace(old, new)
    return src


def load_variant(tmp: Path):
    """:func:`variant_source` written to ``tmp`` and imported from there (Triton's JIT needs the
    source file)."""
    path = tmp / "fwd_gluon_ws_timeline.py"
    path.write_text(variant_source())
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ws_launch(module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
              num_programs: int):
    """A direct launch of ``module``'s ws kernel as a callable: q, k, v (B, H, L, D) on the GPU,
    128x128 tiles, 2 stages, ``num_programs`` persistent programs, the LSE stored."""
    b, h, lq, d = q.shape
    o = torch.empty_like(q)
    lse = torch.empty(b, h, lq, device=q.device)
    hpg = heads_per_group(b * h, k.shape[2], d, q.element_size(),
                          torch.cuda.get_device_properties(q.device).L2_cache_size)

    def run() -> None:
        module.kernel_call(q, k, v, o, lse, causal=causal, qk_scale=LOG2_E / math.sqrt(d),
                           causal_offset=0, heads_per_group=hpg, store_lse=True, block_n=128,
                           num_stages=2, num_programs=num_programs).run()
    return run


def trace_events(path: Path) -> list[dict]:
    data = json.loads(path.read_text())
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [e for e in events if e.get("ph") == "X"]


def split_launches(events: list[dict]) -> list[dict[tuple, list[dict]]]:
    """The launches in time order, each as every warp's events in time order. Launches are
    told apart on the trace's global clock: Proton's host work separates them (thousands of
    units), while inside a launch some warp is always inside a scope, so a stretch above a
    tenth of the median loop with no scope open is a new launch. A warp is (CTA, warp): the
    trace's ``pid`` also names the SM ("Core"), and a CTA may run on another SM in another
    launch (lab/2026-11-29-three-consumer-tile/'s traces: CTAs 0-7 did)."""
    loop = statistics.median(float(e["dur"]) for e in events if e["name"] == "loop")
    launches: list[dict[tuple, list[dict]]] = []
    end = float("-inf")
    for e in sorted(events, key=lambda e: float(e["ts"])):
        if float(e["ts"]) - end > 0.1 * loop:
            launches.append(defaultdict(list))
        end = max(end, float(e["ts"]) + float(e["dur"]))
        launches[-1][(e["pid"].split()[-1], e["tid"])].append(e)
    return launches


def summarize(events: list[dict], launch: int) -> list[list]:
    """Median and max duration per (phase, tile) over every consumer warp of every program
    in launch ``launch`` (trace time units), tiles 0, 1 and the program's last."""
    durations: dict[tuple, list[float]] = defaultdict(list)
    spans = []
    for evs in split_launches(events)[launch].values():
        spans.append((float(evs[0]["ts"]), float(evs[-1]["ts"]) + float(evs[-1]["dur"])))
        n_tiles = sum(e["name"] == "epilogue" for e in evs)
        count: dict[str, int] = defaultdict(int)
        for e in evs:
            tile = count[e["name"]]
            count[e["name"]] += 1
            label = str(tile) if tile < 2 else ("last" if tile == n_tiles - 1 else None)
            if label is not None:
                durations[(e["name"], label)].append(float(e["dur"]))
    rows = [["warps' span, first record to last", "", len(spans),
             round(max(s[1] for s in spans) - min(s[0] for s in spans), 3), ""]]
    for (name, tile), d in sorted(durations.items(),
                                  key=lambda kv: (kv[0][1], PHASES.index(kv[0][0]))):
        rows.append([name, tile, len(d), round(statistics.median(d), 3), round(max(d), 3)])
    return rows


def offline_check(causal: bool) -> int:
    """Compile the instrumented kernel for sm_90 on a machine without a GPU, with the passes
    Proton's instrumentation hook registers (``InstrumentationHook.activate``, which itself
    needs a GPU) and :data:`MODE`; returns the PTX's clock reads (one per scope boundary and
    consumer warpgroup). Raises where Proton or ptxas refuse the kernel, as on the GPU."""
    import triton
    from triton._C.libtriton import passes as triton_passes
    from triton._C.libtriton import proton as triton_proton
    from triton.backends import backends
    from triton.profiler.flags import flags
    from triton.profiler.hooks.instrumentation import Instrumentation, InstrumentationHook
    from triton.runtime.driver import driver

    from flashrepro_harness.analysis.offline_compile import TARGETS, _OfflineDriver

    def to_llvmir(pm) -> None:
        triton_proton.add_convert_proton_to_protongpu(
            pm, MODE.metric_type, MODE.sampling_strategy, MODE.sampling_options,
            MODE.granularity, MODE.buffer_strategy, MODE.buffer_type, MODE.buffer_size,
            SM90_MAX_SHARED, InstrumentationHook.profile_buffer_size,
            InstrumentationHook.profile_buffer_alignment, True)
        triton_passes.common.add_cse(pm)
        triton_proton.add_allocate_proton_shared_memory(pm)

    def to_llvm(pm) -> None:
        triton_proton.add_allocate_proton_global_scratch_buffer(pm)
        triton_proton.add_convert_proton_nvidia_gpu_to_llvm(pm)

    flags.instrumentation_on = True
    backends["nvidia"].compiler.instrumentation = Instrumentation(
        {"ttgpuir_to_llvmir": to_llvmir, "llvmir_to_llvm": to_llvm})
    triton.knobs.compilation.instrumentation_mode = str(MODE)
    with tempfile.TemporaryDirectory() as tmp:
        module = load_variant(Path(tmp))
        article, _ = load_article()
        q = torch.empty(article.batch, article.heads, article.seqlen_q, article.head_dim,
                        dtype=torch.float16, device="meta")
        call = module.kernel_call(q, torch.empty_like(q), torch.empty_like(q),
                                  torch.empty_like(q), torch.empty(q.shape[:3], device="meta"),
                                  causal=causal, qk_scale=0.1, causal_offset=0,
                                  heads_per_group=32, store_lse=True, block_n=128, num_stages=2,
                                  num_programs=132)
        driver.set_active(_OfflineDriver(TARGETS["sm_90"]))
        ptx = call.kernel.warmup(*call.args, grid=call.grid, **call.kwargs).asm["ptx"]
    return ptx.count("%clock")


def main() -> None:
    if sys.argv[1:] == ["--offline"]:
        for causal in (False, True):
            print(f"causal={causal}: the instrumented kernel compiles for sm_90 offline, "
                  f"{offline_check(causal)} clock reads in its PTX")
        return
    out_dir = Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    article, _ = load_article()
    problems = {"article-noncausal": Problem(**{**article.as_dict(), "causal": False}),
                "article-causal": article}
    for d in (128, 64):  # B=16 L=1024: 16 tiles per program; D=64 causal trails cuDNN most
        for causal in (False, True):
            problems[f"b16-l1024-d{d}-{'causal' if causal else 'noncausal'}"] = Problem(
                batch=16, heads=16, seqlen_q=1024, seqlen_k=1024, head_dim=d,
                dtype="float16", causal=causal)
    chosen = sys.argv[2:] or ["article-noncausal", "article-causal", "b16-l1024-d128-noncausal"]
    if unknown := [name for name in chosen if name not in problems]:
        sys.exit(f"unknown problems {unknown}; choose from {sorted(problems)}")
    with tempfile.TemporaryDirectory() as tmp:
        module = load_variant(Path(tmp))
        for name in chosen:
            problem = problems[name]
            q, k, v = problem.inputs()
            sms = torch.cuda.get_device_properties(q.device).multi_processor_count
            run = ws_launch(module, q, k, v, problem.causal, sms)
            stem = Path(tmp) / name
            proton.start(str(stem), data="trace", backend="instrumentation", mode=MODE)
            for _ in range(3):  # the first compiles; Proton's host work separates them
                run()
            torch.cuda.synchronize()
            proton.finalize(output_format="chrome_trace")
            trace = next(Path(tmp).glob(f"{name}*"))
            with trace.open("rb") as src, gzip.open(out_dir / f"{name}.chrome_trace.json.gz",
                                                   "wb") as dst:
                shutil.copyfileobj(src, dst)
            events = trace_events(trace)
            print(f"## {name} ({problem})\n\nfirst events: {events[:3]}\n", flush=True)
            for launch in (1, 2):
                print(f"launch {launch + 1} of 3 (trace time units)\n")
                print(tabulate(summarize(events, launch), ["phase", "tile", "warps", "median",
                                                           "max"], tablefmt="github"),
                      flush=True)


if __name__ == "__main__":
    main()
