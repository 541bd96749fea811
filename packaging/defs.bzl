"""Rules that turn //:lockstep into an installable library (packaging/BUILD).

whole_archive: the libraries of `deps` re-exported with alwayslink, so that a shared library linked from
them keeps every object: the whole API, not only what some other object happens to reference, and the
static initialisers (backend registration) of every library.

build_info: what a program compiled against the installed headers must know, read off the CcInfo Bazel
computed for `deps`: the LOCKSTEP_* defines the public headers test (LOCKSTEP_WITH_NCCL, ...) and the
system libraries linked in (-lgloo, -lcudart, -lmpi, ...) and the headers a program may include, one
`define X` / `link X` / `header X` a line. The
installer turns it into lockstepConfig.cmake's find_dependency calls and lockstep.pc's flags, so the
two follow what was built (CUDA or not, Open MPI or not) without a second list.
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")

def _whole_archive_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    feature_configuration = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = ctx.disabled_features,
    )
    merged = cc_common.merge_cc_infos(cc_infos = [d[CcInfo] for d in ctx.attr.deps])
    inputs = []
    for li in merged.linking_context.linker_inputs.to_list():
        libs = []
        for lib in li.libraries:
            if lib.alwayslink or not (lib.static_library or lib.pic_static_library):
                libs.append(lib)
                continue
            libs.append(cc_common.create_library_to_link(
                actions = ctx.actions,
                feature_configuration = feature_configuration,
                cc_toolchain = cc_toolchain,
                static_library = lib.static_library,
                pic_static_library = lib.pic_static_library,
                alwayslink = True,
            ))
        inputs.append(cc_common.create_linker_input(
            owner = li.owner,
            libraries = depset(libs),
            user_link_flags = depset(li.user_link_flags),
            additional_inputs = depset(li.additional_inputs),
        ))
    linking_context = cc_common.create_linking_context(linker_inputs = depset(inputs))
    return [CcInfo(compilation_context = merged.compilation_context, linking_context = linking_context)]

whole_archive = rule(
    implementation = _whole_archive_impl,
    attrs = {
        "deps": attr.label_list(providers = [CcInfo]),
        "_cc_toolchain": attr.label(default = Label("@bazel_tools//tools/cpp:current_cc_toolchain")),
    },
    fragments = ["cpp"],
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
)

def _build_info_impl(ctx):
    merged = cc_common.merge_cc_infos(cc_infos = [d[CcInfo] for d in ctx.attr.deps])
    lines = ["version " + ctx.attr.version]
    lines += ["header " + h for h in ctx.attr.entry_headers]
    lines += ["define " + d for d in merged.compilation_context.defines.to_list() if d.startswith("LOCKSTEP_")]
    seen = {}
    for li in merged.linking_context.linker_inputs.to_list():
        for flag in li.user_link_flags:
            if flag not in seen:
                seen[flag] = True
                lines.append("link " + flag)
    out = ctx.actions.declare_file(ctx.label.name + ".txt")
    ctx.actions.write(out, "\n".join(lines) + "\n")
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

build_info = rule(
    implementation = _build_info_impl,
    attrs = {
        "deps": attr.label_list(providers = [CcInfo]),
        "entry_headers": attr.string_list(),
        "version": attr.string(mandatory = True),
    },
)

def _headers_impl(ctx):
    merged = cc_common.merge_cc_infos(cc_infos = [d[CcInfo] for d in ctx.attr.deps])
    hdrs = [
        h
        for h in merged.compilation_context.headers.to_list()
        if h.owner.workspace_name == ctx.label.workspace_name and h.is_source
    ]
    return [DefaultInfo(files = depset(hdrs), runfiles = ctx.runfiles(files = hdrs))]

# headers: every header of this repository that `deps` declare (hdrs and private headers alike); the
# installer copies the ones its entry headers reach.
headers = rule(
    implementation = _headers_impl,
    attrs = {"deps": attr.label_list(providers = [CcInfo])},
)
