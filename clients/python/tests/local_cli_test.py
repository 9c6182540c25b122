"""The client beside `tributary local`: the launcher starts a cluster and its job, and a
Python program attaches to it through the run directory (Client.from_run_dir), pauses
and resumes the job, and follows it to the end, while the launcher shows the same job.

  local_cli_test.py --cli=BIN --coordinator=BIN --parameter_server=BIN --worker=BIN
"""
import argparse
import json
import os
import subprocess
import sys
import time
import unittest

import debian_python

debian_python.rerun_under_debian_python()

import grpc  # noqa: E402

from tributary_client import Client, JobState, TributaryError  # noqa: E402

ARGS = None


class LocalCliTest(unittest.TestCase):

    def test_attach_to_tributary_local_pause_resume_and_follow(self):
        work = os.environ["TEST_TMPDIR"]
        # `tributary local --bin_dir` wants the three binaries side by side.
        bin_dir = os.path.join(work, "bin")
        os.makedirs(bin_dir, exist_ok=True)
        for name in ("coordinator", "parameter_server", "worker"):
            os.symlink(os.path.abspath(getattr(ARGS, name)), os.path.join(bin_dir, name))
        run_dir = os.path.join(work, "run")
        summary = os.path.join(work, "summary.json")
        log_path = os.path.join(work, "tributary-local.log")
        command = [ARGS.cli, "local", "--bin_dir=" + bin_dir, "--run_dir=" + run_dir,
                   "--summary_json=" + summary, "--progress_interval=0.2",
                   "--coordinator_arg=--heartbeat_interval=200ms",
                   "--dataset=synthetic", "--synthetic_features=16", "--synthetic_classes=4",
                   "--synthetic_train=2048", "--synthetic_test=256", "--layers=16,32,4",
                   "--epochs=0", "--max_steps=6000", "--batch=64", "--eval_interval=500"]
        with open(log_path, "wb") as log:
            launcher = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL)
        try:
            self.attach_and_drive(run_dir, launcher)
            self.assertEqual(launcher.wait(120), 0, self.tail(log_path))
        except BaseException:
            sys.stderr.write(self.tail(log_path))
            raise
        finally:
            if launcher.poll() is None:
                launcher.terminate()
                launcher.wait(30)
        with open(summary) as f:
            self.assertEqual(json.load(f)["job_id"], self.job_id)

    def attach_and_drive(self, run_dir, launcher):
        ports = os.path.join(run_dir, "coordinator.ports.json")
        give_up = time.monotonic() + 60
        while not os.path.exists(ports):
            self.assertIsNone(launcher.poll(), "tributary local exited early")
            self.assertLess(time.monotonic(), give_up, "no coordinator port file")
            time.sleep(0.05)
        with Client.from_run_dir(run_dir) as client:
            # The launcher submits its job once every process serves.
            job = None
            while job is None:
                try:
                    job = client.get_job()
                except TributaryError as e:
                    self.assertEqual(e.code, grpc.StatusCode.NOT_FOUND, str(e))
                    self.assertLess(time.monotonic(), give_up, "no job submitted")
                    time.sleep(0.05)
            self.job_id = job.job_id
            while not (job.state == JobState.RUNNING and job.step > 0):
                self.assertNotIn(job.state, (JobState.COMPLETED, JobState.FAILED),
                                 job.state_reason)
                time.sleep(0.02)
                job = client.get_job(self.job_id)

            # Control calls need the run's control token: from_run_dir reads it. Without it
            # (any other local process) they are refused.
            with Client(client.address,
                        cluster_token_file=os.path.join(run_dir, "cluster.token")) as stranger:
                with self.assertRaises(TributaryError) as refused:
                    stranger.pause_job(reason="not mine")
                self.assertEqual(refused.exception.code, grpc.StatusCode.UNAUTHENTICATED)
            self.assertEqual(os.stat(os.path.join(run_dir, "control.token")).st_mode & 0o777,
                             0o600)
            paused = client.pause_job(reason="from python", wait=True)
            self.assertEqual(paused.state, JobState.PAUSED)
            time.sleep(1.0)
            self.assertEqual(client.get_job(self.job_id).step, paused.step)
            self.assertLess(paused.step, 6000)
            client.resume_job()

            points = []
            done = client.wait_for_job(self.job_id, timeout=120, on_progress=points.append,
                                       check=True)
            self.assertEqual(done.state, JobState.COMPLETED)
            self.assertEqual(done.result.steps, 6000)
            self.assertEqual(points[-1].step, 6000)
            self.assertTrue(any(e.reason.endswith("from python") for e in done.events),
                            [e.reason for e in done.events])

    @staticmethod
    def tail(path, lines=40):
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    for flag in ("coordinator", "parameter_server", "worker", "cli"):
        parser.add_argument("--" + flag, required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
