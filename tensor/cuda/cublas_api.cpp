// Loading cuBLAS on first use (cublas_api.h says why).
#include "tensor/cuda/cublas_api.h"

#include <dlfcn.h>

#include <atomic>
#include <string>

#include "common/check.h"

#ifndef LOCKSTEP_CUDA_EMU
#include "lockstep_cuda_paths.h"  // LOCKSTEP_CUDA_LIB_DIR: the toolkit's libraries, found at configure time
#endif

namespace lockstep::cuda::detail {
namespace {

std::atomic<bool> loaded{false};

#define LOCKSTEP_STRINGIFY_(x) #x
#define LOCKSTEP_STRINGIFY(x) LOCKSTEP_STRINGIFY_(x)

#ifdef LOCKSTEP_CUDA_EMU

CublasApi load() {
  CublasApi api;
#define LOCKSTEP_CUBLAS_LINKED(f, type) api.f = static_cast<type>(&::f);
  LOCKSTEP_CUBLAS_FUNCTIONS(LOCKSTEP_CUBLAS_LINKED)
#undef LOCKSTEP_CUBLAS_LINKED
  return api;
}

#else

// The library by its soname first, so LD_LIBRARY_PATH and the loader's cache decide as they would for a
// linked library; then the toolkit lockstep was built against. libcublasLt comes from libcublas's own
// directory ($ORIGIN in its run path).
void* open_cublas() {
  const std::string soname = "libcublas.so." LOCKSTEP_STRINGIFY(CUBLAS_VER_MAJOR);
  if (void* h = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  const std::string first_error = dlerror();
  const std::string path = std::string(LOCKSTEP_CUDA_LIB_DIR) + "/" + soname;
  if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  fail("cuBLAS: cannot load ", soname, " (", first_error, "; ", dlerror(),
       "): lockstep's CUDA matmuls need the CUDA toolkit's cuBLAS; put its lib directory on LD_LIBRARY_PATH");
}

CublasApi load() {
  void* h = open_cublas();
  CublasApi api;
#define LOCKSTEP_CUBLAS_LOOKUP(f, type)                                                                  \
  api.f = reinterpret_cast<type>(dlsym(h, LOCKSTEP_STRINGIFY(f)));                                       \
  LOCKSTEP_CHECK(api.f != nullptr, "cuBLAS: libcublas.so." LOCKSTEP_STRINGIFY(CUBLAS_VER_MAJOR) " has no ", \
                 LOCKSTEP_STRINGIFY(f), " (a cuBLAS older than the toolkit lockstep was built with?)");
  LOCKSTEP_CUBLAS_FUNCTIONS(LOCKSTEP_CUBLAS_LOOKUP)
#undef LOCKSTEP_CUBLAS_LOOKUP
  return api;  // the library stays loaded for the life of the process
}

#endif

}  // namespace

const CublasApi& cublas_api() {
  static const CublasApi api = [] {
    CublasApi a = load();
    loaded = true;
    return a;
  }();
  return api;
}

bool cublas_loaded() { return loaded; }

}  // namespace lockstep::cuda::detail
