#!/usr/bin/env bash
# Runs on the GPU test machine (docs/gpu.md), from the repository root, after
# `cargo xtask gpu-pack` here and a device run that carries `.gpu`: every CUDA test with a GPU
# required, then `kestrel bench --device cuda` on random-weight files of real shapes that `kestrel
# synth` writes there, then compute-sanitizer's memcheck over the kernel tests. Each step is
# limited to GPU_STEP_TIMEOUT seconds (600). Logs go to $OUT (the device tool brings them back) or
# ./gpu-report.
set -uo pipefail
out="${OUT:-gpu-report}"
mkdir -p "$out"
export KESTREL_REQUIRE_GPU=1
# cuBLAS (the prefill GEMM) is loaded at run time: the toolkit's lib64 may not be in ld.so's path.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
# Each step's limit in seconds (device time is scarce; a hung kernel must not eat all of it).
step="${GPU_STEP_TIMEOUT:-600}"
status=0
{
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
    nvcc --version | tail -2
} 2>&1 | tee "$out/device.txt"
for t in cuda_kernels cuda_forward cuda_generate; do
    echo "== $t"
    if ! timeout "$step" .gpu/$t --test-threads 1 --nocapture 2>&1 | tee "$out/$t.log"; then
        status=1
    fi
done
# Speed on random-weight files of real shapes, written here by kestrel (no transfer needed).
# GPU_RUN_BENCH=0 skips it; GPU_RUN_SHAPES picks the files (8B ones take ~1 min to write).
if [ "${GPU_RUN_BENCH:-1}" != 0 ]; then
    tmp="${TMPDIR:-/tmp}/kestrel-synth"
    mkdir -p "$tmp"
    for spec in ${GPU_RUN_SHAPES:-gemma3-270m:Q4_K_M llama-1b:Q4_0 llama-8b:Q4_K_M}; do
        shape="${spec%%:*}"
        ty="${spec#*:}"
        f="$tmp/$shape-$ty.gguf"
        echo "== bench $shape $ty"
        if .gpu/kestrel synth --shape "$shape" --type "$ty" -o "$f" 2>&1 | tee -a "$out/bench.log"; then
            timeout "$step" .gpu/kestrel bench -m "$f" --device cuda -p 512 -n 128 -r 3 2>&1 | tee -a "$out/bench.log"
            echo "-- without CUDA graphs" | tee -a "$out/bench.log"
            KESTREL_CUDA_GRAPHS=0 timeout "$step" .gpu/kestrel bench -m "$f" --device cuda -p 512 -n 128 -r 3 2>&1 | tee -a "$out/bench.log"
            if [ "$shape" != llama-8b ]; then
                timeout "$step" .gpu/kestrel bench -m "$f" --device cpu -p 64 -n 16 -r 1 -t 16 2>&1 | tee -a "$out/bench.log"
            fi
        fi
        rm -f "$f"
    done
fi
if command -v compute-sanitizer >/dev/null; then
    echo "== compute-sanitizer memcheck (kernel tests)"
    if ! timeout "$step" compute-sanitizer --tool memcheck --error-exitcode 9 .gpu/cuda_kernels --test-threads 1 \
        >"$out/memcheck.log" 2>&1; then
        status=1
    fi
    tail -5 "$out/memcheck.log"
fi
echo "== gpu-run: exit $status"
exit $status
