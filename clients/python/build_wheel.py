"""Packs tributary_client (its modules and the stubs the build generated) as a wheel.

  build_wheel.py --out=DIR/tributary_client-VERSION-py3-none-any.whl FILE...

Each FILE is a path ending in clients/python/tributary_client/...: a source file, or one
the build wrote under bazel-out. The version is __version__ of tributary_client/__init__.py.
A wheel is a zip with the package and a .dist-info directory (METADATA, WHEEL, RECORD;
PEP 427); entries are sorted and dated 1980-01-01, so the same inputs give the same bytes.
"""
import argparse
import base64
import hashlib
import re
import sys
import zipfile

NAME = "tributary_client"
MARKER = "clients/python/"
METADATA = """Metadata-Version: 2.1
Name: tributary-client
Version: {version}
Summary: Python client of Tributary, data-parallel training as gRPC microservices
License: see the Tributary repository
Requires-Python: >=3.9
Requires-Dist: grpcio>=1.51
Requires-Dist: protobuf>=3.20
Provides-Extra: torch
Requires-Dist: torch; extra == "torch"

Submit, follow, pause, resume, stop and export training jobs on a Tributary cluster.
See docs/python_client.md in the Tributary repository.
"""
WHEEL = """Wheel-Version: 1.0
Generator: tributary clients/python/build_wheel.py
Root-Is-Purelib: true
Tag: py3-none-any
"""


def archive_name(path):
    """The path inside the wheel: what follows clients/python/."""
    _, found, rest = path.rpartition(MARKER)
    if not found or not rest.startswith(NAME + "/"):
        sys.exit("build_wheel.py: %s is not a file of clients/python/%s/" % (path, NAME))
    return rest


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()

    entries = {}
    for path in args.files:
        name = archive_name(path)
        if name in entries:
            sys.exit("build_wheel.py: %s given twice" % name)
        with open(path, "rb") as f:
            entries[name] = f.read()
    init = entries.get(NAME + "/__init__.py", b"").decode()
    found = re.search(r'^__version__ = "([^"]+)"$', init, re.M)
    if not found:
        sys.exit("build_wheel.py: no __version__ in %s/__init__.py" % NAME)
    version = found.group(1)
    expected = "%s-%s-py3-none-any.whl" % (NAME, version)
    if not args.out.endswith("/" + expected) and args.out != expected:
        sys.exit("build_wheel.py: --out must be named %s (version %s)" % (expected, version))

    dist_info = "%s-%s.dist-info" % (NAME, version)
    entries[dist_info + "/METADATA"] = METADATA.format(version=version).encode()
    entries[dist_info + "/WHEEL"] = WHEEL.encode()
    record = [record_line(name, data) for name, data in sorted(entries.items())]
    record.append(dist_info + "/RECORD,,")
    entries[dist_info + "/RECORD"] = ("\n".join(record) + "\n").encode()

    with zipfile.ZipFile(args.out, "w", zipfile.ZIP_DEFLATED) as wheel:
        # The .dist-info last, RECORD at the very end (PEP 427's recommendation).
        last = lambda n: (n.startswith(dist_info), n.endswith("RECORD"), n)  # noqa: E731
        for name in sorted(entries, key=last):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, entries[name])


if __name__ == "__main__":
    main()
