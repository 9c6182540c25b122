#!/usr/bin/python3
"""grpcurl for this repository: the subset of fullstorydev/grpcurl's command line that
docs/operations.md uses, over server reflection, with Debian's python3-grpcio and
python3-protobuf (grpcurl itself is not packaged in Debian 12).

    grpcurl -plaintext [-d JSON] [-H 'name: value']... [-max-time SECONDS]
            [-connect-timeout SECONDS] [-emit-defaults] ADDRESS list [SERVICE]
    grpcurl ... ADDRESS describe [SYMBOL]
    grpcurl ... ADDRESS SERVICE/METHOD        (or SERVICE.METHOD)

Nothing is compiled in: `list` asks the server's grpc.reflection.v1alpha service, and a
call fetches the FileDescriptorProtos of its service (and their dependencies), builds a
DescriptorPool, makes the request and response classes from it and converts JSON with
google.protobuf.json_format, as grpcurl does. Output follows grpcurl's: one JSON
document per response message (lowerCamelCase names, 64-bit integers as strings), and
on failure "ERROR:\\n  Code: <Go code name>\\n  Message: ..." on stderr with exit status
64 + the gRPC status code. Errors before the call (bad flags, unknown symbol, bad JSON,
no connection) exit with 1 or 2.

Only -plaintext is supported (TLS flags are refused by name). The reflection messages
come from src/proto/grpc/reflection/v1alpha/reflection_pb2.py, generated from Debian's
grpc-proto by //tools/grpcurl:reflection_pb2 and found beside this file (or at
$GRPCURL_REFLECTION_PB2).

GRPCURL_ADDRESS_MAP="localhost:50051=127.0.0.1:41234,..." rewrites addresses before
dialing, the way `kubectl port-forward` would: tests run the guide's lines, which name
the conventional ports, against a cluster on free ports.
"""

import importlib.util
import json
import os
import signal
import sys

import grpc
from google.protobuf import descriptor
from google.protobuf import descriptor_pb2
from google.protobuf import descriptor_pool
from google.protobuf import json_format
from google.protobuf import message_factory

REFLECTION_METHOD = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
STATUS_CODE_OFFSET = 64  # grpcurl's exit status for a failed RPC: 64 + code.

# Go's codes.Code names, as grpcurl prints them.
GO_CODE_NAMES = {
    0: "OK", 1: "Canceled", 2: "Unknown", 3: "InvalidArgument", 4: "DeadlineExceeded",
    5: "NotFound", 6: "AlreadyExists", 7: "PermissionDenied", 8: "ResourceExhausted",
    9: "FailedPrecondition", 10: "Aborted", 11: "OutOfRange", 12: "Unimplemented",
    13: "Internal", 14: "Unavailable", 15: "DataLoss", 16: "Unauthenticated",
}

USAGE = __doc__.split("\n\n")[1]


class UsageError(Exception):
    """Bad command line: exit 2, as grpcurl does."""


class ToolError(Exception):
    """Failure before or around the RPC (not a gRPC status): exit 1."""


# --- Command line -------------------------------------------------------------------------

class Options:
    def __init__(self):
        self.plaintext = False
        self.data = None
        self.headers = []
        self.max_time = None
        self.connect_timeout = 10.0
        self.emit_defaults = False
        self.positional = []


_VALUE_FLAGS = {"d", "H", "max-time", "connect-timeout"}
_BOOL_FLAGS = {"plaintext", "emit-defaults"}
_REFUSED_FLAGS = {
    "cacert": "TLS is not supported by this grpcurl: use -plaintext",
    "cert": "TLS is not supported by this grpcurl: use -plaintext",
    "key": "TLS is not supported by this grpcurl: use -plaintext",
    "insecure": "TLS is not supported by this grpcurl: use -plaintext",
    "import-path": "no .proto sources here: every service has server reflection",
    "proto": "no .proto sources here: every service has server reflection",
    "protoset": "no protosets here: every service has server reflection",
}


def parse_args(argv):
    """Go's flag rules: flags (-name, --name, -name=value, -name value) before the
    positional arguments; "--" ends the flags."""
    options = Options()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        name = arg.lstrip("-")
        value = None
        if "=" in name:
            name, value = name.split("=", 1)
        if name in _REFUSED_FLAGS:
            raise UsageError("-%s: %s" % (name, _REFUSED_FLAGS[name]))
        if name in _BOOL_FLAGS:
            enabled = value is None or value.lower() in ("1", "t", "true")
            if name == "plaintext":
                options.plaintext = enabled
            else:
                options.emit_defaults = enabled
        elif name in _VALUE_FLAGS:
            if value is None:
                i += 1
                if i >= len(argv):
                    raise UsageError("flag needs an argument: -%s" % name)
                value = argv[i]
            if name == "d":
                options.data = value
            elif name == "H":
                options.headers.append(value)
            else:
                try:
                    seconds = float(value)
                except ValueError:
                    raise UsageError("-%s: %r is not a number of seconds" % (name, value))
                if name == "max-time":
                    options.max_time = seconds
                else:
                    options.connect_timeout = seconds
        else:
            raise UsageError("flag provided but not defined: -%s" % name)
        i += 1
    options.positional = argv[i:]
    if not options.positional:
        raise UsageError("too few arguments")
    if not options.plaintext:
        raise UsageError("this grpcurl speaks plaintext only: add -plaintext")
    return options


def metadata_of(options):
    metadata = []
    for header in options.headers:
        if ":" not in header:
            raise UsageError("-H %r: expected 'name: value'" % header)
        name, value = header.split(":", 1)
        metadata.append((name.strip().lower(), value.strip()))
    return metadata


def mapped_address(address):
    mapping = os.environ.get("GRPCURL_ADDRESS_MAP", "")
    for entry in filter(None, (item.strip() for item in mapping.split(","))):
        source, _, target = entry.partition("=")
        if source == address:
            return target
    return address


# --- Server reflection --------------------------------------------------------------------

def load_reflection_module():
    path = os.environ.get("GRPCURL_REFLECTION_PB2") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "src", "proto", "grpc", "reflection", "v1alpha",
        "reflection_pb2.py")
    if not os.path.exists(path):
        raise ToolError("reflection_pb2.py not found at %s (build //tools/grpcurl)" % path)
    spec = importlib.util.spec_from_file_location("grpcurl_reflection_pb2", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Reflection:
    """A client of grpc.reflection.v1alpha over one channel, one stream per question."""

    def __init__(self, channel, metadata, timeout):
        self.pb2 = load_reflection_module()
        self.metadata = metadata
        self.timeout = timeout
        self.stream = channel.stream_stream(
            REFLECTION_METHOD,
            request_serializer=self.pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=self.pb2.ServerReflectionResponse.FromString)
        self.files = {}  # name -> FileDescriptorProto
        self.pool = descriptor_pool.DescriptorPool()
        self.added = set()

    def ask(self, **request):
        responses = list(self.stream(iter([self.pb2.ServerReflectionRequest(**request)]),
                                     metadata=self.metadata, timeout=self.timeout))
        if len(responses) != 1:
            raise ToolError("server reflection answered %d messages to %s" % (
                len(responses), request))
        response = responses[0]
        if response.HasField("error_response"):
            error = response.error_response
            raise ToolError("server reflection: %s (code %d) for %s" % (
                error.error_message, error.error_code, request))
        return response

    def services(self):
        return sorted(s.name for s in self.ask(list_services="").list_services_response.service)

    def _take_files(self, response):
        for blob in response.file_descriptor_response.file_descriptor_proto:
            proto = descriptor_pb2.FileDescriptorProto.FromString(blob)
            self.files.setdefault(proto.name, proto)

    def _add_file(self, name):
        if name in self.added:
            return
        if name not in self.files:
            self._take_files(self.ask(file_by_filename=name))
            if name not in self.files:
                raise ToolError("server reflection did not send file %s" % name)
        proto = self.files[name]
        for dependency in proto.dependency:
            self._add_file(dependency)
        self.pool.Add(proto)
        self.added.add(name)

    def find_symbol(self, symbol):
        """The descriptor of a fully qualified service, method, message or enum."""
        try:
            return self._lookup(symbol)
        except KeyError:
            pass
        try:
            response = self.ask(file_containing_symbol=symbol)
        except ToolError as error:
            raise ToolError("Symbol not found: %s (%s)" % (symbol, error))
        self._take_files(response)
        for blob in response.file_descriptor_response.file_descriptor_proto:
            self._add_file(descriptor_pb2.FileDescriptorProto.FromString(blob).name)
        try:
            return self._lookup(symbol)
        except KeyError:
            raise ToolError("Symbol not found: %s" % symbol)

    def _lookup(self, symbol):
        for find in (self.pool.FindServiceByName, self.pool.FindMessageTypeByName,
                     self.pool.FindEnumTypeByName):
            try:
                return find(symbol)
            except KeyError:
                pass
        service, _, method = symbol.rpartition(".")
        if service:
            try:
                return self.pool.FindServiceByName(service).methods_by_name[method]
            except KeyError:
                pass
        raise KeyError(symbol)

    def message_class(self, message_descriptor):
        factory = message_factory.MessageFactory(self.pool)
        return factory.GetPrototype(message_descriptor)


# --- describe: descriptors as .proto text -------------------------------------------------

_SCALAR_NAMES = {
    descriptor.FieldDescriptor.TYPE_DOUBLE: "double",
    descriptor.FieldDescriptor.TYPE_FLOAT: "float",
    descriptor.FieldDescriptor.TYPE_INT64: "int64",
    descriptor.FieldDescriptor.TYPE_UINT64: "uint64",
    descriptor.FieldDescriptor.TYPE_INT32: "int32",
    descriptor.FieldDescriptor.TYPE_FIXED64: "fixed64",
    descriptor.FieldDescriptor.TYPE_FIXED32: "fixed32",
    descriptor.FieldDescriptor.TYPE_BOOL: "bool",
    descriptor.FieldDescriptor.TYPE_STRING: "string",
    descriptor.FieldDescriptor.TYPE_BYTES: "bytes",
    descriptor.FieldDescriptor.TYPE_UINT32: "uint32",
    descriptor.FieldDescriptor.TYPE_SFIXED32: "sfixed32",
    descriptor.FieldDescriptor.TYPE_SFIXED64: "sfixed64",
    descriptor.FieldDescriptor.TYPE_SINT32: "sint32",
    descriptor.FieldDescriptor.TYPE_SINT64: "sint64",
}


def _type_name(field):
    if field.message_type is not None:
        return "." + field.message_type.full_name
    if field.enum_type is not None:
        return "." + field.enum_type.full_name
    return _SCALAR_NAMES[field.type]


def _is_map(field):
    return (field.message_type is not None and field.message_type.GetOptions().map_entry
            and field.label == descriptor.FieldDescriptor.LABEL_REPEATED)


def _field_line(field):
    if _is_map(field):
        key, value = (field.message_type.fields_by_name[n] for n in ("key", "value"))
        return "map<%s, %s> %s = %d;" % (_type_name(key), _type_name(value), field.name,
                                         field.number)
    label = "repeated " if field.label == descriptor.FieldDescriptor.LABEL_REPEATED else ""
    return "%s%s %s = %d;" % (label, _type_name(field), field.name, field.number)


def _message_text(message, indent=""):
    lines = ["%smessage %s {" % (indent, message.name)]
    inner = indent + "  "
    in_oneof = {f.name for o in message.oneofs for f in o.fields}
    for field in message.fields:
        if field.name in in_oneof:
            oneof = field.containing_oneof
            if oneof.fields[0] is field or oneof.fields[0].name == field.name:
                lines.append("%soneof %s {" % (inner, oneof.name))
                for member in oneof.fields:
                    lines.append("%s  %s" % (inner, _field_line(member)))
                lines.append("%s}" % inner)
            continue
        lines.append(inner + _field_line(field))
    for nested in message.nested_types:
        if not nested.GetOptions().map_entry:
            lines.extend(_message_text(nested, inner))
    for enum in message.enum_types:
        lines.extend(_enum_text(enum, inner))
    lines.append(indent + "}")
    return lines


def _enum_text(enum, indent=""):
    lines = ["%senum %s {" % (indent, enum.name)]
    for value in enum.values:
        lines.append("%s  %s = %d;" % (indent, value.name, value.number))
    lines.append(indent + "}")
    return lines


def _method_line(method):
    request = ("stream " if _client_streaming(method) else "") + "." + method.input_type.full_name
    response = ("stream " if _server_streaming(method) else "") + "." + \
        method.output_type.full_name
    return "rpc %s ( %s ) returns ( %s );" % (method.name, request, response)


def _client_streaming(method):
    return _method_proto(method).client_streaming


def _server_streaming(method):
    return _method_proto(method).server_streaming


def _method_proto(method):
    proto = descriptor_pb2.MethodDescriptorProto()
    method.CopyToProto(proto)
    return proto


def describe_text(symbol):
    if isinstance(symbol, descriptor.ServiceDescriptor):
        lines = ["%s is a service:" % symbol.full_name, "service %s {" % symbol.name]
        lines += ["  " + _method_line(method) for method in symbol.methods]
        return "\n".join(lines + ["}"])
    if isinstance(symbol, descriptor.MethodDescriptor):
        return "%s is a method:\n%s" % (symbol.full_name, _method_line(symbol))
    if isinstance(symbol, descriptor.Descriptor):
        return "%s is a message:\n%s" % (symbol.full_name, "\n".join(_message_text(symbol)))
    return "%s is an enum:\n%s" % (symbol.full_name, "\n".join(_enum_text(symbol)))


# --- Calls --------------------------------------------------------------------------------

def request_messages(data, request_class, pool):
    """The -d text as request messages: a stream of JSON objects, as grpcurl reads it."""
    if data is None:
        return [request_class()]
    if data == "@":
        data = sys.stdin.read()
    messages = []
    decoder = json.JSONDecoder()
    position = 0
    while True:
        while position < len(data) and data[position].isspace():
            position += 1
        if position >= len(data):
            break
        try:
            document, position = decoder.raw_decode(data, position)
        except json.JSONDecodeError as error:
            raise ToolError("error getting request data: %s" % error)
        message = request_class()
        try:
            json_format.ParseDict(document, message, descriptor_pool=pool)
        except json_format.ParseError as error:
            raise ToolError("error getting request data: %s" % error)
        messages.append(message)
    return messages


def to_json(message, options, pool):
    return json_format.MessageToJson(message, including_default_value_fields=options.emit_defaults,
                                     indent=2, descriptor_pool=pool, ensure_ascii=False)


def invoke(channel, reflection, options, method_name, metadata):
    if "/" in method_name:
        service_name, _, method = method_name.rpartition("/")
    else:
        service_name, _, method = method_name.rpartition(".")
    if not service_name:
        raise UsageError("%r: expected SERVICE/METHOD" % method_name)
    service = reflection.find_symbol(service_name)
    if not isinstance(service, descriptor.ServiceDescriptor):
        raise ToolError("target server does not expose service %r" % service_name)
    if method not in service.methods_by_name:
        raise ToolError("service %r does not include a method named %r" % (service_name, method))
    method_descriptor = service.methods_by_name[method]
    request_class = reflection.message_class(method_descriptor.input_type)
    response_class = reflection.message_class(method_descriptor.output_type)
    requests = request_messages(options.data, request_class, reflection.pool)
    client_streaming = _client_streaming(method_descriptor)
    if not client_streaming and len(requests) != 1:
        raise ToolError("method %r is a unary RPC, but request data contained %d messages" % (
            method_name, len(requests)))
    path = "/%s/%s" % (service.full_name, method)
    kwargs = {"request_serializer": lambda m: m.SerializeToString(),
              "response_deserializer": response_class.FromString}
    call_args = {"metadata": metadata, "timeout": options.max_time}
    if client_streaming and _server_streaming(method_descriptor):
        responses = channel.stream_stream(path, **kwargs)(iter(requests), **call_args)
    elif client_streaming:
        responses = [channel.stream_unary(path, **kwargs)(iter(requests), **call_args)]
    elif _server_streaming(method_descriptor):
        responses = channel.unary_stream(path, **kwargs)(requests[0], **call_args)
    else:
        responses = [channel.unary_unary(path, **kwargs)(requests[0], **call_args)]
    for response in responses:
        print(to_json(response, options, reflection.pool), flush=True)


def run(argv):
    options = parse_args(argv)
    metadata = metadata_of(options)
    address = mapped_address(options.positional[0])
    command = options.positional[1:]
    if not command:
        raise UsageError("too few arguments: expected list, describe or a method")
    channel = grpc.insecure_channel(address)
    try:
        try:
            grpc.channel_ready_future(channel).result(timeout=options.connect_timeout)
        except grpc.FutureTimeoutError:
            raise ToolError("Failed to dial target host %r: not reachable within %gs" % (
                address, options.connect_timeout))
        reflection = Reflection(channel, metadata, options.max_time)
        verb = command[0]
        if verb == "list":
            if len(command) == 1:
                print("\n".join(reflection.services()))
            else:
                service = reflection.find_symbol(command[1])
                if not isinstance(service, descriptor.ServiceDescriptor):
                    raise ToolError("%s is not a service" % command[1])
                print("\n".join(sorted(m.full_name for m in service.methods)))
        elif verb == "describe":
            symbols = command[1:] or reflection.services()
            for name in symbols:
                print(describe_text(reflection.find_symbol(name.lstrip("."))))
        else:
            if len(command) != 1:
                raise UsageError("too many arguments: %s" % " ".join(command))
            invoke(channel, reflection, options, verb, metadata)
    finally:
        channel.close()
    return 0


def main():
    # Like grpcurl (Go) and most command-line tools: a closed pipe (`| grep -q`) ends the
    # process quietly instead of raising BrokenPipeError.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        return run(sys.argv[1:])
    except UsageError as error:
        print("grpcurl: %s\n\nUsage:\n%s" % (error, USAGE), file=sys.stderr)
        return 2
    except ToolError as error:
        print("Failed: %s" % error, file=sys.stderr)
        return 1
    except grpc.RpcError as error:
        code = error.code().value[0]
        print("ERROR:\n  Code: %s\n  Message: %s" % (GO_CODE_NAMES.get(code, code),
                                                    error.details()), file=sys.stderr)
        return STATUS_CODE_OFFSET + code


if __name__ == "__main__":
    sys.exit(main())
