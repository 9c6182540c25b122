"""proto_cc_grpc: C++ protobuf + gRPC stubs from Debian's protoc and grpc_cpp_plugin.

proto_cc_grpc(name = "job", srcs = ["job.proto"], deps = [":tensor_proto"]) makes the
triplet STYLE.md asks for:
  job_proto    the .proto sources (and those of its deps), for other protos to import;
  job_cc_proto the generated messages (job.pb.h);
  job_cc_grpc  the generated services (job.grpc.pb.h), when has_services is True.
Imports are written from the workspace root: import "proto/tensor.proto";
"""

def _strip_proto(path):
    return path[:-len(".proto")]

def proto_cc_grpc(name, srcs, deps = [], has_services = False, visibility = None):
    proto_deps = [d for d in deps if d.endswith("_proto") and not d.endswith("_cc_proto")]
    cc_deps = [d[:-len("_proto")] + "_cc_proto" for d in proto_deps]

    native.filegroup(
        name = name + "_proto",
        srcs = srcs + proto_deps,
        visibility = visibility,
    )

    package = native.package_name()
    prefix = package + "/" if package else ""
    pb_hdrs = [_strip_proto(s) + ".pb.h" for s in srcs]
    pb_srcs = [_strip_proto(s) + ".pb.cc" for s in srcs]
    grpc_hdrs = [_strip_proto(s) + ".grpc.pb.h" for s in srcs] if has_services else []
    grpc_srcs = [_strip_proto(s) + ".grpc.pb.cc" for s in srcs] if has_services else []
    proto_paths = " ".join([prefix + s for s in srcs])

    cmd = ("$(location @system//:bin/protoc) -I. -Iexternal/system/proto_include " +
           "--cpp_out=$(GENDIR) ")
    tools = ["@system//:bin/protoc"]
    if has_services:
        cmd += ("--grpc_out=$(GENDIR) " +
                "--plugin=protoc-gen-grpc=$(location @system//:bin/grpc_cpp_plugin) ")
        tools.append("@system//:bin/grpc_cpp_plugin")
    native.genrule(
        name = name + "_codegen",
        srcs = [name + "_proto", "@system//:well_known_protos"],
        outs = pb_hdrs + pb_srcs + grpc_hdrs + grpc_srcs,
        cmd = cmd + proto_paths,
        tools = tools,
        message = "protoc " + proto_paths,
    )

    native.cc_library(
        name = name + "_cc_proto",
        srcs = pb_srcs,
        hdrs = pb_hdrs,
        deps = cc_deps + ["@system//:protobuf"],
        visibility = visibility,
    )
    if has_services:
        native.cc_library(
            name = name + "_cc_grpc",
            srcs = grpc_srcs,
            hdrs = grpc_hdrs,
            deps = [name + "_cc_proto", "@system//:grpcpp"],
            visibility = visibility,
        )
