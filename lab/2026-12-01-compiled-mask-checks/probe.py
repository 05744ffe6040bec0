"""Does a data-dependent refusal in the transformers integration fire under torch.compile on CUDA?

The integration refuses, under tracing, what it cannot check in Python: restarting position_ids
(packed sequences) and padding, with ``torch._assert_async(cond, msg)``. On the CPU that raises
RuntimeError(msg) at run time (the tests pass there); this probe asks what the same call does
with CUDA tensors, eagerly and inside graphs (aot_eager and inductor, fullgraph), and whether the
candidate, the same assert on the condition copied to the CPU, raises by name. Each case runs in
a fresh subprocess: a device-side assert would poison the CUDA context of the process.

    PYTHONPATH=src python3 lab/2026-12-01-compiled-mask-checks/probe.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

CASE = r"""
import sys, torch
where, how, backend = sys.argv[1:4]
def f(x):
    cond = (x > 0).all()
    if where == "cpu":
        cond = cond.cpu()
    torch._assert_async(cond, "PROBE-MESSAGE: refused")
    return x * 2
fn = f if how == "eager" else torch.compile(f, fullgraph=True, backend=backend)
x = torch.ones(8, device="cuda")
fn(x); torch.cuda.synchronize()
try:
    fn(-x); torch.cuda.synchronize()
    print("RESULT no-raise")
except Exception as exc:
    print("RESULT", type(exc).__name__, "named" if "PROBE-MESSAGE" in str(exc) else "unnamed",
          str(exc).splitlines()[0][:160])
try:
    torch.ones(1, device="cuda").sum().item(); print("RESULT-AFTER context ok")
except Exception as exc:
    print("RESULT-AFTER context broken:", str(exc).splitlines()[0][:120])
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for where in ("cuda", "cpu"):
        for how, backend in (("eager", "-"), ("compile", "aot_eager"), ("compile", "inductor")):
            proc = subprocess.run([sys.executable, "-c", CASE, where, how, backend],
                                  capture_output=True, text=True, timeout=240)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
            rows.append({"condition_on": where, "call": how, "backend": backend,
                         "rc": proc.returncode, "result": lines,
                         "stderr_tail": proc.stderr.strip().splitlines()[-3:]})
            print(where, how, backend, proc.returncode, lines, flush=True)
    (args.out / "probe.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
