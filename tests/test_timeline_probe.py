"""The intra-kernel timeline probe (scripts/timeline_probe.py): its scopes still apply to the ws
kernel and Proton can instrument the result for sm_90 with the probe's settings (offline,
without a GPU: a buffer size Proton refuses fails here as on the GPU); and its trace reading,
on synthetic Proton traces of known phases (three launches, 132 programs of 8 consumer warps,
a CTA that changes SM between launches)."""

from __future__ import annotations

import importlib.util
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "timeline_probe.py"


@pytest.fixture(scope="module")
def probe():
    spec = importlib.util.spec_from_file_location("timeline_probe", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_scopes_apply_to_the_kernel(probe) -> None:
    src = probe.variant_source()  # raises if an edit no longer matches exactly once
    for phase in probe.PHASES:
        assert src.count(f'pl.enter_scope("{phase}")') == 1
        assert src.count(f'pl.exit_scope("{phase}")') == 1
    assert src.index('pl.enter_scope("wait_q_k0")') < src.index('pl.exit_scope("epilogue")')


@pytest.mark.parametrize("buffer_size", [None, 65536], ids=["probe-settings", "refused-size"])
def test_instrumented_kernel_compiles_offline(buffer_size: int | None) -> None:
    """The probe's own settings compile (a clock read at each scope boundary of both
    consumers); 64 KiB over 12 warps is refused, as on the GPU."""
    code = ("import sys; import timeline_probe as t\n"
            + (f"t.MODE = t.proton.mode.Default(buffer_type='global', granularity='warp', "
               f"buffer_size={buffer_size})\n" if buffer_size else "")
            + "print(t.offline_check(False))")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(SCRIPT.parent)])
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, text=True,
                            capture_output=True, timeout=900)
    if buffer_size is None:
        assert result.returncode == 0, result.stderr[-3000:]
        assert int(result.stdout.split()[-1]) >= 2 * 2 * 5  # 5 scopes x enter/exit x 2
    else:
        assert result.returncode != 0
        assert "must be power of 2" in result.stderr


CTAS, WARPS, SMS = 132, 8, 132


def _trace(seed: int) -> tuple[list[dict], list[dict]]:
    """Proton-style events of three launches of CTAS programs with WARPS consumer warps each,
    every warp running the five phases back to back per tile (random durations), 1-3 tiles per
    CTA; in the second launch CTAs 0-7 run on other SMs. Returns (events shuffled, truth: per
    launch the tile count per CTA and every event with its tile index)."""
    rng = random.Random(seed)
    tiles = [1 + (cta % 3 == 0) + (cta % 5 == 0) for cta in range(CTAS)]
    events, truth, start = [], [], 0.0
    for launch in range(3):
        records = []
        for cta in range(CTAS):
            core = (cta + 8) % SMS if launch == 1 and cta < 8 else cta
            for warp in range(WARPS):
                ts = start + rng.uniform(0.0, 0.5)
                for tile in range(tiles[cta]):
                    for name, mean in zip(("wait_q_k0", "block0", "loop", "last_pv",
                                           "epilogue"), (3.0, 3.0, 22.0, 2.0, 1.5), strict=True):
                        dur = round(mean * rng.uniform(0.5, 1.5), 3)
                        e = {"name": name, "ph": "X", "ts": round(ts, 3), "dur": dur,
                             "pid": f"attn_fwd_gluon_ws_kernel Core{core} CTA{cta}",
                             "tid": f"warp {warp} (line 0)"}
                        records.append((e, tile))
                        ts += dur
        events += [e for e, _ in records]
        truth.append({"tiles": tiles, "records": records})
        start = max(e["ts"] + e["dur"] for e, _ in records) + 5000.0  # Proton's host work
    rng.shuffle(events)
    return events, truth


def test_launches_are_split_on_the_global_clock(probe) -> None:
    """Three launches, each with every CTA's consumer warps once (a CTA on another SM in another
    launch stays one warp per launch), each warp's events in time order, five per tile."""
    seed = random.randrange(2**32)
    events, truth = _trace(seed)
    launches = probe.split_launches(events)
    assert len(launches) == 3, f"seed {seed}"
    for warps, known in zip(launches, truth, strict=True):
        assert len(warps) == CTAS * WARPS
        for (cta, _), evs in warps.items():
            assert len(evs) == 5 * known["tiles"][int(cta.removeprefix("CTA"))]
            assert [float(e["ts"]) for e in evs] == sorted(float(e["ts"]) for e in evs)
        got = sorted(id(e) for evs in warps.values() for e in evs)
        assert got == sorted(id(e) for e, _ in known["records"])


@pytest.mark.parametrize("launch", [1, 2])
def test_summary_per_phase_and_tile(probe, launch: int) -> None:
    """The span row and, per (phase, tile), the warp count, median and max of the durations,
    against the generated truth: tiles 0 and 1 and a program's last tile beyond those."""
    seed = random.randrange(2**32)
    events, truth = _trace(seed)
    rows = probe.summarize(events, launch)
    records = truth[launch]["records"]
    tiles = truth[launch]["tiles"]
    starts = [e["ts"] for e, _ in records]
    ends = [e["ts"] + e["dur"] for e, _ in records]
    assert rows[0][2] == CTAS * WARPS
    assert rows[0][3] == pytest.approx(max(ends) - min(starts), abs=2e-3)
    expected: dict[tuple[str, str], list[float]] = {}
    for e, tile in records:
        n = tiles[int(e["pid"].split("CTA")[-1])]
        label = str(tile) if tile < 2 else ("last" if tile == n - 1 else None)
        if label is not None:
            expected.setdefault((e["name"], label), []).append(e["dur"])
    got = {(r[0], r[1]): r[2:] for r in rows[1:]}
    assert set(got) == set(expected), f"seed {seed}"
    for key, durs in expected.items():
        warps, median, top = got[key]
        assert warps == len(durs), f"seed {seed}, {key}"
        assert median == pytest.approx(statistics.median(durs), abs=1e-3)
        assert top == pytest.approx(max(durs), abs=1e-3)
    assert {warps for (_, tile), (warps, _, _) in got.items() if tile == "0"} == {CTAS * WARPS}
    assert {warps for (_, tile), (warps, _, _) in got.items() if tile == "last"} == {
        WARPS * sum(n == 3 for n in tiles)}
