"""Your own PyTorch model through the client: a module with BatchNorm scripted here with
Debian's python3-torch, uploaded (UploadModel), trained by a live cluster, exported by
the client with PyTorch, and checked against the shards' values and against what
`tributary export` writes for the same job.

  torchscript_test.py --coordinator=BIN --parameter_server=BIN --worker=BIN --cli=BIN
                      --torch_in_build=True|False
"""
import argparse
import hashlib
import os
import sys
import unittest

import debian_python

debian_python.rerun_under_debian_python()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from typing import Dict  # noqa: E402

import live_cluster  # noqa: E402
import tributary_client.export as export_lib  # noqa: E402
from tributary_client import Client, JobState  # noqa: E402

ARGS = None
FEATURES, CLASSES = 16, 4


class Net(torch.nn.Module):
    """Linear, BatchNorm (buffers that travel), ReLU, Linear; a frozen scale."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(FEATURES, 32)
        self.norm = torch.nn.BatchNorm1d(32)
        self.fc2 = torch.nn.Linear(32, CLASSES)
        self.scale = torch.nn.Parameter(torch.full([CLASSES], 2.0), requires_grad=False)

    def forward(self, x):
        return self.fc2(torch.relu(self.norm(self.fc1(x.flatten(1))))) * self.scale


class Regressor(torch.nn.Module):
    """Two float outputs per sample, its own squared-error loss and a named metric."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(FEATURES, 2)

    def forward(self, x):
        return self.fc(x)

    @torch.jit.export
    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (self.fc(x) - y) ** 2

    @torch.jit.export
    def metrics(self, x: torch.Tensor, y: torch.Tensor) -> Dict[str, torch.Tensor]:
        return {"mae": (self.fc(x) - y).abs().mean(1).sum()}


class TorchScriptTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        if not ARGS.torch_in_build:
            raise unittest.SkipTest("this build has no LibTorch (libtorch-dev absent when "
                                    "Bazel configured @local_torch): its workers cannot run "
                                    "TorchScript models")
        cls.dir = os.environ["TEST_TMPDIR"]
        cls.cluster = live_cluster.LiveCluster(
            {"coordinator": ARGS.coordinator, "parameter_server": ARGS.parameter_server,
             "worker": ARGS.worker}, os.path.join(cls.dir, "cluster"))
        cls.cluster.start()
        cls.client = cls.cluster.connected_client(ARGS.cli, min_workers=2)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.cluster.stop()
        sys.stderr.write(cls.cluster.logs())  # Shown by Bazel only when the test fails.

    def test_upload_train_and_export(self):
        torch.manual_seed(0)
        model_path = os.path.join(self.dir, "net.pt")
        torch.jit.script(Net().float()).save(model_path)
        with open(model_path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()

        uploaded = self.client.upload_model(model_path)
        self.assertEqual((uploaded.sha256, uploaded.file_name), (digest, "net.pt"))
        self.assertEqual(uploaded.size_bytes, os.path.getsize(model_path))
        self.assertFalse(uploaded.already_stored)
        self.assertTrue(self.client.upload_model(model_path).already_stored)

        spec = {
            "name": "own-model",
            "dataset": {"format": "SYNTHETIC", "syntheticTrainSamples": 2048,
                        "syntheticTestSamples": 256, "syntheticFeatures": FEATURES,
                        "syntheticClasses": CLASSES},
            "globalBatchSize": 64, "epochs": 0, "maxSteps": 400,
            "optimizer": {"type": "ADAM", "learningRate": 0.01}, "nodesMin": 2,
        }
        job = self.client.submit_job(spec, model=uploaded)
        self.assertEqual(job.spec.model.name, "torchscript")
        self.assertEqual(job.spec.model.torchscript.sha256, digest)
        done = self.client.wait_for_job(job.job_id, timeout=240, check=True)
        self.assertEqual(done.state, JobState.COMPLETED)
        self.assertEqual(done.result.steps, 400)
        self.assertGreater(done.result.test_accuracy, 0.5)
        with open(model_path, "rb") as f:
            self.assertEqual(self.client.fetch_model_file(job.job_id), f.read())

        out = os.path.join(self.dir, "trained.pt")
        exported = self.client.export_model(out, job.job_id)
        self.assertEqual((exported.job_id, exported.model, exported.step),
                         (job.job_id, "torchscript:net.pt", 400))
        trained = torch.jit.load(out)
        self.assertFalse(trained.training, "exported in eval mode")
        original = torch.jit.load(model_path)
        self.assertFalse(torch.equal(trained.fc1.weight, original.fc1.weight), "trained")
        self.assertTrue(torch.equal(trained.scale, original.scale), "frozen stays")
        self.assertGreater(int(trained.norm.num_batches_tracked), 0, "buffers came back")
        self.assertFalse(torch.equal(trained.norm.running_mean, original.norm.running_mean))

        # The file holds exactly the shards' values: parameters, then buffers, then
        # frozen parameters.
        params = self.client.pull_parameters(job.job_id)
        self.assertEqual(exported.parameters, len(params))
        order = [trained.fc1.weight, trained.fc1.bias, trained.norm.weight, trained.norm.bias,
                 trained.fc2.weight, trained.fc2.bias, trained.norm.running_mean,
                 trained.norm.running_var, trained.norm.num_batches_tracked, trained.scale]
        flat = torch.cat([t.detach().float().flatten() for t in order])
        self.assertTrue(torch.equal(flat, torch.tensor(params.values.tolist())))

        # And it is the file `tributary export` writes for the same job.
        by_cli = os.path.join(self.dir, "trained_by_cli.pt")
        cli_result = export_lib.run_cli_export(
            ARGS.cli, ["--coordinator=" + self.cluster.coordinator_address,
                       "--cluster_token_file=" + self.cluster.cluster_token_file,
                       "--job_id=" + job.job_id], by_cli, 300)
        self.assertEqual(cli_result.parameters, exported.parameters)
        reference = torch.jit.load(by_cli)
        ours = dict(trained.state_dict())
        theirs = dict(reference.state_dict())
        self.assertEqual(list(ours), list(theirs))
        for name in ours:
            self.assertTrue(torch.equal(ours[name], theirs[name]), name)
        x = torch.randn(8, FEATURES)
        self.assertTrue(torch.equal(trained(x), reference(x)))


    def test_own_loss_and_metrics_reach_the_client(self):
        """A regression model (float targets, its own loss) trains; its test loss and
        named metric come back in the job's result, progress and history."""
        rng = np.random.default_rng(3)
        weights = rng.normal(size=(FEATURES, 2)).astype(np.float32)
        paths = {}
        for split, n in (("train", 1024), ("test", 256)):
            x = rng.normal(size=(n, FEATURES)).astype(np.float32)
            y = (x @ weights + 0.5).astype(np.float32)
            paths[split] = (os.path.join(self.dir, split + "_x.npy"),
                            os.path.join(self.dir, split + "_y.npy"))
            np.save(paths[split][0], x)
            np.save(paths[split][1], y)
        variance = float(np.load(paths["test"][1]).var())
        model_path = os.path.join(self.dir, "regressor.pt")
        torch.manual_seed(0)
        torch.jit.script(Regressor()).save(model_path)
        uploaded = self.client.upload_model(model_path)
        spec = {
            "name": "regression",
            "dataset": {"format": "NPY", "trainPath": paths["train"][0],
                        "trainLabelsPath": paths["train"][1], "testPath": paths["test"][0],
                        "testLabelsPath": paths["test"][1]},
            "globalBatchSize": 32, "epochs": 0, "maxSteps": 300, "evalIntervalSteps": 100,
            "optimizer": {"type": "ADAM", "learningRate": 0.05}, "nodesMin": 2,
        }
        job = self.client.submit_job(spec, model=uploaded)
        done = self.client.wait_for_job(job.job_id, timeout=240, check=True)
        self.assertEqual(done.state, JobState.COMPLETED)
        self.assertLess(done.result.test_accuracy, 0, "no accuracy for its own loss")
        self.assertLess(done.result.test_loss, 0.1 * variance, "MSE well below the variance")
        self.assertIn("mae", done.result.metrics)
        self.assertLess(done.result.metrics["mae"], 0.5)
        self.assertIn("mae", done.progress[-1].metrics)
        history = self.client.get_job_history(job.job_id)
        self.assertEqual([e.step for e in history.evaluations], [100, 200, 300])
        self.assertEqual(history.evaluations[-1].metrics["mae"], done.result.metrics["mae"])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    for flag in ("coordinator", "parameter_server", "worker", "cli"):
        parser.add_argument("--" + flag, required=True)
    parser.add_argument("--torch_in_build", choices=["True", "False"], required=True)
    ARGS, rest = parser.parse_known_args()
    ARGS.torch_in_build = ARGS.torch_in_build == "True"
    unittest.main(argv=[sys.argv[0]] + rest)
