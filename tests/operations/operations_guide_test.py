#!/usr/bin/python3
"""docs/operations.md, run line by line against a live cluster of the real binaries.

The guide's own start-up block (the first code block with `bazel-bin/...` command
lines) is started here, with two changes: every process listens on a free port (the
guide's fixed ports are mapped to the real ones, like `kubectl port-forward`) and
/tmp/tributary is this test's temporary directory. Then every `grpcurl` and `curl`
line of the guide runs in document order through bash, with `grpcurl` being
//tools/grpcurl (a generic client over server reflection: nothing about Tributary's
API is compiled into it) and TOKEN set as the guide sets it. Each line must end with
status OK, or with the code its `# answers CODE` comment names. Then the metrics
tables are checked against what every process serves on /metrics.

Run by an sh_test: this file's shebang is Debian's /usr/bin/python3, which has
python3-grpcio and python3-protobuf (the `python3` first on PATH may not).
"""

import argparse
import hashlib
import hmac
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

ARGS = None
STATUS_CODES = {
    "OK": 0, "CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3, "DEADLINE_EXCEEDED": 4,
    "NOT_FOUND": 5, "ALREADY_EXISTS": 6, "PERMISSION_DENIED": 7, "RESOURCE_EXHAUSTED": 8,
    "FAILED_PRECONDITION": 9, "ABORTED": 10, "OUT_OF_RANGE": 11, "UNIMPLEMENTED": 12,
    "INTERNAL": 13, "UNAVAILABLE": 14, "DATA_LOSS": 15, "UNAUTHENTICATED": 16,
}
CODE_NAMES = {number: name for name, number in STATUS_CODES.items()}
GRPCURL_STATUS_OFFSET = 64  # grpcurl exits with 64 + the gRPC code of a failed RPC.
LINE_TIMEOUT_SECONDS = 240  # A line, including the guide's `until ...` waits.
START_TIMEOUT_SECONDS = 120
GUIDE_ROOT = "/tmp/tributary"


# --- Reading the guide ------------------------------------------------------------------

class Command:
    def __init__(self, text, line, section):
        self.text = text          # As written: may span lines (\ and quoted newlines).
        self.line = line          # 1-based line of the guide where it starts.
        self.section = section    # The "## " heading it is under.
        match = re.search(r"#\s*answers\s+([A-Z_]+)\s*$", text)
        self.expected = match.group(1) if match else "OK"
        # bash drops a backslash-newline; shlex would keep the newline as a word.
        self.words = shlex.split(text.replace("\\\n", " "), comments=True)

    def program(self):
        return self.words[0] if self.words else ""

    def is_simple(self):
        """One program, no pipes, lists or loops: its exit status is the program's."""
        return not any(w in ("|", "||", "&&", ";", "&") or w.endswith(";")
                       for w in self.words) and self.words[0] not in ("until", "while")

    def runs(self, program):
        return program in self.words

    def __str__(self):
        return "line %d (%s): %s" % (self.line, self.section, self.text)


def guide_commands(path):
    """Every shell command of the guide's ```sh blocks, in document order."""
    with open(path) as guide:
        lines = guide.read().split("\n")
    commands, section, in_block, pending, start = [], "", False, None, 0
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            if in_block and pending is not None:
                raise AssertionError("unterminated command at line %d: %s" % (start, pending))
            in_block = not in_block and stripped in ("```sh", "```bash")
            continue
        if not in_block:
            if line.startswith("## "):
                section = line[3:].strip()
            continue
        text = stripped if pending is None else pending + "\n" + line
        if pending is None:
            start = number
            if not stripped or stripped.startswith("#"):
                continue
        try:
            shlex.split(text, comments=True)
            complete = not text.endswith("\\")
        except ValueError:  # An open quote: the command goes on.
            complete = False
        if complete:
            commands.append(Command(text, start, section))
            pending = None
        else:
            pending = text
    return commands


def start_block(commands):
    """The first run of `bazel-bin/...` command lines: the cluster the guide uses."""
    starts = [c for c in commands if c.program().startswith("bazel-bin/")]
    if not starts:
        raise AssertionError("the guide starts no process (no bazel-bin/... line)")
    first_section = starts[0].section
    return [c for c in starts if c.section == first_section]


# --- The cluster ------------------------------------------------------------------------

class Process:
    def __init__(self, name, argv, log_path):
        self.name, self.argv, self.log_path = name, argv, log_path
        self.log = open(log_path, "w")
        self.popen = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                      start_new_session=True)

    def tail(self, lines=20):
        with open(self.log_path, errors="replace") as log:
            return "".join(log.readlines()[-lines:])

    def stop(self, grace=15):
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self.log.close()


class Cluster:
    """The guide's processes on free ports, and the map from its ports to theirs."""

    def __init__(self, work_dir, binaries, tool):
        self.work_dir = work_dir
        self.root = os.path.join(work_dir, "tributary")  # Stands for /tmp/tributary.
        os.makedirs(self.root)
        self.binaries = binaries   # "bazel-bin/worker/worker" -> its runfiles path.
        self.tool = tool
        self.processes = []
        self.address_map = {}      # "localhost:50051" -> "127.0.0.1:41234"
        self.http_ports = {}       # guide HTTP port -> real one
        self.grpc_address = {}     # process name -> real gRPC address
        self.http_address = {}     # process name -> real HTTP address
        with open(os.path.join(self.root, "token"), "w") as token:
            token.write("guide-test-%d\n" % os.getpid())
        self.token = "guide-test-%d" % os.getpid()
        # The cluster secret, and the operator's x-tributary-auth as docs/security.md
        # defines it: "operator " + hex HMAC-SHA256(secret, "tributary-role:operator").
        secret = "guide-cluster-secret-%d" % os.getpid()
        with open(os.path.join(self.root, "cluster.token"), "w") as token:
            token.write(secret + "\n")
        self.auth = "operator " + hmac.new(secret.encode(), b"tributary-role:operator",
                                           hashlib.sha256).hexdigest()

    def start(self, command, index):
        words = [w for w in command.words if w != "&"]
        program = words[0]
        if program not in self.binaries:
            raise AssertionError("%s: unknown binary %s (known: %s)" % (
                command, program, sorted(self.binaries)))
        name = "%s-%d" % (os.path.basename(program), index)
        port_file = os.path.join(self.work_dir, name + ".ports.json")
        argv, guide_grpc, guide_http = [self.binaries[program]], None, None
        for word in words[1:]:
            if word.startswith("--listen="):
                guide_grpc = word.rsplit(":", 1)[1]
                word = "--listen=127.0.0.1:0"
            elif word.startswith("--http_port="):
                guide_http = word.split("=", 1)[1]
                word = "--http_port=0"
            else:
                for guide, real in self.address_map.items():
                    word = word.replace(guide, real)
                word = word.replace(GUIDE_ROOT, self.root)
            argv.append(word)
        if guide_grpc is None or guide_http is None:
            raise AssertionError("%s: the guide must name --listen and --http_port" % command)
        argv += ["--port_file=" + port_file, "--drain_seconds=0.5"]
        # The logs outlive the test in its undeclared outputs (bazel-testlogs/.../outputs).
        log_dir = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", self.work_dir)
        process = Process(name, argv, os.path.join(log_dir, name + ".log"))
        self.processes.append(process)
        ports = self.wait_for_port_file(process, port_file)
        real_grpc = "127.0.0.1:%d" % ports["grpc_port"]
        self.address_map["localhost:" + guide_grpc] = real_grpc
        self.address_map["localhost:" + guide_http] = "127.0.0.1:%d" % ports["http_port"]
        self.grpc_address[name] = real_grpc
        self.http_address[name] = "127.0.0.1:%d" % ports["http_port"]
        self.wait_serving(process, real_grpc)
        return name

    def wait_for_port_file(self, process, path):
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if process.popen.poll() is not None:
                raise AssertionError("%s exited with %s:\n%s" % (
                    process.name, process.popen.returncode, process.tail()))
            try:
                with open(path) as ports:
                    return json.load(ports)
            except (OSError, ValueError):
                time.sleep(0.1)
        raise AssertionError("%s wrote no port file:\n%s" % (process.name, process.tail()))

    def call(self, address, method, body=None):
        argv = [self.tool, "-plaintext", "-max-time", "10"]
        if body is not None:
            argv += ["-d", body]
        result = subprocess.run(argv + [address, method], capture_output=True, text=True,
                                timeout=60)
        return result.returncode, result.stdout, result.stderr

    def wait_until(self, what, predicate, process=None):
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if process is not None and process.popen.poll() is not None:
                raise AssertionError("%s exited with %s:\n%s" % (
                    process.name, process.popen.returncode, process.tail()))
            if predicate():
                return
            time.sleep(0.5)
        raise AssertionError("timed out waiting for %s" % what + (
            ":\n" + process.tail() if process else ""))

    def wait_serving(self, process, address):
        def serving():
            code, out, _ = self.call(address, "grpc.health.v1.Health/Check")
            return code == 0 and json.loads(out).get("status") == "SERVING"
        self.wait_until("%s SERVING" % process.name, serving, process)

    def wait_registered(self):
        """Every shard and worker the guide started is registered with the coordinator."""
        coordinator = next(address for name, address in self.grpc_address.items()
                           if name.startswith("coordinator"))
        shards = sum(1 for p in self.processes if "parameter_server" in p.name)
        workers = sum(1 for p in self.processes if p.name.startswith("worker"))

        def registered():
            code, out, _ = self.call(coordinator, "tributary.v1.Coordinator/GetClusterStatus")
            if code != 0:
                return False
            status = json.loads(out)
            present = len(status.get("idleWorkers", [])) + sum(
                len(node.get("workers", [])) for node in status.get("nodes", []))
            return len(status.get("shards", [])) == shards and present == workers
        self.wait_until("%d shard(s) and %d worker(s) registered" % (shards, workers),
                        registered)

    def stop(self):
        for process in reversed(self.processes):
            process.stop()

    def logs(self):
        return "\n".join("--- %s (%s) ---\n%s" % (p.name, p.log_path, p.tail())
                         for p in self.processes)


def write_tools(bin_dir, tool, cluster):
    """`grpcurl` and `curl` on PATH, both aimed through the guide-to-real address map."""
    os.makedirs(bin_dir)
    with open(os.path.join(bin_dir, "grpcurl"), "w") as grpcurl:
        grpcurl.write("#!/bin/sh\nexec %s \"$@\"\n" % shlex.quote(tool))
    with open(os.path.join(bin_dir, "curl"), "w") as curl:
        curl.write("#!/usr/bin/python3\n"
                   "import json, os, sys\n"
                   "MAP = json.loads(%r)\n"
                   "args = []\n"
                   "for arg in sys.argv[1:]:\n"
                   "    for guide, real in MAP.items():\n"
                   "        arg = arg.replace(guide, real)\n"
                   "    args.append(arg)\n"
                   "os.execv('/usr/bin/curl', ['curl'] + args)\n" % json.dumps(cluster.address_map))
    for name in ("grpcurl", "curl"):
        os.chmod(os.path.join(bin_dir, name), 0o755)


# --- Metrics ----------------------------------------------------------------------------

def documented_metrics(path):
    """{subsection of "## Metrics": {metric: (type, {label names})}} from its tables."""
    with open(path) as guide:
        text = guide.read()
    section = text.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    tables = {}
    for part in section.split("\n### ")[1:]:
        title, body = part.split("\n", 1)
        rows = {}
        for row in re.findall(r"^\| `(tributary_\w+)` \|([^|]*)\|([^|]*)\|", body, flags=re.M):
            name, kind, labels = row
            rows[name] = (kind.strip(), set(re.findall(r"`(\w+)`", labels)))
        tables[title.strip()] = rows
    return tables


def served_metrics(http_address):
    """{family: (type, {label names})} from a process's /metrics."""
    with urllib.request.urlopen("http://%s/metrics" % http_address, timeout=10) as response:
        text = response.read().decode()
    families = {}
    for name, kind in re.findall(r"^# TYPE (\w+) (\w+)$", text, flags=re.M):
        families[name] = (kind, set())
    for line in text.split("\n"):
        match = re.match(r"^(\w+?)(?:_bucket|_sum|_count)?\{(.*)\} ", line)
        if not match:
            continue
        name = match.group(1)
        if name not in families:
            name = re.sub(r"_(bucket|sum|count)$", "", line.split("{", 1)[0])
        labels = set(re.findall(r"(\w+)=\"", match.group(2))) - {"le"}
        if name in families:
            families[name][1].update(labels)
    return {name: value for name, value in families.items() if name.startswith("tributary_")}


# --- Tests ------------------------------------------------------------------------------

class OperationsGuideTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.commands = guide_commands(ARGS.guide)
        cls.work_dir = tempfile.mkdtemp(prefix="guide-", dir=os.environ.get("TEST_TMPDIR"))
        binaries = {"bazel-bin/" + path: os.path.abspath(path) for path in
                    (ARGS.coordinator, ARGS.parameter_server, ARGS.worker)}
        cls.tool = os.path.abspath(ARGS.grpcurl)
        cls.cluster = Cluster(cls.work_dir, binaries, cls.tool)
        cls.names = []
        try:
            for index, command in enumerate(start_block(cls.commands)):
                cls.names.append(cls.cluster.start(command, index))
            cls.cluster.wait_registered()
        except BaseException:
            print(cls.cluster.logs(), file=sys.stderr)
            cls.cluster.stop()
            raise
        cls.bin_dir = os.path.join(cls.work_dir, "bin")
        write_tools(cls.bin_dir, cls.tool, cls.cluster)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def run_line(self, command):
        env = {
            "PATH": "%s:/usr/bin:/bin" % self.bin_dir,
            "HOME": self.work_dir,
            "TOKEN": self.cluster.token,
            "AUTH": self.cluster.auth,
            "GRPCURL_ADDRESS_MAP": ",".join("%s=%s" % item
                                            for item in self.cluster.address_map.items()),
        }
        text = command.text.replace(GUIDE_ROOT, self.cluster.root)
        try:
            return subprocess.run(["/bin/bash", "-c", text], cwd=self.work_dir, env=env,
                                  capture_output=True, text=True, timeout=LINE_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired as expired:
            self.fail("%s\ndid not finish within %ds; stdout:\n%s\n%s" % (
                command, LINE_TIMEOUT_SECONDS, expired.stdout, self.cluster.logs()))

    def test_1_every_grpcurl_and_curl_line_in_document_order(self):
        runnable = [c for c in self.commands if c.runs("grpcurl") or c.runs("curl")]
        grpcurl_lines = [c for c in runnable if c.runs("grpcurl")]
        # The guide covers every control call the issue asks for.
        called = " ".join(" ".join(c.words) for c in grpcurl_lines)
        for method in ("Coordinator/SubmitJob", "Coordinator/GetJob", "Coordinator/ListJobs",
                       "Coordinator/PauseJob", "Coordinator/ResumeJob", "Coordinator/StopJob",
                       "Coordinator/ListWorkers", "Coordinator/GetClusterStatus",
                       "ParameterServer/GetShardStatus", "ParameterServer/Checkpoint",
                       "Worker/GetStatus", "Worker/Drain", "grpc.health.v1.Health/Check"):
            self.assertIn(method, called)
        for verb in (" list", " describe tributary.v1.Coordinator",
                     " describe tributary.v1.ParameterServer", " describe tributary.v1.Worker"):
            self.assertIn(verb, called)
        ran = 0
        for command in runnable:
            expected = command.expected
            self.assertIn(expected, STATUS_CODES, "%s: unknown status" % command)
            for word in command.words:
                for address in re.findall(r"localhost:\d+", word):
                    self.assertIn(address, self.cluster.address_map,
                                  "%s: %s is not in the guide's address table" % (
                                      command, address))
            result = self.run_line(command)
            shown = "%s\nexit status %d\nstdout:\n%s\nstderr:\n%s" % (
                command, result.returncode, result.stdout[-3000:], result.stderr[-3000:])
            if command.is_simple() and command.program() == "grpcurl":
                if result.returncode == 0:
                    status = "OK"
                elif result.returncode > GRPCURL_STATUS_OFFSET:
                    status = CODE_NAMES.get(result.returncode - GRPCURL_STATUS_OFFSET, "?")
                else:
                    self.fail("grpcurl failed before the RPC: " + shown)
                self.assertEqual(status, expected, shown)
                if status == "OK" and "/" in command.words[-1]:
                    self.assert_json_documents(result.stdout, shown)
            else:
                self.assertEqual(expected, "OK",
                                 "%s: only a single grpcurl call can expect an error" % command)
                self.assertEqual(result.returncode, 0, shown)
            ran += 1
        print("ran %d guide lines (%d grpcurl)" % (ran, len(grpcurl_lines)), file=sys.stderr)

    def assert_json_documents(self, text, shown):
        decoder, position, documents = json.JSONDecoder(), 0, 0
        while position < len(text):
            if text[position].isspace():
                position += 1
                continue
            try:
                _, position = decoder.raw_decode(text, position)
            except ValueError as error:
                self.fail("answer is not JSON (%s): %s" % (error, shown))
            documents += 1
        self.assertGreater(documents, 0, shown)

    def test_2_metrics_tables_match_what_each_process_serves(self):
        tables = documented_metrics(ARGS.guide)
        shared = next(rows for title, rows in tables.items() if title == "Every service")
        by_binary = {
            "coordinator": ("Coordinator", ARGS.coordinator_metrics),
            "parameter_server": ("Parameter server shard", ARGS.ps_metrics),
            "worker": ("Worker", ARGS.worker_metrics),
        }
        sources = {}
        for binary, (_, paths) in by_binary.items():
            sources[binary] = []
            for path in paths.split(",") + [ARGS.rpc_metrics]:
                with open(path) as source:
                    sources[binary].append(source.read())
        self.assertEqual(set(tables), {"Every service"} | {v[0] for v in by_binary.values()})
        checked = set()
        for name in self.names:
            binary = name.rsplit("-", 1)[0]
            if binary in checked or self.cluster.processes[self.names.index(name)].popen.poll() \
                    is not None:
                continue  # One live process of each kind (the guide drains a worker).
            checked.add(binary)
            title, _ = by_binary[binary]
            documented = dict(shared, **tables[title])
            served = served_metrics(self.cluster.http_address[name])
            for family, (kind, labels) in served.items():
                self.assertIn(family, documented, "%s serves %s, which the guide's '%s' "
                              "table does not list" % (name, family, title))
                self.assertEqual(kind, documented[family][0], "%s: type of %s" % (name, family))
                self.assertEqual(labels, documented[family][1],
                                     "%s: labels of %s" % (name, family))
            # A family with no sample yet (a failure reason never hit) is not served: then
            # the binary's metrics code must register it.
            for family in documented:
                if family not in served:
                    self.assertTrue(any('"%s"' % family in text for text in sources[binary]),
                                    "the guide lists %s for %s, which does not serve it and "
                                    "whose metrics code does not name it" % (family, binary))
        self.assertEqual(checked, set(by_binary))


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    for name in ("guide", "grpcurl", "coordinator", "parameter_server", "worker",
                 "coordinator_metrics", "ps_metrics", "worker_metrics", "rpc_metrics"):
        parser.add_argument("--" + name, required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
