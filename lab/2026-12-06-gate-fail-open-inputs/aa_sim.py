"""How often an unchanged kernel is not a pass (flagged or inconclusive) under the gate's rule,
against a baseline and paired, on the synthetic H200 noise of gate.simulate."""
import sys
import numpy as np
from flashrepro_harness.gate.baseline import round_samples
from flashrepro_harness.gate.simulate import Noise, synthetic_results
from flashrepro_harness.gate.stats import compare, compare_paired

rng = np.random.default_rng(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
RUNS = 60
print("mode | round cv | ratio cv | slowdown | flagged | inconclusive | not a pass")
for ratio_cv in (0.0025, 0.01):
    for cv in (0.005, 0.01, 0.02):
        for s in (0.0, 0.01):
            nz = Noise(round_cv=cv, ratio_cv=ratio_cv)
            flagged = unclear = 0
            for _ in range(RUNS):
                base = round_samples(synthetic_results(rng, noise=nz))
                cur = round_samples(synthetic_results(rng, noise=nz, slowdown=s))
                c = compare(cur["flashrepro"]["ratio"], base["flashrepro"]["ratio"],
                            record="flashrepro", metric="ratio")
                flagged += c.slower
                unclear += c.inconclusive
            print(f"baseline | {cv:.1%} | {ratio_cv:.2%} | {s:.0%} | {flagged}/{RUNS} | "
                  f"{unclear}/{RUNS} | {flagged + unclear}/{RUNS}")
for cv in (0.001, 0.003, 0.01):
    for s in (0.0, 0.01):
        flagged = unclear = 0
        for _ in range(RUNS):
            ref = 26.0 * (1 + 0.02 * rng.standard_normal(100))
            cur = ref * (1 + s) * (1 + cv * rng.standard_t(5, 100) / np.sqrt(5 / 3))
            c = compare_paired(cur.tolist(), ref.tolist(), record="flashrepro")
            flagged += c.slower
            unclear += c.inconclusive
        print(f"paired | {cv:.1%} (pair) | - | {s:.0%} | {flagged}/{RUNS} | {unclear}/{RUNS} | "
              f"{flagged + unclear}/{RUNS}")
