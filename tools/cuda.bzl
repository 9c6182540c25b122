"""cuda_library: compiles .cu files with nvcc into a static library for cc targets.

Used only under --config=cuda (see :cuda_enabled). The .cu files may include
headers of this workspace by their workspace path and the CUDA headers; they are
compiled for the GPU generations Tributary targets (Ampere, Hopper) plus PTX for
newer ones.
"""

NVCC_ARCH_FLAGS = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
]

def cuda_library(name, srcs, hdrs = [], deps = [], nvcc_inputs = [], visibility = None, tags = []):
    """tags go to both targets: tags = ["manual"] keeps `bazel build //...` without
    --config=cuda from running nvcc; a select() on //tools:cuda_enabled pulls it in.
    nvcc_inputs: headers of other packages the .cu files include (exported files)."""
    archive = "lib%s_cu.a" % name
    native.genrule(
        name = name + "_nvcc",
        srcs = srcs + hdrs + nvcc_inputs + ["@local_cuda//:headers"],
        outs = [archive],
        tools = ["@local_cuda//:nvcc"],
        cmd = " ".join([
            "$(location @local_cuda//:nvcc)",
            "--lib",
            "-std=c++17",
            "-O3",
            "-Xcompiler=-fPIC",
            "-I.",
            "-I$(GENDIR)",
        ] + NVCC_ARCH_FLAGS + [
            "-o $@",
        ] + ["$(location %s)" % s for s in srcs]),
        message = "nvcc " + name,
        # nvcc finds cicc, ptxas and its headers relative to itself; a sandbox would hold
        # only the nvcc binary, so it runs where the whole toolkit is reachable.
        tags = tags + ["no-sandbox"],
    )
    native.cc_library(
        name = name,
        srcs = [archive],
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart"],
        alwayslink = True,
        visibility = visibility,
        tags = tags,
    )
