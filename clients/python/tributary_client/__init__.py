"""tributary_client: Tributary's Python client (docs/python_client.md).

Submit, follow, control and export training jobs on a Tributary cluster from Python,
over the v1 gRPC API (docs/api.md), with Debian's python3-grpcio and python3-protobuf
(and python3-torch to export TorchScript models):

    from tributary_client import Client, JobState
    client = Client("127.0.0.1:50051", control_token_file="token",
                    cluster_token_file="cluster.token")
    job = client.submit_job({"epochs": 1}, model="net.pt")
    job = client.wait_for_job(job.job_id, timeout=3600, on_progress=print, check=True)
    client.export_model("trained.pt", job.job_id)

The messages the client answers are the generated v1 classes, under `pb`
(pb.job_pb2.Job, pb.coordinator_pb2.ClusterStatus, ...); proto/*.proto documents every
field. Failed calls raise TributaryError (code, details, rpc).
"""

from . import _proto as pb
from ._proto import job_pb2 as _job_pb2
from .client import TERMINAL_STATES, Client, ModelFile
from .credentials import read_cluster_secret, role_credential
from .errors import JobFailedError, TributaryError, WaitTimeoutError
from .export import ExportResult
from .parameters import Parameters, PartitionInfo, load_parameters
from .specs import CLI_NAMES, job_spec, to_dict

__version__ = "0.1.0"

# Enums of proto/job.proto, with .Name(value) and .Value(name):
# JobState.COMPLETED, JobState.Name(job.state) == "COMPLETED", ...
JobState = _job_pb2.JobState
TrainingMode = _job_pb2.TrainingMode
OptimizerType = _job_pb2.OptimizerType
DatasetFormat = _job_pb2.DatasetFormat

__all__ = [
    "CLI_NAMES",
    "Client",
    "DatasetFormat",
    "ExportResult",
    "JobFailedError",
    "JobState",
    "ModelFile",
    "OptimizerType",
    "Parameters",
    "PartitionInfo",
    "TERMINAL_STATES",
    "TrainingMode",
    "TributaryError",
    "WaitTimeoutError",
    "job_spec",
    "load_parameters",
    "pb",
    "read_cluster_secret",
    "role_credential",
    "to_dict",
]
