"""Finds the CUDA toolkit at fetch time ($CUDA_PATH, else /usr/local/cuda) and exposes it as
@local_cuda. Where no toolkit is found the repository still exists, with CUDA_FOUND = False and empty
targets, so that the whole workspace builds CPU-only."""

def _cuda_configure_impl(ctx):
    path = ctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    nvcc = ctx.path(path + "/bin/nvcc")
    found = nvcc.exists and ctx.path(path + "/include/cuda_runtime.h").exists
    has_nccl = found and ctx.path(path + "/include/nccl.h").exists
    libdir = path + "/lib64"
    if found:
        ctx.symlink(path + "/include", "include")
        build = """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "cuda_headers",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.cuh", "include/**/*.inl"],
                exclude = ["include/**/thrust/**", "include/**/cub/**"], allow_empty = True),
    includes = ["include"],
)

# The library path is baked in (rpath) so binaries run without LD_LIBRARY_PATH.
cc_library(
    name = "cudart",
    deps = [":cuda_headers"],
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-lcudart", "-ldl", "-lrt", "-pthread"],
)

# cuBLAS's headers only: lockstep loads the library itself on the first GPU matmul
# (tensor/cuda/cublas_api.cpp), from LOCKSTEP_CUDA_LIB_DIR where the loader's search does not find it.
cc_library(
    name = "cublas",
    hdrs = ["lockstep_cuda_paths.h"],
    includes = ["."],
    deps = [":cudart"],
    linkopts = ["-ldl"],
)

cc_library(
    name = "nccl",
    deps = [":cudart"],
    linkopts = {nccl_opts},
)
""".format(lib = libdir, nccl_opts = '["-L{lib}", "-Wl,-rpath,{lib}", "-lnccl"]'.format(lib = libdir) if has_nccl else "[]")
    else:
        build = """
package(default_visibility = ["//visibility:public"])
cc_library(name = "cuda_headers")
cc_library(name = "cudart")
cc_library(name = "cublas")
cc_library(name = "nccl")
"""
    ctx.file("BUILD", build)
    ctx.file("lockstep_cuda_paths.h", "#pragma once\n#define LOCKSTEP_CUDA_LIB_DIR \"{}\"\n".format(libdir))
    ctx.file("defs.bzl", "CUDA_FOUND = {f}\nNCCL_FOUND = {n}\nCUDA_PATH = \"{p}\"\nNVCC = \"{p}/bin/nvcc\"\n".format(
        f = "True" if found else "False",
        n = "True" if has_nccl else "False",
        p = path,
    ))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH"],
    local = True,
)
