#!/usr/bin/python3
"""The chart's Prometheus rules, checked and unit-tested by the real promtool.

`promtool check rules` on deploy/helm/tributary/files/prometheus-rules.yaml, then
`promtool test rules` on tests/monitoring/prometheus_rules_test.yaml, whose series fire
every alert of the file and hold each back where it must stay quiet. Every alert and
recording rule of the file must be exercised by that test file. promtool comes from
Debian's `prometheus` package (scripts/setup installs it).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ARGS = None


def promtool():
    path = shutil.which("promtool")
    if path is None:
        raise AssertionError("promtool not found: run scripts/setup (Debian package prometheus)")
    return path


class PrometheusRulesTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="prometheus_rules_test.")
        # promtool resolves rule_files relative to the test file.
        shutil.copy(ARGS.rules, os.path.join(self.dir, "prometheus-rules.yaml"))
        shutil.copy(ARGS.tests, os.path.join(self.dir, "prometheus_rules_test.yaml"))

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_promtool(self, *args):
        result = subprocess.run([promtool(), *args], cwd=self.dir, capture_output=True,
                                text=True, timeout=120)
        return result.returncode, result.stdout + result.stderr

    def test_rules_are_valid(self):
        code, output = self.run_promtool("check", "rules", "prometheus-rules.yaml")
        self.assertEqual(code, 0, output)
        self.assertIn("SUCCESS", output)

    def test_every_alert_fires_and_holds_back_as_its_tests_say(self):
        code, output = self.run_promtool("test", "rules", "prometheus_rules_test.yaml")
        self.assertEqual(code, 0, output)
        self.assertIn("SUCCESS", output)

    def test_every_rule_has_a_test(self):
        with open(ARGS.rules) as f:
            rules = f.read()
        with open(ARGS.tests) as f:
            tests = f.read()
        alerts = re.findall(r"^\s*- alert:\s*(\S+)", rules, re.M)
        records = re.findall(r"^\s*- record:\s*(\S+)", rules, re.M)
        self.assertGreaterEqual(len(alerts), 5, rules)
        for alert in alerts:
            # Once firing and once quiet.
            self.assertGreaterEqual(len(re.findall(r"alertname:\s*%s\s*$" % re.escape(alert),
                                                   tests, re.M)), 2, alert)
        for record in records:
            self.assertRegex(tests, r"expr:.*%s" % re.escape(record), record)

    def test_a_broken_rule_fails_its_test(self):
        # The tests can fail: with a factor of 6 the straggler (5x the fastest) goes quiet.
        path = os.path.join(self.dir, "prometheus-rules.yaml")
        with open(path) as f:
            rules = f.read()
        broken = rules.replace("2 * min by (job_id)", "6 * min by (job_id)")
        self.assertNotEqual(broken, rules)
        with open(path, "w") as f:
            f.write(broken)
        code, output = self.run_promtool("test", "rules", "prometheus_rules_test.yaml")
        self.assertNotEqual(code, 0, output)
        self.assertIn("TributaryStraggler", output)


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rules", required=True)
    parser.add_argument("--tests", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
