"""The intra-kernel timeline probe (lab/probes/timeline_probe.py): its scopes still apply to
the ws kernel and Proton can instrument the result for sm_90 with the probe's settings (offline,
without a GPU: the first GPU run of lab/2026-11-29-three-consumer-tile/ lost its timeline to a
buffer size Proton refuses, which this compile catches); and its trace reading, on that
experiment's committed Proton traces (the article problem, 132 programs of 8 consumer warps,
256 tiles: 124 programs take two)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.probes import timeline_probe
from lab.probes.timeline_probe import split_launches, summarize

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "lab/2026-11-29-three-consumer-tile/ws3-tune-bench/timeline"


def test_scopes_apply_to_the_kernel() -> None:
    src = timeline_probe.variant_source()  # raises if an edit no longer matches exactly once
    for phase in timeline_probe.PHASES:
        assert src.count(f'pl.enter_scope("{phase}")') == 1
        assert src.count(f'pl.exit_scope("{phase}")') == 1
    assert src.index('pl.enter_scope("wait_q_k0")') < src.index('pl.exit_scope("epilogue")')


@pytest.mark.parametrize("buffer_size", [None, 65536], ids=["probe-settings", "refused-size"])
def test_instrumented_kernel_compiles_offline(buffer_size: int | None) -> None:
    """The probe's own settings compile (a clock read at each scope boundary of both
    consumers); the first GPU run's setting, 64 KiB over 12 warps, is refused as on the GPU."""
    code = ("import sys; from lab.probes import timeline_probe as t\n"
            + (f"t.MODE = t.proton.mode.Default(buffer_type='global', granularity='warp', "
               f"buffer_size={buffer_size})\n" if buffer_size else "")
            + "print(t.offline_check(False))")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, text=True,
                            capture_output=True, timeout=900)
    if buffer_size is None:
        assert result.returncode == 0, result.stderr[-3000:]
        assert int(result.stdout.split()[-1]) >= 2 * 2 * 5  # 5 scopes x enter/exit x 2
    else:
        assert result.returncode != 0
        assert "must be power of 2" in result.stderr


def _events(name: str) -> list[dict]:
    with gzip.open(TRACES / f"{name}.chrome_trace.json.gz") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [e for e in events if e.get("ph") == "X"]


@pytest.mark.parametrize("name", ["article-noncausal", "article-causal"])
def test_every_launch_has_every_warp(name: str) -> None:
    """Three launches, each with all 132 CTAs' 8 consumer warps, each warp's five phases per
    tile; a CTA that ran on another SM ("Core" in the trace) in another launch (CTAs 0-7
    here) stays one warp per launch, and no launch's span reaches into the next."""
    events = _events(name)
    launches = split_launches(events)
    assert len(launches) == 3
    for warps in launches:
        assert len(warps) == 132 * 8
        tiles = [sum(e["name"] == "epilogue" for e in evs) for evs in warps.values()]
        assert sorted(tiles) == [1] * 8 * 8 + [2] * 124 * 8
        assert [len(evs) for evs in warps.values()] == [5 * n for n in tiles]
    for launch in (1, 2):
        rows = summarize(events, launch)
        span = rows[0]
        assert span[2] == 132 * 8 and span[3] < 100  # one kernel: ~50 units (50k cycles)
        assert {r[2] for r in rows[1:] if r[1] == "0"} == {132 * 8}
        assert {r[2] for r in rows[1:] if r[1] == "1"} == {124 * 8}
