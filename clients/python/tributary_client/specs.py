"""Job specs from Python values: a dict, a JSON string or a JobSpec message.

A dict or JSON follows the proto3 JSON mapping of tributary.v1.JobSpec (proto/job.proto),
exactly what grpcurl's SubmitJob and `tributary submit --job_json` take: field names in
lowerCamelCase or as written in the .proto, enums by name ("mode": "SYNC"), unset
fields left to the coordinator's defaults.
"""

import json

from google.protobuf import json_format

from ._proto import job_pb2

TORCHSCRIPT = "torchscript"


def job_spec(spec=None):
    """A new tributary.v1.JobSpec from `spec`.

    `spec` may be None (every field takes the coordinator's default), a dict or a JSON
    string in the proto3 JSON mapping, or a JobSpec (copied). Raises ValueError naming
    the field for an unknown field, a wrong type or an unknown enum name, and TypeError
    for anything else. The coordinator validates the values themselves (SubmitJob).
    """
    message = job_pb2.JobSpec()
    if spec is None:
        return message
    if isinstance(spec, job_pb2.JobSpec):
        message.CopyFrom(spec)
        return message
    if isinstance(spec, (str, bytes)):
        try:
            spec = json.loads(spec)
        except ValueError as e:
            raise ValueError("job spec: not valid JSON: %s" % e) from None
        if not isinstance(spec, dict):
            raise ValueError("job spec: the JSON must be an object, got %s"
                             % type(spec).__name__)
    if not isinstance(spec, dict):
        raise TypeError("job spec must be a dict, a JSON string or a tributary.v1.JobSpec, "
                        "got %s" % type(spec).__name__)
    try:
        json_format.ParseDict(spec, message)
    except json_format.ParseError as e:
        raise ValueError("job spec: %s" % e) from None
    return message


def name_model_file(spec, model_file):
    """Makes `spec` (a JobSpec, changed in place) train the uploaded `model_file`.

    `model_file` is what Client.upload_model answered (a ModelFile). The spec's model
    must be unset or already torchscript: a built-in model's fields (layer_sizes,
    conv_channels, input_shape, dropout) do not apply to a TorchScript module, and the
    coordinator refuses them; ValueError here names the conflict first.
    """
    model = spec.model
    if model.name and model.name != TORCHSCRIPT:
        raise ValueError("job spec names model %r and a model file was given: leave "
                         "model.name unset (or \"torchscript\") to train the file" % model.name)
    model.name = TORCHSCRIPT
    model.torchscript.sha256 = model_file.sha256
    model.torchscript.file_name = model_file.file_name
    return spec


def to_dict(message):
    """A v1 message (a Job, a JobSpec, ClusterStatus, ...) as a dict in the proto3 JSON
    mapping with the .proto's field names (64-bit integers become strings, enums
    their names), e.g. to log it or save it as JSON."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True)
