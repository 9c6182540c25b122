"""A live Tributary cluster on loopback for the client's tests.

Starts the real coordinator, PS shards and workers the way `tributary local` does
(cli/local_cluster.cc: free ports through --port_file, a fresh cluster secret, one
node per worker), with a control token on the coordinator, and workers that stay for
the next job: `tributary local` itself submits one job and stops the cluster when it
ends, while these tests submit several jobs through the client.
"""
import ctypes
import json
import os
import secrets
import signal
import subprocess
import sys
import time

from tributary_client import Client

_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    # A child outlives no test: it gets SIGTERM when the test process goes.
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _write_private(path, text):
    if os.path.exists(path):
        os.remove(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


class LiveCluster:
    """A coordinator, `shards` PS shards and `workers` CPU workers under `run_dir`."""

    def __init__(self, binaries, run_dir, shards=2, workers=2, control_token=True,
                 coordinator_args=(), worker_args=(), common_args=()):
        """`binaries`: {"coordinator": path, "parameter_server": path, "worker": path};
        `common_args` go to every process (e.g. the TLS flags)."""
        self.binaries = binaries
        self.run_dir = run_dir
        self.shards = shards
        self.workers = workers
        self.with_control_token = control_token
        self.coordinator_args = list(coordinator_args)
        self.worker_args = list(worker_args)
        self.common_args = list(common_args)
        self.processes = []  # (name, Popen)
        self.coordinator_address = None
        self.cluster_token_file = os.path.join(run_dir, "cluster.token")
        self.control_token_file = os.path.join(run_dir, "control.token")

    def start(self, timeout=60):
        """Starts every process, each once the one before serves; raises RuntimeError
        with the log's tail when one does not come up. On any failure the processes
        started are stopped and every log's tail goes to stderr."""
        try:
            return self._start_all(timeout)
        except BaseException:
            self._give_up()
            raise

    def connected_client(self, tributary_cli, min_workers):
        """The operator's Client, once `min_workers` workers have registered; on failure
        the cluster is stopped as in start()."""
        client = Client(self.coordinator_address, tributary_cli=tributary_cli,
                        **self.client_kwargs())
        try:
            client.wait_for_cluster(timeout=60, min_workers=min_workers)
        except BaseException:
            client.close()
            self._give_up()
            raise
        return client

    def _give_up(self):
        sys.stderr.write(self.logs())
        self.stop()

    def _start_all(self, timeout):
        os.makedirs(self.run_dir, exist_ok=True)
        _write_private(self.cluster_token_file, secrets.token_hex(32))
        token_flag = "--cluster_token_file=" + self.cluster_token_file
        coordinator = [self.binaries["coordinator"], token_flag,
                       "--ps_shards=%d" % self.shards,
                       "--state_dir=" + os.path.join(self.run_dir, "coordinator-state"),
                       "--heartbeat_interval=200ms", "--settle_window=200ms",
                       "--shard_poll_interval=250ms", "--drain_seconds=0.2"]
        if self.with_control_token:
            _write_private(self.control_token_file, secrets.token_urlsafe(24) + "\n")
            coordinator.append("--control_token_file=" + self.control_token_file)
        port = self._start("coordinator", coordinator + self.coordinator_args, timeout)
        self.coordinator_address = "127.0.0.1:%d" % port
        for i in range(self.shards):
            name = "ps-%d" % i
            self._start(name, [self.binaries["parameter_server"], token_flag,
                               "--coordinator=" + self.coordinator_address,
                               "--shard_index=%d" % i,
                               "--checkpoint_dir=%s/%s-checkpoints" % (self.run_dir, name),
                               "--drain_seconds=0.2"], timeout)
        for i in range(self.workers):
            self._start("worker-%d" % i,
                        [self.binaries["worker"], token_flag,
                         "--coordinator=" + self.coordinator_address, "--node=node-%d" % i,
                         "--devices=cpu", "--cpu_threads=1", "--drain_seconds=0.2"]
                        + self.worker_args, timeout)
        return self

    def _start(self, name, argv, timeout):
        port_file = os.path.join(self.run_dir, name + ".ports.json")
        if os.path.exists(port_file):
            os.remove(port_file)
        argv = argv + self.common_args + ["--listen=127.0.0.1:0", "--http_port=0",
                                          "--port_file=" + port_file]
        log = open(os.path.join(self.run_dir, name + ".log"), "wb")
        # Everything glog says goes to the process's log (under Bazel it would otherwise
        # write its own files into TEST_TMPDIR).
        env = dict(os.environ, GLOG_logtostderr="1")
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, env=env,
                                   preexec_fn=_die_with_parent)
        log.close()
        self.processes.append((name, process))
        give_up = time.monotonic() + timeout
        while time.monotonic() < give_up:
            if process.poll() is not None:
                raise RuntimeError("%s exited with %s:\n%s"
                                   % (name, process.returncode, self.log_tail(name)))
            try:
                with open(port_file) as f:
                    return json.load(f)["grpc_port"]  # Written once it serves.
            except (OSError, ValueError, KeyError):
                time.sleep(0.05)
        raise RuntimeError("%s wrote no port file within %ds:\n%s"
                           % (name, timeout, self.log_tail(name)))

    def log_tail(self, name, lines=30):
        """The last lines of a process's log."""
        try:
            with open(os.path.join(self.run_dir, name + ".log"), errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError as e:
            return str(e)

    def logs(self):
        """Every process's log tail, for a failing test's output."""
        return "\n".join("--- %s (exit %s):\n%s" % (name, p.poll(), self.log_tail(name))
                         for name, p in self.processes)

    def client_kwargs(self):
        """Client(**kwargs) of the operator: the control token and the cluster secret."""
        kwargs = {"cluster_token_file": self.cluster_token_file}
        if self.with_control_token:
            kwargs["control_token_file"] = self.control_token_file
        return kwargs

    def stop(self, grace=10):
        """Workers, then shards, then the coordinator: SIGTERM, SIGKILL after `grace`."""
        for prefix in ("worker-", "ps-", "coordinator"):
            tier = [p for name, p in self.processes if name.startswith(prefix)]
            for p in tier:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in tier:
                try:
                    p.wait(grace)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
