// What every thread the core starts does first.
#pragma once

#include <exception>

namespace gpuprof {

// Sets up this thread's C++ exception state now, while memory is still to be had. libstdc++ keeps
// it in thread-local storage that glibc allocates on first use in each thread (the library is
// loaded with the Python module, so its TLS is dynamic); when that allocation fails, glibc does
// not report it but ends the whole process (exit 127, "cannot allocate memory for thread-local
// data"). Without this, the first exception a new thread throws under memory pressure (the
// std::bad_alloc of an analysis on a node short of memory) ended the training run with it.
// (std::uncaught_exceptions is declared pure: its result is kept, or the call would be dropped.)
inline void prepare_thread_for_exceptions() {
  volatile int in_flight = std::uncaught_exceptions();
  (void)in_flight;
}

}  // namespace gpuprof
