// An emulated CUDA device: the driver API and cuBLAS calls kestrel makes through cudarc,
// answered on the host, with kestrel's kernels run by the host stand-in (kernels.cpp). Built by
// `cargo xtask gpu-emu` into a library cudarc finds under the driver's and cuBLAS's names, so
// the CUDA test executables run on a machine without a GPU: they check what the host checks
// cannot (the launch code: argument order, grid shapes, buffer sizes and offsets; the plans,
// graph capture and replay, the scheduler over a device block pool), not speed or the memory
// model.
//
// Device memory is host memory (a device pointer is the host address); work is done when it is
// submitted (one stream order, kernels one at a time). Stricter than a GPU where that helps:
// copies must stay inside one allocation, launches are checked against the device's limits, and
// an allocation, a free, a synchronous copy or a synchronisation while the calling thread
// captures a graph fails the call and the capture, as the driver's capture modes do.
#include "emu.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#define API extern "C" __attribute__((visibility("default")))

namespace {

using CUresult = int;
constexpr CUresult OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, INVALID_DEVICE = 101, INVALID_IMAGE = 200,
                   INVALID_HANDLE = 400, NOT_FOUND = 500, ILLEGAL_STATE = 401, CAPTURE_UNSUPPORTED = 900,
                   CAPTURE_INVALIDATED = 901;

const char *error_name(CUresult e) {
    switch (e) {
    case OK: return "CUDA_SUCCESS";
    case INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
    case INVALID_IMAGE: return "CUDA_ERROR_INVALID_IMAGE";
    case INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
    case ILLEGAL_STATE: return "CUDA_ERROR_ILLEGAL_STATE";
    case NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case CAPTURE_UNSUPPORTED: return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
    case CAPTURE_INVALIDATED: return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED";
    default: return "CUDA_ERROR_UNKNOWN";
    }
}

// The emulated device: an H200's limits and SM count (the plans choose kernels by them), memory
// as `KESTREL_EMU_MEM_GIB` (16 GiB unless set).
constexpr int SMS = 132, MAX_THREADS = 1024, SHARED_DEFAULT = 48 * 1024, SHARED_OPTIN = 232448;

std::size_t total_memory() {
    static const std::size_t total = [] {
        const char *v = std::getenv("KESTREL_EMU_MEM_GIB");
        const long gib = v ? std::atol(v) : 16;
        return (std::size_t)std::max(1L, gib) << 30;
    }();
    return total;
}

bool trace() {
    static const bool on = std::getenv("KESTREL_EMU_TRACE") != nullptr;
    return on;
}

struct Graph {
    std::vector<std::function<void()>> nodes;
};

struct Stream {
    bool capturing = false, invalidated = false;
    int mode = 0;  // CU_STREAM_CAPTURE_MODE_GLOBAL 0, THREAD_LOCAL 1, RELAXED 2
    std::thread::id thread;
    Graph *graph = nullptr;
};

struct Event {
    double t = 0;
};

struct Func {
    const emu::Kernel *kernel;
    int max_dynamic_shared = SHARED_DEFAULT;
};

struct Module {
    std::vector<std::string> entries;
    // One handle a function, as the driver gives (an attribute set through one handle holds
    // for every launch of the function); freed with the module.
    std::map<std::string, Func> funcs;
};

std::mutex mu;  // the allocation map, the streams, and one kernel at a time
std::map<std::uintptr_t, std::size_t> device_allocs, host_allocs;
std::size_t used = 0;
std::vector<Stream *> streams;
Stream default_stream;
int context_token = 1;

double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Stream *stream_of(void *s) { return s ? static_cast<Stream *>(s) : &default_stream; }

// Runs `op` now, or adds it to the graph `s` captures.
void submit(void *s, std::function<void()> op) {
    Stream *st = stream_of(s);
    if (st->capturing) {
        st->graph->nodes.push_back(std::move(op));
        return;
    }
    op();
}

// True (and the capture invalidated) when the calling thread may not make `call` now: a stream
// captures in global mode, or in thread-local mode from this thread.
bool capture_forbids(const char *call) {
    std::lock_guard<std::mutex> g(mu);
    for (Stream *s : streams) {
        if (!s->capturing || s->mode == 2) continue;
        if (s->mode == 1 && s->thread != std::this_thread::get_id()) continue;
        std::fprintf(stderr, "emu: %s while a stream captures a graph (the capture is invalidated)\n", call);
        s->invalidated = true;
        return true;
    }
    return false;
}

// True when [p, p + n) lies inside one device allocation.
bool in_device(std::uintptr_t p, std::size_t n) {
    std::lock_guard<std::mutex> g(mu);
    auto it = device_allocs.upper_bound(p);
    if (it == device_allocs.begin()) return false;
    --it;
    return p >= it->first && p + n <= it->first + it->second;
}

CUresult check_device(const char *call, const char *what, std::uintptr_t p, std::size_t n) {
    if (n == 0 || in_device(p, n)) return OK;
    std::fprintf(stderr, "emu: %s: %s of %zu bytes at %#lx is not inside one device allocation\n", call, what, n,
                 (unsigned long)p);
    return INVALID_VALUE;
}

}  // namespace

// ---- initialisation, devices, contexts ----

API CUresult cuInit(unsigned) { return OK; }
API CUresult cuDriverGetVersion(int *v) {
    *v = 12090;
    return OK;
}
API CUresult cuDeviceGetCount(int *n) {
    *n = 1;
    return OK;
}
API CUresult cuDeviceGet(int *d, int ordinal) {
    if (ordinal != 0) return INVALID_DEVICE;
    *d = 0;
    return OK;
}
API CUresult cuDeviceGetName(char *name, int len, int) {
    std::snprintf(name, (std::size_t)len, "kestrel emulated GPU (host stand-in)");
    return OK;
}
API CUresult cuDeviceTotalMem_v2(std::size_t *bytes, int) {
    *bytes = total_memory();
    return OK;
}
API CUresult cuDeviceGetUuid(unsigned char *uuid, int) {
    std::memset(uuid, 0, 16);
    return OK;
}
API CUresult cuDeviceGetUuid_v2(unsigned char *uuid, int d) { return cuDeviceGetUuid(uuid, d); }
API CUresult cuDeviceGetAttribute(int *v, int attrib, int) {
    switch (attrib) {
    case 1: *v = MAX_THREADS; break;                      // MAX_THREADS_PER_BLOCK
    case 2: case 3: *v = 1024; break;                     // MAX_BLOCK_DIM_X / Y
    case 4: *v = 64; break;                               // MAX_BLOCK_DIM_Z
    case 5: *v = 2147483647; break;                       // MAX_GRID_DIM_X
    case 6: case 7: *v = 65535; break;                    // MAX_GRID_DIM_Y / Z
    case 8: *v = SHARED_DEFAULT; break;                   // MAX_SHARED_MEMORY_PER_BLOCK
    case 10: *v = 32; break;                              // WARP_SIZE
    case 16: *v = SMS; break;                             // MULTIPROCESSOR_COUNT
    case 19: case 41: *v = 1; break;                      // CAN_MAP_HOST_MEMORY, UNIFIED_ADDRESSING
    case 75: *v = 9; break;                               // COMPUTE_CAPABILITY_MAJOR
    case 76: *v = 0; break;                               // COMPUTE_CAPABILITY_MINOR
    case 81: *v = SHARED_OPTIN; break;                    // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
    case 97: *v = SHARED_OPTIN; break;                    // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    case 115: *v = 1; break;                              // MEMORY_POOLS_SUPPORTED: cuMemAllocAsync, as on an H200
    default: *v = 0; break;
    }
    return OK;
}
API CUresult cuDevicePrimaryCtxRetain(void **ctx, int) {
    *ctx = &context_token;
    return OK;
}
API CUresult cuDevicePrimaryCtxRelease_v2(int) { return OK; }
API CUresult cuCtxSetCurrent(void *) { return OK; }
API CUresult cuCtxGetCurrent(void **ctx) {
    *ctx = &context_token;
    return OK;
}
API CUresult cuCtxSynchronize() { return capture_forbids("cuCtxSynchronize") ? CAPTURE_UNSUPPORTED : OK; }
API CUresult cuCtxSetFlags(unsigned) { return OK; }
API CUresult cuGetErrorName(CUresult e, const char **s) {
    *s = error_name(e);
    return OK;
}
API CUresult cuGetErrorString(CUresult e, const char **s) {
    *s = error_name(e);
    return OK;
}

// ---- memory ----

API CUresult cuMemGetInfo_v2(std::size_t *free, std::size_t *total) {
    std::lock_guard<std::mutex> g(mu);
    *total = total_memory();
    *free = total_memory() - std::min(used, total_memory());
    return OK;
}
namespace {

CUresult allocate(std::uintptr_t *p, std::size_t n) {
    if (n == 0) return INVALID_VALUE;  // as cuMemAlloc documents
    std::lock_guard<std::mutex> g(mu);
    if (used + n > total_memory()) return OUT_OF_MEMORY;
    // 256-byte aligned as cuMemAlloc's, and exactly `n` bytes: under AddressSanitizer a kernel
    // reading or writing past an allocation is reported (compute-sanitizer's memcheck here).
    void *m = nullptr;
    if (posix_memalign(&m, 256, n) != 0) return OUT_OF_MEMORY;
    *p = (std::uintptr_t)m;
    device_allocs[*p] = n;
    used += n;
    return OK;
}

CUresult release(std::uintptr_t p) {
    std::lock_guard<std::mutex> g(mu);
    auto it = device_allocs.find(p);
    if (it == device_allocs.end()) return INVALID_VALUE;
    used -= it->second;
    device_allocs.erase(it);
    std::free((void *)p);
    return OK;
}

// A stream-ordered allocation or free inside a capture would become a graph memory node, which
// replays with every launch: kestrel allocates outside captures, so here it is an error.
bool captured_memory_op(void *s, const char *call) {
    if (!stream_of(s)->capturing) return false;
    std::fprintf(stderr, "emu: %s on a capturing stream (a graph memory node; the capture is invalidated)\n", call);
    stream_of(s)->invalidated = true;
    return true;
}

}  // namespace

API CUresult cuMemAlloc_v2(std::uintptr_t *p, std::size_t n) {
    if (capture_forbids("cuMemAlloc")) return CAPTURE_UNSUPPORTED;
    return allocate(p, n);
}
API CUresult cuMemFree_v2(std::uintptr_t p) {
    if (capture_forbids("cuMemFree")) return CAPTURE_UNSUPPORTED;
    return release(p);
}
API CUresult cuMemAllocAsync(std::uintptr_t *p, std::size_t n, void *s) {
    if (captured_memory_op(s, "cuMemAllocAsync")) return CAPTURE_UNSUPPORTED;
    return allocate(p, n);
}
API CUresult cuMemFreeAsync(std::uintptr_t p, void *s) {
    if (captured_memory_op(s, "cuMemFreeAsync")) return CAPTURE_UNSUPPORTED;
    return release(p);
}
API CUresult cuMemHostAlloc(void **p, std::size_t n, unsigned) {
    *p = std::aligned_alloc(4096, (std::max<std::size_t>(n, 1) + 4095) / 4096 * 4096);
    if (!*p) return OUT_OF_MEMORY;
    std::lock_guard<std::mutex> g(mu);
    host_allocs[(std::uintptr_t)*p] = n;
    return OK;
}
API CUresult cuMemFreeHost(void *p) {
    std::lock_guard<std::mutex> g(mu);
    host_allocs.erase((std::uintptr_t)p);
    std::free(p);
    return OK;
}

API CUresult cuMemcpyHtoDAsync_v2(std::uintptr_t dst, const void *src, std::size_t n, void *s) {
    if (CUresult e = check_device("cuMemcpyHtoDAsync", "destination", dst, n)) return e;
    submit(s, [=] { std::memcpy((void *)dst, src, n); });
    return OK;
}
API CUresult cuMemcpyDtoHAsync_v2(void *dst, std::uintptr_t src, std::size_t n, void *s) {
    if (CUresult e = check_device("cuMemcpyDtoHAsync", "source", src, n)) return e;
    submit(s, [=] { std::memcpy(dst, (const void *)src, n); });
    return OK;
}
API CUresult cuMemcpyDtoDAsync_v2(std::uintptr_t dst, std::uintptr_t src, std::size_t n, void *s) {
    if (CUresult e = check_device("cuMemcpyDtoDAsync", "destination", dst, n)) return e;
    if (CUresult e = check_device("cuMemcpyDtoDAsync", "source", src, n)) return e;
    submit(s, [=] { std::memmove((void *)dst, (const void *)src, n); });
    return OK;
}
API CUresult cuMemcpyHtoD_v2(std::uintptr_t dst, const void *src, std::size_t n) {
    if (capture_forbids("cuMemcpyHtoD")) return CAPTURE_UNSUPPORTED;
    return cuMemcpyHtoDAsync_v2(dst, src, n, nullptr);
}
API CUresult cuMemcpyDtoH_v2(void *dst, std::uintptr_t src, std::size_t n) {
    if (capture_forbids("cuMemcpyDtoH")) return CAPTURE_UNSUPPORTED;
    return cuMemcpyDtoHAsync_v2(dst, src, n, nullptr);
}
API CUresult cuMemcpyDtoD_v2(std::uintptr_t dst, std::uintptr_t src, std::size_t n) {
    if (capture_forbids("cuMemcpyDtoD")) return CAPTURE_UNSUPPORTED;
    return cuMemcpyDtoDAsync_v2(dst, src, n, nullptr);
}
API CUresult cuMemsetD8Async(std::uintptr_t dst, unsigned char v, std::size_t n, void *s) {
    if (CUresult e = check_device("cuMemsetD8Async", "destination", dst, n)) return e;
    submit(s, [=] { std::memset((void *)dst, v, n); });
    return OK;
}
API CUresult cuMemsetD8_v2(std::uintptr_t dst, unsigned char v, std::size_t n) {
    if (capture_forbids("cuMemsetD8")) return CAPTURE_UNSUPPORTED;
    return cuMemsetD8Async(dst, v, n, nullptr);
}

// ---- streams, events, graphs ----

API CUresult cuStreamCreate(void **s, unsigned) {
    auto *st = new Stream;
    std::lock_guard<std::mutex> g(mu);
    streams.push_back(st);
    *s = st;
    return OK;
}
API CUresult cuStreamCreateWithPriority(void **s, unsigned flags, int) { return cuStreamCreate(s, flags); }
API CUresult cuStreamDestroy_v2(void *s) {
    std::lock_guard<std::mutex> g(mu);
    streams.erase(std::remove(streams.begin(), streams.end(), static_cast<Stream *>(s)), streams.end());
    delete static_cast<Stream *>(s);
    return OK;
}
API CUresult cuStreamSynchronize(void *) {
    return capture_forbids("cuStreamSynchronize") ? CAPTURE_UNSUPPORTED : OK;
}
API CUresult cuStreamWaitEvent(void *, void *, unsigned) { return OK; }
API CUresult cuStreamQuery(void *) { return OK; }
API CUresult cuStreamBeginCapture_v2(void *s, int mode) {
    Stream *st = stream_of(s);
    if (st->capturing) return ILLEGAL_STATE;
    st->capturing = true;
    st->invalidated = false;
    st->mode = mode;
    st->thread = std::this_thread::get_id();
    st->graph = new Graph;
    return OK;
}
API CUresult cuStreamEndCapture(void *s, void **graph) {
    Stream *st = stream_of(s);
    if (!st->capturing) return ILLEGAL_STATE;
    st->capturing = false;
    if (st->invalidated) {
        delete st->graph;
        st->graph = nullptr;
        *graph = nullptr;
        return CAPTURE_INVALIDATED;
    }
    *graph = st->graph;
    st->graph = nullptr;
    return OK;
}
API CUresult cuStreamIsCapturing(void *s, int *status) {
    Stream *st = stream_of(s);
    *status = st->capturing ? (st->invalidated ? 2 : 1) : 0;
    return OK;
}
API CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long) {
    if (!graph) return INVALID_VALUE;
    *exec = new Graph(*static_cast<Graph *>(graph));
    return OK;
}
API CUresult cuGraphUpload(void *, void *) { return OK; }
API CUresult cuGraphLaunch(void *exec, void *s) {
    if (!exec) return INVALID_HANDLE;
    const Graph *gr = static_cast<Graph *>(exec);
    submit(s, [gr] {
        for (const auto &node : gr->nodes) node();
    });
    return OK;
}
API CUresult cuGraphDestroy(void *g) {
    delete static_cast<Graph *>(g);
    return OK;
}
API CUresult cuGraphExecDestroy(void *g) {
    delete static_cast<Graph *>(g);
    return OK;
}
API CUresult cuEventCreate(void **e, unsigned) {
    *e = new Event;
    return OK;
}
API CUresult cuEventDestroy_v2(void *e) {
    delete static_cast<Event *>(e);
    return OK;
}
API CUresult cuEventRecord(void *e, void *s) {
    auto *ev = static_cast<Event *>(e);
    submit(s, [ev] { ev->t = now(); });
    return OK;
}
API CUresult cuEventSynchronize(void *) { return OK; }
API CUresult cuEventQuery(void *) { return OK; }
API CUresult cuEventElapsedTime(float *ms, void *start, void *end) {
    *ms = (float)((static_cast<Event *>(end)->t - static_cast<Event *>(start)->t) * 1e3);
    return OK;
}
API CUresult cuEventElapsedTime_v2(float *ms, void *start, void *end) { return cuEventElapsedTime(ms, start, end); }
API CUresult cuLaunchHostFunc(void *s, void (*fn)(void *), void *data) {
    submit(s, [fn, data] { fn(data); });
    return OK;
}

// ---- modules and kernels ----

API CUresult cuModuleLoadData(void **module, const void *image) {
    auto m = std::make_unique<Module>();
    const std::string ptx(static_cast<const char *>(image));
    for (std::size_t at = ptx.find(".entry "); at != std::string::npos; at = ptx.find(".entry ", at + 7)) {
        std::size_t b = at + 7, e = b;
        while (e < ptx.size() && (std::isalnum((unsigned char)ptx[e]) || ptx[e] == '_')) e++;
        std::string name = ptx.substr(b, e - b);
        if (!emu::find_kernel(name.c_str())) {
            std::fprintf(stderr, "emu: the PTX entry %s has no host build (rebuild the emulator)\n", name.c_str());
            return INVALID_IMAGE;
        }
        m->entries.push_back(std::move(name));
    }
    *module = m.release();
    return OK;
}
API CUresult cuModuleUnload(void *m) {
    delete static_cast<Module *>(m);
    return OK;
}
API CUresult cuModuleGetFunction(void **f, void *module, const char *name) {
    Module &m = *static_cast<Module *>(module);
    if (std::find(m.entries.begin(), m.entries.end(), name) == m.entries.end()) return NOT_FOUND;
    std::lock_guard<std::mutex> g(mu);
    *f = &m.funcs.try_emplace(name, Func{emu::find_kernel(name)}).first->second;
    return OK;
}
API CUresult cuFuncSetAttribute(void *f, int attrib, int value) {
    if (attrib == 8) {  // MAX_DYNAMIC_SHARED_SIZE_BYTES
        if (value < 0 || value > SHARED_OPTIN) return INVALID_VALUE;
        static_cast<Func *>(f)->max_dynamic_shared = value;
    }
    return OK;
}
API CUresult cuFuncGetAttribute(int *v, int attrib, void *f) {
    switch (attrib) {
    case 0: *v = MAX_THREADS; break;
    case 4: *v = 64; break;
    case 5: case 6: *v = 90; break;
    case 8: *v = static_cast<Func *>(f)->max_dynamic_shared; break;
    default: *v = 0; break;
    }
    return OK;
}
API CUresult cuFuncSetCacheConfig(void *, int) { return OK; }
API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, void *, int block, std::size_t) {
    *n = std::max(1, 2048 / std::max(block, 1));
    return OK;
}

namespace {

CUresult launch(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared,
                void *s, void **params, void **extra, bool programmatic) {
    const Func *fn = static_cast<Func *>(f);
    if (!fn) return INVALID_HANDLE;
    const char *name = fn->kernel->name;
    const unsigned long long threads = (unsigned long long)bx * by * bz;
    const char *bad = nullptr;
    if (extra) bad = "`extra` parameters (unsupported here)";
    else if (!params) bad = "no parameters";
    else if (gx == 0 || gy == 0 || gz == 0 || gy > 65535 || gz > 65535 || gx > 2147483647u) bad = "grid";
    else if (threads == 0 || threads > MAX_THREADS || bx > 1024 || by > 1024 || bz > 64) bad = "block";
    else if ((int)shared > fn->max_dynamic_shared) bad = "dynamic shared memory past the function's limit";
    if (bad) {
        std::fprintf(stderr, "emu: launch of %s rejected: %s (grid %u×%u×%u, block %u×%u×%u, %u shared bytes)\n",
                     name, bad, gx, gy, gz, bx, by, bz, shared);
        return INVALID_VALUE;
    }
    if (trace())
        std::fprintf(stderr, "emu: %s grid %u×%u×%u block %u×%u×%u%s%s\n", name, gx, gy, gz, bx, by, bz,
                     stream_of(s)->capturing ? " (captured)" : "", programmatic ? " (programmatic)" : "");
    auto body = std::make_shared<std::function<void()>>(fn->kernel->bind(params));
    const Dim3 grid{gx, gy, gz}, block{bx, by, bz};
    submit(s, [body, grid, block, shared] {
        static std::mutex run;
        std::lock_guard<std::mutex> g(run);
        emu::run_kernel(*body, grid, block, shared);
    });
    return OK;
}

// cuLaunchKernelEx's CUlaunchConfig and CUlaunchAttribute (cuda.h, 12.x).
struct LaunchAttribute {
    int id;
    char pad[4];
    union {
        char bytes[64];
        int value;
    };
};
struct LaunchConfig {
    unsigned gx, gy, gz, bx, by, bz, shared;
    void *stream;
    LaunchAttribute *attrs;
    unsigned num_attrs;
};
static_assert(sizeof(LaunchAttribute) == 72, "CUlaunchAttribute is 72 bytes");

}  // namespace

API CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                            unsigned shared, void *s, void **params, void **extra) {
    return launch(f, gx, gy, gz, bx, by, bz, shared, s, params, extra, false);
}

// Kernels run one after the other here, so the one attribute kestrel sets, programmatic stream
// serialization (6: the next kernel may start before this one ends), changes nothing but the
// trace; any other attribute is refused rather than ignored.
API CUresult cuLaunchKernelEx(const LaunchConfig *c, void *f, void **params, void **extra) {
    if (!c || (c->num_attrs > 0 && !c->attrs)) return INVALID_VALUE;
    bool programmatic = false;
    for (unsigned i = 0; i < c->num_attrs; i++) {
        if (c->attrs[i].id != 6 || (c->attrs[i].value != 0 && c->attrs[i].value != 1)) {
            std::fprintf(stderr, "emu: cuLaunchKernelEx attribute %d (value %d) is not supported here\n",
                         c->attrs[i].id, c->attrs[i].value);
            return INVALID_VALUE;
        }
        programmatic = programmatic || c->attrs[i].value == 1;
    }
    return launch(f, c->gx, c->gy, c->gz, c->bx, c->by, c->bz, c->shared, c->stream, params, extra, programmatic);
}

// ---- cuBLAS: the GEMM the prefill path calls ----

namespace {

struct Blas {
    void *stream = nullptr;
    // CUBLAS_POINTER_MODE_DEVICE (1): alpha and beta point at device memory, read when the
    // GEMM runs on the stream, not when it is enqueued.
    int pointer_mode = 0;
};

// One operand element as f32: CUDA_R_32F (0), CUDA_R_16F (2), CUDA_R_16BF (14); TF32 inputs
// rounded to 10 mantissa bits (nearest, ties away, as `cvt.rna.tf32.f32`).
float load(const void *p, int type, std::size_t i, bool tf32) {
    float v;
    if (type == 0) {
        v = static_cast<const float *>(p)[i];
    } else {
        const std::uint16_t h = static_cast<const std::uint16_t *>(p)[i];
        std::uint32_t bits;
        if (type == 14) {
            bits = (std::uint32_t)h << 16;
        } else {
            const std::uint32_t s = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023;
            float f = e == 0 ? std::ldexp((float)m, -24)
                             : e == 31 ? (m ? NAN : INFINITY) : std::ldexp((float)(m | 1024), (int)e - 25);
            std::memcpy(&bits, &f, 4);
            bits |= s << 31;
        }
        std::memcpy(&v, &bits, 4);
    }
    if (tf32 && std::isfinite(v)) {
        std::uint32_t bits;
        std::memcpy(&bits, &v, 4);
        bits = (bits + 0x1000u) & ~0x1FFFu;
        std::memcpy(&v, &bits, 4);
    }
    return v;
}

}  // namespace

API int cublasCreate_v2(void **h) {
    *h = new Blas;
    return 0;
}
API int cublasDestroy_v2(void *h) {
    delete static_cast<Blas *>(h);
    return 0;
}
API int cublasSetStream_v2(void *h, void *s) {
    static_cast<Blas *>(h)->stream = s;
    return 0;
}
API int cublasGetStream_v2(void *h, void **s) {
    *s = static_cast<Blas *>(h)->stream;
    return 0;
}
API int cublasSetMathMode(void *, int) { return 0; }
API int cublasSetWorkspace_v2(void *, void *, std::size_t) { return 0; }
API int cublasSetPointerMode_v2(void *h, int mode) {
    if (mode != 0 && mode != 1) return 7;  // CUBLAS_STATUS_INVALID_VALUE
    static_cast<Blas *>(h)->pointer_mode = mode;
    return 0;
}
API int cublasGetPointerMode_v2(void *h, int *mode) {
    *mode = static_cast<Blas *>(h)->pointer_mode;
    return 0;
}

// C = alpha·op(A)·op(B) + beta·C, column-major, f32 output and accumulation (8 partial sums,
// as a GPU's tree differs from a serial sum).
API int cublasGemmEx(void *h, int transa, int transb, int m, int n, int k, const void *alpha, const void *a, int atype,
                     int lda, const void *b, int btype, int ldb, const void *beta, void *c, int ctype, int ldc,
                     int compute, int) {
    if (m < 0 || n < 0 || k < 0 || ctype != 0) return 7;  // CUBLAS_STATUS_INVALID_VALUE
    const bool on_device = static_cast<Blas *>(h)->pointer_mode == 1;
    if (on_device && (check_device("cublasGemmEx", "alpha", (std::uintptr_t)alpha, 4) ||
                      check_device("cublasGemmEx", "beta", (std::uintptr_t)beta, 4)))
        return 7;
    const float *alpha_at = static_cast<const float *>(alpha), *beta_at = static_cast<const float *>(beta);
    const float host_al = on_device ? 0.0f : *alpha_at, host_be = on_device ? 0.0f : *beta_at;
    const bool tf32 = compute == 77;
    const std::size_t a_extent = transa ? (std::size_t)(m - 1) * lda + k : (std::size_t)(k - 1) * lda + m;
    const std::size_t b_extent = transb ? (std::size_t)(k - 1) * ldb + n : (std::size_t)(n - 1) * ldb + k;
    const std::size_t elem_a = atype == 0 ? 4 : 2, elem_b = btype == 0 ? 4 : 2;
    if (m && n && k &&
        (check_device("cublasGemmEx", "A", (std::uintptr_t)a, a_extent * elem_a) ||
         check_device("cublasGemmEx", "B", (std::uintptr_t)b, b_extent * elem_b) ||
         check_device("cublasGemmEx", "C", (std::uintptr_t)c, ((std::size_t)(n - 1) * ldc + m) * 4)))
        return 7;
    submit(static_cast<Blas *>(h)->stream, [=] {
        const float al = on_device ? *alpha_at : host_al, be = on_device ? *beta_at : host_be;
        std::vector<float> ar((std::size_t)m * k), bc((std::size_t)n * k);
        for (int i = 0; i < m; i++)
            for (int l = 0; l < k; l++)
                ar[(std::size_t)i * k + l] =
                    load(a, atype, transa ? (std::size_t)i * lda + l : (std::size_t)l * lda + i, tf32);
        for (int j = 0; j < n; j++)
            for (int l = 0; l < k; l++)
                bc[(std::size_t)j * k + l] =
                    load(b, btype, transb ? (std::size_t)l * ldb + j : (std::size_t)j * ldb + l, tf32);
        float *out = static_cast<float *>(c);
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                const float *x = &ar[(std::size_t)i * k], *y = &bc[(std::size_t)j * k];
                float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                int l = 0;
                for (; l + 8 <= k; l += 8)
                    for (int u = 0; u < 8; u++) acc[u] += x[l + u] * y[l + u];
                for (; l < k; l++) acc[0] += x[l] * y[l];
                const float dot = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
                float &o = out[(std::size_t)j * ldc + i];
                o = be == 0.0f ? al * dot : al * dot + be * o;
            }
    });
    return 0;
}
