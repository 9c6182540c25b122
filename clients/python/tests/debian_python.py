"""Runs the calling test under Debian's /usr/bin/python3.

Bazel's py_test takes the first `python3` on PATH, which may be another interpreter
(pyenv, a virtualenv) without Debian's python3-grpcio, python3-protobuf and
python3-torch. A test calls rerun_under_debian_python() before importing any of them:
it replaces the process by the same test under /usr/bin/python3 (the environment,
PYTHONPATH with Bazel's import paths included, is kept).
"""
import os
import sys

DEBIAN_PYTHON = "/usr/bin/python3"


def rerun_under_debian_python():
    """Re-executes this test with DEBIAN_PYTHON unless it already runs under it."""
    if os.path.realpath(sys.executable) == os.path.realpath(DEBIAN_PYTHON):
        return
    if not os.access(DEBIAN_PYTHON, os.X_OK):
        sys.exit("%s is missing: run scripts/setup (Debian's python3)" % DEBIAN_PYTHON)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON] + sys.argv)
