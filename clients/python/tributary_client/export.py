"""A job's trained model as a TorchScript file, the file `tributary export` writes.

For a TorchScript job the client does it itself with PyTorch (Debian's python3-torch):
it loads the job's own model file (FetchModel), writes the flat buffer the shards hold
(Pull) into the module's tensors in the order the workers laid them out, and saves it
in eval mode. The order is worker/engine/torchscript.cc's CollectTensors: trainable
parameters (named_parameters order), then buffers (named_buffers order), then frozen
parameters, each skipped when empty.

A built-in model (mlp, cnn, logreg) has no file to load: its TorchScript module is
generated from the C++ engine's layers, so for those the client runs the `tributary`
command line's `export` (see Client.export_model).
"""

import dataclasses
import io
import os
import re
import subprocess

import grpc

from .errors import TributaryError


@dataclasses.dataclass(frozen=True)
class ExportResult:
    """What Client.export_model wrote."""

    job_id: str
    model: str       # "torchscript:net.pt", "mlp", ... (as `tributary export` prints it).
    step: int        # The lowest step over the partitions exported.
    parameters: int  # float32 values written (parameters and buffers).
    path: str        # The file written.


def layout_tensors(module):
    """(name, tensor) of a TorchScript module in flat-buffer order (see the module doc)."""
    trained, buffers, frozen = [], [], []
    for name, tensor in module.named_parameters():
        if tensor.numel() == 0:
            continue
        (trained if tensor.requires_grad else frozen).append((name, tensor))
    for name, tensor in module.named_buffers():
        if tensor.numel() > 0:
            buffers.append((name, tensor))
    return trained + buffers + frozen


def write_torchscript(model_bytes, file_name, values, path):
    """Loads the TorchScript module in `model_bytes`, sets its tensors from the flat
    float32 `values` (an array.array("f")) and saves it in eval mode to `path`
    (written to a temporary file first, then renamed). Returns the values written.

    ValueError when the module's tensors do not add up to len(values) (a file other
    than the job's). Needs PyTorch: ImportError saying so when it is missing.
    """
    try:
        import torch
    except ImportError as e:
        raise ImportError("exporting a TorchScript job needs PyTorch (Debian's python3-torch, "
                          "installed by scripts/setup): %s" % e) from e
    module = torch.jit.load(io.BytesIO(model_bytes), map_location="cpu")
    tensors = layout_tensors(module)
    total = sum(t.numel() for _, t in tensors)
    if total != len(values):
        raise ValueError("model file %s: its parameters and buffers hold %d values, the "
                         "shards %d: not the file this job trained"
                         % (file_name, total, len(values)))
    flat = torch.frombuffer(values, dtype=torch.float32) if len(values) else torch.zeros(0)
    offset = 0
    with torch.no_grad():
        for _, tensor in tensors:
            count = tensor.numel()
            tensor.copy_(flat[offset:offset + count].reshape(tensor.shape))
            offset += count
    module.eval()
    temporary = "%s.tmp-%d" % (path, os.getpid())
    try:
        module.save(temporary)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
    return total


# `tributary export` prints "tributary: CODE: message" (an absl::Status) when it fails.
_CLI_ERROR = re.compile(r"^tributary: ([A-Z_]+): (.*)$", re.S)
# ... and on success "exported MODEL of job ID (step S, N values) to PATH".
_CLI_DONE = re.compile(r"exported (.+) of job (\S+) \(step (\d+), (\d+) values\) to ")


def run_cli_export(cli, args, path, timeout):
    """Runs `cli export` with `args` (the connection flags and --job_id) writing `path`.

    Returns an ExportResult. The CLI's error becomes a TributaryError with the status
    code it printed (UNKNOWN when it printed none).
    """
    command = [cli, "export", "--out=" + path] + list(args)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise TributaryError(grpc.StatusCode.DEADLINE_EXCEEDED,
                             "%s export did not finish within %gs" % (cli, timeout),
                             "tributary export") from None
    if done.returncode != 0:
        text = (done.stderr or done.stdout).strip()
        last = text.splitlines()[-1] if text else "exit status %d" % done.returncode
        found = _CLI_ERROR.match(last)
        code = getattr(grpc.StatusCode, found.group(1), None) if found else None
        if code is None:
            raise TributaryError(grpc.StatusCode.UNKNOWN, last, "tributary export")
        raise TributaryError(code, found.group(2), "tributary export")
    found = _CLI_DONE.search(done.stdout)
    if not found:
        raise TributaryError(grpc.StatusCode.UNKNOWN,
                             "unexpected output of %s export: %s" % (cli, done.stdout.strip()),
                             "tributary export")
    return ExportResult(job_id=found.group(2), model=found.group(1), step=int(found.group(3)),
                        parameters=int(found.group(4)), path=path)
