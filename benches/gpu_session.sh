#!/usr/bin/env bash
# One GPU lease, planned ahead: every GPU figure the open issues still need,
# in stages that each fit one call of the device tool (10 minutes a command,
# 15 minutes of device time a session as of 2026-11, a bare machine each
# call, no Rust toolchain there). docs/dev/gpu-session.md says which stages
# a 15-minute lease takes.
#
# Here, on the build machine (release build, stripped, xz-compressed into gpu/,
# which git ignores):
#     benches/gpu_session.sh pack
# There, from the repository's root, with `gpu` named in the call's carry:
#     bash benches/gpu_session.sh STAGE [STAGE...]
#
# Stages, in the order a short lease should take them:
#     tests       the CUDA checks (kynml-core/tests/cuda.rs), each in its own
#                 process with its own limit (TEST_SECONDS, default 150):
#                 fp32/TF32 products, layers against the CPU, bf16/fp16,
#                 fused update, determinism, checkpointing and estimated
#                 memory, NVML, profile, a run too large refused (issues 14-17)
#     start       first run on an empty kernel cache, then a second run, for
#                 DeepNet fp32 and wide bf16; `kynml warmup` (issue 14, item 4)
#     speed       benches/compare_gpu.py: wide and DeepNet at fp32, tf32,
#                 bf16, fp16 and fused, KynML beside PyTorch (issue 14, items
#                 1-3; issue 17 fused)
#     epilogue    wide bf16, wide fp32 and DeepNet bf16 with each dense
#                 product fused with its cast, bias and activation
#                 (KYNML_MATMUL_EPILOGUE=fused) and alone (separate, the
#                 default since session 21, so that it can take CubeCL's
#                 plain TMA kernels), alternating
#     kernels     CubeCL's profiler on wide and DeepNet in bf16 and fp32: each
#                 kind of kernel's launches and device time a step
#                 (benches/kernel_profile.py), which products took a slow
#                 kernel and what the step's time is made of (issue 14)
#     controls    wide bf16 at autotune fast and balanced, each from an empty
#                 cache; DeepNet with `deterministic`; a deep model with
#                 `checkpoint_activations` (issue 17)
#
# Every stage stops starting new work when fewer than STAGE_SECONDS (default
# 540) remain since the command began, and says what it left out. Results
# come back in $OUT (or ./gpu-out): summary.md (the lines for BENCHMARKS.md
# and the closing note), rows.jsonl (one JSON object per measurement),
# log.txt (everything printed), env.txt (GPU, driver, versions, commit), and
# cache.tar.xz.00 (.01, ... past 15 MiB), the kernel cache: put the parts in
# gpu/ before the next call on a fresh machine and that call starts warm.
#
# Environment: KYNML_GPU_DEVICE (default cuda), STAGE_SECONDS, CUDA_TESTS
# and TEST_SECONDS (which checks, and each one's limit), START_RUNS ("deepnet
# wide" by default) and START_WARMUP (0 leaves `kynml warmup` out), SPEED_CONFIG
# (compare_gpu.py's --config, default both), SPEED_PRECISIONS (default
# "fp32 tf32 bf16 fp16"), STEPS and ROUNDS for the benches (default 50, 3).
# START_LIMIT caps the cold run; START_SECOND=0 leaves the second run out
# (the speed stage's first run of the spec, on the warm cache, is one);
# SPEED_MIN_SECONDS (default 240) is what the speed stage needs to start.
# KERNEL_RUNS picks the kernels stage's runs ("wide bf16|deepnet bf16|wide
# fp32|deepnet fp32" by default, `|`-separated).

set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$HERE")"
GPU_DIR="$REPO/gpu"

pack() {
    set -e
    export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$REPO/target}"
    cd "$REPO"
    cargo build --release -p kynml-cli
    local tests
    tests=$(cargo test --release -p kynml-core --test cuda --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "cuda":
        print(m["executable"])')
    [ -x "$tests" ] || { echo "gpu_session.sh: the cuda test binary was not built" >&2; exit 1; }
    mkdir -p "$GPU_DIR"
    local tmp
    tmp=$(mktemp -d)
    cp "$CARGO_TARGET_DIR/release/kynml" "$tmp/kynml"
    cp "$tests" "$tmp/cuda"
    strip "$tmp/kynml" "$tmp/cuda"
    # xz: a third smaller than gzip, which leaves room in the call's 64 MiB
    # for the kernel cache a previous call brought back.
    rm -f "$GPU_DIR"/kynml.gz "$GPU_DIR"/cuda.gz
    xz -T2 -6 -c "$tmp/kynml" >"$GPU_DIR/kynml.xz"
    xz -T2 -6 -c "$tmp/cuda" >"$GPU_DIR/cuda.xz"
    rm -rf "$tmp"
    {
        echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD || echo ' (with uncommitted changes)')"
        echo "packed $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m)"
    } >"$GPU_DIR/COMMIT"
    ls -l "$GPU_DIR"
    echo "carry: [\"gpu\"]; command: bash benches/gpu_session.sh tests start"
}

# ---- on the GPU machine ----

OUT_DIR="${OUT:-$REPO/gpu-out}"
BIN=/tmp/kynml-gpu
CACHE=/tmp/kynml-gpu-cache
DEVICE="${KYNML_GPU_DEVICE:-cuda}"
BUDGET="${STAGE_SECONDS:-540}"
STEPS="${STEPS:-50}"
ROUNDS="${ROUNDS:-3}"
STARTED=$(date +%s)

say() { echo "$*" | tee -a "$OUT_DIR/summary.md"; }
left() { echo $((BUDGET - ($(date +%s) - STARTED))); }
# `within MARGIN`: the seconds a command may take leaving MARGIN, or a
# failure when under 5 remain (`timeout 0` would mean no limit at all).
within() {
    local t=$(($(left) - $1))
    [ "$t" -ge 5 ] || return 1
    echo "$t"
}
# `enough N`: at least N seconds remain; else it says what is left out.
enough() {
    if [ "$(left)" -lt "$1" ]; then
        say "- left out (under $1 s of the ${BUDGET} s remained): $2"
        return 1
    fi
}

setup() {
    mkdir -p "$OUT_DIR" "$BIN" "$CACHE"
    : >"$OUT_DIR/summary.md"
    for f in kynml cuda; do
        [ -f "$GPU_DIR/$f.xz" ] || { echo "gpu_session.sh: no $GPU_DIR/$f.xz (run \`benches/gpu_session.sh pack\` on the build machine and carry gpu/)" >&2; exit 2; }
        python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
            "$GPU_DIR/$f.xz" "$BIN/$f" && chmod +x "$BIN/$f"
    done
    # A warm machine keeps /tmp between calls: what the previous call on it
    # tuned and compiled is newer than the carried cache, which must not be
    # unpacked over it (session 25 lost a call's tuning that way).
    if [ -n "$(ls -A "$CACHE" 2>/dev/null)" ]; then
        echo "kernel cache: kept the one the previous call left on this machine (newer than any carried one)"
    elif compgen -G "$GPU_DIR/cache.tar.xz*" >/dev/null; then
        if cat "$GPU_DIR"/cache.tar.xz* |
            python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer)' |
            tar -xf - -C "$CACHE"; then
            echo "kernel cache: carried in (warm)"
        else
            rm -rf "${CACHE:?}"/* "${CACHE:?}"/.[!.]* 2>/dev/null
            echo "kernel cache: the carried parts did not unpack; this call starts cold"
        fi
    elif [ -f "$GPU_DIR/cache.tar.gz" ]; then
        if tar -xzf "$GPU_DIR/cache.tar.gz" -C "$CACHE"; then
            echo "kernel cache: carried in (warm)"
        else
            rm -rf "${CACHE:?}"/* "${CACHE:?}"/.[!.]* 2>/dev/null
            echo "kernel cache: the carried cache.tar.gz did not unpack; this call starts cold"
        fi
    fi
    export KYNML_CACHE="$CACHE" PYTHONUNBUFFERED=1
    {
        cat "$GPU_DIR/COMMIT" 2>/dev/null
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
        "$BIN/kynml" --version
        "$BIN/kynml" devices 2>&1
        python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
        nproc
    } >"$OUT_DIR/env.txt" 2>&1
    say "# GPU session $(date -u +%Y-%m-%dT%H:%M:%SZ): $(head -1 "$OUT_DIR/env.txt")"
    say "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
}

# `bench NAME SECONDS ARGS...`: one `kynml bench` (killed after SECONDS),
# its JSON appended to rows.jsonl with NAME, a line in summary.md.
bench() {
    local name=$1 limit=$2
    shift 2
    local json=/tmp/kynml-bench.json started=$(date +%s)
    # `timeout 0` would mean no limit at all.
    [ "$limit" -ge 5 ] || { say "- $name: no time left (a limit of $limit s)"; return 1; }
    rm -f "$json"
    echo "\$ kynml bench $*" >>"$OUT_DIR/log.txt"
    timeout "$limit" "$BIN/kynml" bench "$@" --steps "$STEPS" --rounds "$ROUNDS" --cache "$KYNML_CACHE" --json "$json" >>"$OUT_DIR/log.txt" 2>&1
    local rc=$? took=$(($(date +%s) - started))
    if [ $rc -ne 0 ] || [ ! -f "$json" ]; then
        say "- $name: did not finish (exit $rc after $took s; timeout $limit s)"
        echo "{\"name\": \"$name\", \"error\": \"exit $rc after $took s\"}" >>"$OUT_DIR/rows.jsonl"
        return 1
    fi
    python3 - "$json" "$name" "$took" >>"$OUT_DIR/rows.jsonl" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
r["name"], r["wall_secs"] = sys.argv[2], int(sys.argv[3])
print(json.dumps(r))
EOF
    python3 - "$json" "$name" "$took" <<'EOF' | tee -a "$OUT_DIR/summary.md"
import json, sys
r = json.load(open(sys.argv[1]))
mem = (r.get("peak_device_memory") or {}).get("in_use")
mem = f"{mem / 2**20:.0f} MiB" if mem else "not read"
print(f"- {sys.argv[2]}: {r['samples_per_sec']:.0f} samples/s ({r['precision']}), {r['step_ms']:.3f} ms/step, "
      f"first round ended {r.get('process_startup_secs') or float('nan'):.1f} s after the process started, "
      f"peak device memory {mem}, train loss {r.get('final_train_loss', float('nan')):.5f}, "
      f"whole command {sys.argv[3]} s")
EOF
}

# A copy of `spec` with `line` added to its train: block.
variant() {
    local spec=$1 line=$2 out=$3
    sed "s/^train:\$/train:\n    $line/" "$spec" >"$out"
}

# The CUDA checks in the order a short lease wants their answers: what no
# earlier lease measured first, what passed before (session 18, H200) next,
# and the activation-checkpointing check, which did not end there, last.
# CUDA_TESTS overrides the list (names as `cuda --list --ignored` gives them).
CUDA_TESTS_DEFAULT="cuda_gelu_odd_widths_and_avgpool_take_the_native_engines_step
cuda_fp32_products_run_in_the_precision_the_plan_names
cuda_training_agrees_with_cpu
cuda_deterministic_runs_are_bit_identical
cuda_fused_update_trains_like_burns_optimizer
cuda_nvml_samples_a_real_run
cuda_profiled_phases_add_up_to_the_step_time
cuda_memory_estimate_is_within_a_quarter_of_the_measured_peak
cuda_device_memory_stays_flat_over_epochs
cuda_sequence_and_categorical_examples_track_the_cpu
cuda_computes_the_same_dropout_masks_as_the_host
cuda_bf16_and_fp16_track_fp32
cuda_a_run_too_large_for_the_gpu_is_refused_before_it_starts
cuda_checkpointed_activations_keep_less_in_device_memory"

stage_tests() {
    say "## tests: kynml-core/tests/cuda.rs, one check at a time (at most ${TEST_SECONDS:-150} s each)"
    # The checks read examples/ from the working folder (they were built elsewhere).
    cd "$REPO" || return
    local listed name log rc took started passed=0 failed=0 timed=0
    listed=$("$BIN/cuda" --list --ignored 2>/dev/null | sed -n 's/: test$//p')
    for name in ${CUDA_TESTS:-$CUDA_TESTS_DEFAULT}; do
        grep -qFx "$name" <<<"$listed" || { say "- $name: not in this test binary"; continue; }
        enough 60 "$name" || continue
        log=/tmp/kynml-cuda-$name.log
        started=$(date +%s)
        # One process each, with its own limit: a check that hangs costs its
        # limit, not the rest of the stage. The checks' models are small: the
        # minimal search finds their kernels.
        local limit=${TEST_SECONDS:-150}
        [ "$limit" -lt $(($(left) - 20)) ] || limit=$(($(left) - 20))
        CUBECL_AUTOTUNE_LEVEL=minimal timeout -k 10 "$limit" "$BIN/cuda" --ignored --exact "$name" --test-threads=1 --nocapture \
            >"$log" 2>&1
        rc=$? took=$(($(date +%s) - started))
        { echo "\$ cuda $name"; cat "$log"; } >>"$OUT_DIR/log.txt"
        if [ $rc -eq 0 ] && grep -q "1 passed" "$log"; then
            say "- passed ($took s): $name"
            passed=$((passed + 1))
        elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
            say "- DID NOT END in $limit s: $name (last lines in log.txt)"
            timed=$((timed + 1))
        else
            say "- FAILED (exit $rc, $took s): $name"
            grep -E "panicked|assert|Error|error" "$log" | head -5 | sed 's/^/    /' >>"$OUT_DIR/summary.md"
            failed=$((failed + 1))
        fi
        # The figures the check prints.
        grep -E "relative|worst|most device memory|estimated|samples;|fused .* from|skipped|in use per epoch|phases .* of" "$log" |
            sort -u | sed 's/^/    /' >>"$OUT_DIR/summary.md"
    done
    say "- checks: $passed passed, $failed failed, $timed did not end"
}

stage_start() {
    say "## start: empty kernel cache, then the same again"
    local deep="$REPO/examples/deepnet/deepnet.kyn" wide="$REPO/examples/wide/wide.kyn"
    local saved=$KYNML_CACHE
    for run in "deepnet fp32|$deep|fp32|51200" "wide bf16|$wide|bf16|256001"; do
        IFS='|' read -r name spec precision rows <<<"$run"
        # START_RUNS="wide" (or "deepnet") takes one of the two.
        [[ " ${START_RUNS-deepnet wide} " == *" ${name%% *} "* ]] || continue
        enough 200 "$name cold and warm" || continue
        export KYNML_CACHE=/tmp/kynml-cold-$RANDOM
        # START_LIMIT caps the cold run, so that a slow autotune leaves the
        # later stages their time (what it tuned stays in the cache).
        local limit=$(($(left) - 60))
        if [ -n "${START_LIMIT:-}" ] && [ "$START_LIMIT" -lt "$limit" ]; then limit=$START_LIMIT; fi
        bench "$name, empty cache" "$limit" "$spec" --device "$DEVICE" --precision "$precision" --synthetic "$rows" &&
            # START_SECOND=0: the speed stage's first run of the same spec is the second run.
            if [ "${START_SECOND:-1}" = 1 ]; then
                bench "$name, second run" 120 "$spec" --device "$DEVICE" --precision "$precision" --synthetic "$rows"
            fi
        # Keep what it learned for the stages after this one.
        cp -r "$KYNML_CACHE"/. "$saved"/ 2>/dev/null
        rm -rf "$KYNML_CACHE"
        export KYNML_CACHE=$saved
    done
    [ "${START_WARMUP:-1}" = 1 ] || return
    enough 120 "kynml warmup" || return
    # On the bench's own rows (the spec's data is generated, not committed):
    # the warm-up tunes exactly the shapes the bench after it meets.
    local warm=/tmp/kynml-warmup-$RANDOM started=$(date +%s)
    if timeout $(($(left) - 30)) "$BIN/kynml" --cache "$warm" warmup "$deep" --device "$DEVICE" --precision fp32 --synthetic 51200 >>"$OUT_DIR/log.txt" 2>&1; then
        say "- kynml warmup deepnet fp32 on an empty cache: $(($(date +%s) - started)) s"
        KYNML_CACHE=$warm bench "deepnet fp32 after kynml warmup" 120 "$deep" --device "$DEVICE" --precision fp32 --synthetic 51200
    else
        say "- kynml warmup deepnet fp32: did not finish"
    fi
    rm -rf "$warm"
}

stage_speed() {
    say "## speed: benches/compare_gpu.py"
    enough "${SPEED_MIN_SECONDS:-240}" "compare_gpu.py" || return
    local json=/tmp/kynml-speed.json
    rm -f "$json"
    # compare_gpu.py saves each row as it ends: a run cut at the stage's
    # time still gives the rows (and their table) that it finished.
    timeout $(($(left) - 20)) python3 "$HERE/compare_gpu.py" --kynml "$BIN/kynml" --device "$DEVICE" --cache "$KYNML_CACHE" \
        --config "${SPEED_CONFIG:-both}" --precisions ${SPEED_PRECISIONS:-fp32 tf32 bf16 fp16} \
        --steps "$STEPS" --rounds "$ROUNDS" --json "$json" >>"$OUT_DIR/log.txt" 2>&1 ||
        say "- compare_gpu.py ended with exit $? (124: cut at the stage's time; the rows below are those it finished)"
    if [ -f "$json" ]; then
        python3 -c 'import json, sys
sys.path.insert(0, sys.argv[1])
import compare_gpu
print(compare_gpu.table(json.load(open(sys.argv[2]))))' "$HERE" "$json" | sed 's/^/    /' >>"$OUT_DIR/summary.md"
        python3 -c 'import json,sys
for r in json.load(open(sys.argv[1])):
    r["name"] = "speed " + r.get("config", "") + " " + r.get("engine", "").strip() + " " + r.get("asked", "")
    print(json.dumps(r))' "$json" >>"$OUT_DIR/rows.jsonl"
    else
        say "- compare_gpu.py saved no row"
    fi
}

stage_epilogue() {
    say "## epilogue: dense products fused with their cast, bias and activation, or alone (KYNML_MATMUL_EPILOGUE)"
    local wide="$REPO/examples/wide/wide.kyn" deep="$REPO/examples/deepnet/deepnet.kyn"
    # Alternating, twice each: the spread of a pair is the noise.
    for run in "wide bf16|$wide|bf16|256001" "wide fp32|$wide|fp32|256001" "deepnet bf16|$deep|bf16|51200"; do
        IFS='|' read -r name spec precision rows <<<"$run"
        for round in 1 2; do
            for epilogue in fused separate; do
                enough 100 "$name, $epilogue, round $round" || continue
                KYNML_MATMUL_EPILOGUE=$epilogue bench "$name, epilogue $epilogue ($round)" $(($(left) - 20)) \
                    "$spec" --device "$DEVICE" --precision "$precision" --synthetic "$rows"
            done
        done
    done
}

# `profiled NAME LOG STEPS SPEC PRECISION ROWS`: one bench run with CubeCL's
# profiler writing LOG; a warm-up round and one timed round of STEPS each.
profiled() {
    local name=$1 log=$2 steps=$3 spec=$4 precision=$5 rows=$6
    rm -f "$log"
    local limit
    limit=$(within 10) || { say "- $name: no time left for the profiled run of $steps steps"; return 1; }
    echo "\$ CUBECL_DEBUG_OPTION=profile kynml bench $spec --precision $precision --steps $steps --rounds 1" >>"$OUT_DIR/log.txt"
    CUBECL_DEBUG_OPTION=profile CUBECL_DEBUG_LOG="$log" timeout "$limit" "$BIN/kynml" bench "$spec" \
        --device "$DEVICE" --precision "$precision" --synthetic "$rows" --steps "$steps" --rounds 1 \
        --cache "$KYNML_CACHE" >>"$OUT_DIR/log.txt" 2>&1 || { say "- $name: the profiled run of $steps steps did not finish"; return 1; }
}

stage_kernels() {
    say "## kernels: CubeCL's profiler, each kind of kernel's launches and device time a step"
    local wide="$REPO/examples/wide/wide.kyn" deep="$REPO/examples/deepnet/deepnet.kyn" run name config precision spec rows
    IFS='|' read -ra runs <<<"${KERNEL_RUNS:-wide bf16|deepnet bf16|wide fp32|deepnet fp32}"
    for run in "${runs[@]}"; do
        read -r config precision <<<"$run"
        case $config in
            wide) spec=$wide rows=256001 ;;
            deepnet) spec=$deep rows=51200 ;;
            *) say "- kernels: unknown config \`$config\` (wide or deepnet)"; continue ;;
        esac
        name="$config $precision"
        enough 120 "kernels, $name" || continue
        # A first unprofiled run tunes and compiles whatever the cache lacks,
        # so that neither profiled run holds autotune's launches; the two
        # profiled runs differ by 2 x 10 training steps (each has a warm-up
        # round and a timed round), and their difference is those steps.
        local limit
        limit=$(within 10) || { say "- $name: no time left for the tuning run"; continue; }
        timeout "$limit" "$BIN/kynml" bench "$spec" --device "$DEVICE" --precision "$precision" --synthetic "$rows" \
            --steps 3 --rounds 1 --cache "$KYNML_CACHE" >>"$OUT_DIR/log.txt" 2>&1 || { say "- $name: the tuning run did not finish"; continue; }
        local short=/tmp/kynml-prof-short.log long=/tmp/kynml-prof-long.log tag=${config}-${precision}
        profiled "$name" "$short" 5 "$spec" "$precision" "$rows" || continue
        profiled "$name" "$long" 15 "$spec" "$precision" "$rows" || continue
        say "### $name"
        python3 "$HERE/kernel_profile.py" "$short" "$long" 20 --json "$OUT_DIR/kernels-$tag.json" | sed 's/^/    /' | tee -a "$OUT_DIR/summary.md"
    done
}

stage_controls() {
    say "## controls: autotune levels, deterministic, checkpoint_activations"
    local wide="$REPO/examples/wide/wide.kyn" deep="$REPO/examples/deepnet/deepnet.kyn"
    for level in fast balanced; do
        enough 200 "wide bf16 at autotune $level" || continue
        KYNML_CACHE=/tmp/kynml-tune-$level bench "wide bf16, autotune $level, empty cache" $(($(left) - 30)) \
            "$wide" --device "$DEVICE" --precision bf16 --synthetic 256001 --autotune "$level"
        rm -rf /tmp/kynml-tune-$level
    done
    enough 90 "deterministic DeepNet" && {
        variant "$deep" "deterministic = true" /tmp/deepnet-deterministic.kyn
        bench "deepnet fp32" 120 "$deep" --device "$DEVICE" --precision fp32 --synthetic 51200
        bench "deepnet fp32, deterministic" 120 /tmp/deepnet-deterministic.kyn --device "$DEVICE" --precision fp32 --synthetic 51200
    }
    enough 90 "checkpoint_activations" && {
        local spec=/tmp/deep-ckpt.kyn
        {
            printf 'dataset D:\n    source = csv("absent.csv")\n    target = "y"\nmodel Deep:\n    input 64\n'
            for _ in 1 2 3 4 5 6 7 8; do printf '    dense 2048 gelu\n    layernorm\n'; done
            printf '    dense 1 linear\ntrain:\n    model = Deep\n    data = D\n    loss = mse\n'
            printf '    optimizer = adamw(lr=0.001)\n    epochs = 3\n    batch = 2048\n'
        } >"$spec"
        variant "$spec" "checkpoint_activations = true" /tmp/deep-ckpt-on.kyn
        bench "deep 8x2048, bf16" 150 "$spec" --device "$DEVICE" --precision bf16 --synthetic 40960
        bench "deep 8x2048, bf16, checkpoint_activations" 150 /tmp/deep-ckpt-on.kyn --device "$DEVICE" --precision bf16 --synthetic 40960
    }
}

finish() {
    local size parts
    # lzma at preset 2: 3 s for session 25's 174 MiB cache, which it brought
    # to 8.3 MiB (gzip: 14.5 MiB); cut into 15 MiB parts, since the device
    # tool brings back no file over 16 MiB. cache.tar.xz.00, .01, ... are
    # joined in name order by the next call's setup.
    rm -rf /tmp/kynml-cache-out && mkdir -p /tmp/kynml-cache-out
    if [ -z "$(ls -A "$CACHE" 2>/dev/null)" ]; then
        say "kernel cache: empty, none written (keep the one in gpu/)"
    # GNU tar exits 1 when a file changed while it was read (grew, shrank
    # and was padded with zeros, or was rewritten): a torn kernel would be
    # carried, so that fails the pack; exit 1 for anything else does not.
    elif { LC_ALL=C tar -cf - -C "$CACHE" . 2>/tmp/kynml-tar.err; rc=$?; [ $rc -eq 0 ] || { [ $rc -eq 1 ] && ! grep -qE 'shrank|changed as we read' /tmp/kynml-tar.err; }; } |
        python3 -c 'import lzma, shutil, sys
with lzma.open(sys.stdout.buffer, "wb", preset=2) as out:
    shutil.copyfileobj(sys.stdin.buffer, out, 1 << 20)' |
        split -d -b 15M - /tmp/kynml-cache-out/cache.tar.xz.; then
        size=$(cat /tmp/kynml-cache-out/cache.tar.xz.* | wc -c)
        parts=$(ls /tmp/kynml-cache-out | wc -l)
        cp /tmp/kynml-cache-out/cache.tar.xz.* "$OUT_DIR/"
        say "kernel cache: $((size / 1024)) KiB in $parts file(s), cache.tar.xz.* (put them in gpu/, in place of any older cache.tar.*, to start the next call warm)"
    else
        say "kernel cache: packing failed, none written (keep the one in gpu/)"
    fi
    say "whole command: $(($(date +%s) - STARTED)) s"
}

main() {
    if [ "${1:-}" = pack ]; then
        pack
        return
    fi
    if [ $# -eq 0 ]; then
        sed -n '2,/^$/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
        return 2
    fi
    for stage in "$@"; do
        case $stage in
            tests | start | speed | epilogue | kernels | controls) ;;
            *) echo "gpu_session.sh: unknown stage \`$stage\` (tests, start, speed, epilogue, kernels, controls, or pack)" >&2; return 2 ;;
        esac
    done
    setup
    for stage in "$@"; do
        "stage_$stage"
    done
    finish
}

main "$@"
