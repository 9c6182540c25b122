"""Every flag of every binary is documented, so the docs cannot drift from the code.

Runs each binary with --helpfull, takes the flags Tributary's own sources define (not
Abseil's), and checks that the binary's document names each one (`--name` or `name`
in backticks). Flags from common/ (shared by every binary) may be documented once, in
the shared places instead; the job flags (common/job_flags*.cc) may not.

  flags_documented_test.py --shared=DOC[,DOC] BINARY=DOC[,DOC] ...
"""
import argparse
import re
import subprocess
import sys
import unittest

ARGS = None


def own_flags(binary):
    """{source file: [flag names]} for the flags of Tributary's sources."""
    out = subprocess.run([binary, "--helpfull"], capture_output=True, text=True, timeout=60)
    text = out.stdout + out.stderr
    flags = {}
    parts = re.split(r"\n  Flags from ([^:\n]+):\n", text)
    for source, body in zip(parts[1::2], parts[2::2]):
        if source.startswith("./") or source.startswith("/usr"):
            continue  # Abseil's and glog's own flags.
        flags[source] = re.findall(r"^    --(\w+) \(", body, re.M)
    return flags


def read(path):
    with open(path) as f:
        return f.read()


def documented(name, texts):
    pattern = re.compile(r"(--%s\b|`%s`)" % (re.escape(name), re.escape(name)))
    return any(pattern.search(text) for text in texts)


class FlagsDocumentedTest(unittest.TestCase):
    def test_every_flag_is_documented(self):
        shared_docs = [read(path) for path in ARGS.shared.split(",")]
        missing = []
        checked = 0
        for pair in ARGS.binaries:
            binary, docs = pair.split("=", 1)
            texts = [read(path) for path in docs.split(",")]
            flags = own_flags(binary)
            self.assertTrue(flags, "%s --helpfull listed no flags of ours" % binary)
            for source, names in sorted(flags.items()):
                for name in names:
                    checked += 1
                    # The job flags (common/job_flags*.cc) are each binary's own: they are
                    # documented with the binary that takes them.
                    shared = source.startswith("common/") and "job_flags" not in source
                    if documented(name, texts) or (shared and documented(name, shared_docs)):
                        continue
                    missing.append("%s: --%s (from %s) is not in %s" %
                                   (binary.split("/")[-1], name, source, docs))
        self.assertEqual(missing, [], "undocumented flags:\n" + "\n".join(missing))
        self.assertGreater(checked, 50, "too few flags seen: is --helpfull parsed right?")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--shared", required=True)
    parser.add_argument("binaries", nargs="+")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
