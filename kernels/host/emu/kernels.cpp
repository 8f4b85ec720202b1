// Every kernel of kernels/*.cu compiled for the host (the stand-in headers, fibers for threads)
// and a table from each PTX entry name to a function that binds a launch's parameters, for the
// emulated driver (driver.cpp). The table's names come from the committed PTX (`kernels.inc`,
// written by `cargo xtask gpu-emu`): a kernel in the PTX without a host build fails to compile.
#include "../../argmax.cu"
#include "../../attention.cu"
#include "../../attention_tiled.cu"
#include "../../dequant.cu"
#include "../../elementwise.cu"
#include "../../get_rows.cu"
#include "../../kv_append.cu"
#include "../../matvec_float.cu"
#include "../../mmvq.cu"
#include "../../mmvq_k.cu"
#include "../../mmvq_tail.cu"
#include "../../mmvq_wide.cu"
#include "../../moe.cu"
#include "../../norm.cu"
#include "../../quantize.cu"
#include "../../rope.cu"
#include "../../ssm.cu"
#include "../../topk.cu"

#include "emu.h"

#include <cstring>
#include <tuple>
#include <utility>

namespace {

// A launch's parameters copied out of cuLaunchKernel's `kernelParams` (each a pointer to a
// value of the kernel's parameter type, as the PTX ABI lays them out), and the kernel body
// each thread runs with them.
template <class... A, std::size_t... I>
std::function<void()> bind_args(void (*f)(A...), void **p, std::index_sequence<I...>) {
    std::tuple<A...> args{*static_cast<A *>(p[I])...};
    return [f, args]() { std::apply(f, args); };
}

template <class... A>
std::function<void()> bind(void (*f)(A...), void **p) {
    return bind_args(f, p, std::index_sequence_for<A...>{});
}

#define KERNEL(name) {#name, [](void **p) { return bind(&name, p); }},
const emu::Kernel TABLE[] = {
#include "kernels.inc"
};
#undef KERNEL

}  // namespace

namespace emu {

const Kernel *find_kernel(const char *name) {
    for (const Kernel &k : TABLE)
        if (std::strcmp(k.name, name) == 0) return &k;
    return nullptr;
}

void run_kernel(const std::function<void()> &body, Dim3 grid, Dim3 block, unsigned shared) {
    simt::launch_dynamic_shared = (long)shared;
    launch3(grid, block, body);
}

}  // namespace emu
