"""The client over TLS: a whole cluster serving mutual TLS (certificates made here with
openssl), a job submitted, followed, pulled and exported through the client, and the
connections TLS must refuse.

  tls_test.py --coordinator=BIN --parameter_server=BIN --worker=BIN --cli=BIN
"""
import argparse
import os
import subprocess
import sys
import unittest

import debian_python

debian_python.rerun_under_debian_python()

import grpc  # noqa: E402

import live_cluster  # noqa: E402
from tributary_client import Client, JobState, TributaryError  # noqa: E402

ARGS = None
EC_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True)


def make_pki(directory, name):
    """A CA and two certificates it signed: a server's for 127.0.0.1 and localhost
    (every process of the cluster uses it, also as its client certificate), and a
    user's. Returns the paths by name."""
    os.makedirs(directory, exist_ok=True)
    openssl("req", "-x509", *EC_KEY, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=%s test CA" % name, cwd=directory)
    with open(os.path.join(directory, "server.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for who, extra in (("server", ["-extfile", "server.ext"]), ("user", [])):
        openssl("req", *EC_KEY, "-keyout", who + ".key", "-out", who + ".csr",
                "-subj", "/CN=%s %s" % (name, who), cwd=directory)
        openssl("x509", "-req", "-in", who + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", who + ".pem", "-days", "2", *extra, cwd=directory)
    return {f: os.path.join(directory, f)
            for f in ("ca.pem", "server.pem", "server.key", "user.pem", "user.key")}


class TlsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        work = os.environ["TEST_TMPDIR"]
        cls.pki = make_pki(os.path.join(work, "pki"), "tributary")
        cls.other_pki = make_pki(os.path.join(work, "other-pki"), "stranger")
        cls.cluster = live_cluster.LiveCluster(
            {"coordinator": ARGS.coordinator, "parameter_server": ARGS.parameter_server,
             "worker": ARGS.worker}, os.path.join(work, "cluster"),
            common_args=["--tls_cert=" + cls.pki["server.pem"],
                         "--tls_key=" + cls.pki["server.key"],
                         "--tls_ca=" + cls.pki["ca.pem"]])
        cls.cluster.start()
        cls.address = cls.cluster.coordinator_address

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()
        sys.stderr.write(cls.cluster.logs())  # Shown by Bazel only when the test fails.

    def user(self, **kwargs):
        tls = {"tls_ca": self.pki["ca.pem"], "tls_cert": self.pki["user.pem"],
               "tls_key": self.pki["user.key"]}
        tls.update(kwargs)
        return Client(self.address, tributary_cli=ARGS.cli, **self.cluster.client_kwargs(),
                      **tls)

    def test_a_job_over_mutual_tls(self):
        with self.user() as client:
            client.wait_for_cluster(timeout=60, min_workers=2)
            job = client.submit_job({
                "model": {"name": "logreg", "layerSizes": [8, 3]},
                "dataset": {"format": "SYNTHETIC", "syntheticFeatures": 8,
                            "syntheticClasses": 3, "syntheticTrainSamples": 512,
                            "syntheticTestSamples": 128},
                "epochs": 0, "maxSteps": 200, "nodesMin": 2})
            done = client.wait_for_job(job.job_id, timeout=120, check=True)
            self.assertEqual(done.result.steps, 200)
            params = client.pull_parameters(job.job_id)  # From the shards, over TLS too.
            self.assertEqual(len(params), 8 * 3 + 3)
            out = os.path.join(os.environ["TEST_TMPDIR"], "logreg.pt")
            exported = client.export_model(out, job.job_id)  # `tributary export --tls_*`.
            self.assertEqual((exported.model, exported.parameters), ("logreg", 27))
        # The certificate names localhost too.
        with self.user(tls_server_name="localhost") as client:
            self.assertEqual(client.get_job(job.job_id).state, JobState.COMPLETED)

    def test_connections_tls_refuses(self):
        refused = {
            "plaintext": Client(self.address),
            "no client certificate": Client(self.address, tls_ca=self.pki["ca.pem"]),
            "a server the client does not trust": self.user(tls_ca=self.other_pki["ca.pem"]),
            "a client certificate the server does not trust": self.user(
                tls_cert=self.other_pki["user.pem"], tls_key=self.other_pki["user.key"]),
            "a name the certificate does not hold": self.user(tls_server_name="example.com"),
        }
        for what, client in refused.items():
            with client:
                with self.assertRaises(TributaryError, msg=what) as e:
                    client.cluster_status()
                self.assertEqual(e.exception.code, grpc.StatusCode.UNAVAILABLE, what)
                self.assertEqual(e.exception.rpc, "GetClusterStatus")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    for flag in ("coordinator", "parameter_server", "worker", "cli"):
        parser.add_argument("--" + flag, required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
