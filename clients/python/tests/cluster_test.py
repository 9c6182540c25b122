"""The client against a live cluster: a built-in model trained, followed and exported;
a running job paused, resumed and stopped; and what the servers refuse, as exceptions.

  cluster_test.py --coordinator=BIN --parameter_server=BIN --worker=BIN --cli=BIN
"""
import argparse
import os
import sys
import time
import unittest

import debian_python

debian_python.rerun_under_debian_python()

import grpc  # noqa: E402

import live_cluster  # noqa: E402
import tributary_client  # noqa: E402
from tributary_client import Client, JobState, TributaryError  # noqa: E402

ARGS = None

# A job of a few seconds on 2 cores: an MLP 16-32-4 on Gaussian clusters. The workers
# heartbeat every 200 ms, so STEPS is long enough for several progress points.
FEATURES, CLASSES = 16, 4
STEPS = 2000


def small_job(max_steps, **extra):
    spec = {
        "name": "python-client-test",
        "model": {"name": "mlp", "layerSizes": [FEATURES, 32, CLASSES]},
        "dataset": {"format": "SYNTHETIC", "syntheticTrainSamples": 2048,
                    "syntheticTestSamples": 256, "syntheticFeatures": FEATURES,
                    "syntheticClasses": CLASSES},
        "globalBatchSize": 64, "epochs": 0, "maxSteps": max_steps,
        "optimizer": {"type": "MOMENTUM", "learningRate": 0.05},
        "evalIntervalSteps": 100, "nodesMin": 2, "seed": 7,
    }
    spec.update(extra)
    return spec


class ClusterTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.cluster = live_cluster.LiveCluster(
            {"coordinator": ARGS.coordinator, "parameter_server": ARGS.parameter_server,
             "worker": ARGS.worker},
            os.path.join(os.environ["TEST_TMPDIR"], "cluster"))
        cls.cluster.start()
        cls.client = cls.cluster.connected_client(ARGS.cli, min_workers=2)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.cluster.stop()
        # Shown by Bazel only when the test fails.
        sys.stderr.write(cls.cluster.logs())

    def setUp(self):
        # One job at a time: none of an earlier test may still be active.
        for job in self.client.list_jobs():
            if job.state not in tributary_client.TERMINAL_STATES:
                self.client.stop_job(job.job_id, reason="test cleanup")
                self.client.wait_for_job(job.job_id, timeout=60)

    def test_a_job_followed_to_completion_and_exported(self):
        job = self.client.submit_job(small_job(STEPS))
        self.assertEqual(job.state, JobState.PENDING)
        self.assertTrue(job.job_id)

        points = list(self.client.follow_job(job.job_id, poll_interval=0.1, timeout=120))
        steps = [p.step for p in points]
        self.assertGreater(len(points), 2)
        self.assertEqual(steps, sorted(set(steps)), "each step once, in order")
        self.assertEqual(steps[-1], STEPS)
        self.assertLess(points[-1].loss, points[0].loss)

        seen = []
        done = self.client.wait_for_job(job.job_id, timeout=30, on_progress=seen.append,
                                        check=True)
        self.assertEqual(done.state, JobState.COMPLETED, done.state_reason)
        self.assertEqual([p.step for p in seen], steps, "the same points to the callback")
        self.assertEqual(done.result.steps, STEPS)
        self.assertGreater(done.result.test_accuracy, 0.5)
        self.assertEqual(self.client.get_job().job_id, job.job_id, "the latest job")
        self.assertIn(job.job_id, [j.job_id for j in self.client.list_jobs()])
        self.assertEqual(tributary_client.to_dict(done)["state"], "COMPLETED")

        # The shards' flat buffer: 16*32+32 + 32*4+4 values, every partition at the last step.
        params = self.client.pull_parameters(job.job_id)
        self.assertEqual(len(params), FEATURES * 32 + 32 + 32 * CLASSES + CLASSES)
        self.assertEqual(params.step, STEPS)
        self.assertEqual(params.partitions[0].offset, 0)
        # Pull is not open: without the cluster credential, or with another cluster's,
        # the shards refuse it.
        other_secret = os.path.join(os.environ["TEST_TMPDIR"], "other.token")
        with open(other_secret, "w") as f:
            f.write("another cluster's secret, 40 bytes long\n")
        for kwargs in ({}, {"cluster_token_file": other_secret}):
            with Client(self.cluster.coordinator_address, **kwargs) as stranger:
                with self.assertRaises(TributaryError) as refused:
                    stranger.pull_parameters(job.job_id)
                self.assertEqual(refused.exception.code, grpc.StatusCode.UNAUTHENTICATED)
                self.assertIn("Pull from shard", refused.exception.rpc)

        saved = os.path.join(os.environ["TEST_TMPDIR"], "mlp.f32")
        params.save(saved)
        self.assertEqual(tributary_client.load_parameters(saved), params.values)

        # A built-in model goes through `tributary export`; its parameters are the
        # shards' values in layer order.
        out = os.path.join(os.environ["TEST_TMPDIR"], "mlp.pt")
        exported = self.client.export_model(out, job.job_id)
        self.assertEqual((exported.job_id, exported.model, exported.step, exported.parameters),
                         (job.job_id, "mlp", STEPS, len(params)))
        import torch
        module = torch.jit.load(out)
        names = [name for name, _ in module.named_parameters()]
        self.assertEqual(names, ["fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias"])
        flat = torch.cat([t.detach().flatten() for _, t in module.named_parameters()])
        self.assertTrue(torch.equal(flat, torch.tensor(params.values.tolist())))
        logits = module(torch.zeros(3, FEATURES))
        self.assertEqual(tuple(logits.shape), (3, CLASSES))

    def test_pause_resume_and_stop_a_running_job(self):
        job = self.client.submit_job(small_job(1_000_000))
        job_id = job.job_id
        with self.assertRaises(TributaryError) as refused:
            self.client.submit_job(small_job(10))
        self.assertEqual(refused.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn(job_id, refused.exception.details)

        self.wait_until(job_id, lambda j: j.state == JobState.RUNNING and j.step > 0)
        with self.assertRaises(tributary_client.WaitTimeoutError) as late:
            self.client.wait_for_job(job_id, timeout=0.5)
        self.assertIsInstance(late.exception, TimeoutError)
        self.assertEqual(late.exception.job.job_id, job_id)
        self.assertEqual(late.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)

        paused = self.client.pause_job(job_id, reason="inspect the curve", wait=True)
        self.assertEqual(paused.state, JobState.PAUSED)
        time.sleep(1.0)  # Five heartbeats.
        still = self.client.get_job(job_id)
        self.assertEqual(still.state, JobState.PAUSED)
        self.assertEqual(still.step, paused.step, "no step while paused")
        self.assertTrue(any("inspect the curve" in e.reason for e in still.events))
        with self.assertRaises(TributaryError) as twice:
            self.client.pause_job(job_id)
        self.assertEqual(twice.exception.code, grpc.StatusCode.FAILED_PRECONDITION)

        self.client.resume_job(job_id)
        self.wait_until(job_id, lambda j: j.state == JobState.RUNNING and j.step > paused.step)

        stopped = self.client.stop_job(job_id, reason="enough")
        self.assertEqual(stopped.state, JobState.STOPPED)
        with self.assertRaises(tributary_client.JobFailedError) as failed:
            self.client.wait_for_job(job_id, timeout=30, check=True)
        self.assertEqual(failed.exception.job.state, JobState.STOPPED)
        self.assertIn("STOPPED", str(failed.exception))
        with self.assertRaises(TributaryError) as again:
            self.client.stop_job(job_id)
        self.assertEqual(again.exception.code, grpc.StatusCode.FAILED_PRECONDITION)

    def test_refusals_are_errors_with_the_code_and_the_message(self):
        address = self.cluster.coordinator_address
        cases = []
        with Client(address) as stranger:
            # Reads of the job are open; control calls need the token.
            self.assertEqual(stranger.cluster_status().expected_shards, 2)
            with self.assertRaises(TributaryError) as e:
                stranger.submit_job(small_job(10))
            cases.append((e.exception, grpc.StatusCode.UNAUTHENTICATED, "Bearer"))
        with Client(address, control_token="not-the-token") as wrong:
            with self.assertRaises(TributaryError) as e:
                wrong.stop_job()
            cases.append((e.exception, grpc.StatusCode.UNAUTHENTICATED, "not valid"))
        with self.assertRaises(TributaryError) as e:
            self.client.submit_job({"optimizer": {"learningRate": -0.1}})
        cases.append((e.exception, grpc.StatusCode.INVALID_ARGUMENT,
                      "spec.optimizer.learning_rate"))
        with self.assertRaises(TributaryError) as e:
            self.client.get_job("job-404-none")
        cases.append((e.exception, grpc.StatusCode.NOT_FOUND, "job-404-none"))
        not_a_model = os.path.join(os.environ["TEST_TMPDIR"], "notes.pt")
        with open(not_a_model, "wb") as f:
            f.write(b"not a TorchScript archive")
        with self.assertRaises(TributaryError) as e:
            self.client.upload_model(not_a_model)
        cases.append((e.exception, grpc.StatusCode.INVALID_ARGUMENT, "notes.pt"))
        for error, code, text in cases:
            self.assertEqual(error.code, code, str(error))
            self.assertIn(text, error.details)
            self.assertTrue(error.rpc)
        self.assertEqual(cases[0][0].rpc, "SubmitJob")
        self.assertEqual(str(cases[0][0]), "SubmitJob: UNAUTHENTICATED: " + cases[0][0].details)

    def wait_until(self, job_id, predicate, timeout=60):
        give_up = time.monotonic() + timeout
        job = self.client.get_job(job_id)
        while not predicate(job):
            if time.monotonic() > give_up:
                self.fail("job %s: still %s at step %d (%s)"
                          % (job_id, JobState.Name(job.state), job.step, job.state_reason))
            time.sleep(0.05)
            job = self.client.get_job(job_id)
        return job


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    for flag in ("coordinator", "parameter_server", "worker", "cli"):
        parser.add_argument("--" + flag, required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
