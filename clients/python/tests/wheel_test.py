"""The wheel //clients/python:wheel builds: what it holds, and that pip installs it into
a virtual environment that sees Debian's packages, where `import tributary_client`
works outside Bazel.

  wheel_test.py --wheel=PATH
"""
import argparse
import base64
import hashlib
import os
import subprocess
import sys
import unittest
import zipfile

import debian_python

debian_python.rerun_under_debian_python()

ARGS = None


class WheelTest(unittest.TestCase):

    def test_contents_and_record(self):
        with zipfile.ZipFile(ARGS.wheel) as wheel:
            names = wheel.namelist()
            for module in ("__init__", "client", "errors", "credentials", "specs",
                           "parameters", "export", "_proto/__init__", "_proto/job_pb2",
                           "_proto/tensor_pb2", "_proto/coordinator_pb2",
                           "_proto/coordinator_pb2_grpc", "_proto/parameter_server_pb2",
                           "_proto/parameter_server_pb2_grpc"):
                self.assertIn("tributary_client/%s.py" % module, names)
            self.assertIn("tributary_client/_proto/job_pb2.pyi", names)
            self.assertFalse([n for n in names if "test" in n or n.endswith(".pyc")], names)
            self.assertEqual(names[-1], "tributary_client-0.1.0.dist-info/RECORD")
            metadata = wheel.read("tributary_client-0.1.0.dist-info/METADATA").decode()
            self.assertIn("Requires-Dist: grpcio>=1.51", metadata)
            record = wheel.read("tributary_client-0.1.0.dist-info/RECORD").decode().splitlines()
            self.assertEqual(len(record), len(names))
            for line in record[:-1]:
                name, digest, size = line.split(",")
                data = wheel.read(name)
                self.assertEqual(int(size), len(data), name)
                expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
                self.assertEqual(digest, "sha256=" + expected.decode(), name)

    def test_pip_installs_it_and_it_imports_outside_bazel(self):
        work = os.environ["TEST_TMPDIR"]
        venv = os.path.join(work, "venv")
        # Debian's grpcio, protobuf (and pip) come from the system site packages.
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                        venv], check=True)
        python = os.path.join(venv, "bin", "python")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
        installed = subprocess.run([python, "-m", "pip", "install", "--no-index", ARGS.wheel],
                                   capture_output=True, text=True, env=env, cwd=work)
        self.assertEqual(installed.returncode, 0, installed.stdout + installed.stderr)
        probe = ("import tributary_client as t; "
                 "c = t.Client('127.0.0.1:1'); c.close(); "
                 "print(t.__file__); print(t.__version__); "
                 "print(t.job_spec({'mode': 'ASYNC'}).mode == t.TrainingMode.Value('ASYNC'))")
        ran = subprocess.run([python, "-c", probe], capture_output=True, text=True, env=env,
                             cwd=work)
        self.assertEqual(ran.returncode, 0, ran.stderr)
        where, version, parsed = ran.stdout.split()
        self.assertTrue(where.startswith(venv), where)
        self.assertEqual((version, parsed), ("0.1.0", "True"))

    def test_the_wheel_on_pythonpath_imports_too(self):
        env = dict(os.environ, PYTHONPATH=ARGS.wheel)
        ran = subprocess.run([sys.executable, "-c",
                              "import tributary_client as t; print(t.__file__)"],
                             capture_output=True, text=True, env=env,
                             cwd=os.environ["TEST_TMPDIR"])
        self.assertEqual(ran.returncode, 0, ran.stderr)
        self.assertTrue(ran.stdout.startswith(ARGS.wheel), ran.stdout)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--wheel", required=True)
    ARGS, rest = parser.parse_known_args()
    ARGS.wheel = os.path.abspath(ARGS.wheel)  # The subprocesses run elsewhere.
    unittest.main(argv=[sys.argv[0]] + rest)
