"""reproduce/gpu/timeline_probe.py's trace reading, on session 10's committed Proton traces
(the article problem, 132 programs of 8 consumer warps, 256 tiles: 124 programs take two)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from reproduce.gpu.timeline_probe import split_launches, summarize

TRACES = (Path(__file__).resolve().parents[1] / "reproduce" / "results" / "nvidia-h200"
          / "session10" / "b-ws3-tune-bench" / "timeline")


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
