"""Finds the system CUDA toolkit (runtime, cuBLAS, NCCL, nvcc) for --config=cuda.

Looks at $CUDA_HOME, then /usr/local/cuda. When found, the repository exposes
@local_cuda//:cudart, :cublas, :nccl (headers + shared libraries) and the nvcc
compiler; when not, every target is a library that fails the build with a clear
message, so only --config=cuda builds ever touch it.
"""

_MISSING = """
genrule(
    name = "cuda_missing",
    outs = ["cuda_missing.h"],
    cmd = "echo 'CUDA not found: set CUDA_HOME or install the toolkit under /usr/local/cuda, or build without --config=cuda' >&2; exit 1",
)

[cc_library(name = n, hdrs = [":cuda_missing"]) for n in ["cudart", "cublas", "nccl", "cuda"]]

filegroup(name = "nvcc", srcs = [":cuda_missing"])
filegroup(name = "headers", srcs = [":cuda_missing"])
"""

_FOUND = """
cc_library(
    name = "headers_lib",
    # nv/target (no extension) is included by cuda_fp16.h, hence by cublas_v2.h.
    hdrs = glob(["cuda/include/**/*.h", "cuda/include/**/*.hpp", "cuda/include/**/*.inl",
                 "cuda/include/nv/**"],
                allow_empty = True),
    includes = ["cuda/include"],
)

filegroup(
    name = "headers",
    srcs = glob(["cuda/include/**"]),
)

cc_library(
    name = "cudart",
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-lcudart"],
    deps = [":headers_lib"],
)

cc_library(
    name = "cublas",
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-lcublas", "-lcublasLt"],
    deps = [":cudart"],
)

cc_library(
    name = "nccl",
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-lnccl"],
    deps = [":cudart"],
)

filegroup(
    name = "nvcc",
    srcs = ["cuda/bin/nvcc"],
)
"""

def _cuda_configure_impl(ctx):
    cuda_home = ctx.os.environ.get("CUDA_HOME", "/usr/local/cuda")
    root = ctx.path(cuda_home)
    build = ['package(default_visibility = ["//visibility:public"])']
    if root.exists and root.get_child("bin").get_child("nvcc").exists:
        ctx.symlink(root, "cuda")
        lib = str(root.get_child("lib64"))
        build.append(_FOUND.replace("{lib}", lib))
        ctx.file("cuda_home.txt", cuda_home + "\n")
    else:
        build.append(_MISSING)
    ctx.file("BUILD.bazel", "\n".join(build))
    ctx.file("WORKSPACE", 'workspace(name = "%s")\n' % ctx.name)

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    local = True,
    configure = True,
    environ = ["CUDA_HOME"],
)
