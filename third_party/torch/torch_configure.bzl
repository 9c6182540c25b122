"""Finds Debian's LibTorch (libtorch-dev, 1.13, CPU) for the TorchScript engine.

When /usr/include/torch/script.h and libtorch.so are present, @local_torch//:torch is
a cc_library with LibTorch's headers and libraries and the define
TRIBUTARY_WITH_TORCH=1, and @local_torch//:defs.bzl says TORCH_FOUND = True. When
they are absent the build still works: :torch is empty, TORCH_FOUND is False, the
TorchScript engine is left out (its functions answer UNAVAILABLE saying why), and
the fetch prints that it was left out. Set LIBTORCH_INCLUDE / LIBTORCH_LIB to use
another installation.
"""

_FOUND = """
cc_library(
    name = "torch",
    hdrs = glob(["include_torch_api/**/*.h"]),
    includes = ["include_torch_api"],
    defines = ["TRIBUTARY_WITH_TORCH=1"],
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-ltorch", "-ltorch_cpu", "-lc10"],
)
"""

_MISSING = """
# LibTorch was not found when this repository was configured: no TorchScript engine.
cc_library(name = "torch")
"""

def _torch_configure_impl(ctx):
    include = ctx.os.environ.get("LIBTORCH_INCLUDE", "/usr/include")
    lib = ctx.os.environ.get("LIBTORCH_LIB", "/usr/lib/x86_64-linux-gnu")
    script_h = ctx.path(include + "/torch/script.h")
    api = ctx.path(include + "/torch/csrc/api/include")
    found = script_h.exists and api.exists and ctx.path(lib + "/libtorch.so").exists
    build = ['package(default_visibility = ["//visibility:public"])']
    if found:
        ctx.symlink(api, "include_torch_api")
        build.append(_FOUND.replace("{lib}", lib))
        if include not in ["/usr/include", "/usr/local/include"]:
            # Headers outside the default search path: expose them too.
            ctx.symlink(include, "include_torch")
            build[-1] = build[-1].replace(
                '"include_torch_api"]',
                '"include_torch_api", "include_torch"]',
            )
    else:
        print("LibTorch not found (%s, %s/libtorch.so): building without the TorchScript " %
              (script_h, lib) + "engine. Install libtorch-dev (bash scripts/setup) for it.")
        build.append(_MISSING)
    ctx.file("BUILD.bazel", "\n".join(build))
    ctx.file("defs.bzl", "TORCH_FOUND = %s\n" % ("True" if found else "False"))
    ctx.file("WORKSPACE", 'workspace(name = "%s")\n' % ctx.name)

torch_configure = repository_rule(
    implementation = _torch_configure_impl,
    local = True,
    configure = True,
    environ = ["LIBTORCH_INCLUDE", "LIBTORCH_LIB"],
)
