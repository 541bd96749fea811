"""Finds Open MPI at fetch time and exposes it as @local_mpi, for the mpi process-group backend
(distributed/mpi/). The include and library folders come from `mpicc --showme:incdirs` and
`--showme:libdirs` ($MPI_HOME/bin/mpicc when MPI_HOME is set, else mpicc on the PATH), else from
$MPI_HOME/include and $MPI_HOME/lib, else from Debian's libopenmpi-dev folders. Where mpi.h or
libmpi.so is not found the repository still exists, with MPI_FOUND = False and an empty target, so
that the workspace builds without MPI (tools/bazel installs libopenmpi-dev)."""

_DEBIAN = "/usr/lib/x86_64-linux-gnu/openmpi"

def _showme(ctx, mpicc, what):
    if not mpicc:
        return []
    r = ctx.execute([str(mpicc), "--showme:" + what])
    if r.return_code != 0:
        return []
    return [d for d in r.stdout.strip().split(" ") if d]

def _mpi_configure_impl(ctx):
    home = ctx.os.environ.get("MPI_HOME", "")
    mpicc = None
    if home and ctx.path(home + "/bin/mpicc").exists:
        mpicc = ctx.path(home + "/bin/mpicc")
    elif not home:
        mpicc = ctx.which("mpicc")
    base = home or _DEBIAN  # where to look when mpicc does not say
    incdirs = _showme(ctx, mpicc, "incdirs") or [base + "/include", base + "/include/openmpi"]
    libdirs = _showme(ctx, mpicc, "libdirs") or [base + "/lib"]
    header = [d for d in incdirs if ctx.path(d + "/mpi.h").exists]
    lib = [d for d in libdirs if ctx.path(d + "/libmpi.so").exists]
    found = len(header) > 0 and len(lib) > 0
    if found:
        # The headers are linked in as include0, include1, ... (Bazel wants them inside the repository);
        # mpi.h includes its siblings (mpi_portable_platform.h) and Open MPI's folder of its own.
        includes = []
        for i, d in enumerate(incdirs):
            if ctx.path(d).exists:
                ctx.symlink(d, "include%d" % i)
                includes.append("include%d" % i)
        linkopts = []
        for d in libdirs:
            linkopts += ["-L" + d, "-Wl,-rpath," + d]  # rpath: binaries run without LD_LIBRARY_PATH
        build = """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "mpi",
    hdrs = glob([{globs}], allow_empty = True),
    includes = {includes},
    # The C API alone: mpi.h would otherwise pull in the removed C++ bindings, whose symbols live in
    # libmpi_cxx and stay undefined in the shared objects of test builds.
    defines = ["OMPI_SKIP_MPICXX", "MPICH_SKIP_MPICXX"],
    linkopts = {linkopts} + ["-lmpi"],
)
""".format(
            globs = ", ".join(['"%s/**/*.h"' % i for i in includes]),
            includes = repr(includes),
            linkopts = repr(linkopts),
        )
    else:
        build = """
package(default_visibility = ["//visibility:public"])
cc_library(name = "mpi")
"""
    ctx.file("BUILD", build)
    ctx.file("defs.bzl", "MPI_FOUND = {f}\nMPI_INCLUDE = {i}\nMPI_LIB = {l}\n".format(
        f = "True" if found else "False",
        i = repr(header[0] if header else ""),
        l = repr(lib[0] if lib else ""),
    ))

mpi_configure = repository_rule(
    implementation = _mpi_configure_impl,
    environ = ["MPI_HOME"],
    local = True,
)
