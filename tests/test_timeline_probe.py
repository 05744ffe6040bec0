"""The intra-kernel timeline probe (reproduce/gpu/timeline_probe.py) keeps working as the ws
kernel changes: its scopes still apply to the kernel source, and Proton can instrument the
result for sm_90 with the probe's settings. Offline, without a GPU: session 10's first GPU call
lost its timeline to a buffer size Proton refuses, which this compile catches."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_scopes_apply_to_the_kernel() -> None:
    from reproduce.gpu import timeline_probe

    src = timeline_probe.variant_source()  # raises if an edit no longer matches exactly once
    for phase in timeline_probe.PHASES:
        assert src.count(f'pl.enter_scope("{phase}")') == 1
        assert src.count(f'pl.exit_scope("{phase}")') == 1
    assert src.index('pl.enter_scope("wait_q_k0")') < src.index('pl.exit_scope("epilogue")')


@pytest.mark.parametrize("buffer_size", [None, 65536], ids=["probe-settings", "refused-size"])
def test_instrumented_kernel_compiles_offline(buffer_size: int | None) -> None:
    """The probe's own settings compile (a clock read at each scope boundary of both
    consumers); session 10's first setting, 64 KiB over 12 warps, is refused as on the GPU."""
    code = ("import sys; from reproduce.gpu import timeline_probe as t\n"
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
