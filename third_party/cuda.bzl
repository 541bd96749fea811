"""cuda_library: a cc_library whose .cu sources are compiled by nvcc.

    cuda_library(name = "kernels", srcs = ["a.cu", "b.cpp"], hdrs = ["k.h"], deps = ["//tensor:tensor_core"])

.cu files go through nvcc (one object per file, for sm_80 and sm_90 plus compute_90 PTX); everything else
in srcs, hdrs and deps is an ordinary cc_library, which also links the objects and @local_cuda//:cudart.
nvcc sees the include paths, defines and headers of `deps`, so .cu files include lockstep headers as any
source does ("tensor/tensor.h"). Where the toolkit is missing (CUDA_FOUND False) the target is tagged
manual and is never built: depend on it only under a select (see //tensor:tensor).

Each cuda_library NAME also has a twin, NAME_emu: the same sources compiled by the host compiler against
the CUDA emulator (//testing/cuda_emu), whose kernels run on the CPU. It needs no toolkit, is tagged
manual, and is what --config=cudaemu links (see //tensor:tensor).
"""

load("@local_cuda//:defs.bzl", "CUDA_FOUND", "NVCC")

NVCC_FLAGS = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
    "-O3",
    "-std=c++20",
    "-DNDEBUG",
    "-Xcompiler=-fPIC,-Wall,-Wextra,-Wno-unused-parameter",
    # Host code runs on the same x86-64-v3 baseline as the rest of the build (see .bazelrc).
    "-Xcompiler=-march=x86-64-v3",
]

def _cuda_objects_impl(ctx):
    cc = cc_common.merge_cc_infos(cc_infos = [d[CcInfo] for d in ctx.attr.deps]).compilation_context
    args = list(NVCC_FLAGS) + ctx.attr.copts
    args += ["-I.", "-I" + ctx.bin_dir.path]
    args += ["-I" + p for p in cc.includes.to_list()]
    args += ["-I" + p for p in cc.quote_includes.to_list()]  # nvcc has no -iquote
    for p in cc.system_includes.to_list():
        args += ["-isystem", p]
    args += ["-D" + d for d in cc.defines.to_list()]
    inputs = depset(ctx.files.hdrs, transitive = [cc.headers])
    outs = []
    for src in ctx.files.srcs:
        stem = "_nvcc/{}/{}".format(ctx.label.name, src.basename[:-len(".cu")])
        # Position-independent (-fPIC), so one object serves shared libraries and binaries alike.
        obj = ctx.actions.declare_file(stem + ".o")
        ctx.actions.run(
            executable = NVCC,
            arguments = args + ["-c", src.path, "-o", obj.path],
            inputs = depset([src], transitive = [inputs]),
            outputs = [obj],
            mnemonic = "Nvcc",
            progress_message = "nvcc " + src.short_path,
            use_default_shell_env = True,
        )
        outs.append(obj)
    return [DefaultInfo(files = depset(outs))]

_cuda_objects = rule(
    implementation = _cuda_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = True),
        "deps": attr.label_list(providers = [CcInfo]),
        "copts": attr.string_list(),
    },
)

def _emu_twin(name, cu, cuh, others, hdrs, deps, tags, kwargs):
    # Each .cu becomes a .cc that includes <cuda_runtime.h> first, as nvcc does implicitly, then the
    # source under a #line directive, so messages and debuggers name the real file.
    copies = []
    for src in cu:
        out = "_emu/{}/{}.cc".format(name, src[:-len(".cu")])
        native.genrule(
            name = "{}_emu_{}".format(name, src[:-len(".cu")].replace("/", "_")),
            srcs = [src],
            outs = [out],
            cmd = "(echo '#include <cuda_runtime.h>'; echo '#line 1 \"$<\"'; cat $<) > $@",
            tags = ["manual"],
            visibility = ["//visibility:private"],
        )
        copies.append(out)
    native.cc_library(
        name = name + "_emu",
        srcs = others + copies,
        hdrs = hdrs,
        textual_hdrs = cuh,
        deps = [d for d in deps if not d.startswith("@local_cuda")] + ["//testing/cuda_emu"],
        tags = tags + ["manual"],
        **kwargs
    )

def cuda_library(name, srcs = [], hdrs = [], deps = [], nvcc_copts = [], tags = [], **kwargs):
    """A cc_library with .cu sources compiled by nvcc; other arguments go to cc_library."""
    cu = [s for s in srcs if s.endswith(".cu")]
    cuh = [s for s in srcs if s.endswith(".cuh")]  # device headers: nvcc only
    others = [s for s in srcs if not s.endswith(".cu") and not s.endswith(".cuh")]
    _emu_twin(name, cu, cuh, others, hdrs, deps, tags, kwargs)
    tags = tags + ([] if CUDA_FOUND else ["manual"])
    if cu:
        _cuda_objects(
            name = name + "_nvcc",
            srcs = cu,
            hdrs = hdrs + cuh + [h for h in others if h.endswith(".h")],
            deps = deps + ["@local_cuda//:cuda_headers"],
            copts = nvcc_copts,
            tags = tags,
            visibility = ["//visibility:private"],
        )
        others = others + [":" + name + "_nvcc"]
    native.cc_library(
        name = name,
        srcs = others,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart"],
        tags = tags,
        **kwargs
    )
