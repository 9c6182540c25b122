"""The client without a cluster: argument checking, job specs, credentials, and every
conversion of what the servers answer (errors, streams, partitions, progress) against
in-process fake servers built from the generated servicers.

  client_unit_test.py --cli=BIN --token_model=PT   (the real `tributary`, for
  `auth-header` and `spec`; a TorchScript file for `spec --model_file`)
"""
import argparse
import array
import copy
import concurrent.futures
import dataclasses
import hashlib
import os
import pickle
import re
import stat
import subprocess
import sys
import tempfile
import unittest

import debian_python

debian_python.rerun_under_debian_python()

import grpc  # noqa: E402

import tributary_client  # noqa: E402
from tributary_client import (Client, JobFailedError, JobState, ModelFile,  # noqa: E402
                              TributaryError, WaitTimeoutError, pb)
from tributary_client import credentials, export, parameters, specs  # noqa: E402

ARGS = None
coordinator_pb2 = pb.coordinator_pb2
job_pb2 = pb.job_pb2
tensor_pb2 = pb.tensor_pb2
SECRET = "0123456789abcdef0123456789abcdef"


class FakeCoordinator(pb.coordinator_pb2_grpc.CoordinatorServicer):
    """Answers from `self.jobs` (GetJob, one per call, the last repeated) and
    `self.errors` ({rpc: (code, message)}); records each call's metadata."""

    def __init__(self):
        self.jobs = [job_pb2.Job(job_id="job-1-abcd", state=job_pb2.RUNNING)]
        self.errors = {}
        self.metadata = {}
        self.uploads = []
        self.model = b""
        self.shards = []
        self.submitted = []

    def _enter(self, rpc, context):
        self.metadata[rpc] = dict(context.invocation_metadata())
        if rpc in self.errors:
            error = self.errors[rpc]
            if callable(error):
                error = error()
            if error is not None:
                context.abort(*error)

    def GetJob(self, request, context):
        self._enter("GetJob", context)
        job = self.jobs.pop(0) if len(self.jobs) > 1 else self.jobs[0]
        if request.job_id and request.job_id != job.job_id:
            context.abort(grpc.StatusCode.NOT_FOUND, "unknown job '%s'" % request.job_id)
        return job

    def ListJobs(self, request, context):
        self._enter("ListJobs", context)
        return coordinator_pb2.ListJobsResponse(jobs=self.jobs[:1])

    def SubmitJob(self, request, context):
        self._enter("SubmitJob", context)
        self.submitted.append(request.spec)
        return job_pb2.Job(job_id="job-2-beef", spec=request.spec, state=job_pb2.PENDING)

    def PauseJob(self, request, context):
        self._enter("PauseJob", context)
        return job_pb2.Job(job_id=request.job_id or "job-1-abcd", state=job_pb2.PAUSED)

    def ResumeJob(self, request, context):
        self._enter("ResumeJob", context)
        return job_pb2.Job(job_id=request.job_id or "job-1-abcd", state=job_pb2.RUNNING)

    def StopJob(self, request, context):
        self._enter("StopJob", context)
        return job_pb2.Job(job_id=request.job_id or "job-1-abcd", state=job_pb2.STOPPED,
                           state_reason=request.reason)

    def GetClusterStatus(self, request, context):
        self._enter("GetClusterStatus", context)
        status = coordinator_pb2.ClusterStatus(job=self.jobs[0], expected_shards=len(self.shards))
        for index, address in enumerate(self.shards):
            status.shards.add(shard=coordinator_pb2.ShardInfo(shard_index=index, address=address),
                              reachable=True)
        return status

    def UploadModel(self, request_iterator, context):
        self._enter("UploadModel", context)
        messages = list(request_iterator)
        self.uploads.append(messages)
        header = messages[0].header
        data = b"".join(m.chunk for m in messages[1:])
        if hashlib.sha256(data).hexdigest() != header.sha256:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "digest mismatch")
        return coordinator_pb2.UploadModelResponse(sha256=header.sha256, size_bytes=len(data),
                                                   already_stored=len(self.uploads) > 1)

    def FetchModel(self, request, context):
        self._enter("FetchModel", context)
        for at in range(0, len(self.model), 4):
            yield coordinator_pb2.ModelChunk(offset=at, data=self.model[at:at + 4],
                                             size_bytes=len(self.model))
            if "FetchModel-midway" in self.errors:
                context.abort(*self.errors["FetchModel-midway"])


class FakeShard(pb.parameter_server_pb2_grpc.ParameterServerServicer):
    """Pull answers `values`; records the metadata."""

    def __init__(self, values, error=None):
        self.values = values
        self.error = error
        self.metadata = None

    def Pull(self, request, context):
        self.metadata = dict(context.invocation_metadata())
        if self.error:
            context.abort(*self.error)
        for values in self.values:
            yield values


def serve(add, servicer):
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
    add(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, "127.0.0.1:%d" % port


def partition(partition_id, floats, step=5, dtype=tensor_pb2.FLOAT32):
    return tensor_pb2.PartitionValues(partition_id=partition_id, dtype=dtype, step=step,
                                      version=step, data=array.array("f", floats).tobytes())


class WithFakeCoordinator(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self.fake = FakeCoordinator()
        self.server, self.address = serve(
            pb.coordinator_pb2_grpc.add_CoordinatorServicer_to_server, self.fake)
        self.secret_file = self.write("cluster.token", SECRET + "\n")
        self.client = Client(self.address, control_token="s3cret",
                             cluster_token_file=self.secret_file, timeout=5)

    def tearDown(self):
        self.client.close()
        self.server.stop(None)

    def write(self, name, content, mode=0o600):
        path = os.path.join(self.tmp, name)
        with open(path, "wb" if isinstance(content, bytes) else "w") as f:
            f.write(content)
        os.chmod(path, mode)
        return path


class JobSpecTest(unittest.TestCase):

    def test_from_dict_json_message_and_none(self):
        from_dict = specs.job_spec({"globalBatchSize": 32, "mode": "ASYNC",
                                    "dataset": {"format": "SYNTHETIC"}, "max_steps": 9})
        self.assertEqual((from_dict.global_batch_size, from_dict.mode, from_dict.max_steps),
                         (32, job_pb2.ASYNC, 9))
        self.assertEqual(specs.job_spec('{"epochs": 2}').epochs, 2)
        self.assertEqual(specs.job_spec(b'{"epochs": 2}').epochs, 2)
        copied = specs.job_spec(from_dict)
        self.assertEqual(copied, from_dict)
        copied.epochs = 7
        self.assertEqual(from_dict.epochs, 0, "a copy, not the caller's message")
        self.assertEqual(specs.job_spec(None), job_pb2.JobSpec())
        self.assertEqual(tributary_client.to_dict(from_dict)["mode"], "ASYNC")

    def test_refusals_name_the_field(self):
        for spec, text in [({"epoch": 1}, 'no field named "epoch"'),
                           ({"mode": "EVENTUALLY"}, "EVENTUALLY"),
                           ({"globalBatchSize": "many"}, "globalBatchSize"),
                           ({"optimizer": {"lr": 1}}, '"lr"'),
                           ("[1, 2]", "JSON must be an object"),
                           ("{not json", "not valid JSON")]:
            with self.assertRaises(ValueError, msg=spec) as e:
                specs.job_spec(spec)
            self.assertIn(text, str(e.exception))
        for spec in (42, ["epochs"], job_pb2.Job()):
            with self.assertRaises(TypeError):
                specs.job_spec(spec)

    def test_a_model_file_names_the_torchscript_model(self):
        model = ModelFile("ab" * 32, 10, "net.pt", False)
        spec = specs.name_model_file(specs.job_spec({"epochs": 1}), model)
        self.assertEqual((spec.model.name, spec.model.torchscript.sha256,
                          spec.model.torchscript.file_name), ("torchscript", "ab" * 32, "net.pt"))
        with self.assertRaises(ValueError) as e:
            specs.name_model_file(specs.job_spec({"model": {"name": "cnn"}}), model)
        self.assertIn("'cnn'", str(e.exception))


class CliNamesTest(unittest.TestCase):
    """A dict may use the CLI's job flags: the same fields, the same values, as
    `tributary spec` makes of them."""

    # Each dict a set of flags `tributary spec` accepts together.
    FLAG_SETS = [
        {"dataset": "npy", "train_npy": "x.npy", "train_labels_npy": "y.npy",
         "test_npy": "tx.npy", "test_labels_npy": "ty.npy", "batch": 128, "epochs": 2,
         "optimizer": "adam", "lr": 0.01, "beta1": 0.8, "beta2": 0.99, "epsilon": 1e-7,
         "lr_schedule": "step", "lr_step_size": 100, "lr_gamma": 0.5, "warmup_steps": 10,
         "train_limit": 500, "test_limit": 50, "job_devices": "cpu"},
        {"dataset": "tokens", "train_tokens": "t.npy", "test_tokens": "v.npy", "seq_len": 32,
         "mode": "local_sgd", "sync_every": 4, "outer_optimizer": "momentum", "outer_lr": 0.7,
         "outer_momentum": 0.8, "outer_nesterov": True, "wire_dtype": "bfloat16",
         "replicas": 2, "nodes_min": 2, "nodes_max": 3},
        {"dataset": "csv", "train_csv": "a.csv", "test_csv": "b.csv", "label_column": 3,
         "csv_header": True, "model": "cnn", "conv_channels": "8,16", "input_shape": "1,28,28",
         "layers": "64,10", "dropout": 0.25, "mode": "bounded", "staleness": 2,
         "job_name": "named", "seed": 7, "max_steps": 50, "eval_interval": 10,
         "eval_samples": 200,
         "checkpoint_interval": 20, "checkpoint_dir": "/tmp/c", "pending_timeout": 30,
         "partition_bytes": 65536, "partition_cut": "layers", "optimizer": "momentum",
         "momentum": 0.5,
         "nesterov": True, "weight_decay": 0.01, "lr_schedule": "cosine", "min_lr": 0.001},
        {"dataset": "synthetic", "synthetic_train": 100, "synthetic_test": 20,
         "synthetic_features": 8, "synthetic_classes": 3, "layers": [8, 4, 3],
         "normalize": True, "resume": "job-1-abcd", "mode": "async", "optimizer": "adamw"},
        {"dataset": "idx", "data_dir": "/data/fashion", "init_from": "params.f32",
         "model": "logreg", "layers": "784,10"},
    ]

    @staticmethod
    def field(message, path):
        """The value at a proto3 JSON path ("dataset.trainPath") of a message."""
        for name in path.split("."):
            snake = "".join("_" + c.lower() if c.isupper() else c for c in name)
            message = getattr(message, snake)
        return list(message) if hasattr(message, "__len__") and not isinstance(
            message, (str, bytes)) else message

    def cli_spec(self, flags):
        words = []
        for name, value in flags.items():
            if isinstance(value, bool):
                value = "true" if value else "false"
            elif isinstance(value, list):
                value = ",".join(str(v) for v in value)
            words.append("--%s=%s" % (name, value))
        if flags.get("dataset") == "tokens":  # Only a model of the user's own takes tokens.
            words.append("--model_file=" + ARGS.token_model)
        result = subprocess.run([ARGS.cli, "spec", *words], capture_output=True, text=True,
                                timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        return specs.job_spec(result.stdout)

    def test_every_job_flag_has_a_name(self):
        helpfull = subprocess.run([ARGS.cli, "--helpfull"], capture_output=True, text=True,
                                  timeout=60).stdout
        # The job flags' sections: common/job_flags.cc, common/job_flags_model.cc, ...
        parts = re.split(r"\n\s*Flags from ([^:\n]+):\n", helpfull)
        flags = set()
        for source, body in zip(parts[1::2], parts[2::2]):
            if re.match(r"common/job_flags(_\w+)?\.cc$", source):
                flags |= set(re.findall(r"^\s+--(\w+)", body, re.M))
        self.assertGreater(len(flags), 50)
        named = set(tributary_client.CLI_NAMES) | set(specs._NOT_FIELDS)
        self.assertEqual(named, flags)

    def test_each_flag_sets_the_field_tributary_spec_sets(self):
        covered = set()
        for flags in self.FLAG_SETS:
            with self.subTest(flags=flags):
                ours = specs.job_spec(flags)
                theirs = self.cli_spec(flags)
                for name in flags:
                    path = tributary_client.CLI_NAMES[name][0]
                    self.assertEqual(self.field(ours, path), self.field(theirs, path),
                                     "%s (%s)" % (name, path))
                    covered.add(name)
        self.assertEqual(covered, set(tributary_client.CLI_NAMES))

    def test_flags_and_fields_mix_and_shared_names_go_by_value(self):
        spec = specs.job_spec({"batch": 32, "dataset": {"format": "NPY"}, "train_npy": "x.npy",
                               "mode": "LOCAL_SGD", "sync_every": 2, "model": "mlp"})
        self.assertEqual((spec.global_batch_size, spec.dataset.format, spec.dataset.train_path,
                          spec.mode, spec.sync_every, spec.model.name),
                         (32, job_pb2.NPY, "x.npy", job_pb2.LOCAL_SGD, 2, "mlp"))
        self.assertEqual(specs.job_spec({"mode": "local_sgd"}).mode, job_pb2.LOCAL_SGD)
        self.assertEqual(specs.job_spec({"optimizer": {"type": "ADAM"}, "lr": 0.5}).optimizer,
                         specs.job_spec({"optimizer": "adam", "lr": 0.5}).optimizer)
        # The caller's dicts stay as they were: the same one serves twice.
        mine = {"optimizer": {"type": "ADAM"}, "lr": 0.5, "dataset": {"format": "NPY"},
                "train_npy": "x.npy"}
        before = copy.deepcopy(mine)
        self.assertEqual(specs.job_spec(mine), specs.job_spec(mine))
        self.assertEqual(mine, before)

    def test_flag_refusals_name_the_flag(self):
        for spec, texts in [
                ({"batch": 32, "globalBatchSize": 64}, ["'batch'", "globalBatchSize"]),
                ({"batch": 32, "global_batch_size": 64}, ["'batch'", "global_batch_size"]),
                ({"train_npy": "x", "train_csv": "y"}, ["train_npy", "train_csv"]),
                ({"mode": "eventually"}, ["mode", "sync, async, bounded, local_sgd",
                                          "eventually"]),
                ({"dataset": "parquet"}, ["dataset", "parquet"]),
                ({"layers": "784,a,10"}, ["layers", "784,a,10"]),
                ({"layers": "784,0"}, ["layers"]),
                ({"model_file": "net.pt"}, ["model_file", "model=PATH"]),
                ({"dataset": "csv", "train_npy": "x.npy"}, ["train_npy", "NPY", "CSV"]),
                ({"train_tokens": "t.npy"}, ["train_tokens", "TOKENS", "IDX"]),
                ({"job_json": "{}"}, ["job_json"]),
                ({"epochz": 1}, ["epochz", "CLI_NAMES"])]:
            with self.subTest(spec=spec):
                with self.assertRaises(ValueError) as e:
                    specs.job_spec(spec)
                for text in texts:
                    self.assertIn(text, str(e.exception))


class DocumentationTest(unittest.TestCase):

    def test_every_public_function_has_a_docstring(self):
        import inspect
        undocumented = []
        modules = [tributary_client, tributary_client.client, credentials, export,
                   parameters, specs, tributary_client.errors]
        for module in modules:
            self.assertTrue(module.__doc__, module.__name__)
            for name, value in vars(module).items():
                if name.startswith("_") or getattr(value, "__module__", None) != module.__name__:
                    continue
                if inspect.isfunction(value) or inspect.isclass(value):
                    if not inspect.getdoc(value):
                        undocumented.append("%s.%s" % (module.__name__, name))
                if inspect.isclass(value):
                    for attr, member in vars(value).items():
                        # A dataclass's generated __init__ is its class docstring's.
                        own_init = attr == "__init__" and not dataclasses.is_dataclass(value)
                        if inspect.isfunction(member) and (not attr.startswith("_") or own_init):
                            if not member.__doc__:
                                undocumented.append("%s.%s.%s" % (module.__name__, name, attr))
        self.assertEqual(undocumented, [])


class CredentialsTest(unittest.TestCase):

    def test_role_credentials_are_what_tributary_auth_header_prints(self):
        tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        path = os.path.join(tmp, "cluster.token")
        with open(path, "w") as f:
            f.write("  \t%s\r\n\n" % SECRET)  # The servers strip surrounding whitespace.
        self.assertEqual(credentials.read_cluster_secret(path), SECRET.encode())
        for role in credentials.ROLES:
            printed = subprocess.run(
                [ARGS.cli, "auth-header", "--cluster_token_file=" + path, "--role=" + role],
                capture_output=True, text=True, check=True).stdout.strip()
            self.assertEqual(tributary_client.role_credential(SECRET, role), printed)
            self.assertEqual(tributary_client.role_credential(SECRET.encode(), role), printed)
        with self.assertRaises(ValueError):
            tributary_client.role_credential(SECRET, "admin")

    def test_a_bad_secret_file_is_named_but_never_shown(self):
        tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        path = os.path.join(tmp, "short.token")
        with open(path, "w") as f:
            f.write("tooshort\n")
        with self.assertRaises(ValueError) as e:
            credentials.read_cluster_secret(path)
        self.assertIn(path, str(e.exception))
        self.assertIn("8 bytes", str(e.exception))
        self.assertNotIn("tooshort", str(e.exception))
        with self.assertRaises(OSError):
            credentials.read_cluster_secret(os.path.join(tmp, "absent"))
        empty = os.path.join(tmp, "empty")
        with open(empty, "w") as f:
            f.write(" \n")
        with self.assertRaises(ValueError):
            credentials.read_control_token(empty)


class ArgumentTest(WithFakeCoordinator):

    def test_the_constructor_refuses_what_cannot_work(self):
        token = self.write("token", "t0ken\n")
        cases = [
            dict(address=""),
            dict(address=None),
            dict(timeout=0),
            dict(timeout="5"),
            dict(control_token="a", control_token_file=token),
            dict(control_token="two words\n"),
            dict(cluster_token_file=self.secret_file, cluster_credential="operator " + "0" * 64),
            dict(cluster_credential="operator"),
            dict(cluster_credential="admin " + "0" * 64),
            dict(tls_cert=token),
            dict(tls_key=token),
            dict(tls_server_name="localhost"),
        ]
        for kwargs in cases:
            kwargs.setdefault("address", self.address)
            with self.assertRaises((ValueError, TypeError), msg=kwargs):
                Client(**kwargs)
        with self.assertRaises(OSError):
            Client(self.address, control_token_file=os.path.join(self.tmp, "absent"))
        with self.assertRaises(OSError):
            Client(self.address, tls_ca=os.path.join(self.tmp, "absent.pem"))
        Client(self.address, control_token_file=token).close()
        Client(self.address, cluster_credential=tributary_client.role_credential(SECRET)).close()

    def test_methods_refuse_bad_arguments_before_calling(self):
        for call in [lambda: self.client.get_job(17),
                     lambda: self.client.stop_job(reason=3),
                     lambda: self.client.wait_for_job(on_progress="print"),
                     lambda: self.client.wait_for_cluster(min_workers=-1),
                     lambda: self.client.upload_model(self.secret_file, file_name=5)]:
            with self.assertRaises((ValueError, TypeError)):
                call()
        with self.assertRaises(ValueError):
            list(self.client.follow_job(poll_interval=0))
        with self.assertRaises(ValueError):
            list(self.client.follow_job(timeout=-1))
        self.assertEqual(self.fake.metadata, {}, "nothing was sent")


class ErrorConversionTest(WithFakeCoordinator):

    def test_errors_carry_the_code_the_message_and_the_call(self):
        self.fake.errors["SubmitJob"] = (grpc.StatusCode.INVALID_ARGUMENT,
                                         "spec.global_batch_size: must be <= 65536, got 70000")
        with self.assertRaises(TributaryError) as e:
            self.client.submit_job({"globalBatchSize": 70000})
        error = e.exception
        self.assertEqual(error.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(error.details, "spec.global_batch_size: must be <= 65536, got 70000")
        self.assertEqual(error.rpc, "SubmitJob")
        self.assertEqual(str(error), "SubmitJob: INVALID_ARGUMENT: " + error.details)
        self.assertIsNone(error.__cause__, "no gRPC internals chained")
        copy = pickle.loads(pickle.dumps(error))
        self.assertEqual((copy.code, copy.details, copy.rpc),
                         (error.code, error.details, "SubmitJob"))

        for rpc, call in [("PauseJob", self.client.pause_job),
                          ("ResumeJob", self.client.resume_job),
                          ("StopJob", self.client.stop_job),
                          ("ListJobs", self.client.list_jobs),
                          ("GetClusterStatus", self.client.cluster_status)]:
            self.fake.errors[rpc] = (grpc.StatusCode.FAILED_PRECONDITION, rpc + " refused")
            with self.assertRaises(TributaryError) as e:
                call()
            self.assertEqual((e.exception.code, e.exception.details, e.exception.rpc),
                             (grpc.StatusCode.FAILED_PRECONDITION, rpc + " refused", rpc))

        with self.assertRaises(TributaryError) as e:
            self.client.get_job("job-9-none")
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertIn("job-9-none", e.exception.details)

    def test_an_error_in_the_middle_of_a_stream_is_converted_too(self):
        self.fake.jobs = [job_pb2.Job(job_id="job-1-abcd", spec=job_pb2.JobSpec(
            model=job_pb2.ModelSpec(name="torchscript", torchscript=job_pb2.TorchScriptFile(
                sha256=hashlib.sha256(b"0123456789").hexdigest()))))]
        self.fake.model = b"0123456789"
        self.assertEqual(self.client.fetch_model_file(), b"0123456789")
        self.fake.errors["FetchModel-midway"] = (grpc.StatusCode.UNAVAILABLE, "draining")
        with self.assertRaises(TributaryError) as e:
            self.client.fetch_model_file()
        self.assertEqual((e.exception.code, e.exception.rpc),
                         (grpc.StatusCode.UNAVAILABLE, "FetchModel"))
        del self.fake.errors["FetchModel-midway"]
        self.fake.model = b"0123456780"  # Not the bytes the digest names.
        with self.assertRaises(TributaryError) as e:
            self.client.fetch_model_file()
        self.assertEqual(e.exception.code, grpc.StatusCode.DATA_LOSS)
        self.fake.jobs[0].spec.model.name = "mlp"
        with self.assertRaises(ValueError):
            self.client.fetch_model_file()

    def test_an_unreachable_coordinator_is_unavailable(self):
        self.server.stop(None)
        with self.assertRaises(TributaryError) as e:
            self.client.get_job()
        self.assertEqual((e.exception.code, e.exception.rpc),
                         (grpc.StatusCode.UNAVAILABLE, "GetJob"))


class CallTest(WithFakeCoordinator):

    def test_the_token_goes_on_control_calls_the_credential_on_every_call(self):
        self.client.submit_job()
        self.client.pause_job()
        self.client.resume_job("job-1-abcd")
        self.client.stop_job(reason="why")
        self.client.get_job()
        self.client.list_jobs()
        self.client.cluster_status()
        self.client.upload_model(self.write("m.pt", b"x" * 10))
        credential = tributary_client.role_credential(SECRET, "operator")
        for rpc, metadata in self.fake.metadata.items():
            self.assertEqual(metadata.get("x-tributary-auth"), credential, rpc)
            if rpc in ("SubmitJob", "PauseJob", "ResumeJob", "StopJob", "UploadModel"):
                self.assertEqual(metadata.get("authorization"), "Bearer s3cret", rpc)
            else:
                self.assertNotIn("authorization", metadata, rpc)
        self.assertEqual(len(self.fake.metadata), 8)

    def test_control_calls_send_the_job_and_the_reason(self):
        stopped = self.client.stop_job("job-7-0000", reason="done for today")
        self.assertEqual((stopped.job_id, stopped.state_reason), ("job-7-0000", "done for today"))
        self.assertEqual(self.client.stop_job().state_reason, "tributary_client stop")
        self.assertEqual(self.client.pause_job().state, JobState.PAUSED)

    def test_upload_streams_a_header_then_chunks_and_submit_names_the_file(self):
        data = os.urandom((5 << 20) // 2)  # 2.5 MiB: three chunks.
        path = self.write("net.pt", data)
        uploaded = self.client.upload_model(path)
        self.assertEqual(uploaded, ModelFile(hashlib.sha256(data).hexdigest(), len(data),
                                             "net.pt", False))
        messages = self.fake.uploads[0]
        self.assertEqual(messages[0].WhichOneof("payload"), "header")
        self.assertEqual((messages[0].header.file_name, messages[0].header.size_bytes),
                         ("net.pt", len(data)))
        self.assertEqual([len(m.chunk) for m in messages[1:]], [1 << 20, 1 << 20, 1 << 19])

        job = self.client.submit_job({"epochs": 1}, model=path)  # Uploads again first.
        self.assertEqual(len(self.fake.uploads), 2)
        self.assertEqual(job.spec.model.name, "torchscript")
        self.assertEqual(job.spec.model.torchscript.sha256, uploaded.sha256)
        self.assertEqual(job.spec.model.torchscript.file_name, "net.pt")
        self.client.submit_job(None, model=ModelFile("cd" * 32, 3, "other.pt", True))
        self.assertEqual(len(self.fake.uploads), 2, "a ModelFile is not uploaded again")
        self.assertEqual(self.fake.submitted[-1].model.torchscript.file_name, "other.pt")
        with self.assertRaises(FileNotFoundError):
            self.client.upload_model(os.path.join(self.tmp, "absent.pt"))


def running(step, points, state=job_pb2.RUNNING, reason=""):
    job = job_pb2.Job(job_id="job-1-abcd", state=state, step=step, total_steps=100,
                      state_reason=reason)
    for s in points:
        job.progress.add(step=s, loss=1.0 / s)
    return job


class FollowTest(WithFakeCoordinator):

    def test_each_new_point_once_in_order_until_the_job_ends(self):
        # A history the coordinator thinned (2 and 4 dropped) between two polls.
        self.fake.jobs = [running(0, []), running(2, [1, 2]), running(5, [1, 3, 5]),
                          running(5, [1, 3, 5]), running(100, [1, 3, 5, 100], job_pb2.COMPLETED)]
        steps = [p.step for p in self.client.follow_job(poll_interval=0.01)]
        self.assertEqual(steps, [1, 2, 3, 5, 100])

    def test_wait_calls_back_and_returns_the_ended_job(self):
        self.fake.jobs = [running(1, [1]), running(1, [1]), running(2, [1, 2]),
                          running(3, [1, 2, 3], job_pb2.COMPLETED)]
        seen = []
        job = self.client.wait_for_job("job-1-abcd", poll_interval=0.01, on_progress=seen.append,
                                       timeout=10, check=True)
        self.assertEqual(job.state, JobState.COMPLETED)
        self.assertEqual([p.step for p in seen], [1, 2, 3])

    def test_a_failed_job_raises_with_check(self):
        self.fake.jobs = [running(3, [3], job_pb2.FAILED, "worker w1 failed: out of memory")]
        self.assertEqual(self.client.wait_for_job().state, JobState.FAILED)
        with self.assertRaises(JobFailedError) as e:
            self.client.wait_for_job(check=True)
        self.assertEqual(e.exception.job.state, JobState.FAILED)
        self.assertIn("FAILED: worker w1 failed: out of memory", str(e.exception))
        self.assertEqual(e.exception.code, grpc.StatusCode.ABORTED)

    def test_the_timeout_raises_with_the_job_as_last_seen(self):
        self.fake.jobs = [running(7, [7])]
        with self.assertRaises(WaitTimeoutError) as e:
            self.client.wait_for_job(timeout=0.3, poll_interval=0.05)
        self.assertIsInstance(e.exception, TimeoutError)
        self.assertEqual((e.exception.job.step, e.exception.code),
                         (7, grpc.StatusCode.DEADLINE_EXCEEDED))
        self.assertIn("RUNNING at step 7 of 100", str(e.exception))

    def test_a_coordinator_briefly_away_is_waited_for(self):
        self.fake.jobs = [running(1, [1]), running(1, [1]), running(2, [1, 2], job_pb2.COMPLETED)]
        # wait_for_job's and follow_job's first GetJob answer, the first poll does not.
        answers = [None, None, (grpc.StatusCode.UNAVAILABLE, "restarting")]
        self.fake.errors["GetJob"] = lambda: answers.pop(0) if answers else None
        job = self.client.wait_for_job(poll_interval=0.01, timeout=10)
        self.assertEqual(job.state, JobState.COMPLETED)
        self.fake.errors["GetJob"] = (grpc.StatusCode.PERMISSION_DENIED, "no")
        with self.assertRaises(TributaryError) as e:
            self.client.wait_for_job()
        self.assertEqual(e.exception.code, grpc.StatusCode.PERMISSION_DENIED)


class PullTest(WithFakeCoordinator):

    def start_shards(self, *shards):
        servers = []
        for shard in shards:
            server, address = serve(
                pb.parameter_server_pb2_grpc.add_ParameterServerServicer_to_server, shard)
            servers.append(server)
            self.fake.shards.append(address)
        self.addCleanup(lambda: [s.stop(None) for s in servers])

    def test_partitions_from_every_shard_make_the_flat_buffer(self):
        shard0 = FakeShard([partition(0, [1, 2, 3], step=8), partition(2, [6], step=7)])
        shard1 = FakeShard([partition(1, [4, 5], step=8)])
        self.start_shards(shard0, shard1)
        params = self.client.pull_parameters()
        self.assertEqual(params.values, array.array("f", [1, 2, 3, 4, 5, 6]))
        self.assertEqual(params.step, 7, "the lowest step")
        self.assertEqual([(p.partition_id, p.offset, p.length, p.shard) for p in params.partitions],
                         [(0, 0, 3, 0), (1, 3, 2, 1), (2, 5, 1, 0)])
        self.assertEqual(params.numpy().tolist(), [1, 2, 3, 4, 5, 6])
        credential = tributary_client.role_credential(SECRET, "operator")
        self.assertEqual(shard0.metadata["x-tributary-auth"], credential)
        self.assertNotIn("authorization", shard0.metadata, "the token stays with the coordinator")
        path = os.path.join(self.tmp, "params.f32")
        params.save(path)
        self.assertEqual(os.path.getsize(path), 24)
        self.assertEqual(tributary_client.load_parameters(path), params.values)

    def test_a_shard_refusing_names_the_shard(self):
        self.start_shards(FakeShard([partition(0, [1])]),
                          FakeShard([], (grpc.StatusCode.FAILED_PRECONDITION,
                                         "Pull for job 'job-1-abcd' but shard 1 holds job 'x'")))
        with self.assertRaises(TributaryError) as e:
            self.client.pull_parameters()
        self.assertEqual(e.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertEqual(e.exception.rpc, "Pull from shard 1 at %s" % self.fake.shards[1])

    def test_missing_repeated_or_mistyped_partitions_are_data_loss(self):
        for pulled, text in [
            ([(0, partition(0, [1])), (1, partition(2, [1]))], "partition(s) 1 "),
            ([(0, partition(0, [1])), (1, partition(0, [1]))], "by shard 0 and by shard 1"),
            ([(0, partition(0, [1], dtype=tensor_pb2.FLOAT16))], "FLOAT16, not FLOAT32"),
            ([(0, tensor_pb2.PartitionValues(partition_id=0, dtype=tensor_pb2.FLOAT32,
                                         data=b"abc"))], "3 bytes"),
            ([], "no shard answered"),
        ]:
            with self.assertRaises(TributaryError, msg=text) as e:
                parameters.assemble("job-1", pulled)
            self.assertEqual(e.exception.code, grpc.StatusCode.DATA_LOSS)
            self.assertIn(text, e.exception.details)

    def test_no_shards_is_a_failed_precondition(self):
        with self.assertRaises(TributaryError) as e:
            self.client.pull_parameters()
        self.assertEqual(e.exception.code, grpc.StatusCode.FAILED_PRECONDITION)


class ExportTest(WithFakeCoordinator):

    def fake_cli(self, name, script):
        return self.write(name, "#!/bin/sh\n" + script, mode=stat.S_IRWXU)

    def test_a_built_in_model_runs_tributary_export_and_keeps_its_errors(self):
        self.fake.jobs = [job_pb2.Job(job_id="job-1-abcd",
                                      spec=job_pb2.JobSpec(model=job_pb2.ModelSpec(name="mlp")))]
        out = os.path.join(self.tmp, "m.pt")
        args_file = os.path.join(self.tmp, "args")
        ok = self.fake_cli("ok", 'echo "$@" > %s\n'
                           'echo "exported mlp of job job-1-abcd (step 42, 1234 values) to $2"\n'
                           % args_file)
        with Client(self.address, cluster_token_file=self.secret_file, tributary_cli=ok) as c:
            result = c.export_model(out)
        self.assertEqual(result, export.ExportResult("job-1-abcd", "mlp", 42, 1234, out))
        with open(args_file) as f:
            self.assertEqual(f.read().split(), [
                "export", "--out=" + out, "--coordinator=" + self.address,
                "--cluster_token_file=" + self.secret_file, "--job_id=job-1-abcd"])

        refused = self.fake_cli(
            "refused", 'echo "tributary: NOT_FOUND: no checkpoint of job x" >&2\nexit 1\n')
        odd = self.fake_cli("odd", 'echo "Segmentation fault" >&2\nexit 139\n')
        for cli, code, details in [
                (refused, grpc.StatusCode.NOT_FOUND, "no checkpoint of job x"),
                (odd, grpc.StatusCode.UNKNOWN, "Segmentation fault")]:
            with Client(self.address, tributary_cli=cli) as c:
                with self.assertRaises(TributaryError) as e:
                    c.export_model(out)
            self.assertEqual((e.exception.code, e.exception.details, e.exception.rpc),
                             (code, details, "tributary export"))

        with Client(self.address, tributary_cli=os.path.join(self.tmp, "absent")) as c:
            with self.assertRaises(FileNotFoundError) as e:
                c.export_model(out)
            self.assertIn("tributary_cli", str(e.exception))
        credential = tributary_client.role_credential(SECRET)
        with Client(self.address, cluster_credential=credential, tributary_cli=ok) as c:
            with self.assertRaises(ValueError) as e:
                c.export_model(out)
            self.assertIn("cluster_token_file", str(e.exception))


class TorchScriptLayoutTest(unittest.TestCase):

    def test_parameters_then_buffers_then_frozen_parameters(self):
        import torch

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.frozen = torch.nn.Parameter(torch.ones(2), requires_grad=False)
                self.inner = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
                self.empty = torch.nn.Parameter(torch.zeros(0))
                self.head = torch.nn.Linear(2, 2, bias=False)

            def forward(self, x):
                return self.head(self.inner(x)) * self.frozen

        module = torch.jit.script(Net())
        names = [name for name, _ in export.layout_tensors(module)]
        self.assertEqual(names, ["inner.0.weight", "inner.0.bias", "inner.1.weight",
                                 "inner.1.bias", "head.weight", "inner.1.running_mean",
                                 "inner.1.running_var", "inner.1.num_batches_tracked", "frozen"])
        tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        buffer = io_bytes(module)
        values = array.array("f", range(6 + 2 + 2 + 2 + 4 + 2 + 2 + 1 + 2))
        out = os.path.join(tmp, "out.pt")
        self.assertEqual(export.write_torchscript(buffer, "net.pt", values, out), len(values))
        loaded = torch.jit.load(out)
        self.assertFalse(loaded.training)
        self.assertEqual(getattr(loaded.inner, "0").weight.flatten().tolist(), [0, 1, 2, 3, 4, 5])
        self.assertEqual(loaded.head.weight.flatten().tolist(), [12, 13, 14, 15])
        self.assertEqual(int(getattr(loaded.inner, "1").num_batches_tracked), 20)
        self.assertEqual(loaded.frozen.tolist(), [21, 22])
        self.assertEqual(os.listdir(tmp), ["out.pt"], "no temporary file left")
        with self.assertRaises(ValueError) as e:
            export.write_torchscript(buffer, "net.pt", values[:-1], out)
        self.assertIn("23 values, the shards 22", str(e.exception))


def io_bytes(module):
    import io
    import torch
    data = io.BytesIO()
    torch.jit.save(module, data)
    return data.getvalue()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--cli", required=True)
    parser.add_argument("--token_model", required=True,
                        help="a TorchScript language model, for `tributary spec` on token data")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
