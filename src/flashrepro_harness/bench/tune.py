"""Time candidate launch configs and pick the winners (``flashrepro tune``,
:mod:`flashrepro_harness.commands.tune`).

The default launch never tunes at call time: it looks its config up in the committed table
``flashrepro/tuned.json`` (:func:`flashrepro.configs.default_config`), keyed by arch, head dim,
causal and a power-of-two bucket of Lq. This command rebuilds that table on the GPU it runs on.
Each candidate is checked against torch SDPA before it may win; the correct candidates of a
problem are timed together in interleaved rounds
(:func:`flashrepro_harness.bench.timing.interleaved_rounds`), so clock drift favours none of them.
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

# The configs that won at least one point of the full grids on the H200 (lab/2026-11-29-*,
# the first four experiments; 30 configs were timed there) and the article's 64x64 pointer build.
# Two-stage 128-row tiles (128x64 and 128x128, 8 warps) were tried again later and lost every
# D = 128 non-causal point to their three-stage versions by 13-46 %
# (lab/2026-11-29-host-time-per-call/).
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

    Candidates whose output differs from torch SDPA's by 2e-2 or more, or that fail to build
    (tiles that do not fit shared memory), are listed with the reason and never win. The rest
    run in ``rounds`` interleaved rounds of ``calls`` calls; a candidate's time (µs) is the
    median of its per-round medians. ``incumbent`` (one of ``pool``) and ``min_gain``: see
    :func:`winner`. The optional peers (:data:`flashrepro_harness.bench.peers.PEERS`) are timed in
    the same rounds as rows ``peer <name>`` that never win, or listed with the reason they did not
    run (not installed, or unsupported here).
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
    must be faster by more than the noise of a few rounds to replace the committed entry, so
    the table does not flip between configs that tie (an entry once moved on 0.5 % over 3
    rounds, and the sweep then showed the point unchanged: lab/2026-11-29-turn-next-q-epilogue/).
    """
    fastest = min(times, key=times.__getitem__)
    if incumbent in times and times[fastest] > times[incumbent] * (1 - min_gain):
        return incumbent
    return fastest


def table_head_dim(head_dim: int) -> bool:
    """Whether the tuned table has keys for ``head_dim``: the default launch looks D up padded
    to a power of two >= 16 (:func:`flashrepro.configs.default_config`), so a winner timed at
    D=96 could only go under a key ``sm90-d96-...`` that no launch reads."""
    return 16 <= head_dim <= MAX_HEAD_DIM and head_dim & (head_dim - 1) == 0
