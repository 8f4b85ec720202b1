// What the emulated driver (driver.cpp) and the host-built kernels (kernels.cpp) share.
#pragma once
#include <cstddef>
#include <functional>

#ifndef KESTREL_HOST_STANDIN
struct Dim3 {
    unsigned x = 0, y = 0, z = 0;
};
#endif

namespace emu {

// One kernel: its PTX entry name and how to bind a launch's parameters to its body.
struct Kernel {
    const char *name;
    std::function<void()> (*bind)(void **params);
};

// The kernel named `name`, or null.
const Kernel *find_kernel(const char *name);

// Runs `body` over `grid` CTAs of `block` threads (fibers), the CTAs shared out among the
// stand-in's OS threads (simt.h), each CTA's dynamic shared memory `shared` bytes (past them an
// inaccessible page); returns when all have finished. One launch at a time.
void run_kernel(const std::function<void()> &body, Dim3 grid, Dim3 block, unsigned shared);

}  // namespace emu
