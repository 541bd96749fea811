"""The repositories lockstep's build needs besides its own, in one macro: the system libraries its BUILD
files name (@eigen, @doctest, @local_cuda, @local_mpi) and, where the WORKSPACE has not declared them,
the offline stand-ins for what Bazel 4 would download (@rules_cc, @rules_java, @remote_coverage_tools,
from third_party/). lockstep's own WORKSPACE calls it, and so does the WORKSPACE of a project that uses
lockstep as an external repository (README, "Use lockstep in your own project"):

    local_repository(name = "lockstep", path = "/path/to/lockstep")
    load("@lockstep//third_party:repositories.bzl", "lockstep_repositories")
    lockstep_repositories()
"""

load("//third_party:cuda_configure.bzl", "cuda_configure")
load("//third_party:mpi_configure.bzl", "mpi_configure")

def _stand_in_impl(ctx):
    # third_party/<dir> of the lockstep checkout this file belongs to, whichever workspace loads it.
    src = ctx.path(Label("//third_party:BUILD")).dirname.get_child(ctx.attr.dir)
    for child in src.readdir():
        ctx.symlink(child, child.basename)

_stand_in = repository_rule(
    implementation = _stand_in_impl,
    attrs = {"dir": attr.string(mandatory = True)},
    local = True,
)

def lockstep_repositories():
    # Offline stand-ins (lockstep's WORKSPACE declares them itself, as local_repository).
    for name in ["rules_cc", "rules_java", "remote_coverage_tools"]:
        if not native.existing_rule(name):
            _stand_in(name = name, dir = name)

    # Debian's packages (tools/bazel installs them): Eigen's and doctest's headers.
    native.new_local_repository(
        name = "eigen",
        path = "/usr/include/eigen3",
        build_file = str(Label("//third_party:eigen.BUILD")),
    )
    native.new_local_repository(
        name = "doctest",
        path = "/usr/include/doctest",
        build_file = str(Label("//third_party:doctest.BUILD")),
    )

    # The CUDA toolkit ($CUDA_PATH, else /usr/local/cuda) and NCCL, where found.
    cuda_configure(name = "local_cuda")

    # Open MPI, where libopenmpi-dev is installed: the mpi process-group backend (distributed/mpi/).
    mpi_configure(name = "local_mpi")
