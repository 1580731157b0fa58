#!/usr/bin/env bash
# One call on a lent GPU machine (the workplace's `device` tool): the benchmarks of
# benchmarks/README.md on the accelerator, each step under its own time limit, JSON lines
# and logs under $OUT. The machine has JAX with CUDA but no netCDF4/beartype; those travel
# as wheels in .whl (see benchmarks/README.md, "GPU").
#
#   STEPS="setup w1 w2 cli w3 fig3" bash benchmarks/gpu_session.sh
set -uo pipefail
OUT=${OUT:-/tmp/attndyn-gpu}
mkdir -p "$OUT"
STEPS=${STEPS:-"setup w1 w2 cli w3"}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >"$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export ATTNDYN_CACHE_DIR=/tmp/attndyn-cache
log() { echo "== $(date +%T) $*" | tee -a "$OUT/log"; }
bench() {  # bench LIMIT ARGS...: one benchmarks/run.py line into bench.jsonl
    local limit=$1; shift
    log "run.py $*"
    timeout "$limit" python3 benchmarks/run.py "$@" --json 2>>"$OUT/stderr.log" \
        | tee -a "$OUT/bench.jsonl" || log "run.py $* failed or timed out (rc $?)"
}
for step in $STEPS; do
    case $step in
    setup)
        log setup
        nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv | tee -a "$OUT/log"
        python3 -c "import jax, jaxlib, diffrax, equinox, xarray, netCDF4, numpy; \
print(jax.__version__, jaxlib.__version__, diffrax.__version__, equinox.__version__, \
xarray.__version__, netCDF4.__version__, numpy.__version__, jax.devices())" 2>&1 | tee -a "$OUT/log"
        ;;
    w1) bench 120 W1; bench 120 W1 --route full; bench 120 W1-d64 ;;
    w2) bench 120 W2 ;;
    cli) bench 240 CLI ;;
    w3) bench 300 W3 --w3-points 17 ;;
    tiles)  # W1's point at 524,288 trajectories in other accelerator tiles
        for t in 32768 131072 262144 524288; do
            log "tile_probe W1 tile $t"
            timeout 120 python3 benchmarks/tile_probe.py W1 --tile "$t" --spread 1 --n 524288 \
                2>>"$OUT/stderr.log" | tee -a "$OUT/bench.jsonl" || log "probe failed (rc $?)"
        done ;;
    absorb*)  # Fig. 3 full with another compaction tile: absorb8192
        t=${step#absorb}; log "tile_probe fig3 absorb tile $t"
        timeout 240 python3 benchmarks/tile_probe.py fig3 --absorb-tile "$t" --spread 1 \
            --out "$OUT/fig3_absorb$t.png" 2>>"$OUT/stderr.log" | tee -a "$OUT/bench.jsonl" \
            || log "probe failed (rc $?)"
        rm -f "$OUT/fig3_absorb$t.png" ;;  # the .nc is what is compared
    fig3)
        log "fig3 --full"
        /usr/bin/time -v timeout 420 python3 experiments/fig3_beta_d.py --full \
            --out "$OUT/fig3_beta_d_full_gpu.png" >>"$OUT/log" 2>"$OUT/fig3.stderr" \
            || log "fig3 failed or timed out"
        grep -E "Elapsed|Maximum resident" "$OUT/fig3.stderr" | tee -a "$OUT/log"
        ;;
    *) log "unknown step $step" ;;
    esac
done
log done
