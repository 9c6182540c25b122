"""docs/python_client.md's example runs as it is: its Python block, against a live
cluster like the one the page starts by hand (control.token and cluster.token in the
working directory), with only the coordinator's address replaced.

  doc_example_test.py --doc=docs/python_client.md --coordinator=BIN
                      --parameter_server=BIN --worker=BIN --torch_in_build=True|False
"""
import argparse
import os
import re
import subprocess
import sys
import unittest

import debian_python

debian_python.rerun_under_debian_python()

import live_cluster  # noqa: E402

ARGS = None
MARKER = "`//clients/python:doc_example_test` runs this block"
ADDRESS = "127.0.0.1:50051"


def example(doc):
    """The ```python block after MARKER."""
    at = doc.index(MARKER)
    found = re.compile(r"^```python\n(.*?)^```$", re.M | re.S).search(doc, at)
    return found.group(1)


class DocExampleTest(unittest.TestCase):

    def test_the_example_trains_and_exports(self):
        if not ARGS.torch_in_build:
            self.skipTest("the example trains a TorchScript model: this build has no LibTorch")
        with open(ARGS.doc) as f:
            code = example(f.read())
        self.assertEqual(code.count(ADDRESS), 1, "the example names the coordinator once")
        run_dir = os.path.join(os.environ["TEST_TMPDIR"], "cluster")
        cluster = live_cluster.LiveCluster(
            {"coordinator": ARGS.coordinator, "parameter_server": ARGS.parameter_server,
             "worker": ARGS.worker}, run_dir)
        cluster.start()
        try:
            script = os.path.join(run_dir, "example.py")
            with open(script, "w") as f:
                f.write(code.replace(ADDRESS, cluster.coordinator_address))
            ran = subprocess.run([sys.executable, script], cwd=run_dir, capture_output=True,
                                 text=True, timeout=240)
            self.assertEqual(ran.returncode, 0, ran.stdout + ran.stderr)
        except BaseException:
            sys.stderr.write(cluster.logs())
            raise
        finally:
            cluster.stop()
        out = ran.stdout
        self.assertRegex(out, r"submitted job-\S+")
        self.assertRegex(out, r"step  600  loss \d")
        accuracy = float(re.search(r"done: test accuracy ([\d.]+)", out).group(1))
        self.assertGreater(accuracy, 0.5, out)
        self.assertTrue(os.path.exists(os.path.join(run_dir, "trained.pt")))
        self.assertRegex(out.splitlines()[-1], r"^tensor\(\[\d, \d, \d, \d\]\)$")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    for flag in ("doc", "coordinator", "parameter_server", "worker"):
        parser.add_argument("--" + flag, required=True)
    parser.add_argument("--torch_in_build", choices=["True", "False"], required=True)
    ARGS, rest = parser.parse_known_args()
    ARGS.torch_in_build = ARGS.torch_in_build == "True"
    unittest.main(argv=[sys.argv[0]] + rest)
