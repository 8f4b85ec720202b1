#!/usr/bin/env bash
# Runs on the GPU test machine (docs/gpu.md), from the repository root, after
# `cargo xtask gpu-pack` here and a device run that carries `.gpu`: every CUDA test with a GPU
# required, then `kestrel bench --device cuda` on random-weight files of real shapes that `kestrel
# synth` writes there, side by side with llama.cpp built with CUDA there from the source
# gpu-pack packs (`.gpu/llama-cuda-src.tgz`, when it does), then compute-sanitizer's memcheck
# over the kernel tests. Logs go to $OUT (the device tool brings them back) or ./gpu-report.
#
#   bash xtask/gpu-run.sh          everything above
#   bash xtask/gpu-run.sh llama    only llama.cpp's side, on the files a first run kept (a second
#                                  call while the machine is still warm: `.gpu-work/` stays)
#
# Knobs: GPU_STEP_TIMEOUT (s, per step, 600), GPU_RUN_DEADLINE (s from the start after which no
# new step starts, 540), GPU_RUN_BENCH=0 (no benchmarks), GPU_RUN_SHAPES="shape:TYPE ...",
# GPU_RUN_LLAMA=0 (no llama.cpp), GPU_RUN_PLAIN=0 (no bench without CUDA graphs), GPU_RUN_F32=0
# (no f32-GEMM tests and benches: f16 operands are the default), GPU_RUN_PROFILE=0 (no KESTREL_CUDA_PROFILE runs),
# GPU_RUN_VARIANTS="VAR=value ..." (one more kestrel bench per file with each setting; settings
# joined by `+` run together: "KESTREL_CUDA_MMVQ_PREFETCH=1+KESTREL_CUDA_MMVQ_RPC=4"),
# GPU_RUN_DEPTH="4096 ..." (tg128 after that many cached tokens, kestrel with each variant and
# llama-bench's -d), GPU_RUN_DECODE_PROFILE=1 (KESTREL_CUDA_PROFILE times of 64 decode steps of every file),
# GPU_RUN_MATVEC=0 (no `kestrel bench --matvec` of each file; GPU_RUN_MATVEC_VARIANTS="VAR=value ...",
# default the matvec's rows a CTA at 1 and 4 besides 2), GPU_RUN_NCU=1 (ncu's kernel times for one prefill layer and one decode step of the 8B-shaped
# Q4_K_M file: the plan's own KESTREL_CUDA_PROFILE times include host stalls), GPU_RUN_MEMCHECK=0.
set -uo pipefail
out="${OUT:-gpu-report}"
mkdir -p "$out"
export KESTREL_REQUIRE_GPU=1
start=$(date +%s)
deadline="${GPU_RUN_DEADLINE:-540}"
step="${GPU_STEP_TIMEOUT:-600}"
work=.gpu-work
models="$work/models"
llama="$work/llama.cpp"
mkdir -p "$models"
status=0
mode="${1:-all}"
# cuBLAS (the prefill GEMM) is loaded at run time: the toolkit's lib64 may not be in ld.so's path.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"

# gpu-pack gzips the executables (the transfer is capped at 64 MiB): unpack them beside.
for z in .gpu/*.gz; do
    [ -f "$z" ] || continue
    n="${z%.gz}"
    [ "$n" = .gpu/kestrel-base ] && continue
    [ -x "$n" ] || { gunzip -c "$z" >"$n" && chmod +x "$n"; }
done

elapsed() { echo $(($(date +%s) - start)); }
# Whether there is time for a step expected to take $1 seconds.
time_for() { [ $(($(elapsed) + ${1:-0})) -lt "$deadline" ]; }
log() { echo "[$(elapsed)s] $*" | tee -a "$out/run.log"; }

# llama.cpp with CUDA, built in the background while kestrel's steps run (16 cores there).
start_llama_build() {
    [ "${GPU_RUN_LLAMA:-1}" != 0 ] && [ -f .gpu/llama-cuda-src.tgz ] || return 0
    [ -x "$llama/b/bin/llama-bench" ] && return 0
    local pid
    pid=$(cat "$work/llama-build.pid" 2>/dev/null || echo none)
    if [ "$pid" != none ] && kill -0 "$pid" 2>/dev/null; then return 0; fi
    log "llama.cpp: building (CUDA, sm_90) in the background"
    mkdir -p "$work"
    (
        cd "$work" && { [ -d llama.cpp ] || tar xzf ../.gpu/llama-cuda-src.tgz; } && cd llama.cpp &&
            cmake -B b -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON \
                -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
                -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DCMAKE_BUILD_TYPE=Release &&
            nice -n 5 cmake --build b -j 16 --target llama-bench llama-batched-bench
    ) >>"$out/llama-build.log" 2>&1 &
    echo $! >"$work/llama-build.pid"
}

wait_llama_build() {
    local pid
    pid=$(cat "$work/llama-build.pid" 2>/dev/null || echo none)
    # No build started (no source packed, or GPU_RUN_LLAMA=0) and none left by an earlier call.
    if [ "$pid" = none ] && [ ! -x "$llama/b/bin/llama-bench" ]; then
        log "llama.cpp: not built (gpu-pack packs it when KESTREL_LLAMA_SRC is set)"
        return 1
    fi
    while [ ! -x "$llama/b/bin/llama-bench" ] || { [ "$pid" != none ] && kill -0 "$pid" 2>/dev/null; }; do
        { [ "$pid" != none ] && kill -0 "$pid" 2>/dev/null; } || break
        time_for 45 || { log "llama.cpp: build not done by the deadline"; return 1; }
        sleep 5
    done
    [ -x "$llama/b/bin/llama-bench" ] || { log "llama.cpp: build failed (llama-build.log)"; return 1; }
    log "llama.cpp: built"
}

specs="${GPU_RUN_SHAPES:-smollm2-135m:Q4_1 gemma3-270m:Q4_K_M llama-8b:Q4_K_M llama-8b:Q4_0}"

llama_benches() {
    wait_llama_build || return 0
    local lb="$llama/b/bin/llama-bench"
    for spec in $specs; do
        f="$models/${spec%%:*}-${spec#*:}.gguf"
        [ -f "$f" ] || continue
        time_for 40 || { log "deadline: llama-bench $spec skipped"; continue; }
        log "llama-bench $spec"
        timeout "$step" "$lb" -m "$f" -ngl 99 -p 512 -n 128 -r 3 2>&1 | tee -a "$out/llama-bench.log"
        for d in ${GPU_RUN_DEPTH:-}; do
            timeout "$step" "$lb" -m "$f" -ngl 99 -p 0 -n 128 -d "$d" -r 3 2>&1 | grep "tg128" |
                tee -a "$out/llama-bench.log"
        done
    done
    f="$models/llama-8b-Q4_K_M.gguf"
    if [ -f "$f" ] && time_for 60; then
        log "llama-batched-bench llama-8b Q4_K_M"
        timeout "$step" "$llama/b/bin/llama-batched-bench" -m "$f" -ngl 99 -c 17408 -b 2048 -ub 512 \
            -npp 128 -ntg 128 -npl 1,8,32,64 2>&1 | tail -12 | tee -a "$out/llama-bench.log"
    fi
}

if [ "$mode" = llama ]; then
    start_llama_build # resumes a build a first call left unfinished
    llama_benches
    log "gpu-run llama: exit $status"
    exit $status
fi

start_llama_build
# Test models carried in parts (gpu-pack with KESTREL_GPU_MODELS): join each complete set into
# the model cache and check its hash, so the real-model tests run instead of skipping.
cache="${KESTREL_HOME:-$HOME/.cache/kestrel}/models"
for parts in .gpu-models/*.parts; do
    [ -f "$parts" ] || continue
    file=$(basename "$parts" .parts)
    read -r count sum <"$parts"
    if [ -f "$cache/$file" ] && [ "$(sha256sum "$cache/$file" | cut -d' ' -f1)" = "$sum" ]; then
        log "model $file: already in the cache"
        continue
    fi
    have=$(ls .gpu-models/"$file".part[0-9][0-9] 2>/dev/null | wc -l)
    if [ "$have" -ne "$count" ]; then
        log "model $file: $have of $count parts here; its tests will skip"
        continue
    fi
    mkdir -p "$cache"
    cat .gpu-models/"$file".part[0-9][0-9] >"$cache/$file.tmp"
    if [ "$(sha256sum "$cache/$file.tmp" | cut -d' ' -f1)" = "$sum" ]; then
        mv "$cache/$file.tmp" "$cache/$file"
        log "model $file: joined from $count parts"
    else
        rm -f "$cache/$file.tmp"
        log "model $file: joined parts do not match the hash; its tests will skip"
    fi
done
{
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.max.sm,clocks.max.mem --format=csv
    nvcc --version | tail -2
    nproc
} 2>&1 | tee "$out/device.txt"
for t in cuda_kernels cuda_gemm cuda_rope cuda_elementwise cuda_attention cuda_kv_q8 cuda_ssm cuda_wide cuda_moe cuda_tail cuda_forward cuda_paged cuda_generate cuda_architectures; do
    log "test $t"
    if ! timeout "$step" .gpu/$t --test-threads 1 --nocapture >"$out/$t.log" 2>&1; then
        status=1
    fi
    grep -E "^test result|FAILED|panicked" "$out/$t.log" | head -20
done
# The GPU scheduler with one cache a sequence (pages of a pool by default since session 56).
log "test cuda_generate scheduler/prefix with KESTREL_CUDA_PAGED=0"
if ! KESTREL_CUDA_PAGED=0 timeout "$step" .gpu/cuda_generate --test-threads 1 scheduler prefix mixed \
    >"$out/cuda_generate-unpaged.log" 2>&1; then
    status=1
fi
grep -E "^test result|FAILED|panicked" "$out/cuda_generate-unpaged.log" | head -5
# Programmatic dependent launch (KESTREL_CUDA_PDL=1, session 64): every kernel may start while
# the one before it runs and waits at its top; only a real GPU overlaps them. The whole forward
# pass against the CPU and the generator's tests, with it on from the first launch.
for t in cuda_forward cuda_generate; do
    time_for 120 || break
    log "test $t with KESTREL_CUDA_PDL=1"
    if ! KESTREL_CUDA_PDL=1 timeout "$step" .gpu/$t --test-threads 1 >"$out/$t-pdl.log" 2>&1; then
        status=1
    fi
    grep -E "^test result|FAILED|panicked" "$out/$t-pdl.log" | head -5
done
# The tensor-core matvec under its other launch settings (each fixed per process).
for v in KESTREL_CUDA_WIDE_NT=4 KESTREL_CUDA_MMVQ_RPC=1 KESTREL_CUDA_MMVQ_RPC=4; do
    log "test cuda_wide with $v"
    if ! env "$v" timeout "$step" .gpu/cuda_wide --test-threads 1 >"$out/cuda_wide-$v.log" 2>&1; then
        status=1
    fi
    grep -E "^test result|FAILED|panicked" "$out/cuda_wide-$v.log" | head -5
    # The MoE matvecs take the same settings (tiles of 32 pairs under WIDE_NT=4).
    if ! env "$v" timeout "$step" .gpu/cuda_moe --test-threads 1 each_pair >"$out/cuda_moe-$v.log" 2>&1; then
        status=1
    fi
    grep -E "^test result|FAILED|panicked" "$out/cuda_moe-$v.log" | head -5
done
# The f32-operand GEMM (the default before f16 operands, KESTREL_CUDA_GEMM=f32) against the
# same bounds: informational, not part of the status.
[ "${GPU_RUN_F32:-1}" != 0 ] && {
log "test cuda_kernels matmul/gemm and cuda_gemm with KESTREL_CUDA_GEMM=f32 (informational)"
KESTREL_CUDA_GEMM=f32 timeout "$step" .gpu/cuda_kernels --test-threads 1 --nocapture matmul gemm \
    >"$out/cuda_kernels-gemm-f32.log" 2>&1
grep -E "^test |^test result|nmse" "$out/cuda_kernels-gemm-f32.log" | head -20
KESTREL_CUDA_GEMM=f32 timeout "$step" .gpu/cuda_gemm --test-threads 1 --nocapture \
    >"$out/cuda_gemm-f32.log" 2>&1
grep -E "^test |^test result|nmse" "$out/cuda_gemm-f32.log" | head -20
KESTREL_CUDA_GEMM=f32 timeout "$step" .gpu/cuda_forward --test-threads 1 --nocapture \
    >"$out/cuda_forward-gemm-f32.log" 2>&1
grep -E "^test result|kld|KLD" "$out/cuda_forward-gemm-f32.log" | head -20
}
# Device-to-device copy bandwidth (the roof for decode's weight reads), by PyTorch when present.
python3 - <<'PY' 2>&1 | tee -a "$out/device.txt"
try:
    import torch
    a = torch.empty(2 << 30, dtype=torch.uint8, device="cuda"); b = torch.empty_like(a)
    for _ in range(3): b.copy_(a)
    torch.cuda.synchronize(); e0 = torch.cuda.Event(True); e1 = torch.cuda.Event(True)
    e0.record()
    for _ in range(20): b.copy_(a)
    e1.record(); torch.cuda.synchronize()
    s = e0.elapsed_time(e1) / 1e3 / 20
    print(f"device copy: {2 * a.numel() / s / 1e9:.0f} GB/s (read + write, 2 GiB, torch)")
except Exception as e:
    print("device copy: not measured:", e)
PY
# Speed on random-weight files of real shapes, written here by kestrel (no transfer needed).
base=""
if [ -f .gpu/kestrel-base.gz ]; then
    gunzip -c .gpu/kestrel-base.gz >"$work/kestrel-base" && chmod +x "$work/kestrel-base" && base="$work/kestrel-base"
fi
bench() { # label, binary, file, extra env...
    local label=$1 bin=$2 f=$3
    shift 3
    echo "-- $label" | tee -a "$out/bench.log"
    env "$@" timeout "$step" "$bin" bench -m "$f" --device cuda -p 512 -n 128 -r 3 2>&1 | tee -a "$out/bench.log"
}
if [ "${GPU_RUN_BENCH:-1}" != 0 ]; then
    for spec in $specs; do
        shape="${spec%%:*}"
        ty="${spec#*:}"
        f="$models/$shape-$ty.gguf"
        time_for 90 || { log "deadline: $spec skipped"; continue; }
        log "synth + bench $shape $ty"
        [ -f "$f" ] || .gpu/kestrel synth --shape "$shape" --type "$ty" -o "$f" 2>&1 | tee -a "$out/bench.log"
        [ -f "$f" ] || { status=1; continue; }
        echo "== bench $shape $ty" | tee -a "$out/bench.log"
        bench "kestrel (graphs)" .gpu/kestrel "$f"
        [ "${GPU_RUN_PLAIN:-1}" != 0 ] && bench "kestrel without CUDA graphs" .gpu/kestrel "$f" KESTREL_CUDA_GRAPHS=0
        [ "${GPU_RUN_F32:-1}" != 0 ] && bench "kestrel f32 GEMM (graphs)" .gpu/kestrel "$f" KESTREL_CUDA_GEMM=f32
        [ -n "$base" ] && bench "kestrel-base (graphs)" "$base" "$f"
        for v in ${GPU_RUN_VARIANTS:-}; do
            bench "kestrel with $v (graphs)" .gpu/kestrel "$f" ${v//+/ }
        done
        # Sampled decode (top-k 40, kestrel run's defaults): candidates found on the device,
        # and with the logits copied back and sampled on the host (KESTREL_CUDA_TOPK=0).
        if [ "$shape" != llama-8b ] && time_for 60; then
            for v in "" KESTREL_CUDA_TOPK=0; do
                echo "-- kestrel run ${v:+with $v }(top-k 40, temp 0.8, 256 tokens)" | tee -a "$out/bench.log"
                env $v timeout "$step" .gpu/kestrel run -m "$f" --device cuda -n 256 --top-k 40 --seed 1 \
                    -p "Once upon a time" 2>&1 >/dev/null | grep -E "generated|rror" | tee -a "$out/bench.log"
            done
        fi
        # Decode at a long context (llama-bench's -d): the same settings, after D cached tokens.
        for d in ${GPU_RUN_DEPTH:-}; do
            for v in "" ${GPU_RUN_VARIANTS:-}; do
                echo "-- kestrel ${v:+with $v }tg128 @ d$d" | tee -a "$out/bench.log"
                env ${v//+/ } timeout "$step" .gpu/kestrel bench -m "$f" --device cuda -p 0 -n 128 -d "$d" -r 3 2>&1 |
                    tail -1 | tee -a "$out/bench.log"
            done
        done
        # Batched decode (the scheduler's GPU steps, up to 64 sequences a step) on the 8B shapes
        # (GPU_RUN_BATCH_ALL=1: every file); at 8 sequences also each alone, and past 8 the
        # tensor-core matvec at 32 activation rows a CTA and off (cuBLAS), and one cache a
        # sequence instead of pages of a pool, for comparison.
        if [ "$shape" = llama-8b ] || [ "${GPU_RUN_BATCH_ALL:-0}" != 0 ]; then
            for b in ${GPU_RUN_BATCH-8 32 64}; do
                time_for 60 || { log "deadline: batched decode $spec skipped"; break; }
                if [ "$b" -le 8 ]; then
                    variants="${GPU_RUN_BATCH_VARIANTS-KESTREL_CUDA_BATCH=0}"
                else
                    variants="${GPU_RUN_WIDE_VARIANTS-KESTREL_CUDA_WIDE_NT=4 KESTREL_CUDA_WIDE=0 KESTREL_CUDA_PAGED=0}"
                fi
                for v in "" $variants; do
                    echo "-- kestrel ${v:+with $v }tg128 @ batch $b" | tee -a "$out/bench.log"
                    env $v timeout "$step" .gpu/kestrel bench -m "$f" --device cuda -p 0 -n 128 --batch "$b" \
                        -r 3 2>&1 | grep -E "@b|rror" | tee -a "$out/bench.log"
                done
            done
        fi
        # Each group of the decode step's matmul weights timed alone (`kestrel bench --matvec`):
        # weight bytes a second per kernel, prefetch setting and row count, and the matmuls'
        # share of the decode step; the rows a matvec CTA takes are fixed per process.
        if [ "${GPU_RUN_MATVEC:-1}" != 0 ]; then
            for v in "" ${GPU_RUN_MATVEC_VARIANTS-KESTREL_CUDA_MMVQ_RPC=1 KESTREL_CUDA_MMVQ_RPC=4}; do
                time_for 45 || { log "deadline: matvec $spec skipped"; break; }
                echo "-- kestrel --matvec 1,8 ${v:+with $v }($spec)" | tee -a "$out/matvec.log"
                env ${v//+/ } timeout "$step" .gpu/kestrel bench -m "$f" --device cuda -p 0 -n 128 -r 3 \
                    --matvec 1,8 >>"$out/matvec.log" 2>&1 || status=1
                grep -E "^matmuls of a step|rror" "$out/matvec.log" | tail -7
            done
        fi
        if [ "${GPU_RUN_DECODE_PROFILE:-0}" != 0 ] && time_for 60; then
            echo "-- decode profile $shape $ty" | tee -a "$out/decode-profile.log"
            KESTREL_CUDA_PROFILE=1 timeout "$step" .gpu/kestrel bench -m "$f" --device cuda -p 0 -n 64 -r 1 \
                >>"$out/decode-profile.log" 2>&1
        fi
        if [ "$shape" = llama-8b ] && [ "${GPU_RUN_PROFILE:-1}" != 0 ] && time_for 60; then
            for g in f32 f16; do
                echo "-- profile, GEMM $g" | tee -a "$out/profile.log"
                KESTREL_CUDA_PROFILE=1 KESTREL_CUDA_GEMM=$g timeout "$step" .gpu/kestrel bench -m "$f" \
                    --device cuda -p 512 -n 32 -r 1 >>"$out/profile.log" 2>&1
            done
        fi
    done
    llama_benches
fi
f="$models/llama-8b-Q4_K_M.gguf"
if [ "${GPU_RUN_NCU:-0}" != 0 ] && command -v ncu >/dev/null && [ -f "$f" ] && time_for 60; then
    # Kernel name | metric | value, in launch order: the first ~60 launches of a prefill of
    # 512, then ~60 of the second one-token step after a prefill of 0 (plain launches).
    for args in "-p 512 -n 0 --ncu 0" "-p 0 -n 4 --ncu 700"; do
        skip="${args##*--ncu }"
        log "ncu: bench ${args%% --ncu*}, launches $skip.."
        KESTREL_CUDA_GRAPHS=0 timeout 120 ncu --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum \
            --launch-skip "$skip" --launch-count 60 .gpu/kestrel bench -m "$f" --device cuda ${args%% --ncu*} -r 1 \
            2>/dev/null | grep '^"' | awk -F'","' '{print $5 "|" $(NF-2) "|" $(NF-0)}' | sed 's/(.*)//' |
            cut -c1-160 >>"$out/ncu.log"
    done
fi
if [ "${GPU_RUN_MEMCHECK:-1}" != 0 ] && command -v compute-sanitizer >/dev/null && time_for 60; then
    log "compute-sanitizer memcheck (kernel tests)"
    if ! timeout $((deadline - $(elapsed))) compute-sanitizer --tool memcheck --error-exitcode 9 \
        .gpu/cuda_kernels --test-threads 1 >"$out/memcheck.log" 2>&1; then
        status=1
    fi
    tail -5 "$out/memcheck.log"
    # The GEMM: the f16 conversion, its device scalars, bands of a few rows.
    if time_for 60 && ! timeout $((deadline - $(elapsed))) compute-sanitizer --tool memcheck --error-exitcode 9 \
        .gpu/cuda_gemm --test-threads 1 >"$out/memcheck-gemm.log" 2>&1; then
        status=1
    fi
    tail -3 "$out/memcheck-gemm.log"
    # Batched decode steps: each token's cache reached through the device table.
    if time_for 60 && ! timeout $((deadline - $(elapsed))) compute-sanitizer --tool memcheck --error-exitcode 9 \
        .gpu/cuda_attention --test-threads 1 >"$out/memcheck-kv-table.log" 2>&1; then
        status=1
    fi
    tail -3 "$out/memcheck-kv-table.log"
    # q8_0 caches: appends and every attention kernel over them.
    if time_for 60 && ! timeout $((deadline - $(elapsed))) compute-sanitizer --tool memcheck --error-exitcode 9 \
        .gpu/cuda_kv_q8 --test-threads 1 >"$out/memcheck-kv-q8.log" 2>&1; then
        status=1
    fi
    tail -3 "$out/memcheck-kv-q8.log"
    # RoPE and its fused forms (their tests were cuda_kernels' until session 55).
    if time_for 60 && ! timeout $((deadline - $(elapsed))) compute-sanitizer --tool memcheck --error-exitcode 9 \
        .gpu/cuda_rope --test-threads 1 >"$out/memcheck-rope.log" 2>&1; then
        status=1
    fi
    tail -3 "$out/memcheck-rope.log"
    # The tensor-core matvec: clamped rows and columns of part-empty CTAs.
    if time_for 60 && ! timeout $((deadline - $(elapsed))) compute-sanitizer --tool memcheck --error-exitcode 9 \
        .gpu/cuda_wide --test-threads 1 eight_and_nine >"$out/memcheck-wide.log" 2>&1; then
        status=1
    fi
    tail -3 "$out/memcheck-wide.log"
    # Paged caches: prefill and decode over pages of a pool, paged and contiguous caches in one
    # batched step, and device picks (the SmolLM2-shaped test; the all-architectures one would
    # take too long under the sanitizer).
    if time_for 90 && ! timeout $((deadline - $(elapsed))) compute-sanitizer --tool memcheck --error-exitcode 9 \
        .gpu/cuda_paged --test-threads 1 one_batched_step >"$out/memcheck-paged.log" 2>&1; then
        status=1
    fi
    tail -3 "$out/memcheck-paged.log"
    # MoE routing on the device, the indirect matvecs, scales, biases and the weighted sum.
    if time_for 60 && ! timeout $((deadline - $(elapsed))) compute-sanitizer --tool memcheck --error-exitcode 9 \
        .gpu/cuda_moe --test-threads 1 each_pair >"$out/memcheck-moe.log" 2>&1; then
        status=1
    fi
    tail -3 "$out/memcheck-moe.log"
    # The matvecs whose last CTA runs the norm or the GLU after them (a counter, the row through
    # L2, shared memory sized by the row).
    if time_for 60 && ! timeout $((deadline - $(elapsed))) compute-sanitizer --tool memcheck --error-exitcode 9 \
        .gpu/cuda_tail --test-threads 1 >"$out/memcheck-tail.log" 2>&1; then
        status=1
    fi
    tail -3 "$out/memcheck-tail.log"
fi
log "gpu-run: exit $status"
exit $status
