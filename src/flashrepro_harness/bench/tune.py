"""Time candidate launch configs and pick the winners (``flashrepro tune``,
:mod:`flashrepro_harness.commands.tune`).

The default launch reads its config from the committed table ``flashrepro/tuned.json``
(:func:`flashrepro.configs.default_config`: arch, head dim, causal, power-of-two bucket of Lq);
this rebuilds it on the GPU it runs on. A candidate must match torch SDPA to win; a problem's
correct candidates are timed together in interleaved rounds.
"""

from __future__ import annotations

import itertools
import statistics

import torch

from flashrepro.configs import KernelConfig
from flashrepro.validation import MAX_HEAD_DIM
from flashrepro_harness.bench import impls as K
from flashrepro_harness.bench import peers
from flashrepro_harness.bench.timing import interleaved_rounds
from flashrepro_harness.problem import Problem

# Winners of at least one grid point on the H200 (lab/2026-11-29-tuned-table/) and the article's
# 64x64 pointer build; two-stage 128-row tiles lost (lab/2026-11-29-host-time-per-call/).
CANDIDATES = [
    KernelConfig(64, 64, 4, 3),
    KernelConfig(64, 64, 4, 2, tma=True),
    KernelConfig(64, 64, 4, 3, tma=True),
    KernelConfig(64, 32, 4, 3, tma=True),
    KernelConfig(64, 128, 4, 2, tma=True),
    KernelConfig(128, 64, 8, 3, tma=True),
    KernelConfig(128, 128, 8, 3, tma=True),
]


def candidates(head_dim: int, pool: list[KernelConfig] = CANDIDATES) -> list[KernelConfig]:
    """Launch configs of ``pool`` worth timing for ``head_dim``: those that fit, and 192-row
    tiles (the ws kernel's three consumers) at D = 64 only, the one D they run at (elsewhere
    the launch runs another config, which would be timed under their label)."""
    pool = [c for c in pool if not c.three_consumers or head_dim == 64]
    if head_dim > 128:  # K/V stages of 256-wide rows do not fit 228 KB of shared memory
        return [c for c in pool if c.block_n <= 64 and c.num_stages <= 2]
    return pool


def problems(lengths: list[int], head_dims: list[int], tokens: int,
             dtype: str = "float16", masks: tuple[bool, ...] = (False, True)) -> list[Problem]:
    """Problems with H = 16 and B·L = ``tokens`` (B >= 1), for each causal flag in ``masks``."""
    out = []
    for length, d, causal in itertools.product(lengths, head_dims, masks):
        out.append(Problem(batch=max(1, tokens // length), heads=16, seqlen_q=length,
                           seqlen_k=length, head_dim=d, dtype=dtype, causal=causal))
    return out


def best_config(problem: Problem, rounds: int, calls: int,
                pool: list[KernelConfig] = CANDIDATES, incumbent: KernelConfig | None = None,
                min_gain: float = 0.0) -> tuple[KernelConfig, list[list]]:
    """Time every candidate on ``problem``; return the fastest correct one (as
    :func:`winner`) and the table rows.

    Candidates that fail to build or differ from torch SDPA by 2e-2 or more are listed with the
    reason and never win. The rest run in ``rounds`` interleaved rounds of ``calls`` calls; a
    time (µs) is the median of per-round medians. The optional peers are timed in the same rounds
    as rows ``peer <name>`` that never win, or listed with why they did not run.
    """
    inputs = problem.inputs()
    q, k, v = inputs
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=problem.causal)
    rows: list[list] = []
    configs: dict[str, KernelConfig] = {}
    fns = {}
    for cfg in candidates(problem.head_dim, pool):
        call = K.make_call("flashrepro", inputs, problem.causal, config=cfg)
        try:
            err = (call().float() - ref.float()).abs().max().item()
        except Exception as exc:  # tiles that do not fit, or a config Triton cannot build
            rows.append([cfg.label(), "n/a", f"{type(exc).__name__}: {exc}".splitlines()[0][:70]])
            continue
        if not err < 2e-2:
            rows.append([cfg.label(), "n/a", f"wrong: max err {err:.2g}"])
            continue
        configs[cfg.label()] = cfg
        fns[cfg.label()] = call
    if not fns:
        raise RuntimeError(f"no candidate ran correctly on {problem.key()}: {rows}")
    peer_fns, peer_notes = {}, {}
    for name in peers.PEERS:
        reason = K.available(name, inputs, problem.causal)
        if reason:
            rows.append([f"peer {name}", "n/a", f"skipped: {reason}"[:90]])
            continue
        call = K.make_call(name, inputs, problem.causal)
        err = (K.output(name, call()).float() - ref.float()).abs().max().item()
        peer_fns[f"peer {name}"] = call
        peer_notes[f"peer {name}"] = f"{peers.PEERS[name].layout}, max err {err:.2g}"
    per_round = interleaved_rounds({**fns, **peer_fns}, rounds=rounds, calls_per_round=calls)
    times = {label: statistics.median(per_round[label]) for label in fns}
    rows += [[label, f"{us:.1f}", ""] for label, us in times.items()]
    rows += [[label, f"{statistics.median(per_round[label]):.1f}", peer_notes[label]]
             for label in peer_fns]
    return configs[winner(times, None if incumbent is None else incumbent.label(), min_gain)], rows


def winner(times: dict[str, float], incumbent: str | None, min_gain: float) -> str:
    """The label of the fastest of ``times`` (µs by config label), unless ``incumbent`` (the
    table's entry, if it ran correctly) is within ``min_gain`` (a fraction) of it: a challenger
    must beat the committed entry by more than the noise, so ties do not flip the table
    (lab/2026-11-29-turn-next-q-epilogue/).
    """
    fastest = min(times, key=times.__getitem__)
    if incumbent in times and times[fastest] > times[incumbent] * (1 - min_gain):
        return incumbent
    return fastest


def table_head_dim(head_dim: int) -> bool:
    """Whether the tuned table has keys for ``head_dim``: the launch looks D up padded to a power
    of two >= 16, so a key such as ``sm90-d96-...`` would never be read."""
    return 16 <= head_dim <= MAX_HEAD_DIM and head_dim & (head_dim - 1) == 0
