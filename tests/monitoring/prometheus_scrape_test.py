#!/usr/bin/python3
"""A real Prometheus scrapes a running `tributary local` cluster.

Starts `tributary local` (coordinator, 2 PS shards, 2 workers on loopback) with a job
long enough to watch, and Debian's `prometheus` on a free loopback port with a scrape
config for every process's /metrics (labelled with its component as the chart's
ServiceMonitor labels them) and the chart's rules file. Once every target is up and the
job has trained for a while, it asks Prometheus's HTTP API what an operator asks and
checks the answers against the job's own figures (the coordinator's ClusterStatus) and
against what each process serves itself:

- the job's samples/s, step-time p95 per worker, the PS wait share and shard bytes/s;
- every panel query of the chart's Grafana dashboard and every query of
  docs/operations.md "Monitoring with Prometheus and Grafana" (each must answer with
  series whose values are numbers, carrying the labels their legends name);
- every process's CPU, and its threads' by name adding up to it;
- the rules load and evaluate without errors on real series;
- `promtool check metrics` on every process's /metrics: no complaints.

Then the job is paused: every counter holds still, and the counters' sums must equal
what the job says it did (samples, steps, bytes), exactly.

Prometheus and promtool come from Debian's `prometheus` package (scripts/setup).
"""

import argparse
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

ARGS = None
WORKERS = 2
SHARDS = 2
BATCH = 64
TRAIN_SAMPLES = 60000  # Fashion-MNIST's training set.
SCRAPE_SECONDS = 1
RATE_WINDOW = "20s"  # The window of the rate checks against the job's own figures.
START_TIMEOUT = 180
TRAIN_SECONDS = 24  # Of training watched before the figures are compared.


def die(message):
    raise AssertionError(message)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


def wait_for(what, predicate, timeout, interval=0.25):
    deadline = time.time() + timeout
    last_error = None
    while time.time() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # Not there yet: a refused connection, a partial file.
            last_error = e
        time.sleep(interval)
    die("timed out after %d s waiting for %s (last error: %s)" % (timeout, what, last_error))


def samples_after(step):
    """Training samples the job has taken after `step` steps: full batches, and the last
    step of each epoch takes what is left of the 60,000."""
    steps_per_epoch = -(-TRAIN_SAMPLES // BATCH)
    return (step // steps_per_epoch) * TRAIN_SAMPLES + (step % steps_per_epoch) * BATCH


def quantile_from_buckets(q, buckets):
    """histogram_quantile's interpolation over cumulative (upper bound, count) pairs."""
    buckets = sorted(buckets)
    total = buckets[-1][1]
    if total == 0:
        return math.nan
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return math.nan


def parse_metrics(text):
    """[(name, {label: value}, value)] of Prometheus text."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)', line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out.append((m.group(1), labels, float(m.group(4))))
    return out


class Cluster:
    """`tributary local` and the Prometheus that scrapes it, in one temporary dir."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="prometheus_scrape_test.")
        self.run_dir = os.path.join(self.dir, "run")
        self.processes = []

    def start(self):
        bin_dir = os.path.join(self.dir, "bin")
        os.makedirs(bin_dir)
        for name, path in (("coordinator", ARGS.coordinator),
                           ("parameter_server", ARGS.parameter_server),
                           ("worker", ARGS.worker)):
            os.symlink(os.path.abspath(path), os.path.join(bin_dir, name))
        self.local_log = open(os.path.join(self.dir, "tributary-local.log"), "w")
        self.local = subprocess.Popen(
            [ARGS.tributary, "local", "--bin_dir=" + bin_dir, "--run_dir=" + self.run_dir,
             "--workers=%d" % WORKERS, "--ps_shards=%d" % SHARDS, "--batch=%d" % BATCH,
             "--epochs=200", "--eval_interval=200", "--progress_interval=1",
             "--coordinator_arg=--heartbeat_interval=200ms"],
            stdout=self.local_log, stderr=subprocess.STDOUT, start_new_session=True)
        self.processes.append(self.local)
        names = ["coordinator"] + ["ps-%d" % i for i in range(SHARDS)] + \
                ["worker-%d" % i for i in range(WORKERS)]
        self.ports = {}
        for name in names:
            self.ports[name] = wait_for(
                "%s's port file" % name, lambda n=name: self.read_ports(n), START_TIMEOUT)
        self.coordinator = "127.0.0.1:%d" % self.ports["coordinator"]["grpc_port"]
        self.targets = {name: "127.0.0.1:%d" % ports["http_port"]
                        for name, ports in self.ports.items()}
        self.start_prometheus()

    def read_ports(self, name):
        self.check_alive()
        with open(os.path.join(self.run_dir, name + ".ports.json")) as f:
            ports = json.load(f)
        return ports if ports.get("http_port", 0) > 0 and ports.get("grpc_port", 0) > 0 else None

    def start_prometheus(self):
        prometheus = shutil.which("prometheus")
        if prometheus is None:
            die("prometheus not found: run scripts/setup (Debian package prometheus)")
        components = {"coordinator": "coordinator", "ps": "parameter-server",
                      "worker": "worker"}
        scrape_configs = []
        for prefix, component in components.items():
            targets = [t for n, t in sorted(self.targets.items()) if n.startswith(prefix)]
            scrape_configs.append({
                "job_name": "tributary-" + component,
                "static_configs": [{"targets": targets,
                                    "labels": {"app_kubernetes_io_component": component}}],
            })
        rules = os.path.join(self.dir, "prometheus-rules.yaml")
        shutil.copy(ARGS.rules, rules)
        config = {
            "global": {"scrape_interval": "%ds" % SCRAPE_SECONDS,
                       "evaluation_interval": "%ds" % SCRAPE_SECONDS},
            "rule_files": [rules],
            "scrape_configs": scrape_configs,
        }
        # JSON is YAML.
        config_path = os.path.join(self.dir, "prometheus.yml")
        with open(config_path, "w") as f:
            json.dump(config, f, indent=1)
        self.prometheus_url = "http://127.0.0.1:%d" % free_port()
        self.prometheus_log = open(os.path.join(self.dir, "prometheus.log"), "w")
        self.prometheus = subprocess.Popen(
            [prometheus, "--config.file=" + config_path,
             "--storage.tsdb.path=" + os.path.join(self.dir, "tsdb"),
             "--web.listen-address=" + self.prometheus_url[len("http://"):],
             "--log.level=warn"],
            stdout=self.prometheus_log, stderr=subprocess.STDOUT, start_new_session=True)
        self.processes.append(self.prometheus)
        wait_for("Prometheus to be ready", lambda: self.prometheus_ready(), 60)

    def prometheus_ready(self):
        if self.prometheus.poll() is not None:
            die("prometheus exited with %s:\n%s" % (self.prometheus.returncode,
                                                    self.tail("prometheus.log")))
        return http_get(self.prometheus_url + "/-/ready", timeout=2).strip() != ""

    def check_alive(self):
        if self.local.poll() is not None:
            die("tributary local exited with %s:\n%s" % (self.local.returncode,
                                                         self.tail("tributary-local.log")))

    def tail(self, name, lines=40):
        try:
            with open(os.path.join(self.dir, name)) as f:
                return "".join(f.readlines()[-lines:])
        except OSError as e:
            return str(e)

    def cli(self, *args):
        result = subprocess.run(
            [ARGS.tributary, *args, "--coordinator=" + self.coordinator,
             "--token_file=" + os.path.join(self.run_dir, "control.token")],
            capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            die("tributary %s: exit %d: %s%s" % (" ".join(args), result.returncode,
                                                 result.stdout, result.stderr))
        return result.stdout

    def status(self):
        return json.loads(self.cli("status", "--json"))

    def query(self, expr, at=None):
        """[(labels, value)] of an instant query (at a Unix time, or now)."""
        params = {"query": expr}
        if at is not None:
            params["time"] = "%.3f" % at
        url = self.prometheus_url + "/api/v1/query?" + urllib.parse.urlencode(params)
        try:
            answer = json.loads(http_get(url))
        except urllib.error.HTTPError as e:
            die("query %r: HTTP %d: %s" % (expr, e.code, e.read().decode()))
        if answer.get("status") != "success":
            die("query %r: %s" % (expr, answer))
        if answer["data"]["resultType"] != "vector":
            die("query %r: a %s, not a vector" % (expr, answer["data"]["resultType"]))
        return [(r["metric"], float(r["value"][1])) for r in answer["data"]["result"]]

    def one(self, expr, at=None):
        result = self.query(expr, at)
        if len(result) != 1:
            die("query %r at %s: %d series, expected one: %s" % (expr, at, len(result), result))
        return result[0][1]

    def stop(self):
        for process in reversed(self.processes):
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def job_figures(status):
    """The job's step and every worker's bytes, from ClusterStatus."""
    job = status["job"]
    workers = [w for node in status.get("nodes", []) for w in node.get("workers", [])]
    return {
        "state": job["state"],
        "job_id": job["job_id"],
        "step": int(job.get("step", 0)),
        "bytes_pushed": sum(int(w.get("bytes_pushed", 0)) for w in workers),
        "bytes_pulled": sum(int(w.get("bytes_pulled", 0)) for w in workers),
        "worker_steps": sorted(int(w.get("step", 0)) for w in workers),
    }


class PrometheusScrapeTest(unittest.TestCase):
    cluster = None

    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster()
        try:
            cls.watch()
        except BaseException:
            cls.cluster.stop()
            sys.stderr.write("tributary local's log:\n%s\nprometheus's log:\n%s\n" % (
                cls.cluster.tail("tributary-local.log"), cls.cluster.tail("prometheus.log")))
            raise

    @classmethod
    def watch(cls):
        c = cls.cluster
        c.start()
        # Every target up.
        def all_up():
            c.check_alive()
            targets = json.loads(http_get(c.prometheus_url + "/api/v1/targets"))
            active = targets["data"]["activeTargets"]
            return len(active) == len(c.targets) and all(t["health"] == "up" for t in active)
        wait_for("every target to be up", all_up, 60)
        # The job training, then TRAIN_SECONDS of it watched: the job's own figures at
        # the start and the end of the last RATE_WINDOW.
        wait_for("the job to train", lambda: job_figures(c.status())["step"] > 50, START_TIMEOUT)
        window = float(RATE_WINDOW.rstrip("s"))
        time.sleep(max(0.0, TRAIN_SECONDS - window))
        cls.before, cls.before_time = cls.figures_now()
        time.sleep(window)
        cls.after, cls.after_time = cls.figures_now()
        cls.job_id = cls.after["job_id"]
        if cls.after["state"] != "RUNNING" or cls.after["step"] <= cls.before["step"]:
            die("the job did not train through the window: %s then %s" % (cls.before, cls.after))
        # Let Prometheus scrape past the window's end before anything is asked about it.
        time.sleep(2 * SCRAPE_SECONDS)
        # Paused: every counter holds still; two scrapes later Prometheus has the last
        # values, and every worker's heartbeat has reached the coordinator.
        c.cli("pause")
        wait_for("the job to be paused",
                 lambda: job_figures(c.status())["state"] == "PAUSED", 60)
        time.sleep(3 * SCRAPE_SECONDS + 1)
        cls.paused = job_figures(c.status())
        cls.paused_time = time.time()
        cls.served = {name: http_get("http://%s/metrics" % target)
                      for name, target in c.targets.items()}

    @classmethod
    def figures_now(cls):
        """The job's figures and when they held: the middle of the status call (a CLI
        process and an RPC, up to a second or two on a loaded machine)."""
        start = time.time()
        figures = job_figures(cls.cluster.status())
        return figures, (start + time.time()) / 2

    @classmethod
    def tearDownClass(cls):
        if cls.cluster is not None:
            try:
                if cls.cluster.local.poll() is None:
                    cls.cluster.cli("stop")
                    cls.cluster.local.wait(timeout=60)
            except Exception as e:  # Stopped below regardless.
                sys.stderr.write("stopping the job: %s\n" % e)
            cls.cluster.stop()
            shutil.rmtree(cls.cluster.dir, ignore_errors=True)

    def sel(self, extra=""):
        return '{job_id="%s"%s}' % (self.job_id, extra)

    # --- The operator's questions, against the job's own figures ---------------------

    def test_samples_per_second_of_the_job(self):
        c = self.cluster
        prometheus = c.one("sum by (job_id) (rate(tributary_worker_samples_total%s[%s]))"
                           % (self.sel(), RATE_WINDOW), self.after_time)
        job = (samples_after(self.after["step"]) - samples_after(self.before["step"])) / (
            self.after_time - self.before_time)
        self.assertGreater(job, 0)
        print("samples/s: Prometheus %.0f, the job %.0f (%.3f)"
              % (prometheus, job, prometheus / job))
        # Scrapes (1 s) and status calls (their middle) are up to a second off on 20 s.
        self.assertAlmostEqual(prometheus / job, 1.0, delta=0.3,
                               msg="Prometheus %.0f samples/s, the job %.0f" % (prometheus, job))
        # The chart's recording rule gives the same over its own window.
        recorded = c.one('tributary:job_samples_per_second:rate2m{job_id="%s"}' % self.job_id,
                         self.after_time)
        self.assertGreater(recorded, 0)

    def test_counters_equal_what_the_paused_job_did(self):
        c = self.cluster
        step = self.paused["step"]
        self.assertEqual(self.paused["worker_steps"], [step] * WORKERS)
        self.assertEqual(c.one("sum(tributary_worker_samples_total%s)" % self.sel()),
                         samples_after(step))
        self.assertEqual(c.one("sum(tributary_worker_step_seconds_count%s)" % self.sel()),
                         WORKERS * step)
        self.assertEqual(c.one("tributary_coordinator_job_step"), step)
        self.assertEqual(c.one('tributary_coordinator_job_state{state="PAUSED"}'), 1)
        # Bytes: what the shards took in and sent out is what the workers pushed and
        # pulled, as the coordinator heard it from them.
        self.assertEqual(c.one('sum(tributary_ps_bytes_total{direction="in"})'),
                         self.paused["bytes_pushed"])
        self.assertEqual(c.one('sum(tributary_ps_bytes_total{direction="out"})'),
                         self.paused["bytes_pulled"])
        self.assertEqual(c.one("sum(tributary_worker_bytes_pushed_total)"),
                         self.paused["bytes_pushed"])

    def test_step_time_p95_per_worker(self):
        c = self.cluster
        # Over the last window of training: one series per worker, a step time.
        during = c.query("histogram_quantile(0.95, sum by (job_id, instance, le) "
                         "(rate(tributary_worker_step_seconds_bucket%s[%s])))"
                         % (self.sel(), RATE_WINDOW), self.after_time)
        workers = {c.targets["worker-%d" % i] for i in range(WORKERS)}
        self.assertEqual({labels["instance"] for labels, _ in during}, workers, during)
        for labels, value in during:
            self.assertTrue(0 < value < 30, (labels, value))
        # Over the whole job, paused: what each worker's own histogram says.
        whole = dict((labels["instance"], value) for labels, value in c.query(
            "histogram_quantile(0.95, sum by (instance, le) "
            "(tributary_worker_step_seconds_bucket%s))" % self.sel()))
        for i in range(WORKERS):
            name = "worker-%d" % i
            buckets = [(float(labels["le"]), value)
                       for metric, labels, value in parse_metrics(self.served[name])
                       if metric == "tributary_worker_step_seconds_bucket"]
            own = quantile_from_buckets(0.95, buckets)
            self.assertAlmostEqual(whole[c.targets[name]], own, places=9, msg=name)

    def test_ps_wait_share(self):
        c = self.cluster
        during = c.one("sum by (job_id) (rate(tributary_worker_push_wait_seconds_sum%s[%s])) "
                       "/ sum by (job_id) (rate(tributary_worker_step_seconds_sum%s[%s]))"
                       % (self.sel(), RATE_WINDOW, self.sel(), RATE_WINDOW), self.after_time)
        self.assertTrue(0 < during < 1, during)
        # Paused, over the whole job: the workers' own sums.
        whole = c.one("sum(tributary_worker_push_wait_seconds_sum%s) / "
                      "sum(tributary_worker_step_seconds_sum%s)" % (self.sel(), self.sel()))
        wait = step = 0.0
        for i in range(WORKERS):
            for metric, labels, value in parse_metrics(self.served["worker-%d" % i]):
                if metric == "tributary_worker_push_wait_seconds_sum":
                    wait += value
                elif metric == "tributary_worker_step_seconds_sum":
                    step += value
        self.assertAlmostEqual(whole, wait / step, places=9)

    def test_shard_bytes_per_second(self):
        c = self.cluster
        shards = c.query("sum by (instance, direction) (rate(tributary_ps_bytes_total[%s]))"
                         % RATE_WINDOW, self.after_time)
        self.assertEqual(len(shards), 2 * SHARDS, shards)
        into = sum(value for labels, value in shards if labels["direction"] == "in")
        job = (self.after["bytes_pushed"] - self.before["bytes_pushed"]) / (
            self.after_time - self.before_time)
        self.assertGreater(job, 0)
        print("bytes/s into the shards: Prometheus %.4g, the workers' pushes %.4g (%.3f)"
              % (into, job, into / job))
        self.assertAlmostEqual(into / job, 1.0, delta=0.3,
                               msg="shards take in %.3g B/s, workers push %.3g" % (into, job))

    def test_threads_say_where_each_process_cpu_went(self):
        """process_cpu_seconds_total of every process, and its threads by name adding up
        to it (less threads too short-lived to be read); a worker's busiest thread while
        the job trains is its training thread."""
        c = self.cluster
        window = RATE_WINDOW
        process = {labels["instance"]: value for labels, value in c.query(
            "rate(process_cpu_seconds_total[%s])" % window, self.after_time)}
        threads = {labels["instance"]: value for labels, value in c.query(
            "sum by (instance) (rate(tributary_thread_cpu_seconds_total[%s]))" % window,
            self.after_time)}
        self.assertEqual(set(process), set(c.targets.values()))
        self.assertEqual(set(threads), set(c.targets.values()))
        for instance, used in process.items():
            print("%s: CPU %.3f s/s, its named threads %.3f" % (instance, used, threads[instance]))
            self.assertGreaterEqual(threads[instance], 0.5 * used - 0.02, instance)
            self.assertLessEqual(threads[instance], 1.05 * used + 0.02, instance)
        busiest = c.query('topk by (instance) (1, rate(tributary_thread_cpu_seconds_total'
                          '{app_kubernetes_io_component="worker"}[%s]))' % window,
                          self.after_time)
        self.assertEqual(len(busiest), WORKERS, busiest)
        for labels, value in busiest:
            self.assertEqual(labels["thread"], "train", (labels, value))
            self.assertGreater(value, 0.1, labels)
        switches = c.query('sum by (instance, kind) (rate(tributary_thread_context_switches_total'
                           '{app_kubernetes_io_component="worker"}[%s]))' % window,
                           self.after_time)
        self.assertEqual(len(switches), 2 * WORKERS, switches)
        for labels, value in switches:
            if labels["kind"] == "voluntary":
                self.assertGreater(value, 0, labels)  # Every step hands work over.

    # --- Every query of the dashboard and of the guide --------------------------------

    def check_query(self, expr, where, legend=""):
        result = self.cluster.query(expr, self.after_time)
        self.assertTrue(result, "%s: %s answers no series" % (where, expr))
        for labels, value in result:
            self.assertFalse(math.isnan(value), "%s: %s gives NaN for %s" % (where, expr, labels))
            for name in re.findall(r"\{\{\s*(\w+)\s*\}\}", legend):
                self.assertIn(name, labels, "%s: legend %r names a label %s lacks"
                              % (where, legend, labels))

    def test_every_dashboard_query_answers(self):
        with open(ARGS.dashboard) as f:
            dashboard = json.load(f)
        targets = [(panel["title"], target) for panel in dashboard["panels"]
                   for target in panel.get("targets", [])]
        self.assertGreaterEqual(len(targets), 10)
        for title, target in targets:
            expr = target["expr"].replace("$__rate_interval", RATE_WINDOW).replace(
                "$job_id", self.job_id)
            with self.subTest(panel=title):
                self.check_query(expr, "panel %r" % title, target.get("legendFormat", ""))
        # The job variable lists this job.
        variable = [v for v in dashboard["templating"]["list"] if v["name"] == "job_id"][0]
        metric = re.match(r"label_values\((\w+),\s*job_id\)", variable["definition"]).group(1)
        jobs = {labels.get("job_id") for labels, _ in self.cluster.query(metric, self.after_time)}
        self.assertIn(self.job_id, jobs)

    def test_every_query_of_the_operations_guide_answers(self):
        with open(ARGS.guide) as f:
            text = f.read()
        section = text.split("\n## Monitoring with Prometheus and Grafana\n", 1)[1]
        section = section.split("\n## ", 1)[0]
        queries = re.findall(r"```promql\n(.*?)```", section, re.S)
        self.assertGreaterEqual(len(queries), 5)
        for block in queries:
            expr = " ".join(line for line in block.splitlines()
                            if not line.strip().startswith("#"))
            with self.subTest(query=expr):
                self.check_query(expr, "docs/operations.md")

    def test_rules_load_and_evaluate_on_real_series(self):
        c = self.cluster
        groups = json.loads(http_get(c.prometheus_url + "/api/v1/rules"))["data"]["groups"]
        self.assertEqual({g["name"] for g in groups}, {"tributary.rules", "tributary.alerts"})
        for group in groups:
            for rule in group["rules"]:
                self.assertEqual(rule["health"], "ok", rule)
        busy = c.query("tributary:worker_busy_seconds_per_step:rate5m", self.after_time)
        self.assertEqual(len(busy), WORKERS, busy)
        for labels, value in busy:
            self.assertTrue(0 < value < 30, (labels, value))
        # A healthy job raises no alert.
        alerts = json.loads(http_get(c.prometheus_url + "/api/v1/alerts"))["data"]["alerts"]
        self.assertEqual([a for a in alerts if a["state"] == "firing"], [])

    def test_promtool_finds_nothing_wrong_with_any_metrics(self):
        promtool = shutil.which("promtool")
        if promtool is None:
            die("promtool not found: run scripts/setup (Debian package prometheus)")
        for name, text in sorted(self.served.items()):
            with self.subTest(process=name):
                result = subprocess.run([promtool, "check", "metrics"], input=text,
                                        capture_output=True, text=True, timeout=60)
                self.assertEqual((result.returncode, result.stdout + result.stderr), (0, ""),
                                 name)


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for flag in ("tributary", "coordinator", "parameter_server", "worker", "rules",
                 "dashboard", "guide"):
        parser.add_argument("--" + flag, required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
