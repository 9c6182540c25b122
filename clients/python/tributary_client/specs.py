"""Job specs from Python values: a dict, a JSON string or a JobSpec message.

A dict or JSON follows the proto3 JSON mapping of tributary.v1.JobSpec (proto/job.proto),
exactly what grpcurl's SubmitJob and `tributary submit --job_json` take: field names in
lowerCamelCase or as written in the .proto, enums by name ("mode": "SYNC"), unset
fields left to the coordinator's defaults.

A dict may also use the job flags of `tributary local` / `tributary submit` by their
names and with their values (CLI_NAMES lists them): {"train_npy": "x.npy",
"train_labels_npy": "y.npy", "dataset": "npy", "batch": 128, "lr": 0.01,
"mode": "local_sgd"}. The two kinds mix; a flag and the field it sets may not both be
given. Unlike the CLI, fields left out take the coordinator's defaults, not the flags'.
"""

import copy
import json

from google.protobuf import json_format

from ._proto import job_pb2

TORCHSCRIPT = "torchscript"


def _sizes(flag):
    def convert(value):
        if isinstance(value, str):
            parts = [p for p in value.split(",") if p.strip()]
        elif isinstance(value, (list, tuple)):
            parts = list(value)
        else:
            raise ValueError("%s: expected sizes as \"784,256,10\" or a list, got %r"
                             % (flag, value))
        try:
            sizes = [int(p) for p in parts]
        except (TypeError, ValueError):
            raise ValueError("%s: expected positive integers, got %r" % (flag, value)) from None
        if not sizes or any(size <= 0 for size in sizes):
            raise ValueError("%s: expected positive integers, got %r" % (flag, value))
        return sizes
    return convert


def _choice(flag, choices):
    def convert(value):
        if not isinstance(value, str) or value.lower() not in choices:
            raise ValueError("%s: expected one of %s, got %r"
                             % (flag, ", ".join(choices), value))
        return choices[value.lower()]
    return convert


def _same(value):
    return value


_FORMATS = {"idx": "IDX", "csv": "CSV", "npy": "NPY", "tokens": "TOKENS",
            "synthetic": "SYNTHETIC"}
_OPTIMIZERS = {"sgd": "SGD", "momentum": "MOMENTUM", "adam": "ADAM", "adamw": "ADAMW"}
_SCHEDULES = {"constant": "CONSTANT", "step": "STEP", "cosine": "COSINE"}
_MODES = {"sync": "SYNC", "async": "ASYNC", "bounded": "BOUNDED_STALENESS",
          "local_sgd": "LOCAL_SGD"}
_DEVICES = {"auto": "AUTO", "cpu": "CPU", "gpu": "GPU"}
_DTYPES = {"float32": "FLOAT32", "float16": "FLOAT16", "bfloat16": "BFLOAT16"}
_CUTS = {"auto": "CUT_AUTO", "even": "CUT_EVEN", "layers": "CUT_LAYERS"}

# The job flags of `tributary local` and `tributary submit` (docs/cli.md), each with the
# JobSpec field it sets (its path in the proto3 JSON mapping) and how its value becomes
# that field's: the flag's own value, as on the command line.
CLI_NAMES = {
    "job_name": ("name", _same),
    "model": ("model.name", _choice("model", {"logreg": "logreg", "mlp": "mlp", "cnn": "cnn",
                                              TORCHSCRIPT: TORCHSCRIPT})),
    "layers": ("model.layerSizes", _sizes("layers")),
    "conv_channels": ("model.convChannels", _sizes("conv_channels")),
    "input_shape": ("model.inputShape", _sizes("input_shape")),
    "dropout": ("model.dropout", _same),
    "dataset": ("dataset.format", _choice("dataset", _FORMATS)),
    "data_dir": ("dataset.directory", _same),
    "train_csv": ("dataset.trainPath", _same),
    "test_csv": ("dataset.testPath", _same),
    "train_npy": ("dataset.trainPath", _same),
    "train_labels_npy": ("dataset.trainLabelsPath", _same),
    "test_npy": ("dataset.testPath", _same),
    "test_labels_npy": ("dataset.testLabelsPath", _same),
    "train_tokens": ("dataset.trainPath", _same),
    "test_tokens": ("dataset.testPath", _same),
    "seq_len": ("dataset.seqLen", _same),
    "label_column": ("dataset.labelColumn", _same),
    "csv_header": ("dataset.csvHasHeader", _same),
    "train_limit": ("dataset.trainLimit", _same),
    "test_limit": ("dataset.testLimit", _same),
    "synthetic_train": ("dataset.syntheticTrainSamples", _same),
    "synthetic_test": ("dataset.syntheticTestSamples", _same),
    "synthetic_features": ("dataset.syntheticFeatures", _same),
    "synthetic_classes": ("dataset.syntheticClasses", _same),
    "normalize": ("dataset.normalize", _same),
    "batch": ("globalBatchSize", _same),
    "epochs": ("epochs", _same),
    "max_steps": ("maxSteps", _same),
    "eval_interval": ("evalIntervalSteps", _same),
    "eval_samples": ("evalSamples", _same),
    "seed": ("seed", _same),
    "optimizer": ("optimizer.type", _choice("optimizer", _OPTIMIZERS)),
    "lr": ("optimizer.learningRate", _same),
    "momentum": ("optimizer.momentum", _same),
    "nesterov": ("optimizer.nesterov", _same),
    "beta1": ("optimizer.beta1", _same),
    "beta2": ("optimizer.beta2", _same),
    "epsilon": ("optimizer.epsilon", _same),
    "weight_decay": ("optimizer.weightDecay", _same),
    "lr_schedule": ("optimizer.schedule.kind", _choice("lr_schedule", _SCHEDULES)),
    "lr_step_size": ("optimizer.schedule.stepSize", _same),
    "lr_gamma": ("optimizer.schedule.gamma", _same),
    "min_lr": ("optimizer.schedule.minLr", _same),
    "warmup_steps": ("optimizer.schedule.warmupSteps", _same),
    "mode": ("mode", _choice("mode", _MODES)),
    "staleness": ("staleness", _same),
    "sync_every": ("syncEvery", _same),
    "outer_optimizer": ("outerOptimizer.type",
                        _choice("outer_optimizer", {"sgd": "SGD", "momentum": "MOMENTUM"})),
    "outer_lr": ("outerOptimizer.learningRate", _same),
    "outer_momentum": ("outerOptimizer.momentum", _same),
    "outer_nesterov": ("outerOptimizer.nesterov", _same),
    "nodes_min": ("nodesMin", _same),
    "nodes_max": ("nodesMax", _same),
    "replicas": ("replicasPerWorker", _same),
    "job_devices": ("devices", _choice("job_devices", _DEVICES)),
    "partition_bytes": ("partitionBytes", _same),
    "partition_cut": ("partitionCut", _choice("partition_cut", _CUTS)),
    "wire_dtype": ("wireDtype", _choice("wire_dtype", _DTYPES)),
    "checkpoint_dir": ("checkpointDir", _same),
    "checkpoint_interval": ("checkpointIntervalSteps", _same),
    "pending_timeout": ("pendingTimeoutSeconds", _same),
    "resume": ("resumeFrom", _same),
    "init_from": ("initFrom", _same),
}

# Flags of the CLI that name no field: what to do instead.
_NOT_FIELDS = {
    "model_file": "pass the file to submit_job(spec, model=PATH), which uploads it and "
                  "names it in the spec (or upload it with Client.upload_model and pass "
                  "the ModelFile it answers as model=)",
    "job_json": "pass the JSON itself (a str) or its parsed dict",
}

# Names a flag and a JobSpec field share. Their value says which is meant: the flag's
# lower-case choices and strings ("mode": "local_sgd", "model": "mlp") are the flag's;
# the proto3 JSON mapping's values ("mode": "LOCAL_SGD", "model": {...}) the field's.
# Where both mean the same ("epochs": 3) the JSON mapping takes it.
_SHARED = {"model", "dataset", "optimizer", "outer_optimizer", "mode", "wire_dtype",
           "epochs", "max_steps", "eval_samples", "seed", "staleness", "sync_every", "nodes_min",
           "nodes_max", "partition_bytes", "partition_cut", "checkpoint_dir", "init_from"}


def _is_flag(key, value):
    if key not in CLI_NAMES:
        return False
    if key not in _SHARED:
        return True
    if key in ("model", "dataset", "optimizer", "outer_optimizer"):
        return isinstance(value, str)
    if key in ("mode", "wire_dtype", "partition_cut"):
        return isinstance(value, str) and value != value.upper()
    return False  # The same value either way: left to the JSON mapping.


# Each data format's own flags, refused with another format as the CLI refuses them.
_FORMAT_FLAGS = {
    "NPY": ("train_npy", "train_labels_npy", "test_npy", "test_labels_npy"),
    "TOKENS": ("train_tokens", "test_tokens", "seq_len"),
    "CSV": ("train_csv", "test_csv"),
}


def _from_flags(spec):
    """A copy of `spec` with its CLI flag names turned into the JobSpec fields they set
    (the caller's dicts are left as they are)."""
    spec = copy.deepcopy(spec)
    fields, flags = {}, {}
    for key, value in spec.items():
        if key in _NOT_FIELDS:
            raise ValueError("job spec: %r is a flag of the CLI that names no JobSpec field: %s"
                             % (key, _NOT_FIELDS[key]))
        if _is_flag(key, value):
            flags[key] = value
        else:
            fields[key] = value
    set_by = {}
    for flag, value in flags.items():
        path, convert = CLI_NAMES[flag]
        *parents, leaf = path.split(".")
        node = fields
        where = []
        for parent in parents:
            where.append(parent)
            given = node.get(parent, node.get(_snake(parent)))
            if given is None:
                given = node[parent] = {}
            elif not isinstance(given, dict):
                raise ValueError("job spec: %r (the flag) sets %s, but %r is given as %r"
                                 % (flag, path, ".".join(where), given))
            node = given
        if path in set_by:
            raise ValueError("job spec: %r and %r both set %s: give one"
                             % (set_by[path], flag, path))
        for name in (leaf, _snake(leaf)):
            if name in node:
                raise ValueError("job spec: %r (the flag) and %r (the field) both set %s: give one"
                                 % (flag, ".".join(parents + [name]), path))
        set_by[path] = flag
        node[leaf] = convert(value)
    dataset = fields.get("dataset")
    given = dataset.get("format") if isinstance(dataset, dict) else None
    if isinstance(given, int) and given in job_pb2.DatasetFormat.values():
        given = job_pb2.DatasetFormat.Name(given)  # The JSON mapping takes enum numbers too.
    for format_name, own in _FORMAT_FLAGS.items():
        for flag in own:
            if flag in flags and given != format_name:
                raise ValueError("job spec: %r needs dataset %r (\"dataset\": \"%s\"); the "
                                 "spec's is %r" % (flag, format_name, format_name.lower(),
                                                   given or "IDX, the default"))
    return fields


def _snake(name):
    return "".join("_" + c.lower() if c.isupper() else c for c in name)


def job_spec(spec=None):
    """A new tributary.v1.JobSpec from `spec`.

    `spec` may be None (every field takes the coordinator's default), a dict or a JSON
    string in the proto3 JSON mapping, or a JobSpec (copied). A dict or JSON may also
    use the CLI's job flags by name (CLI_NAMES: "train_npy", "batch", "lr", ...). Raises
    ValueError naming the field or flag for an unknown name, a wrong type, an unknown
    enum name or choice, or a flag given with the field it sets, and TypeError for
    anything else. The coordinator validates the values themselves (SubmitJob).
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
    spec = _from_flags(spec)
    try:
        json_format.ParseDict(spec, message)
    except json_format.ParseError as e:
        raise ValueError("job spec: %s (a dict may use the proto3 JSON mapping of JobSpec or "
                         "the flags of `tributary local` named in CLI_NAMES)" % e) from None
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
