#!/usr/bin/env bash
# Runs on the GPU test machine (docs/gpu.md), from the repository root, after
# `cargo xtask gpu-pack` here and a device run that carries `.gpu`: every CUDA test with a GPU
# required, then compute-sanitizer's memcheck over the kernel tests. Logs go to $OUT (the
# device tool brings them back) or ./gpu-report.
set -uo pipefail
out="${OUT:-gpu-report}"
mkdir -p "$out"
export KESTREL_REQUIRE_GPU=1
status=0
{
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
    nvcc --version | tail -2
} 2>&1 | tee "$out/device.txt"
for t in cuda_kernels cuda_forward; do
    echo "== $t"
    if ! .gpu/$t --test-threads 1 --nocapture 2>&1 | tee "$out/$t.log"; then
        status=1
    fi
done
if command -v compute-sanitizer >/dev/null; then
    echo "== compute-sanitizer memcheck (kernel tests)"
    if ! compute-sanitizer --tool memcheck --error-exitcode 9 .gpu/cuda_kernels --test-threads 1 \
        >"$out/memcheck.log" 2>&1; then
        status=1
    fi
    tail -5 "$out/memcheck.log"
fi
echo "== gpu-run: exit $status"
exit $status
