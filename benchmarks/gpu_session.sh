#!/usr/bin/env bash
# One call on a lent GPU machine (the workplace's `device` tool): the benchmarks of
# benchmarks/README.md on the accelerator, each step under its own time limit, JSON lines
# and logs under $OUT. The machine has JAX with CUDA but no netCDF4/beartype; those travel
# as wheels in .whl (see benchmarks/README.md, "GPU").
#
#   STEPS="setup w1 w2 cli w3 fig3" bash benchmarks/gpu_session.sh
#   FIG6_ARGS=--x64 STEPS="quick fig6 tests" bash benchmarks/gpu_session.sh
#   STEPS="setup manytokens" bash benchmarks/gpu_session.sh   # issue 31, ~5 min
#   MANYTOKENS_N="512 2048" STEPS=manytokens bash benchmarks/gpu_session.sh  # a CPU try
#
# STEPS unset runs "setup w1 w2 cli w3"; STEPS="" runs none (only the install).
set -uo pipefail
OUT=${OUT:-/tmp/attndyn-gpu}
mkdir -p "$OUT"
STEPS=${STEPS-"setup w1 w2 cli w3"}
if [ -d .whl ]; then  # no wheels (a CPU try of a step): the environment's packages
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl >"$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 1; }
fi
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
    fig6)  # seed 003 Fig. 6 at the paper's scale, resumable: a checkpoint carried in
        # .ckpt (an earlier call's $OUT/ckpt) is resumed, and the new one comes back
        log "fig6 --full"; mkdir -p "$OUT/ckpt"; cp .ckpt/*.ckpt.nc "$OUT/ckpt/" 2>/dev/null
        # shellcheck disable=SC2086  # FIG6_ARGS: more flags, e.g. --x64
        /usr/bin/time -v timeout "${FIG6_LIMIT:-480}" python3 experiments/fig6_multitoken.py \
            --full ${FIG6_ARGS:-} --checkpoint-dir "$OUT/ckpt" >>"$OUT/log" \
            2>"$OUT/fig6.stderr" || log "fig6 stopped (rc $?)"
        grep -E "Elapsed|Maximum resident" "$OUT/fig6.stderr" | tee -a "$OUT/log"
        cp figures/fig6_multitoken_discrete_full*.{png,json} "$OUT/" 2>/dev/null ;;
    manytokens)  # issue 31: one trajectory of N tokens in d = 3, seconds per layer against
        # the dense-dot bound, peak memory; N = 10^6 for a few layers (projected to 100),
        # and the dense form beside the blockwise one up to 65,536 (MANYTOKENS_N: other N)
        for n in ${MANYTOKENS_N:-4096 65536 1000000}; do
            layers=10; limit=120
            if [ "$n" -ge 1000000 ]; then layers=${MANYTOKENS_BIG_LAYERS:-3}; limit=300; fi
            log "manytokens N=$n ($layers layers)"
            timeout "$limit" python3 benchmarks/manytokens.py --n-tokens "$n" --layers "$layers" \
                --dense-limit-gib 24 --json 2>>"$OUT/stderr.log" | tee -a "$OUT/bench.jsonl" \
                || log "manytokens N=$n failed or timed out (rc $?)"
            if [ "$n" -le 65536 ]; then
                timeout 120 python3 benchmarks/manytokens.py --n-tokens "$n" --layers "$layers" \
                    --implementation dense --dense-limit-gib 24 --json 2>>"$OUT/stderr.log" \
                    | tee -a "$OUT/bench.jsonl" || log "dense N=$n failed or timed out (rc $?)"
            fi
        done ;;
    quick)  # the tests that failed on the GPU last time
        JAX_PLATFORMS=cuda timeout 120 python3 -m pytest -q -p no:cacheprovider \
            "tests/test_distributed.py::test_more_trajectories_keep_chunk_sized_device_work" \
            "tests/test_distributed.py::test_an_accelerator_runs_a_small_study_in_one_tile" \
            "tests/test_validation.py::test_softmax_past_its_float32_resolution_is_named_as_the_cause" \
            2>&1 | tail -3 | tee -a "$OUT/log" ;;
    tests)  # the default suite on the GPU (docs/development.md); mkdocs is not there
        log tests
        JAX_PLATFORMS=cuda timeout "${TEST_LIMIT:-300}" python3 -m pytest -m "not slow" -n 8 \
            -q -p no:cacheprovider --ignore tests/test_docs.py >"$OUT/tests.log" 2>&1 \
            || log "tests failed or timed out (rc $?)"
        grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | tail -40 | tee -a "$OUT/log" ;;
    *) log "unknown step $step" ;;
    esac
done
log done
