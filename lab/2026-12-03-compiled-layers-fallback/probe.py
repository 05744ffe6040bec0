"""Why do the compiled decoder layers of the frepro Qwen3 run aten kernels? 28 layers, B=4,
L=1024, bf16: an eager forward, then measure.compile_forward (inductor), three forwards with
dynamo's recompile and graph-break logs, its counters, and the top kernels of one profiled
forward. (lab/2026-12-03-compiled-layers-fallback)

    PYTHONPATH=src:. python lab/2026-12-03-compiled-layers-fallback/probe.py
"""

import torch

from flashrepro_harness.qwen3 import build, measure

torch._logging.set_logs(recompiles=True, graph_breaks=True)
config = build.qwen3_0_6b_config(28)
models = build.build_models(config, ["frepro"])
model = models["frepro"]
ids = torch.randint(0, config.vocab_size, (4, 1024), device="cuda")
fwd = build.make_forward(model, "frepro")
with torch.inference_mode():
    fwd(ids)
torch.cuda.synchronize()
fwd, info = measure.compile_forward(model, "frepro", ids)
print("INFO", info, flush=True)
for _i in range(3):
    with torch.inference_mode():
        fwd(ids)
torch.cuda.synchronize()
counters = torch._dynamo.utils.counters
print("COUNTERS", {k: dict(v) for k, v in counters.items()
                   if k in ("stats", "recompiles", "frames", "graph_break")}, flush=True)
with torch.inference_mode():
    ev = measure.profile_forward(lambda: fwd(ids))
agg = {}
for name, us in ev:
    agg[name[:70]] = agg.get(name[:70], 0) + us
print("TOP", sorted(agg.items(), key=lambda x: -x[1])[:6])
