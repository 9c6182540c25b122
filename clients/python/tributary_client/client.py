"""Client: a user's calls to a Tributary cluster, over the v1 gRPC API (docs/api.md).

One Client talks to one coordinator (and, to read parameters, to the PS shards the
coordinator lists). Every method is one or a few RPCs; the messages it answers are the
generated v1 classes (tributary_client.pb), so every field documented in
proto/*.proto is there. Failed calls raise TributaryError with the gRPC status code
and the server's message.
"""

import dataclasses
import hashlib
import json
import os
import shutil
import time

import grpc

from . import credentials
from . import export as export_lib
from . import parameters as parameters_lib
from . import specs
from ._proto import coordinator_pb2
from ._proto import coordinator_pb2_grpc
from ._proto import job_pb2
from ._proto import parameter_server_pb2
from ._proto import parameter_server_pb2_grpc
from .errors import JobFailedError, TributaryError, WaitTimeoutError, from_rpc_error

# A job in one of these states will not change any more.
TERMINAL_STATES = frozenset([job_pb2.COMPLETED, job_pb2.FAILED, job_pb2.STOPPED])

# UploadModel chunks (the coordinator takes up to 4 MiB; the CLI sends 1 MiB).
UPLOAD_CHUNK_BYTES = 1 << 20
# Largest message taken from the coordinator (a Job with its history, a ClusterStatus).
COORDINATOR_MAX_MESSAGE_BYTES = 64 << 20
# Largest message taken from a shard: the largest partition a job may have (256 MiB,
# proto/job.proto partition_bytes) plus framing.
SHARD_MAX_MESSAGE_BYTES = (256 << 20) + (1 << 20)
# Deadline of the calls that move a model file or a model's parameters.
TRANSFER_TIMEOUT_SECONDS = 600.0
# While following a job, how long the coordinator may stay unreachable (a restart,
# a network blip) before the wait gives up with its error.
UNREACHABLE_GRACE_SECONDS = 30.0

_TRANSIENT = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


@dataclasses.dataclass(frozen=True)
class ModelFile:
    """A TorchScript file stored on the coordinator (UploadModel's answer).

    A job names it by sha256 (spec.model.torchscript); pass it as submit_job(model=...).
    """

    sha256: str           # 64 lowercase hex digits.
    size_bytes: int
    file_name: str        # The name the job's messages and dashboard show.
    already_stored: bool  # The coordinator had the same file already; nothing was written.


def _check_job_id(job_id):
    if job_id is None:
        return ""
    if not isinstance(job_id, str):
        raise TypeError("job_id must be a str or None, got %s" % type(job_id).__name__)
    return job_id


def _check_seconds(name, value, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError("%s must be a number of seconds > 0, got %r" % (name, value))
    return float(value)


def _read_file(path):
    with open(path, "rb") as f:
        return f.read()


class Client:
    """A connection to a Tributary coordinator, for the calls a user makes.

    Example (a cluster started by hand, docs/python_client.md):

        from tributary_client import Client
        with Client("127.0.0.1:50051", control_token_file="token",
                    cluster_token_file="cluster.token") as client:
            job = client.submit_job({"dataset": {"format": "SYNTHETIC"},
                                     "maxSteps": 300, "epochs": 0}, model="net.pt")
            for point in client.follow_job(job.job_id):
                print(point.step, point.loss)
            client.export_model("trained.pt", job.job_id)

    Credentials (docs/security.md): the control token (`control_token` or
    `control_token_file`, the coordinator's --control_token_file) is sent as
    `authorization: Bearer ...` on SubmitJob, UploadModel, PauseJob, ResumeJob and
    StopJob. The cluster credential (`cluster_token_file`, the secret file every process
    of the cluster shares, e.g. a `tributary local` run directory's cluster.token; or
    `cluster_credential`, the value `tributary auth-header` prints) is sent as
    x-tributary-auth on every call: Pull and FetchModel need it, so pull_parameters and
    export_model do. A cluster without either needs neither.

    TLS: `tls_ca` (PEM file of the CA that signed the servers' certificates; with
    mutual TLS the servers also require a client certificate, `tls_cert` + `tls_key`),
    or `tls=True` alone for servers whose certificates the system trusts.
    `tls_server_name` overrides the name checked in the server's certificate.

    `timeout` is the deadline of each call, in seconds (uploads, downloads and pulls get
    TRANSFER_TIMEOUT_SECONDS). `tributary_cli` is the path of the `tributary` binary,
    needed only to export built-in models (see export_model); default: $TRIBUTARY_CLI,
    else `tributary` on PATH.
    """

    def __init__(self, address="127.0.0.1:50051", *, control_token=None,
                 control_token_file=None, cluster_token_file=None, cluster_credential=None,
                 tls=False, tls_ca=None, tls_cert=None, tls_key=None, tls_server_name=None,
                 timeout=30.0, tributary_cli=None):
        """Checks the arguments and opens a channel to the coordinator at `address`
        ("host:port"). Nothing is sent yet: a wrong address shows at the first call
        (UNAVAILABLE). ValueError or TypeError for arguments that cannot work, OSError
        for files that cannot be read."""
        if not isinstance(address, str) or not address.strip():
            raise ValueError("address must be 'host:port', got %r" % (address,))
        self._address = address.strip()
        self._timeout = _check_seconds("timeout", timeout)

        if control_token is not None and control_token_file is not None:
            raise ValueError("give control_token or control_token_file, not both")
        if control_token_file is not None:
            control_token = credentials.read_control_token(control_token_file)
        if control_token is not None:
            credentials.check_header_value("control_token", control_token)
        self._control_token = control_token

        if cluster_token_file is not None and cluster_credential is not None:
            raise ValueError("give cluster_token_file or cluster_credential, not both")
        self._cluster_token_file = cluster_token_file
        if cluster_token_file is not None:
            cluster_credential = credentials.role_credential(
                credentials.read_cluster_secret(cluster_token_file), "operator")
        if cluster_credential is not None:
            credentials.check_header_value("cluster_credential", cluster_credential)
            role, _, mac = cluster_credential.partition(" ")
            if role not in credentials.ROLES or len(mac) != 64:
                raise ValueError("cluster_credential must read '<role> <64 hex digits>' "
                                 "(what `tributary auth-header` prints)")
        self._cluster_credential = cluster_credential

        if (tls_cert is None) != (tls_key is None):
            raise ValueError("tls_cert and tls_key go together (a client certificate and "
                             "its private key)")
        self._tls_files = {"tls_ca": tls_ca, "tls_cert": tls_cert, "tls_key": tls_key}
        self._tls_server_name = tls_server_name
        use_tls = bool(tls) or tls_ca is not None or tls_cert is not None
        if tls_server_name is not None and not use_tls:
            raise ValueError("tls_server_name needs TLS (tls=True or tls_ca)")
        self._channel_credentials = None
        if use_tls:
            self._channel_credentials = grpc.ssl_channel_credentials(
                root_certificates=_read_file(tls_ca) if tls_ca else None,
                private_key=_read_file(tls_key) if tls_key else None,
                certificate_chain=_read_file(tls_cert) if tls_cert else None)
        self._tributary_cli = tributary_cli
        self._channel = self._open_channel(self._address, COORDINATOR_MAX_MESSAGE_BYTES)
        self._coordinator = coordinator_pb2_grpc.CoordinatorStub(self._channel)

    @classmethod
    def from_run_dir(cls, run_dir, **kwargs):
        """A Client for the cluster a `tributary local --run_dir=RUN_DIR` started: the
        coordinator's port from RUN_DIR/coordinator.ports.json, the cluster secret
        RUN_DIR/cluster.token and the run's control token RUN_DIR/control.token (each
        run makes both, mode 0600). Other keyword arguments go to Client()."""
        with open(os.path.join(run_dir, "coordinator.ports.json")) as f:
            port = json.load(f)["grpc_port"]
        kwargs.setdefault("cluster_token_file", os.path.join(run_dir, "cluster.token"))
        if "control_token" not in kwargs:
            kwargs.setdefault("control_token_file", os.path.join(run_dir, "control.token"))
        return cls("127.0.0.1:%d" % port, **kwargs)

    @property
    def address(self):
        """The coordinator's "host:port"."""
        return self._address

    def close(self):
        """Closes the channel to the coordinator. The Client cannot be used afterwards."""
        self._channel.close()

    def __enter__(self):
        """`with Client(...) as client:` closes it at the end."""
        return self

    def __exit__(self, *exc):
        """Closes the channel."""
        self.close()
        return False

    # --- The cluster ---

    def cluster_status(self):
        """The whole picture the dashboard shows: a v1 ClusterStatus (the active or
        latest job, the running generation, its nodes and workers, idle workers, the PS
        shards, why a job waits). GetClusterStatus."""
        return self._call("GetClusterStatus", coordinator_pb2.GetClusterStatusRequest())

    def wait_for_cluster(self, timeout=60.0, min_workers=0, poll_interval=0.2):
        """Waits until the coordinator answers, every PS shard it expects (its
        --ps_shards) is registered and reachable, and at least `min_workers` workers are
        registered; returns the ClusterStatus. WaitTimeoutError naming what is missing
        after `timeout` seconds; other errors as they come."""
        timeout = _check_seconds("timeout", timeout)
        if isinstance(min_workers, bool) or not isinstance(min_workers, int) or min_workers < 0:
            raise ValueError("min_workers must be an int >= 0, got %r" % (min_workers,))
        give_up = time.monotonic() + timeout
        missing = "the coordinator did not answer"
        while True:
            try:
                status = self.cluster_status()
                reachable = sum(1 for s in status.shards if s.reachable)
                workers = len(status.idle_workers) + sum(len(n.workers) for n in status.nodes)
                if reachable >= status.expected_shards and workers >= min_workers:
                    return status
                missing = "%d of %d PS shard(s) reachable, %d of %d worker(s) registered" % (
                    reachable, status.expected_shards, workers, min_workers)
            except TributaryError as e:
                if e.code not in _TRANSIENT:
                    raise
                missing = str(e)
            if time.monotonic() > give_up:
                raise WaitTimeoutError("cluster at %s not ready after %gs: %s"
                                       % (self._address, timeout, missing), None,
                                       "wait_for_cluster")
            time.sleep(poll_interval)

    # --- Models and jobs ---

    def upload_model(self, path, *, file_name=None):
        """Uploads the TorchScript file at `path` (torch.jit.script(model).save(path)) to
        the coordinator and returns its ModelFile. UploadModel, with the control token.

        The coordinator checks the size (--max_model_bytes), the SHA-256 and that it is
        a TorchScript archive; uploading a file it already has answers already_stored.
        `file_name` (default: the file's own name) is what the job's messages show:
        1-255 printable ASCII characters without '/'. OSError when the file cannot be
        read; TributaryError INVALID_ARGUMENT / RESOURCE_EXHAUSTED for a refused file.
        """
        path = os.fspath(path)
        data = _read_file(path)
        if file_name is None:
            file_name = os.path.basename(path)
        if not isinstance(file_name, str):
            raise TypeError("file_name must be a str, got %s" % type(file_name).__name__)
        digest = hashlib.sha256(data).hexdigest()

        def requests():
            yield coordinator_pb2.UploadModelRequest(header=coordinator_pb2.ModelFileHeader(
                file_name=file_name, size_bytes=len(data), sha256=digest))
            for at in range(0, len(data), UPLOAD_CHUNK_BYTES):
                yield coordinator_pb2.UploadModelRequest(chunk=data[at:at + UPLOAD_CHUNK_BYTES])

        answer = self._call("UploadModel", requests(), control=True,
                            timeout=TRANSFER_TIMEOUT_SECONDS)
        if answer.sha256 != digest:
            raise TributaryError(grpc.StatusCode.DATA_LOSS,
                                 "the coordinator stored %s, the file's SHA-256 is %s"
                                 % (answer.sha256, digest), "UploadModel")
        return ModelFile(sha256=answer.sha256, size_bytes=answer.size_bytes,
                         file_name=file_name, already_stored=answer.already_stored)

    def submit_job(self, spec=None, *, model=None):
        """Submits a job and returns it (a v1 Job, PENDING, with its job_id). SubmitJob,
        with the control token.

        `spec`: a dict or JSON string in the proto3 JSON mapping of
        tributary.v1.JobSpec (the body grpcurl and `tributary submit --job_json` take,
        e.g. {"model": {"name": "mlp", "layerSizes": [784, 128, 10]},
        "globalBatchSize": 128, "epochs": 2, "optimizer": {"type": "ADAM"}}), a
        JobSpec, or None for every default. `model`: a TorchScript file to train, as a
        path (uploaded first, like `tributary submit --model_file`) or the ModelFile
        upload_model answered; the spec's model must then be unset.

        ValueError for a spec that does not parse (naming the field); TributaryError
        INVALID_ARGUMENT for a value the coordinator refuses (naming the field and the
        value), FAILED_PRECONDITION while another job is active, UNAUTHENTICATED
        without the right control token.
        """
        message = specs.job_spec(spec)
        if model is not None:
            if not isinstance(model, ModelFile):
                model = self.upload_model(model)
            specs.name_model_file(message, model)
        return self._call("SubmitJob", coordinator_pb2.SubmitJobRequest(spec=message),
                          control=True)

    def get_job(self, job_id=None):
        """One job (a v1 Job): state, reason, step, total steps, events, progress
        history and, once COMPLETED, its result. None means the active job, or else the
        latest one. GetJob; NOT_FOUND for an unknown id."""
        return self._call("GetJob", coordinator_pb2.GetJobRequest(job_id=_check_job_id(job_id)))

    def get_job_history(self, job_id=None):
        """A job's per-step history (a v1 JobHistory): its steps (loss, throughput, the
        workers' timings), its evaluations (test accuracy, test loss and the model's named
        `metrics`, by step) and its traffic. None means the active job, or else the latest
        one. GetJobHistory; NOT_FOUND for an unknown id."""
        return self._call("GetJobHistory",
                          coordinator_pb2.GetJobHistoryRequest(job_id=_check_job_id(job_id)))

    def list_jobs(self):
        """Every job the coordinator keeps, newest first, without their progress
        history: a list of v1 Job. ListJobs."""
        return list(self._call("ListJobs", coordinator_pb2.ListJobsRequest()).jobs)

    def pause_job(self, job_id=None, reason=None, *, wait=False, timeout=60.0):
        """Pauses a running job and returns it. None means the active job; `reason` goes
        to its event log (default "tributary_client pause"). PauseJob, with the control
        token; FAILED_PRECONDITION when it is not running.

        The job is PAUSED at once; its workers then run on to a common step boundary
        and hold there (reporting WORKER_PAUSED). With `wait=True` this returns only
        once every worker of the generation holds, so the job's step stands still from
        then on (WaitTimeoutError after `timeout` seconds)."""
        job = self._control("PauseJob", job_id, reason, "pause")
        if wait:
            job = self._wait_until_held(job.job_id, _check_seconds("timeout", timeout))
        return job

    def resume_job(self, job_id=None, reason=None):
        """Resumes a PAUSED job and returns it. ResumeJob, with the control token;
        FAILED_PRECONDITION when it is not paused."""
        return self._control("ResumeJob", job_id, reason, "resume")

    def stop_job(self, job_id=None, reason=None):
        """Stops a job that has not ended (it goes STOPPED; the shards write a final
        checkpoint when they have a directory) and returns it. StopJob, with the control
        token; FAILED_PRECONDITION when it already ended."""
        return self._control("StopJob", job_id, reason, "stop")

    def follow_job(self, job_id=None, *, poll_interval=0.5, timeout=None):
        """Yields the job's progress as the coordinator reports it: each new v1
        ProgressPoint (step, epoch, loss, test_accuracy, samples_per_second, time), in
        step order, from the first one it holds; returns once the job ended (COMPLETED,
        FAILED or STOPPED). None means the active job, or else the latest one.

        The coordinator is asked every `poll_interval` seconds (GetJob) and keeps a
        bounded history (--progress_history, thinned by halves), so a slow reader may
        see every other point of a long job, never a point twice. The final figures are
        in get_job(...).result. WaitTimeoutError after `timeout` seconds (None: no
        limit); the coordinator may be unreachable for UNREACHABLE_GRACE_SECONDS in a row
        before its error is raised.
        """
        poll_interval = _check_seconds("poll_interval", poll_interval)
        timeout = _check_seconds("timeout", timeout, allow_none=True)
        give_up = None if timeout is None else time.monotonic() + timeout
        job = self.get_job(job_id)
        last_step = -1
        while True:
            for point in job.progress:
                if point.step > last_step:
                    last_step = point.step
                    yield point
            if job.state in TERMINAL_STATES:
                return
            if give_up is not None and time.monotonic() >= give_up:
                raise WaitTimeoutError(
                    "job %s is still %s at step %d of %d after %gs"
                    % (job.job_id, job_pb2.JobState.Name(job.state), job.step,
                       job.total_steps, timeout), job)
            time.sleep(poll_interval if give_up is None
                       else max(0.0, min(poll_interval, give_up - time.monotonic())))
            job = self._get_job_patiently(job.job_id)

    def wait_for_job(self, job_id=None, *, timeout=None, poll_interval=0.5, on_progress=None,
                     check=False):
        """Waits until the job ended and returns it (a v1 Job in COMPLETED, FAILED or
        STOPPED; for COMPLETED, job.result holds the accuracy, loss, steps and
        throughput). None means the active job, or else the latest one.

        `on_progress(point)` is called with each new ProgressPoint (see follow_job).
        With `check=True` a FAILED or STOPPED job raises JobFailedError carrying the job
        and its reason. WaitTimeoutError (a TimeoutError, code DEADLINE_EXCEEDED, with
        .job as last seen) after `timeout` seconds; None waits as long as it takes.
        """
        if on_progress is not None and not callable(on_progress):
            raise TypeError("on_progress must be callable, got %s" % type(on_progress).__name__)
        job_id = self.get_job(job_id).job_id
        for point in self.follow_job(job_id, poll_interval=poll_interval, timeout=timeout):
            if on_progress is not None:
                on_progress(point)
        job = self._get_job_patiently(job_id)
        if check and job.state != job_pb2.COMPLETED:
            raise JobFailedError("job %s %s: %s" % (job.job_id, job_pb2.JobState.Name(job.state),
                                                    job.state_reason), job)
        return job

    # --- Results ---

    def pull_parameters(self, job_id=None):
        """The job's flat float32 parameter buffer from the PS shards (Parameters), what
        `tributary pull` writes: GetClusterStatus for the shards, then Pull on each.
        Works while training (each partition's latest values), after the job ended, and
        for an older job whose checkpoints the shards keep. Needs the operator's cluster
        credential when the cluster has a secret. The shards are reached at the
        addresses they registered with the coordinator."""
        job = self.get_job(job_id)
        status = self.cluster_status()
        if not status.shards:
            raise TributaryError(grpc.StatusCode.FAILED_PRECONDITION,
                                 "the coordinator knows no PS shards", "pull_parameters")
        pulled = []
        for summary in status.shards:
            shard = summary.shard
            rpc = "Pull from shard %d at %s" % (shard.shard_index, shard.address)
            channel = self._open_channel(shard.address, SHARD_MAX_MESSAGE_BYTES)
            try:
                stub = parameter_server_pb2_grpc.ParameterServerStub(channel)
                for values in stub.Pull(parameter_server_pb2.PullRequest(job_id=job.job_id),
                                        timeout=TRANSFER_TIMEOUT_SECONDS,
                                        metadata=self._metadata(control=False)):
                    pulled.append((shard.shard_index, values))
            except grpc.RpcError as e:
                raise from_rpc_error(e, rpc) from None
            finally:
                channel.close()
        return parameters_lib.assemble(job.job_id, pulled)

    def fetch_model_file(self, job_id=None):
        """The bytes of a TorchScript job's model file as the coordinator stores it
        (FetchModel; the SHA-256 is checked). ValueError for a job of a built-in model.
        Needs the operator's cluster credential when the cluster has a secret."""
        job = self.get_job(job_id)
        if job.spec.model.name != specs.TORCHSCRIPT:
            raise ValueError("job %s trains the built-in model %r: it has no model file"
                             % (job.job_id, job.spec.model.name))
        return self._fetch(job.spec.model.torchscript)

    def export_model(self, path, job_id=None):
        """Writes the job's trained model to `path` as a TorchScript file that
        torch.jit.load reads, in eval mode (call .train() to fine-tune), the file
        `tributary export` writes; returns an ExportResult. None means the active job,
        or else the latest one.

        A TorchScript job is exported here with PyTorch: its model file (FetchModel)
        with the shards' parameters and buffers (Pull) written into it. A built-in model
        (mlp, cnn, logreg) becomes a module generated from the C++ engine's layers, so
        for those this runs `tributary export` (tributary_cli, $TRIBUTARY_CLI or
        `tributary` on PATH) with this client's address, cluster_token_file and TLS
        files; FileNotFoundError when there is no such binary.
        Both need the operator's cluster credential when the cluster has a secret.
        """
        path = os.fspath(path)
        job = self.get_job(job_id)
        if job.spec.model.name == specs.TORCHSCRIPT:
            torchscript = job.spec.model.torchscript
            model_bytes = self._fetch(torchscript)
            parameters = self.pull_parameters(job.job_id)
            written = export_lib.write_torchscript(model_bytes, torchscript.file_name,
                                                   parameters.values, path)
            return export_lib.ExportResult(job_id=job.job_id,
                                           model="torchscript:" + torchscript.file_name,
                                           step=parameters.step, parameters=written, path=path)
        cli = self._find_cli(job.spec.model.name)
        return export_lib.run_cli_export(cli, self._cli_flags() + ["--job_id=" + job.job_id],
                                         path, TRANSFER_TIMEOUT_SECONDS)

    # --- Plumbing ---

    def _open_channel(self, address, max_message_bytes):
        options = [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", COORDINATOR_MAX_MESSAGE_BYTES),
        ]
        if self._tls_server_name is not None:
            options.append(("grpc.ssl_target_name_override", self._tls_server_name))
        if self._channel_credentials is None:
            return grpc.insecure_channel(address, options=options)
        return grpc.secure_channel(address, self._channel_credentials, options=options)

    def _metadata(self, control):
        metadata = []
        if self._cluster_credential is not None:
            metadata.append((credentials.CLUSTER_AUTH_METADATA, self._cluster_credential))
        if control and self._control_token is not None:
            metadata.append((credentials.AUTHORIZATION_METADATA, "Bearer " + self._control_token))
        return metadata

    def _call(self, rpc, request, control=False, timeout=None):
        method = getattr(self._coordinator, rpc)
        try:
            return method(request, timeout=timeout or self._timeout,
                          metadata=self._metadata(control))
        except grpc.RpcError as e:
            raise from_rpc_error(e, rpc) from None

    def _control(self, rpc, job_id, reason, verb):
        if reason is None:
            reason = "tributary_client " + verb
        if not isinstance(reason, str):
            raise TypeError("reason must be a str, got %s" % type(reason).__name__)
        request = coordinator_pb2.JobControlRequest(job_id=_check_job_id(job_id), reason=reason)
        return self._call(rpc, request, control=True)

    def _wait_until_held(self, job_id, timeout):
        """Waits until every worker of the running generation reports WORKER_PAUSED
        (GetClusterStatus), or the job is no longer PAUSED; returns the job."""
        give_up = time.monotonic() + timeout
        while True:
            status = self.cluster_status()
            job = status.job
            if job.job_id != job_id or job.state != job_pb2.PAUSED:
                return self.get_job(job_id)
            moving = [w.worker_id for node in status.nodes for w in node.workers
                      if w.phase != coordinator_pb2.WORKER_PAUSED]
            if not moving:
                return self.get_job(job_id)
            if time.monotonic() >= give_up:
                raise WaitTimeoutError("job %s is PAUSED but worker(s) %s still run after %gs"
                                       % (job_id, ", ".join(moving), timeout), job, "pause_job")
            time.sleep(0.1)

    def _get_job_patiently(self, job_id):
        """GetJob, retried while the coordinator is unreachable, for at most
        UNREACHABLE_GRACE_SECONDS."""
        give_up = time.monotonic() + UNREACHABLE_GRACE_SECONDS
        while True:
            try:
                return self.get_job(job_id)
            except TributaryError as e:
                if e.code not in _TRANSIENT or time.monotonic() >= give_up:
                    raise
            time.sleep(0.5)

    def _fetch(self, torchscript):
        rpc = "FetchModel"
        chunks = []
        size = None
        try:
            for chunk in self._coordinator.FetchModel(
                    coordinator_pb2.FetchModelRequest(sha256=torchscript.sha256),
                    timeout=TRANSFER_TIMEOUT_SECONDS, metadata=self._metadata(control=False)):
                received = sum(len(c) for c in chunks)
                if chunk.offset != received:
                    raise TributaryError(grpc.StatusCode.DATA_LOSS,
                                         "chunk at offset %d after %d bytes"
                                         % (chunk.offset, received), rpc)
                chunks.append(chunk.data)
                size = chunk.size_bytes
        except grpc.RpcError as e:
            raise from_rpc_error(e, rpc) from None
        data = b"".join(chunks)
        if size is None or len(data) != size:
            raise TributaryError(grpc.StatusCode.DATA_LOSS, "model %s: %d bytes received of %s"
                                 % (torchscript.sha256, len(data), size), rpc)
        if hashlib.sha256(data).hexdigest() != torchscript.sha256:
            raise TributaryError(grpc.StatusCode.DATA_LOSS, "model %s: the bytes received have "
                                 "another SHA-256" % torchscript.sha256, rpc)
        return data

    def _find_cli(self, model_name):
        cli = self._tributary_cli or os.environ.get("TRIBUTARY_CLI") or shutil.which("tributary")
        if not cli or not os.access(cli, os.X_OK):
            raise FileNotFoundError(
                "exporting the built-in model %r runs `tributary export` (its module is "
                "generated by the C++ engine), and no tributary binary was found%s: pass "
                "Client(tributary_cli=PATH) or set TRIBUTARY_CLI (bazel build //:tributary "
                "makes bazel-bin/cli/tributary); pull_parameters() gives the raw values "
                "without it" % (model_name, " at %s" % cli if cli else ""))
        return cli

    def _cli_flags(self):
        flags = ["--coordinator=" + self._address]
        if self._cluster_credential is not None:
            if self._cluster_token_file is None:
                raise ValueError("`tributary export` takes the cluster secret as a file: "
                                 "make the Client with cluster_token_file, not "
                                 "cluster_credential, to export a built-in model")
            flags.append("--cluster_token_file=" + os.fspath(self._cluster_token_file))
        if self._tls_server_name is not None:
            raise ValueError("`tributary export` has no tls_server_name: it checks the "
                             "address's own name")
        if self._channel_credentials is not None and not any(self._tls_files.values()):
            raise ValueError("`tributary export` takes TLS from files: give tls_ca")
        for flag, path in self._tls_files.items():
            if path is not None:
                flags.append("--%s=%s" % (flag, os.fspath(path)))
        return flags
