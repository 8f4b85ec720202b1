// The host stand-in's SIMT engine: a CTA's threads as fibers on one OS thread, switched at
// barriers (warp shuffles, `__syncthreads`); a launch's CTAs shared out among a few OS threads
// (one per core; `KESTREL_SIMT_THREADS=N` sets how many, 1 for one CTA after another). Fibers
// instead of an OS thread per CUDA thread because a shuffle is a barrier of 32 lanes: a switch
// costs nanoseconds where waking an OS thread costs microseconds, so whole models run through
// the kernels (the emulated driver, kernels/host/emu) and the host checks finish in seconds.
//
// Semantics kept from the GPU: a barrier waits for every thread of its warp or CTA that has not
// exited (an exited thread leaves every barrier, as on sm_70+), shared memory is one array a CTA
// (function-local thread_local statics: an OS thread runs one CTA at a time), CTAs of a launch
// run concurrently and in no set order (the atomics are real atomics, `__threadfence` a fence),
// and a CTA whose threads all wait on a barrier none can pass is reported as a deadlock (with
// the grid position) instead of hanging. Not kept: a kernel that waits for another CTA to make
// progress may deadlock (CTAs are not preempted), and the GPU's weaker memory model.
#pragma once
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <new>
#include <mutex>
#include <thread>
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
struct WarpExchange;

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

// Bytes of stack a thread has at least (kernels keep small arrays in registers on the GPU; here
// on the stack).
constexpr std::size_t STACK = 64 * 1024;
constexpr std::size_t PAGE = 4096;
// A fiber's region, aligned to its size (address space only, mapped without reserve): a guard
// page, the stack growing down from the fiber's header, the header, then an unused gap. Code
// running on a fiber finds the header from its stack pointer (no thread_local on the hot path:
// in the emulated driver, a shared library, each costs a call).
constexpr std::size_t REGION = 128 * 1024;
constexpr std::size_t HEADER = 256;  // bytes kept for a header
// The gap: a different page and 64 bytes region by region, so that the headers and stack tops
// every switch touches do not all fall in the same few cache sets.
constexpr std::size_t COLOURS = 15, COLOUR_STEP = PAGE + 64;
static_assert(PAGE + STACK + HEADER + (COLOURS - 1) * COLOUR_STEP <= REGION, "a fiber's region holds its stack");
// Threads a CTA has at most (as on every GPU since sm_20), so warps a CTA has at most.
constexpr unsigned MAX_THREADS = 1024, MAX_WARPS = MAX_THREADS / 32;

struct Barrier;
struct State;

// The running CTA's position and shape (one per OS thread).
struct CtaInfo {
    Dim3 bid, bdim, gdim;
};

// What a fiber's code reads: its coordinates (threadIdx below; blockIdx, blockDim, gridDim
// through `cta`), its warp's exchange slots and its CTA's barrier, the scheduler it belongs to.
// In the fiber's region, next to its stack's top; written only when a launch's block shape
// differs from the last one's (headers lie a page apart: rewriting all of them for every CTA
// touched a page per thread).
struct Fiber {
    Dim3 tid;
    unsigned index = 0;  // in the CTA, in thread order
    unsigned lane = 0;
    WarpExchange *wx = nullptr;
    Barrier *block = nullptr;
    const CtaInfo *cta = nullptr;
    State *os = nullptr;
};

// Where in the region at `base` its header lies (its stack's top).
inline std::uintptr_t header_at(std::uintptr_t base) {
    return base + REGION - HEADER - (base / REGION) % COLOURS * COLOUR_STEP;
}

// The running fiber's header.
inline Fiber *self() {
    std::uintptr_t sp;
#if defined(__x86_64__)
    asm("movq %%rsp, %0" : "=r"(sp));
#else
    asm("mov %0, sp" : "=r"(sp));
#endif
    return reinterpret_cast<Fiber *>(header_at(sp & ~static_cast<std::uintptr_t>(REGION - 1)));
}

// The scheduler's view of a fiber (contiguous, as the scheduler scans them).
struct Slot {
    void *sp = nullptr;
    Fiber *f = nullptr;
    void *base = nullptr;              // the region
    const Barrier *waiting = nullptr;  // the barrier it waits on (resumed once it moves on)
    unsigned waiting_gen = 0;
    unsigned phase = 0;  // which exchange slots the thread's next shuffle uses
    bool done = true;
};

// One OS thread's fibers and scheduler.
struct State {
    Slot *slots = nullptr;  // MAX_THREADS, their regions mapped as first needed
    unsigned mapped = 0;    // slots with a region
    void *sched_sp = nullptr;
    const void *sched_bottom = nullptr;  // the scheduler's stack, for AddressSanitizer
    std::size_t sched_size = 0;
    bool from_sched = false;  // the next switch lands from the scheduler
    unsigned n = 0;           // the running CTA's threads
    unsigned remaining = 0;   // of which not exited
    CtaInfo info;             // the running CTA's
    Dim3 shape;               // the block shape the headers were last written for
    unsigned shaped = 0;      // for how many threads
    const std::function<void()> *body = nullptr;
};
inline thread_local State state;

// A barrier of `expected` threads (a warp's lanes or a CTA's threads).
struct Barrier {
    int expected = 0, count = 0;
    unsigned gen = 0;
    void reset(int n) {
        expected = n;
        count = 0;
    }
    inline void arrive_and_wait();
    // A thread that exits leaves the barrier: the others no longer wait for it.
    void drop() {
        expected--;
        if (count > 0 && count >= expected) {
            count = 0;
            gen++;
        }
    }
};

// A fiber's stack: from above the guard page to its header.
inline std::size_t stack_size(const Slot &s) {
    return reinterpret_cast<std::uintptr_t>(s.f) - (reinterpret_cast<std::uintptr_t>(s.base) + PAGE);
}

// Whether a fiber can run: not exited, and not waiting on a barrier that has not moved on.
inline bool runnable(const Slot &s) { return !s.done && !(s.waiting && s.waiting->gen == s.waiting_gen); }

#ifdef SIMT_ASAN
// After a switch lands: AddressSanitizer's half of it (and the scheduler's stack, the first time
// a fiber is entered from it).
inline void landed(State &os, void *fake) {
    const void *bottom = nullptr;
    std::size_t size = 0;
    __sanitizer_finish_switch_fiber(fake, &bottom, &size);
    if (os.from_sched) {
        os.sched_bottom = bottom;
        os.sched_size = size;
        os.from_sched = false;
    }
}
#endif

// Leaves the running fiber for the next one that can run, in thread order after it (a warp's
// lanes one after another), or for the scheduler when none can: every thread exited, or a
// deadlock.
inline void yield() {
    Fiber *me = self();
    State &os = *me->os;
    const unsigned from = me->index;
    unsigned i = from;
    for (unsigned k = 0; k < os.n; k++) {
        if (++i == os.n) i = 0;
        const Slot &to = os.slots[i];
        if (!runnable(to)) continue;
        if (i == from) return;  // (cannot happen: the caller waits or exited)
#ifdef SIMT_ASAN
        void *fake = nullptr;
        __sanitizer_start_switch_fiber(&fake, static_cast<char *>(to.base) + PAGE, stack_size(to));
        kestrel_simt_switch(&os.slots[from].sp, to.sp);
        landed(os, fake);
#else
        kestrel_simt_switch(&os.slots[from].sp, to.sp);
#endif
        return;
    }
#ifdef SIMT_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, os.sched_bottom, os.sched_size);
    kestrel_simt_switch(&os.slots[from].sp, os.sched_sp);
    landed(os, fake);
#else
    kestrel_simt_switch(&os.slots[from].sp, os.sched_sp);
#endif
}

inline void Barrier::arrive_and_wait() {
    const unsigned g = gen;
    if (++count >= expected) {
        count = 0;
        gen++;
        return;
    }
    Fiber *me = self();
    Slot &s = me->os->slots[me->index];
    s.waiting = this;
    s.waiting_gen = g;
    yield();  // resumed only once the generation moved on
    s.waiting = nullptr;
}

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
    // A butterfly's results for every lane (cuda_fp16.h's `warp_butterfly`), per slot set,
    // computed once by the first lane past the barrier.
    float fout[2][32];
    bool fready[2];
};

// What kernel code reads as CUDA's built-ins, and the stand-in's per-thread exchange: the
// running fiber's.
#define threadIdx (simt::self()->tid)
#define blockIdx (simt::self()->cta->bid)
#define blockDim (simt::self()->cta->bdim)
#define gridDim (simt::self()->cta->gdim)

namespace simt {
// The running thread's warp exchange, its CTA barrier, its lane.
inline WarpExchange &warp() { return *self()->wx; }
inline Barrier &block() { return *self()->block; }
inline int lane() { return (int)self()->lane; }

// The calling thread's slot set for its next shuffle (and the turn passed on).
inline unsigned next_phase() {
    Fiber *me = self();
    unsigned &ph = me->os->slots[me->index].phase;
    const unsigned p = ph;
    ph ^= 1u;
    return p;
}

// The running CTA's barriers and exchange slots (one CTA at a time per OS thread).
struct Cta {
    WarpExchange warps[MAX_WARPS];
    Barrier block;
};
inline thread_local Cta cta;

// A fiber's life: run the kernel body for each CTA it is given, then park.
[[noreturn]] inline void entry() {
#ifdef SIMT_ASAN
    landed(*self()->os, nullptr);
#endif
    for (;;) {
        Fiber *me = self();
        State &os = *me->os;
        (*os.body)();
        os.slots[me->index].done = true;
        os.remaining--;
        me->wx->bar.drop();
        me->block->drop();
        yield();
    }
}

// Maps regions for the first `n` slots of this OS thread.
inline void grow(State &os, unsigned n) {
    if (!os.slots) os.slots = new Slot[MAX_THREADS];  // kept for the thread's life
    while (os.mapped < n) {
        Slot &s = os.slots[os.mapped];
        // Twice the region, then the aligned region kept.
        char *raw = static_cast<char *>(
            mmap(nullptr, 2 * REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
        if (raw == MAP_FAILED) {
            std::fprintf(stderr, "simt: no memory for a fiber stack\n");
            std::abort();
        }
        const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(raw);
        char *base = raw + ((REGION - at % REGION) % REGION);
        if (base > raw) munmap(raw, base - raw);
        if (base + REGION < raw + 2 * REGION) munmap(base + REGION, raw + 2 * REGION - (base + REGION));
        mprotect(base, PAGE, PROT_NONE);  // a guard page below the stack
        const std::uintptr_t h = header_at(reinterpret_cast<std::uintptr_t>(base));
        static_assert(sizeof(Fiber) <= HEADER);
        s.base = base;
        s.f = new (reinterpret_cast<void *>(h)) Fiber{};
        s.f->os = &os;
        auto *top = reinterpret_cast<std::uintptr_t *>(h);
#if defined(__x86_64__)
        // As kestrel_simt_switch leaves a stack: six registers, then the return address.
        top[-1] = 0;
        top[-2] = reinterpret_cast<std::uintptr_t>(&entry);
        for (int r = 3; r <= 8; r++) top[-r] = 0;
        s.sp = top - 8;
#else
        // x19..x30 (x30 the return address: `entry`), d8..d15.
        std::uintptr_t *frame = top - 20;
        for (int r = 0; r < 20; r++) frame[r] = 0;
        frame[11] = reinterpret_cast<std::uintptr_t>(&entry);
        s.sp = frame;
#endif
        os.mapped++;
    }
}

// Runs one CTA at grid position `b` of `block` threads (a grid of `grid`): enters its first
// thread, and is back once no thread can run.
inline void run_cta(Dim3 b, Dim3 block, Dim3 grid) {
    State &os = state;
    Cta &c = cta;
    const unsigned n = block.x * block.y * block.z;  // <= MAX_THREADS (launch3)
    const unsigned nwarps = (n + 31) / 32;
    for (unsigned w = 0; w < nwarps; w++) c.warps[w].bar.reset((int)std::min(32u, n - 32 * w));
    c.block.reset((int)n);
    grow(os, n);
    for (unsigned i = 0; i < n; i++) {
        Slot &s = os.slots[i];
        s.done = false;
        s.waiting = nullptr;
        s.phase = 0;
    }
    os.info = {b, block, grid};
    const Dim3 &sh = os.shape;
    if (sh.x != block.x || sh.y != block.y || sh.z != block.z || os.shaped < n) {
        unsigned x = 0, y = 0, z = 0;
        for (unsigned i = 0; i < n; i++) {
            Fiber &f = *os.slots[i].f;
            f.tid = {x, y, z};
            f.index = i;
            f.lane = i % 32;
            f.wx = &c.warps[i / 32];
            f.block = &c.block;
            f.cta = &os.info;
            if (++x == block.x) {
                x = 0;
                if (++y == block.y) {
                    y = 0;
                    z++;
                }
            }
        }
        os.shape = block;
        os.shaped = n;
    }
    os.n = n;
    os.remaining = n;
#ifdef SIMT_ASAN
    void *fake = nullptr;
    os.from_sched = true;
    __sanitizer_start_switch_fiber(&fake, static_cast<char *>(os.slots[0].base) + PAGE, stack_size(os.slots[0]));
    kestrel_simt_switch(&os.sched_sp, os.slots[0].sp);
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
    kestrel_simt_switch(&os.sched_sp, os.slots[0].sp);
#endif
    if (os.remaining > 0) {
        std::fprintf(stderr,
                     "simt: deadlock in CTA (%u, %u, %u) of (%u, %u, %u): %u threads wait on a barrier "
                     "the others never reach\n",
                     b.x, b.y, b.z, grid.x, grid.y, grid.z, os.remaining);
        std::abort();
    }
}

// One launch, as the OS threads that run it share it: the next CTA to take, in grid order.
struct Launch {
    const std::function<void()> *body;
    Dim3 grid, block;
    unsigned total;
    std::atomic<unsigned> next{0};
};

// Takes CTAs of `l` until none is left.
inline void run_ctas(Launch &l) {
    state.body = l.body;
    for (;;) {
        const unsigned i = l.next.fetch_add(1, std::memory_order_relaxed);
        if (i >= l.total) break;
        const unsigned xy = l.grid.x * l.grid.y;
        run_cta({i % l.grid.x, i % xy / l.grid.x, i / xy}, l.block, l.grid);
    }
}

// OS threads a launch runs on: `KESTREL_SIMT_THREADS`, else one per core (at most 64).
inline unsigned os_threads() {
    static const unsigned n = [] {
        const char *v = std::getenv("KESTREL_SIMT_THREADS");
        const long asked = v ? std::strtol(v, nullptr, 10) : 0;
        const long n = asked > 0 ? asked : (long)std::thread::hardware_concurrency();
        return (unsigned)std::clamp(n, 1L, 64L);
    }();
    return n;
}

// The helper threads (the launching thread is one more): started at the first launch of more
// than one CTA, parked between launches, never stopped (the pool is never destroyed, so no
// thread outlives what it waits on).
struct Pool {
    std::mutex m;
    std::condition_variable wake, idle;
    Launch *job = nullptr;
    unsigned long gen = 0;  // launches handed out
    unsigned busy = 0;      // helpers not done with the current one
    std::vector<std::thread> helpers;
};

inline void helper(Pool *p) {
    unsigned long seen = 0;
    for (;;) {
        Launch *job;
        {
            std::unique_lock<std::mutex> lk(p->m);
            p->wake.wait(lk, [&] { return p->gen != seen; });
            seen = p->gen;
            job = p->job;
        }
        run_ctas(*job);
        std::lock_guard<std::mutex> lk(p->m);
        if (--p->busy == 0) p->idle.notify_all();
    }
}

}  // namespace simt

// Runs `kernel` over a grid of (gx, gy, gz) CTAs of (bx, by, bz) threads, the CTAs shared out
// among `simt::os_threads()` OS threads; returns when every CTA has finished. One launch at a
// time (a second waits).
inline void launch3(Dim3 grid, Dim3 block, const std::function<void()> &kernel) {
    static std::mutex one_at_a_time;
    std::lock_guard<std::mutex> g(one_at_a_time);
    const unsigned threads = block.x * block.y * block.z;
    if (threads == 0 || threads > simt::MAX_THREADS) {
        std::fprintf(stderr, "simt: a CTA of %u threads (1 to %u)\n", threads, simt::MAX_THREADS);
        std::abort();
    }
    simt::Launch l{&kernel, grid, block, grid.x * grid.y * grid.z};
    const unsigned helpers = std::min(simt::os_threads(), l.total) - (l.total > 0);
    if (helpers == 0) {
        simt::run_ctas(l);
        return;
    }
    static simt::Pool *pool = new simt::Pool;
    {
        std::lock_guard<std::mutex> lk(pool->m);
        while (pool->helpers.size() < simt::os_threads() - 1) pool->helpers.emplace_back(simt::helper, pool);
        pool->job = &l;
        pool->gen++;
        pool->busy = (unsigned)pool->helpers.size();
    }
    pool->wake.notify_all();
    simt::run_ctas(l);
    std::unique_lock<std::mutex> lk(pool->m);
    pool->idle.wait(lk, [&] { return pool->busy == 0; });
}

// A grid of (gx, gy) CTAs of (bx, by) threads.
inline void launch(unsigned gx, unsigned gy, unsigned bx, unsigned by, const std::function<void()> &kernel) {
    launch3({gx, gy, 1}, {bx, by, 1}, kernel);
}
