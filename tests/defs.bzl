"""Test macros for lockstep's test folders (tests/<layer>/BUILD).

    load("//tests:defs.bzl", "lockstep_sh_test", "lockstep_test")

    lockstep_test(name = "nn_test", deps = ["//nn"])      # nn_test.cpp, small
    lockstep_test(name = "cuda_test", deps = ["//tensor"], cuda = True, emu_devices = 2)
    lockstep_sh_test(name = "gpt_restart_test", args = ["//distributed/launch", "//examples:gpt"])
"""

# What every doctest test links: doctest's main() with the sanitizers' settings, doctest, and the small
# shared helpers (error_of, TempDir, expect_error, RANK_CHECK).
_COMMON_DEPS = [
    "//tests/util:doctest_main",
    "//tests/util:test_util",
    "@doctest",
]

def lockstep_test(name, srcs = None, deps = [], size = "small", cuda = False, emu_devices = None, env = {}, tags = [], **kwargs):
    """A doctest cc_test: NAME.cpp (or srcs) with _COMMON_DEPS added to deps.

    cuda: a GPU test (tag "cuda"): it builds everywhere and skips without a device.
    emu_devices: how many devices the CUDA emulator shows the test under --config=cudaemu
    (LOCKSTEP_CUDA_EMU_TEST_DEVICES, testing/cuda_emu/README.md); the default build ignores it.
    Other arguments (data, args, timeout, flaky, shard_count, ...) go to cc_test unchanged.
    """
    env = dict(env)
    if emu_devices != None:
        env["LOCKSTEP_CUDA_EMU_TEST_DEVICES"] = str(emu_devices)
    native.cc_test(
        name = name,
        size = size,
        srcs = srcs if srcs != None else [name + ".cpp"],
        env = env,
        tags = (["cuda"] if cuda else []) + tags,
        deps = deps + [d for d in _COMMON_DEPS if d not in deps],
        **kwargs
    )

def lockstep_sh_test(name, src = None, args = [], data = [], size = "small", **kwargs):
    """A shell test: NAME.sh (or src) run with the runfiles paths of the labels in args, in order.

    The labels in args are data too, with `data` (files the script finds by its own path).
    """
    native.sh_test(
        name = name,
        size = size,
        srcs = [src if src != None else name + ".sh"],
        args = ["$(rootpath %s)" % a for a in args],
        data = args + [d for d in data if d not in args],
        **kwargs
    )
