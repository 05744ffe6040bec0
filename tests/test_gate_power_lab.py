"""CPU checks of lab/2026-12-01-gate-power/run.py's non-GPU parts: the kernel variants are
source transformations that apply once, parse and import, the FMA count is interpolated from
the calibration scan, and the detection schedule rotates the levels. (That each variant
compiles for sm_90 and keeps its FMAs in SASS: ``python lab/2026-12-01-gate-power/run.py
--check-offline``, about 10 s per variant.)"""

from __future__ import annotations

import ast
import importlib.util
import random
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "lab" / "2026-12-01-gate-power" / "run.py"


@pytest.fixture(scope="module")
def lab():
    spec = importlib.util.spec_from_file_location("gate_power_run", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gate_power_run"] = module
    spec.loader.exec_module(module)
    return module


def _ws_source(lab) -> str:
    return (ROOT / "src" / lab.WS_FILE).read_text()


def test_unmodified_is_the_kernel_as_it_is(lab) -> None:
    assert lab.patched_source(_ws_source(lab), "unmodified") == _ws_source(lab)


def test_lag0_turns_the_lag_off_and_nothing_else(lab) -> None:
    src = _ws_source(lab)
    out = lab.patched_source(src, "lag0")
    assert "MAX_LAG = gl.constexpr(0.0)" in out and "MAX_LAG = gl.constexpr(8.0)" not in out
    assert out.replace("gl.constexpr(0.0)", "gl.constexpr(8.0)") == src


@pytest.mark.parametrize("n", [1, 7, 64])
def test_fma_chain_sits_in_the_steady_state_loop(lab, n: int) -> None:
    src = _ws_source(lab)
    out = lab.patched_source(src, f"fma{n}")
    tree = ast.parse(out)
    consumer = next(f for f in ast.walk(tree)
                    if isinstance(f, ast.FunctionDef) and f.name == "_consumer")
    loops = [node for node in ast.walk(consumer) if isinstance(node, ast.For)
             and any(isinstance(c, ast.Call) and ast.unparse(c.func) == "gl.static_range"
                     and ast.unparse(c.args[0]) == str(n) for c in [node.iter])]
    assert len(loops) == 1
    chain = ast.unparse(loops[0])
    assert "chain = chain * 0.5 + 1.0" in chain
    assert out.count("alpha = alpha + chain * 0.0") == 1
    # the chain comes right before the rescale that consumes alpha, once
    assert out.index("alpha = alpha + chain * 0.0") < out.index(lab.FMA_ANCHOR)
    assert out.count(lab.FMA_ANCHOR) == 1
    assert len(out.splitlines()) == len(src.splitlines()) + 5


@pytest.mark.parametrize("bad", ["fma", "fma0", "fmax", "lag", ""])
def test_unknown_variants_are_refused(lab, bad: str) -> None:
    with pytest.raises(ValueError, match=r"variant|FMAs"):
        lab.patched_source(_ws_source(lab), bad)


def test_an_anchor_that_moved_is_refused(lab) -> None:
    src = _ws_source(lab).replace(lab.LAG[0], "MAX_LAG = gl.constexpr(4.0)")
    with pytest.raises(ValueError, match="occurs 0 times"):
        lab.patched_source(src, "lag0")
    with pytest.raises(ValueError, match="occurs 2 times"):
        lab.patched_source(_ws_source(lab) + "\n" + lab.FMA_ANCHOR, "fma8")


def test_tree_is_a_copy_whose_kernel_imports(lab, tmp_path: Path) -> None:
    tree = lab.make_tree(tmp_path, "fma5")
    path = tree / "src" / lab.WS_FILE
    assert "gl.static_range(5)" in path.read_text()
    assert (tree / "reproduce" / "article.toml").is_file()
    assert _ws_source(lab) == (ROOT / "src" / lab.WS_FILE).read_text()  # product untouched
    spec = importlib.util.spec_from_file_location("ws_fma5_copy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert hasattr(module, "launch") and hasattr(module, "attn_fwd_gluon_ws_kernel")


def test_choose_n_interpolates_the_scan(lab) -> None:
    linear = {8: 0.01, 24: 0.03, 64: 0.08}
    assert lab.choose_n(linear, 0.03) == 24
    assert lab.choose_n(linear, 0.05) == 40
    assert lab.choose_n(linear, 0.005) == 4
    assert lab.choose_n(linear, 0.16) == 128  # beyond the scan: through the origin
    # a hidden start (no slowdown below 24) and a noisy dip are made non-decreasing first
    assert lab.choose_n({8: -0.002, 24: 0.0, 64: 0.04, 160: 0.035}, 0.02) == 44


def test_schedule_rotates_every_level_equally(lab) -> None:
    order = lab.schedule(20, ["a", "b", "c", "d"])
    assert Counter(order) == {"a": 20, "b": 20, "c": 20, "d": 20}
    assert order[:8] == ["a", "b", "c", "d", "b", "c", "d", "a"]
    firsts = Counter(order[i * 4] for i in range(20))
    assert firsts == {"a": 5, "b": 5, "c": 5, "d": 5}


def test_slowdowns_are_per_round_against_the_unmodified_kernel(lab) -> None:
    rng = random.Random(3)
    base = [30.0 + rng.random() for _ in range(41)]
    rounds = {"torch-flash": [2 * b for b in base], "unmodified": base,
              "fma9": [b * 1.04 for b in base]}
    out = lab.slowdowns(rounds)
    assert out["unmodified"]["slowdown"] == 0.0
    assert out["fma9"]["slowdown"] == pytest.approx(0.04)
    assert out["fma9"]["ratio_vs_torch_flash"] == pytest.approx(0.52)


def test_the_calibration_swaps_the_module_the_launch_uses() -> None:
    """The calibration swaps the ws kernel module where the default launch looks it up
    (flashrepro.launch), and clears the launch plans around each swapped call: a plan binds
    the kernel it first compiled."""
    import flashrepro.launch
    from flashrepro.kernels import fwd_gluon_ws

    assert flashrepro.launch.fwd_gluon_ws is fwd_gluon_ws
    source = (Path(__file__).resolve().parents[1] / "lab" / "2026-12-01-gate-power"
              / "run.py").read_text()
    assert "launch.fwd_gluon_ws = module" in source and "launch.clear_plans()" in source
