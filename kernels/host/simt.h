// The host stand-in's SIMT engine: a CTA's threads as fibers on the calling thread, switched at
// barriers (warp shuffles, `__syncthreads`), one CTA after another. Fibers instead of host
// threads because a shuffle is a barrier of 32 lanes: a switch costs nanoseconds where waking
// an OS thread costs microseconds, so whole models run through the kernels (the emulated
// driver, kernels/host/emu) and the host checks finish in seconds.
//
// Semantics kept from the GPU: a barrier waits for every thread of its warp or CTA that has not
// exited (an exited thread leaves every barrier, as on sm_70+), shared memory is one array a
// CTA (function-local statics: CTAs run one at a time), and a CTA whose threads all wait on a
// barrier none can pass is reported as a deadlock (with the grid position) instead of hanging.
// Not kept: concurrency between CTAs (a kernel that waits for another CTA would deadlock) and
// the memory model.
#pragma once
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <vector>
#include <sys/mman.h>

// AddressSanitizer (the emulated device's memory check, `KESTREL_EMU_ASAN=1`) is told of each
// stack switch, so it tracks the fibers' stacks instead of reporting them.
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define SIMT_ASAN 1
#endif

struct Dim3 {
    unsigned x = 0, y = 0, z = 0;
};
// One thread's coordinates, set by the scheduler each time it resumes a fiber (launches are
// serialised, so plain globals serve every thread).
inline Dim3 threadIdx, blockIdx;
inline Dim3 blockDim, gridDim;

namespace simt {

// Saves the running context's callee-saved registers on its stack and its stack pointer in
// `*save`, then resumes the context whose stack pointer is `load`.
extern "C" __attribute__((visibility("hidden"))) void kestrel_simt_switch(void **save, void *load);

#if defined(__x86_64__)
// The switch: the six callee-saved registers (every fiber runs with the thread's SSE and x87
// control words: kernels never change them).
asm(R"(
    .text
    .p2align 4
    .weak kestrel_simt_switch
    .hidden kestrel_simt_switch
    .type kestrel_simt_switch, @function
kestrel_simt_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size kestrel_simt_switch, .-kestrel_simt_switch
)");
#elif defined(__aarch64__)
// The switch: x19-x30 and d8-d15 (AAPCS64's callee-saved registers).
asm(R"(
    .text
    .p2align 4
    .weak kestrel_simt_switch
    .hidden kestrel_simt_switch
    .type kestrel_simt_switch, %function
kestrel_simt_switch:
    sub sp, sp, #160
    stp x19, x20, [sp, #0]
    stp x21, x22, [sp, #16]
    stp x23, x24, [sp, #32]
    stp x25, x26, [sp, #48]
    stp x27, x28, [sp, #64]
    stp x29, x30, [sp, #80]
    stp d8, d9, [sp, #96]
    stp d10, d11, [sp, #112]
    stp d12, d13, [sp, #128]
    stp d14, d15, [sp, #144]
    mov x9, sp
    str x9, [x0]
    mov sp, x1
    ldp x19, x20, [sp, #0]
    ldp x21, x22, [sp, #16]
    ldp x23, x24, [sp, #32]
    ldp x25, x26, [sp, #48]
    ldp x27, x28, [sp, #64]
    ldp x29, x30, [sp, #80]
    ldp d8, d9, [sp, #96]
    ldp d10, d11, [sp, #112]
    ldp d12, d13, [sp, #128]
    ldp d14, d15, [sp, #144]
    add sp, sp, #160
    ret
    .size kestrel_simt_switch, .-kestrel_simt_switch
)");
#else
#error "the host stand-in's fibers need x86_64 or aarch64"
#endif

// Bytes of stack a thread (kernels keep small arrays in registers on the GPU; here on the stack).
constexpr std::size_t STACK = 256 * 1024;

struct Barrier;

struct Fiber {
    void *sp = nullptr;
    void *base = nullptr;  // the mapping, a guard page first
    bool done = true;
    unsigned x = 0, y = 0, z = 0, warp = 0;
    unsigned phase = 0;              // which exchange slots the thread's next shuffle uses
    const Barrier *waiting = nullptr;  // the barrier it waits on (resumed once it moves on)
    unsigned waiting_gen = 0;
};

struct State {
    std::vector<Fiber> fibers;  // grown, reused by every CTA and launch
    void *sched_sp = nullptr;
    const void *sched_bottom = nullptr;  // the scheduler's stack, for AddressSanitizer
    std::size_t sched_size = 0;
    unsigned cur = 0;
    bool progress = false;
    const std::function<void()> *body = nullptr;
};
inline State state;

inline void yield() {
#ifdef SIMT_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, state.sched_bottom, state.sched_size);
    kestrel_simt_switch(&state.fibers[state.cur].sp, state.sched_sp);
    __sanitizer_finish_switch_fiber(fake, &state.sched_bottom, &state.sched_size);
#else
    kestrel_simt_switch(&state.fibers[state.cur].sp, state.sched_sp);
#endif
}

// A barrier of `expected` threads (a warp's lanes or a CTA's threads).
struct Barrier {
    int expected = 0, count = 0;
    unsigned gen = 0;
    void reset(int n) {
        expected = n;
        count = 0;
    }
    void arrive_and_wait() {
        const unsigned g = gen;
        state.progress = true;
        if (++count >= expected) {
            count = 0;
            gen++;
            return;
        }
        Fiber &f = state.fibers[state.cur];
        f.waiting = this;
        f.waiting_gen = g;
        yield();  // resumed only once the generation moved on
        state.fibers[state.cur].waiting = nullptr;
    }
    // A thread that exits leaves the barrier: the others no longer wait for it.
    void drop() {
        expected--;
        if (count > 0 && count >= expected) {
            count = 0;
            gen++;
        }
    }
};

}  // namespace simt

// One warp's exchange slots; every lane of a warp that has not exited must reach each shuffle
// (as on the GPU with a full mask).
struct WarpExchange {
    simt::Barrier bar;
    // Shuffles: two sets of slots used in turn, so one barrier a shuffle suffices (a lane
    // writes a set again only after every lane passed the next shuffle's barrier, so after
    // every lane read it).
    float fslot[2][32];
    int ishf[2][32];
    int islot[3][32];  // mma operands (mma.cuh), __match_any_sync
};

namespace simt {
// The calling thread's slot set for its next shuffle (and the turn passed on).
inline unsigned next_phase() {
    unsigned &ph = state.fibers[state.cur].phase;
    const unsigned p = ph;
    ph ^= 1u;
    return p;
}
}  // namespace simt
inline WarpExchange *tl_warp = nullptr;
inline simt::Barrier *tl_block = nullptr;

namespace simt {

struct Cta {
    std::vector<WarpExchange> warps;
    Barrier block;
};
inline Cta cta;

// A fiber's life: run the kernel body for each CTA it is given, then park.
[[noreturn]] inline void entry() {
#ifdef SIMT_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &state.sched_bottom, &state.sched_size);
#endif
    for (;;) {
        (*state.body)();
        Fiber &f = state.fibers[state.cur];
        f.done = true;
        state.progress = true;
        cta.warps[f.warp].bar.drop();
        cta.block.drop();
        yield();
    }
}

inline void grow(std::size_t n) {
    while (state.fibers.size() < n) {
        Fiber f;
        const long page = 4096;
        f.base = mmap(nullptr, STACK + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                      -1, 0);
        if (f.base == MAP_FAILED) {
            std::fprintf(stderr, "simt: no memory for a fiber stack\n");
            std::abort();
        }
        mprotect(f.base, page, PROT_NONE);  // a guard page below the stack
        auto *top = reinterpret_cast<std::uintptr_t *>(static_cast<char *>(f.base) + page + STACK);
#if defined(__x86_64__)
        // As kestrel_simt_switch leaves a stack: six registers, then the return address.
        top[-1] = 0;
        top[-2] = reinterpret_cast<std::uintptr_t>(&entry);
        for (int r = 3; r <= 8; r++) top[-r] = 0;
        f.sp = top - 8;
#else
        // x19..x30 (x30 the return address: `entry`), d8..d15.
        std::uintptr_t *frame = top - 20;
        for (int r = 0; r < 20; r++) frame[r] = 0;
        frame[11] = reinterpret_cast<std::uintptr_t>(&entry);
        f.sp = frame;
#endif
        state.fibers.push_back(f);
    }
}

// Runs one CTA at grid position `b` of `block` threads.
inline void run_cta(Dim3 b, Dim3 block) {
    const unsigned n = block.x * block.y * block.z;
    const unsigned nwarps = (n + 31) / 32;
    if (cta.warps.size() < nwarps) cta.warps.resize(nwarps);
    for (unsigned w = 0; w < nwarps; w++) cta.warps[w].bar.reset((int)std::min(32u, n - 32 * w));
    cta.block.reset((int)n);
    grow(n);
    unsigned x = 0, y = 0, z = 0;
    for (unsigned i = 0; i < n; i++) {
        Fiber &f = state.fibers[i];
        f.done = false;
        f.phase = 0;
        f.waiting = nullptr;
        f.x = x;
        f.y = y;
        f.z = z;
        f.warp = i / 32;
        if (++x == block.x) {
            x = 0;
            if (++y == block.y) {
                y = 0;
                z++;
            }
        }
    }
    blockIdx = b;
    unsigned remaining = n;
    while (remaining > 0) {
        state.progress = false;
        for (unsigned i = 0; i < n; i++) {
            Fiber &f = state.fibers[i];
            if (f.done || (f.waiting && f.waiting->gen == f.waiting_gen)) continue;
            state.cur = i;
            threadIdx = {f.x, f.y, f.z};
            tl_warp = &cta.warps[f.warp];
            tl_block = &cta.block;
#ifdef SIMT_ASAN
            void *fake = nullptr;
            __sanitizer_start_switch_fiber(&fake, static_cast<char *>(f.base) + 4096, STACK);
            kestrel_simt_switch(&state.sched_sp, f.sp);
            __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
            kestrel_simt_switch(&state.sched_sp, f.sp);
#endif
            if (f.done) remaining--;
        }
        if (!state.progress && remaining > 0) {
            std::fprintf(stderr,
                         "simt: deadlock in CTA (%u, %u, %u) of (%u, %u, %u): %u threads wait on a barrier "
                         "the others never reach\n",
                         b.x, b.y, b.z, gridDim.x, gridDim.y, gridDim.z, remaining);
            std::abort();
        }
    }
}

}  // namespace simt

// Runs `kernel` over a grid of (gx, gy, gz) CTAs of (bx, by, bz) threads, one CTA at a time.
inline void launch3(Dim3 grid, Dim3 block, const std::function<void()> &kernel) {
    gridDim = grid;
    blockDim = block;
    simt::state.body = &kernel;
    for (unsigned cz = 0; cz < grid.z; cz++)
        for (unsigned cy = 0; cy < grid.y; cy++)
            for (unsigned cx = 0; cx < grid.x; cx++) simt::run_cta({cx, cy, cz}, block);
}

// A grid of (gx, gy) CTAs of (bx, by) threads.
inline void launch(unsigned gx, unsigned gy, unsigned bx, unsigned by, const std::function<void()> &kernel) {
    launch3({gx, gy, 1}, {bx, by, 1}, kernel);
}
