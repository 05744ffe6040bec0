#!/usr/bin/env bash
# GPU smoke run of the optional peers and the host-cost columns:
# reproduce (fa4-cute rows where flash_attn.cute imports, host/eager µs per call) and a short
# bench sweep (flashrepro / best peer), everything written under $OUT.
#
#   OUT=/tmp/out scripts/peers_smoke.sh                    # FA4 already importable, or skipped
#   FA4_WHEELS=/path/to/fa4whl OUT=/tmp/out scripts/peers_smoke.sh
#
# FA4_WHEELS: a folder holding the fa4 extra's wheels (flash_attn_4, nvidia_cutlass_dsl,
# -libs-base, -libs-core, -libs-cu13, quack_kernels, apache_tvm_ffi, torch_c_dlpack_ext, and
# einops if the machine lacks it); they are installed with --no-deps into $OUT/fa4-site, which
# goes first on PYTHONPATH. The cutlass DSL loads its .pth only from a site dir, so that dir is
# added with site.addsitedir through sitecustomize.
set -euo pipefail
: "${OUT:?set OUT to a results folder}"
PY=${PYTHON:-python}
ROUNDS=${ROUNDS:-30}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
if [[ -n "${FA4_WHEELS:-}" ]]; then
  site="$OUT/fa4-site"
  "$PY" -m pip install --quiet --no-deps --no-index --target "$site" "$FA4_WHEELS"/*.whl
  mkdir -p "$OUT/fa4-boot"
  printf 'import site\nsite.addsitedir(%r)\n' "$site" > "$OUT/fa4-boot/sitecustomize.py"
  export PYTHONPATH="$OUT/fa4-boot:$site:$PYTHONPATH"
fi
"$PY" - <<'PY'
from flashrepro_harness.bench import peers
for name in peers.PEERS:
    print(f"{name}: {peers.import_error(name) or 'imports'}")
PY
"$PY" -m flashrepro_harness doctor | tee "$OUT/doctor.txt"
# reproduce: the article config and its non-causal twin, every kernel and peer, host/eager µs
"$PY" -m flashrepro_harness reproduce --rounds "$ROUNDS" --no-sass --no-mma-sync \
  --out "$OUT/reproduce" 2>&1 | tee "$OUT/reproduce.log"
# a short sweep: D 64 and 128, L 512..16384, fp16 (bf16 too with DTYPES="float16 bfloat16")
"$PY" -m flashrepro_harness bench --dtypes ${DTYPES:-float16} --rounds "${BENCH_ROUNDS:-5}" \
  --out "$OUT/bench" 2>&1 | tee "$OUT/bench.log"
# tune's table with the peer rows, one problem
"$PY" -m flashrepro_harness tune --lengths 1024 --head-dims 128 --masks causal --rounds 3 \
  2>&1 | tee "$OUT/tune.log"
"$PY" - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
res = json.loads((out / "reproduce" / "reproduce.json").read_text())
print(f"{'record':34} {'µs':>8} {'host µs':>8} {'eager µs':>9} {'max err':>9}  note")
for r in res["records"]:
    if "skipped" in r:
        print(f"{r['name']:34} {'':>8} {'':>8} {'':>9} {'':>9}  skipped: {r['skipped'][:60]}")
    else:
        print(f"{r['name']:34} {r['median_us']:8.1f} {r['host_us']:8.1f} {r['eager_us']:9.1f} "
              f"{r['max_abs_err']:9.1e}")
bench = json.loads((out / "bench" / "bench.json").read_text())
for pt in bench["points"]:
    p, best = pt["problem"], pt.get("best_peer")
    print(f"{p['dtype']} D={p['head_dim']} {'causal' if p['causal'] else 'full':6} "
          f"L={p['seqlen_q']:5}: flashrepro / best peer "
          + (f"{best['ratio']:.3f} ({best['name']})" if best else "n/a"))
PY
