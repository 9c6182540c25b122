"""Tests of the Helm chart deploy/helm/tributary with real Helm and kubectl.

`helm lint --strict`, `helm template` for the default values, the GPU values file and
other variants, every rendered manifest parsed by `kubectl apply --dry-run=client`
(against a loopback stand-in for the API server's discovery, see fake_apiserver.py),
then checked against the binaries themselves: every flag the chart passes must be one
the binary defines (from its --helpfull), ports and probes must agree with those flags
and their defaults. Every pod must meet the Pod Security Standards' "restricted" level.
Bad values must be refused by values.schema.json, and the job specs it accepts or
refuses must be accepted or refused alike by the real ValidateJobSpec (through
`tributary submit`).
"""

import argparse
import base64
import copy
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

from fake_apiserver import FakeApiServer

ARGS = None
RELEASE = "tributary"
NAMESPACE = "ml"


# --- The tools --------------------------------------------------------------------------

def _tmpdir():
    return tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))


class Tools:
    """helm and kubectl with private homes, and the chart copied out of the runfiles."""

    def __init__(self):
        self.home = _tmpdir()
        self.env = {
            "PATH": "/usr/bin:/bin",
            "HOME": self.home,
            "HELM_CACHE_HOME": os.path.join(self.home, "cache"),
            "HELM_CONFIG_HOME": os.path.join(self.home, "config"),
            "HELM_DATA_HOME": os.path.join(self.home, "data"),
            # Never the developer's cluster: no kubeconfig unless a test names one.
            "KUBECONFIG": os.path.join(self.home, "no-kubeconfig"),
        }
        self.chart = os.path.join(self.home, "tributary")
        # Runfiles are symlinks; Helm gets plain files.
        shutil.copytree(os.path.dirname(ARGS.chart), self.chart, symlinks=False)
        self._rendered = {}

    def run(self, tool, args, env=None, check=True):
        result = subprocess.run([tool] + args, env=dict(self.env, **(env or {})),
                                capture_output=True, text=True, timeout=120)
        if check and result.returncode != 0:
            raise AssertionError("%s %s failed (%d):\n%s%s" % (
                os.path.basename(tool), " ".join(args), result.returncode, result.stdout,
                result.stderr))
        return result

    def helm(self, args, **kwargs):
        return self.run(ARGS.helm, args, **kwargs)

    def kubectl(self, args, **kwargs):
        return self.run(ARGS.kubectl, args, **kwargs)

    @staticmethod
    def value_args(values_files=(), sets=(), set_json=()):
        args = []
        for path in values_files:
            args += ["-f", path]
        for item in sets:
            args += ["--set", item]
        for item in set_json:
            args += ["--set-json", item]
        return args

    def template(self, values_files=(), sets=(), check=True, set_json=()):
        args = ["template", RELEASE, self.chart, "--namespace", NAMESPACE]
        return self.helm(args + self.value_args(values_files, sets, set_json), check=check)

    def lint(self, values_files=(), sets=(), set_json=(), check=True):
        args = ["lint", "--strict", self.chart]
        return self.helm(args + self.value_args(values_files, sets, set_json), check=check)

    def render(self, values_files=(), sets=(), set_json=()):
        """The manifests as kubectl parsed them: a list of objects (a fresh copy: the
        same values are rendered and parsed once per test run)."""
        key = (tuple(values_files), tuple(sets), tuple(set_json))
        if key not in self._rendered:
            self._rendered[key] = self._render(values_files, sets, set_json)
        return copy.deepcopy(self._rendered[key])

    def _render(self, values_files, sets, set_json):
        manifest = self.template(values_files, sets, set_json=set_json).stdout
        path = os.path.join(_tmpdir(), "manifest.yaml")
        with open(path, "w") as out:
            out.write(manifest)
        with FakeApiServer() as server:
            kubeconfig = server.write_kubeconfig(os.path.join(self.home, "kubeconfig"), NAMESPACE)
            result = self.kubectl(["apply", "--dry-run=client", "--validate=false", "-o", "json",
                                   "-f", path], env={"KUBECONFIG": kubeconfig})
        parsed = json.loads(result.stdout)
        items = parsed["items"] if parsed.get("kind") == "List" else [parsed]
        documents = len(re.findall(r"^kind: ", manifest, flags=re.M))
        if len(items) != documents:
            raise AssertionError("helm rendered %d objects, kubectl parsed %d" % (documents,
                                                                                  len(items)))
        return items


TOOLS = None


# --- The binaries' flags ----------------------------------------------------------------

_FLAG_CACHE = {}


def binary_flags(binary):
    """{flag name: default as printed} from `binary --helpfull`."""
    if binary not in _FLAG_CACHE:
        result = subprocess.run([binary, "--helpfull"], capture_output=True, text=True,
                                timeout=60)
        text = result.stdout + result.stderr
        flags = {}
        # Each flag: "    --name (help...); default: value;" possibly over several lines.
        for block in re.split(r"\n    (?=--)", text):
            match = re.match(r"--(\w+) \(", block)
            if not match:
                continue
            default = re.search(r"default: (.*?);\s*$", block, flags=re.S)
            flags[match.group(1)] = default.group(1).strip() if default else None
        if "listen" not in flags and "coordinator" not in flags:
            raise AssertionError("no flags parsed from %s --helpfull:\n%s" % (binary, text))
        _FLAG_CACHE[binary] = flags
    return _FLAG_CACHE[binary]


def flag_value(args, name):
    """The value of --name=value in args (the last one wins, as in Abseil)."""
    value = None
    for arg in args:
        if arg.startswith("--%s=" % name):
            value = arg.split("=", 1)[1]
    return value


def container_flags(container):
    """Every --name=value the container passes, from its command and args."""
    words = []
    for word in container.get("command", []) + container.get("args", []):
        words += re.findall(r"--\w+=[^\s\"]*|--\w+\b", word)
    return words


# --- Manifest helpers -------------------------------------------------------------------

def by_kind(items, kind):
    return {item["metadata"]["name"]: item for item in items if item["kind"] == kind}


def one(items, kind, name):
    found = by_kind(items, kind)
    if name not in found:
        raise AssertionError("no %s %s among %s" % (kind, name, sorted(
            (item["kind"], item["metadata"]["name"]) for item in items)))
    return found[name]


def pod_spec(workload):
    return workload["spec"]["template"]["spec"]


def only_container(workload):
    containers = pod_spec(workload)["containers"]
    assert len(containers) == 1, containers
    return containers[0]


def ports_by_name(container):
    return {port["name"]: port["containerPort"] for port in container["ports"]}


def env_field(container, name):
    for var in container.get("env", []):
        if var["name"] == name:
            return var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
    return None


def listen_port(container):
    return int(flag_value(container_flags(container), "listen").rsplit(":", 1)[1])


def default_port(binary, flag):
    value = binary_flags(binary)[flag].strip('"')
    return int(value.rsplit(":", 1)[1]) if flag == "listen" else int(value)


def find_gpu(obj):
    """Every path in obj that mentions nvidia.com/gpu."""
    found = []

    def walk(node, path):
        if isinstance(node, dict):
            for key, value in node.items():
                if "nvidia.com/gpu" in str(key):
                    found.append(path + "/" + key)
                walk(value, path + "/" + str(key))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, "%s[%d]" % (path, index))
        elif isinstance(node, str) and "nvidia.com/gpu" in node:
            found.append(path)
    walk(obj, "")
    return found


WORKLOADS = {
    # name suffix: (kind, container, binary argument)
    "coordinator": ("Deployment", "coordinator", "coordinator"),
    "ps": ("StatefulSet", "parameter-server", "parameter_server"),
    "worker": ("StatefulSet", "worker", "worker"),
}


def binary_of(role):
    return getattr(ARGS, WORKLOADS[role][2])


def workload(items, role):
    kind = WORKLOADS[role][0]
    return one(items, kind, "%s-%s" % (RELEASE, role))


def pods(items):
    """{(kind, name): pod spec} of every workload rendered."""
    return {(item["kind"], item["metadata"]["name"]): pod_spec(item) for item in items
            if item["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job")}


def selects(selector, labels):
    """Whether a LabelSelector (matchLabels, matchExpressions) matches these labels."""
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions", []):
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values", [])
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and labels.get(key) in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def path_is_under(path, root):
    path, root = os.path.normpath(path), os.path.normpath(root)
    return root == "/" or path == root or path.startswith(root + "/")


# The Pod Security Standards, level "restricted" (Kubernetes 1.31), as the API server's
# PodSecurity admission checks them: the baseline controls plus the restricted ones.
RESTRICTED_VOLUME_TYPES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                           "persistentVolumeClaim", "projected", "secret"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}


def restricted_violations(spec):
    """Every way a pod spec breaks the Pod Security "restricted" level; empty: none."""
    found = []
    pod = spec.get("securityContext", {})
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(host):
            found.append(host)
    for volume in spec.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_TYPES:
            found.append("volume %s is %s" % (volume["name"], sorted(kinds)))
    for sysctl in pod.get("sysctls", []):
        if sysctl["name"] not in SAFE_SYSCTLS:
            found.append("sysctl " + sysctl["name"])
    containers = (spec.get("initContainers", []) + spec.get("containers", []) +
                  spec.get("ephemeralContainers", []))
    for container in containers:
        name = container["name"]
        context = container.get("securityContext", {})

        def effective(key):
            return context[key] if key in context else pod.get(key)
        if context.get("privileged"):
            found.append(name + ": privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(name + ": allowPrivilegeEscalation is not false")
        capabilities = context.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []):
            found.append(name + ": capabilities.drop lacks ALL")
        if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            found.append(name + ": capabilities.add " + str(capabilities["add"]))
        if effective("runAsNonRoot") is not True:
            found.append(name + ": runAsNonRoot is not true")
        if effective("runAsUser") == 0:
            found.append(name + ": runAsUser 0")
        seccomp = (effective("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append("%s: seccompProfile %s" % (name, seccomp))
        if context.get("procMount", "Default") != "Default":
            found.append(name + ": procMount")
        apparmor = (effective("appArmorProfile") or {}).get("type", "RuntimeDefault")
        if apparmor not in ("RuntimeDefault", "Localhost"):
            found.append(name + ": appArmorProfile " + apparmor)
        selinux = effective("seLinuxOptions") or {}
        if selinux.get("user") or selinux.get("role") or selinux.get("type", "") not in (
                "", "container_t", "container_init_t", "container_kvm_t",
                "container_engine_t"):
            found.append(name + ": seLinuxOptions")
        for port in container.get("ports", []):
            if port.get("hostPort"):
                found.append("%s: hostPort %d" % (name, port["hostPort"]))
    return found


def submit_check(spec):
    """(accepted, message): the real ValidateJobSpec's verdict on a JobSpec, from
    `tributary submit --job_json` against an address that refuses connections: the CLI
    parses (proto3 JSON) and validates the spec before it dials, so UNAVAILABLE means
    the spec passed and INVALID_ARGUMENT names what did not."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # Bound, never listening: connections are refused.
        address = "127.0.0.1:%d" % closed.getsockname()[1]
        result = subprocess.run([ARGS.cli, "submit", "--coordinator=" + address,
                                 "--job_json=" + json.dumps(spec)],
                                capture_output=True, text=True, timeout=60)
    message = (result.stdout + result.stderr).strip()
    if "INVALID_ARGUMENT" in message:
        return False, message
    if "UNAVAILABLE" in message:
        return True, message
    raise AssertionError("tributary submit neither refused the spec nor dialed: " + message)


def camel(name):
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def merge_field(spec, path, value):
    """A copy of a JobSpec (lowerCamelCase) with `--set-json job.spec.PATH=VALUE` applied
    as the chart would: maps merged key by key, null deletes, proto names of fields
    replace their lowerCamelCase ones."""
    def coalesce(node, key, value):
        key = camel(key)
        if value is None:
            node.pop(key, None)
        elif isinstance(value, dict):
            target = node.setdefault(key, {})
            if not isinstance(target, dict):
                target = node[key] = {}
            for inner_key, inner_value in value.items():
                coalesce(target, inner_key, inner_value)
        else:
            node[key] = value

    spec = json.loads(json.dumps(spec))
    node = spec
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.setdefault(camel(part), {})
    coalesce(node, parts[-1], value)
    return spec


def job_spec(items):
    return json.loads(one(items, "ConfigMap", "tributary-job")["data"]["job.json"])


# --- Tests ------------------------------------------------------------------------------

class LintTest(unittest.TestCase):
    def test_lint_strict_with_default_values(self):
        result = TOOLS.helm(["lint", "--strict", TOOLS.chart])
        self.assertIn("0 chart(s) failed", result.stdout)

    def test_lint_strict_with_gpu_values(self):
        result = TOOLS.helm(["lint", "--strict", TOOLS.chart, "-f", ARGS.gpu_values])
        self.assertIn("0 chart(s) failed", result.stdout)


class DefaultValuesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.items = TOOLS.render()

    def test_kinds_and_names(self):
        self.assertEqual(
            sorted((item["kind"], item["metadata"]["name"]) for item in self.items),
            sorted([
                ("ConfigMap", "tributary-job"),
                ("Deployment", "tributary-coordinator"),
                ("NetworkPolicy", "tributary-coordinator"),
                ("NetworkPolicy", "tributary-parameter-server"),
                ("NetworkPolicy", "tributary-worker"),
                ("PersistentVolumeClaim", "tributary-coordinator-state"),
                ("PodDisruptionBudget", "tributary-ps"),
                ("Secret", "tributary-cluster-token"),
                ("Service", "tributary-coordinator"),
                ("Service", "tributary-ps"),
                ("Service", "tributary-worker"),
                ("StatefulSet", "tributary-ps"),
                ("StatefulSet", "tributary-worker"),
            ]))
        for item in self.items:
            self.assertEqual(item["metadata"]["namespace"], NAMESPACE)

    def test_every_flag_the_chart_passes_exists_in_its_binary(self):
        for role in WORKLOADS:
            container = only_container(workload(self.items, role))
            defined = binary_flags(binary_of(role))
            for flag in container_flags(container):
                name = flag[2:].split("=", 1)[0]
                self.assertIn(name, defined, "%s passes %s, which %s does not define" % (
                    role, flag, os.path.basename(binary_of(role))))

    def test_container_ports_agree_with_the_flags_and_the_binaries_defaults(self):
        for role in WORKLOADS:
            container = only_container(workload(self.items, role))
            ports = ports_by_name(container)
            flags = container_flags(container)
            # The shards also serve their TCP data plane (ps.dataPort).
            self.assertEqual(set(ports), {"grpc", "http"} | ({"data"} if role == "ps" else set()),
                             role)
            self.assertEqual(ports["grpc"], listen_port(container), role)
            self.assertEqual(ports["http"], int(flag_value(flags, "http_port")), role)
            if role == "ps":
                self.assertEqual(ports["data"], int(flag_value(flags, "data_port")))
            # The chart's defaults are the binaries' own defaults.
            self.assertEqual(ports["grpc"], default_port(binary_of(role), "listen"), role)
            self.assertEqual(ports["http"], default_port(binary_of(role), "http_port"), role)

    def test_probes_use_the_grpc_health_service_on_the_grpc_port(self):
        for role in WORKLOADS:
            container = only_container(workload(self.items, role))
            grpc_port = ports_by_name(container)["grpc"]
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                self.assertIn(probe, container, role)
                self.assertEqual(container[probe].get("grpc"), {"port": grpc_port},
                                 "%s %s" % (role, probe))
                self.assertNotIn("httpGet", container[probe])

    def test_services_reach_the_named_container_ports(self):
        services = by_kind(self.items, "Service")
        for role in WORKLOADS:
            service = services["%s-%s" % (RELEASE, role)]
            pods = workload(self.items, role)
            container = only_container(pods)
            self.assertEqual(service["spec"]["selector"], pods["spec"]["selector"]["matchLabels"])
            for key, value in service["spec"]["selector"].items():
                self.assertEqual(pods["spec"]["template"]["metadata"]["labels"][key], value)
            ports = ports_by_name(container)
            for port in service["spec"]["ports"]:
                self.assertIn(port["targetPort"], ports, role)
                self.assertEqual(port["port"], ports[port["targetPort"]], role)
        self.assertNotEqual(services["tributary-coordinator"]["spec"].get("clusterIP"), "None")
        for headless in ("tributary-ps", "tributary-worker"):
            self.assertEqual(services[headless]["spec"]["clusterIP"], "None")
            self.assertTrue(services[headless]["spec"]["publishNotReadyAddresses"])

    def test_workers_and_shards_dial_the_coordinator_service(self):
        service = one(self.items, "Service", "tributary-coordinator")
        grpc = [p["port"] for p in service["spec"]["ports"] if p["name"] == "grpc"][0]
        for role in ("ps", "worker"):
            flags = container_flags(only_container(workload(self.items, role)))
            self.assertEqual(flag_value(flags, "coordinator"), "tributary-coordinator:%d" % grpc)

    def test_coordinator_keeps_its_state_on_a_volume_and_never_runs_twice(self):
        deployment = workload(self.items, "coordinator")
        self.assertEqual(deployment["spec"]["replicas"], 1)
        self.assertEqual(deployment["spec"]["strategy"]["type"], "Recreate")
        container = only_container(deployment)
        flags = container_flags(container)
        state_dir = flag_value(flags, "state_dir")
        mount = [m for m in container["volumeMounts"] if m["mountPath"] == state_dir]
        self.assertEqual(len(mount), 1, container["volumeMounts"])
        volume = [v for v in pod_spec(deployment)["volumes"] if v["name"] == mount[0]["name"]][0]
        self.assertEqual(volume["persistentVolumeClaim"]["claimName"],
                         "tributary-coordinator-state")
        pvc = one(self.items, "PersistentVolumeClaim", "tributary-coordinator-state")
        self.assertEqual(pvc["spec"]["resources"]["requests"]["storage"], "1Gi")
        # The coordinator waits for exactly the shards the StatefulSet runs.
        self.assertEqual(int(flag_value(flags, "ps_shards")),
                         workload(self.items, "ps")["spec"]["replicas"])
        self.assertIsNone(flag_value(flags, "control_token_file"))

    def test_parameter_servers_are_a_parallel_statefulset_with_a_checkpoint_volume_each(self):
        statefulset = workload(self.items, "ps")
        self.assertEqual(statefulset["spec"]["podManagementPolicy"], "Parallel")
        self.assertEqual(statefulset["spec"]["serviceName"], "tributary-ps")
        self.assertEqual(statefulset["spec"]["replicas"], 2)
        claims = statefulset["spec"]["volumeClaimTemplates"]
        self.assertEqual([c["metadata"]["name"] for c in claims], ["checkpoints"])
        self.assertEqual(claims[0]["spec"]["resources"]["requests"]["storage"], "10Gi")
        container = only_container(statefulset)
        checkpoint_dir = flag_value(container_flags(container), "checkpoint_dir")
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        self.assertEqual(mounts.get(checkpoint_dir), "checkpoints")
        # --shard_index is the ordinal, cut from the pod name by the shell.
        self.assertEqual(container["command"][:2], ["/bin/sh", "-c"])
        self.assertIn('--shard_index="${POD_NAME##*-}"', container["command"][2])
        self.assertTrue(container["command"][2].startswith("exec /usr/local/bin/parameter_server"))
        self.assertEqual(env_field(container, "POD_NAME"), "metadata.name")
        self.assertEqual(flag_value(container_flags(container), "advertise_host"),
                         "$(POD_NAME).tributary-ps.$(POD_NAMESPACE).svc")
        # Run the command line as the container would, with echo for the binary.
        command = container["command"][2].replace("exec /usr/local/bin/", "echo ", 1)
        for pod, index in (("tributary-ps-0", "0"), ("tributary-ps-11", "11")):
            shown = subprocess.run(["/bin/sh", "-c", command, container["command"][3], "--a=1"],
                                   env={"POD_NAME": pod}, capture_output=True, text=True,
                                   check=True).stdout.split()
            self.assertEqual(shown, ["parameter_server", "--shard_index=" + index, "--a=1"])

    def test_workers_group_by_kubernetes_node_and_ask_for_no_gpu(self):
        statefulset = workload(self.items, "worker")
        self.assertEqual(statefulset["spec"]["serviceName"], "tributary-worker")
        container = only_container(statefulset)
        flags = container_flags(container)
        self.assertEqual(flag_value(flags, "node"), "$(NODE_NAME)")
        self.assertEqual(env_field(container, "NODE_NAME"), "spec.nodeName")
        self.assertEqual(flag_value(flags, "devices"), "cpu")
        self.assertEqual(flag_value(flags, "gloo_bind_host"), "$(POD_IP)")
        self.assertEqual(env_field(container, "POD_IP"), "status.podIP")
        shm = [v for v in pod_spec(statefulset)["volumes"] if v["name"] == "dshm"][0]
        self.assertEqual(shm["emptyDir"]["medium"], "Memory")
        self.assertEqual(find_gpu(self.items), [])
        self.assertNotIn("tolerations", pod_spec(statefulset))

    def test_images_run_binaries_the_dockerfile_installs(self):
        with open(ARGS.dockerfile) as dockerfile:
            collected = set(re.findall(r"bazel-bin/\S+/(\w+)", dockerfile.read()))
        for role in WORKLOADS:
            container = only_container(workload(self.items, role))
            self.assertEqual(container["image"], "tributary:0.1.0")
            program = re.search(r"/usr/local/bin/(\w+)", " ".join(container["command"])).group(1)
            self.assertEqual(program, WORKLOADS[role][2])
            self.assertIn(program, collected)

    def test_pods_run_as_the_images_user_without_api_credentials(self):
        for role in WORKLOADS:
            spec = pod_spec(workload(self.items, role))
            self.assertFalse(spec["automountServiceAccountToken"])
            self.assertEqual(spec["securityContext"]["runAsUser"], 10001)
            self.assertTrue(spec["securityContext"]["runAsNonRoot"])
            annotations = workload(self.items, role)["spec"]["template"]["metadata"]["annotations"]
            self.assertEqual(annotations["prometheus.io/port"],
                             str(ports_by_name(only_container(workload(self.items, role)))["http"]))

    def test_the_job_spec_is_stored_but_not_submitted(self):
        self.assertEqual(by_kind(self.items, "Job"), {})
        spec = json.loads(one(self.items, "ConfigMap", "tributary-job")["data"]["job.json"])
        self.assertEqual(spec["model"], {"name": "mlp", "layerSizes": [784, 256, 128, 10]})
        # nodesMax unset in the values: raised to the number of worker pods.
        self.assertEqual(spec["nodesMax"], 2)
        # CPU workers: replicasPerWorker keeps the proto's default.
        self.assertNotIn("replicasPerWorker", spec)


class GpuValuesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.items = TOOLS.render(values_files=[ARGS.gpu_values])

    def test_workers_request_and_tolerate_gpus(self):
        statefulset = workload(self.items, "worker")
        container = only_container(statefulset)
        self.assertEqual(container["resources"]["limits"]["nvidia.com/gpu"], 4)
        self.assertEqual(container["resources"]["requests"]["nvidia.com/gpu"], 4)
        self.assertEqual(container["resources"]["requests"]["cpu"], "8")
        self.assertEqual(flag_value(container_flags(container), "devices"), "gpu")
        tolerations = pod_spec(statefulset)["tolerations"]
        self.assertIn({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                      tolerations)
        self.assertIn({"key": "dedicated", "operator": "Equal", "value": "training",
                       "effect": "NoSchedule"}, tolerations)
        self.assertEqual(pod_spec(statefulset)["nodeSelector"], {"nvidia.com/gpu.present": "true"})
        self.assertEqual(container["image"], "tributary:0.1.0-cuda")

    def test_only_workers_pull_the_cuda_image(self):
        self.assertEqual(only_container(workload(self.items, "worker"))["image"],
                         "tributary:0.1.0-cuda")
        for role in ("coordinator", "ps"):
            self.assertEqual(only_container(workload(self.items, role))["image"],
                             "tributary:0.1.0", role)
        hook = only_container(one(self.items, "Job", "tributary-job-submit"))
        self.assertEqual(hook["image"], "tributary:0.1.0")

    def test_workers_mount_the_data_the_job_reads(self):
        spec = job_spec(self.items)
        self.assertEqual(spec["dataset"]["format"], "IDX")
        directory = spec["dataset"]["directory"]
        statefulset = workload(self.items, "worker")
        container = only_container(statefulset)
        # A mount of the worker holds the job's directory...
        mounts = [m for m in container["volumeMounts"] if path_is_under(directory, m["mountPath"])]
        self.assertEqual(len(mounts), 1, container["volumeMounts"])
        self.assertTrue(mounts[0]["readOnly"])
        # ...from a volume that is data (a claim), not one of the chart's own...
        volume = [v for v in pod_spec(statefulset)["volumes"] if v["name"] == mounts[0]["name"]][0]
        self.assertEqual(volume["persistentVolumeClaim"]["claimName"], "fashion-mnist")
        # ...and --data_root lets the worker read it.
        data_root = flag_value(container_flags(container), "data_root")
        self.assertIsNotNone(data_root, "no --data_root: the workers may read anything")
        self.assertTrue(path_is_under(directory, data_root), (directory, data_root))
        self.assertTrue(path_is_under(mounts[0]["mountPath"], data_root))
        self.assertIn("data_root", binary_flags(ARGS.worker))

    def test_only_workers_get_gpus(self):
        for role in ("coordinator", "ps"):
            self.assertEqual(find_gpu(workload(self.items, role)), [], role)
        paths = find_gpu(workload(self.items, "worker"))
        for path in ("/resources/limits/nvidia.com/gpu", "/resources/requests/nvidia.com/gpu"):
            self.assertTrue(any(p.endswith(path) for p in paths), (path, paths))
        self.assertTrue(any("/tolerations[" in p and p.endswith("/key") for p in paths), paths)

    def test_the_hook_submits_the_job_with_the_tributary_cli(self):
        job = one(self.items, "Job", "tributary-job-submit")
        self.assertEqual(job["metadata"]["annotations"]["helm.sh/hook"], "post-install")
        container = only_container(job)
        self.assertEqual(container["command"], ["/usr/local/bin/tributary"])
        self.assertEqual(container["args"][0], "submit")
        defined = binary_flags(ARGS.cli)
        for flag in container["args"][1:]:
            self.assertIn(flag[2:].split("=", 1)[0], defined, flag)
        self.assertEqual(flag_value(container["args"], "coordinator"), "tributary-coordinator:50051")
        job_json = flag_value(container["args"], "job_json")
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        self.assertEqual(mounts[os.path.dirname(job_json)], "job")
        volume = [v for v in pod_spec(job)["volumes"] if v["name"] == "job"][0]
        self.assertEqual(volume["configMap"]["name"], "tributary-job")
        spec = json.loads(one(self.items, "ConfigMap", "tributary-job")["data"][
            os.path.basename(job_json)])
        self.assertEqual(spec["devices"], "GPU")
        self.assertEqual(spec["wireDtype"], "FLOAT16")
        self.assertEqual(spec["nodesMin"], 2)
        self.assertEqual(spec["nodesMax"], 2)
        # One replica per GPU of the pod, so none of its 4 GPUs sits idle.
        self.assertEqual(spec["replicasPerWorker"], 4)


class OtherValuesTest(unittest.TestCase):
    def test_grpcurl_submitter_sends_the_spec_as_a_submit_job_request(self):
        items = TOOLS.render(sets=["job.submit=true", "job.submitter=grpcurl",
                                   "controlToken.value=s3cret"])
        job = one(items, "Job", "tributary-job-submit")
        container = only_container(job)
        self.assertEqual(container["image"], "fullstorydev/grpcurl:v1.9.1")
        args = container["args"]
        self.assertEqual(args[-2:], ["tributary-coordinator:50051",
                                     "tributary.v1.Coordinator/SubmitJob"])
        self.assertIn("-plaintext", args)
        body = json.loads(args[args.index("-d") + 1])
        stored = json.loads(one(items, "ConfigMap", "tributary-job")["data"]["job.json"])
        self.assertEqual(body, {"spec": stored})
        self.assertIn("-expand-headers", args)
        self.assertEqual(args[args.index("-H") + 1],
                         "authorization: Bearer ${TRIBUTARY_CONTROL_TOKEN}")
        self.assertEqual(container["env"][0]["valueFrom"]["secretKeyRef"],
                         {"name": "tributary-control-token", "key": "token"})
        self.assertEqual(pod_spec(job)["securityContext"]["runAsUser"], 65534)

    def test_control_token_secret_reaches_the_coordinator(self):
        items = TOOLS.render(sets=["controlToken.value=s3cret"])
        secret = one(items, "Secret", "tributary-control-token")
        self.assertEqual(secret["data"]["token"], "czNjcmV0")  # base64("s3cret")
        container = only_container(workload(items, "coordinator"))
        path = flag_value(container_flags(container), "control_token_file")
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        self.assertEqual(mounts[os.path.dirname(path)], "control-token")
        items = TOOLS.render(sets=["controlToken.existingSecret=mine"])
        self.assertEqual(list(by_kind(items, "Secret")), ["tributary-cluster-token"])
        volume = [v for v in pod_spec(workload(items, "coordinator"))["volumes"]
                  if v["name"] == "control-token"][0]
        self.assertEqual(volume["secret"]["secretName"], "mine")
        both = TOOLS.template(sets=["controlToken.value=a", "controlToken.existingSecret=b"],
                              check=False)
        self.assertNotEqual(both.returncode, 0)
        self.assertIn("either existingSecret or value", both.stderr)

    def test_network_policies_let_only_the_release_reach_internal_ports(self):
        items = TOOLS.render()
        policies = by_kind(items, "NetworkPolicy")
        release = {"app.kubernetes.io/name": "tributary", "app.kubernetes.io/instance": "tributary"}
        ports = {"coordinator": (50051, 8080), "parameter-server": (50061, 8081),
                 "worker": (50071, 8082)}
        for component, (grpc_port, http_port) in ports.items():
            spec = policies["tributary-" + component]["spec"]
            self.assertEqual(spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"],
                             component)
            self.assertEqual(spec["policyTypes"], ["Ingress"])
            rules = spec["ingress"]
            # Every port from the release's own pods.
            self.assertEqual(rules[0], {"from": [{"podSelector": {"matchLabels": release}}]})
            open_ports = sorted(rule["ports"][0]["port"] for rule in rules[1:])
            if component == "coordinator":
                self.assertEqual(open_ports, sorted([grpc_port, http_port]))
            else:
                self.assertEqual(open_ports, [http_port], "%s: gRPC only from the release" % component)
            for rule in rules[1:]:
                self.assertNotIn("from", rule, "empty client lists: anyone")
        # Pods of the release must carry the labels the policies allow.
        for role in WORKLOADS:
            labels = workload(items, role)["spec"]["template"]["metadata"]["labels"]
            for key, value in release.items():
                self.assertEqual(labels[key], value, role)
        peer = {"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}
        limited = TOOLS.render(sets=[
            'networkPolicy.httpClients[0].namespaceSelector.matchLabels.name=monitoring'])
        for policy in by_kind(limited, "NetworkPolicy").values():
            http_rule = policy["spec"]["ingress"][-1]
            self.assertEqual(http_rule["from"], [peer])
        self.assertEqual(by_kind(TOOLS.render(sets=["networkPolicy.enabled=false"]),
                                 "NetworkPolicy"), {})

    def test_cluster_secret_reaches_every_component(self):
        items = TOOLS.render()
        secret = one(items, "Secret", "tributary-cluster-token")
        self.assertGreaterEqual(len(base64.b64decode(secret["data"]["token"])), 16)
        self.assertEqual(secret["metadata"]["annotations"]["helm.sh/resource-policy"], "keep")
        for role in WORKLOADS:
            container = only_container(workload(items, role))
            path = flag_value(container_flags(container), "cluster_token_file")
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            self.assertEqual(mounts[os.path.dirname(path)], "cluster-token", role)
            volume = [v for v in pod_spec(workload(items, role))["volumes"]
                      if v["name"] == "cluster-token"][0]
            self.assertEqual(volume["secret"]["secretName"], "tributary-cluster-token", role)
        given = TOOLS.render(sets=["clusterToken.value=a-cluster-secret-of-32-characters"])
        self.assertEqual(
            base64.b64decode(one(given, "Secret", "tributary-cluster-token")["data"]["token"]),
            b"a-cluster-secret-of-32-characters")
        mine = TOOLS.render(sets=["clusterToken.existingSecret=mine"])
        self.assertNotIn("tributary-cluster-token", by_kind(mine, "Secret"))
        for role in WORKLOADS:
            volume = [v for v in pod_spec(workload(mine, role))["volumes"]
                      if v["name"] == "cluster-token"][0]
            self.assertEqual(volume["secret"]["secretName"], "mine", role)
        open_items = TOOLS.render(sets=["clusterToken.allowUnauthenticated=true"])
        self.assertNotIn("tributary-cluster-token", by_kind(open_items, "Secret"))
        for role in WORKLOADS:
            flags = container_flags(only_container(workload(open_items, role)))
            self.assertIn("--allow_unauthenticated", flags, role)
            self.assertFalse(any(f.startswith("--cluster_token_file") for f in flags), role)
        short = TOOLS.template(sets=["clusterToken.value=short"], check=False)
        self.assertNotEqual(short.returncode, 0)
        self.assertIn("at least 16 characters", short.stderr)

    def test_tls_switches_probes_to_http_healthz_and_passes_the_files(self):
        items = TOOLS.render(sets=["tls.enabled=true", "tls.secretName=tributary-tls"])
        for role in WORKLOADS:
            container = only_container(workload(items, role))
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                self.assertEqual(container[probe]["httpGet"], {"path": "/healthz", "port": "http"})
                self.assertNotIn("grpc", container[probe])
            flags = container_flags(container)
            mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
            for flag in ("tls_cert", "tls_key", "tls_ca"):
                self.assertTrue(flag_value(flags, flag).startswith(mounts["tls"] + "/"), flag)
            volume = [v for v in pod_spec(workload(items, role))["volumes"] if v["name"] == "tls"]
            self.assertEqual(volume[0]["secret"]["secretName"], "tributary-tls")
        # With TLS the shards run no (unencrypted) data plane: none asked for, none opened.
        ps = only_container(workload(items, "ps"))
        self.assertEqual(flag_value(container_flags(ps), "data_port"), "-1")
        self.assertNotIn("data", ports_by_name(ps))
        service = one(items, "Service", "tributary-ps")
        self.assertNotIn("data", [p["name"] for p in service["spec"]["ports"]])

    def test_certificate_roles_give_each_component_its_own_certificate(self):
        items = TOOLS.render(sets=["tls.enabled=true", "tls.secretName=tributary-tls",
                                   "tls.certificateRoles=true",
                                   "tls.roleSecretNames.worker=tls-worker",
                                   "tls.roleSecretNames.parameterServer=tls-ps"])
        expected = {"coordinator": "tributary-tls", "ps": "tls-ps", "worker": "tls-worker"}
        for role in WORKLOADS:
            flags = container_flags(only_container(workload(items, role)))
            self.assertIn("--certificate_roles", flags, role)
            volume = [v for v in pod_spec(workload(items, role))["volumes"] if v["name"] == "tls"]
            self.assertEqual(volume[0]["secret"]["secretName"], expected[role], role)
        plain = TOOLS.render(sets=["tls.enabled=true", "tls.secretName=tributary-tls"])
        for role in WORKLOADS:
            self.assertNotIn("--certificate_roles",
                             container_flags(only_container(workload(plain, role))), role)
        without_tls = TOOLS.template(sets=["tls.certificateRoles=true"], check=False)
        self.assertNotEqual(without_tls.returncode, 0)
        self.assertIn("tls.certificateRoles needs tls.enabled", without_tls.stderr)

    def test_ports_follow_the_values_everywhere(self):
        items = TOOLS.render(sets=["coordinator.grpcPort=6000", "coordinator.httpPort=6001",
                                   "ps.grpcPort=6100", "worker.httpPort=6201"])
        coordinator = only_container(workload(items, "coordinator"))
        self.assertEqual(listen_port(coordinator), 6000)
        self.assertEqual(ports_by_name(coordinator), {"grpc": 6000, "http": 6001})
        self.assertEqual(coordinator["readinessProbe"]["grpc"]["port"], 6000)
        service = one(items, "Service", "tributary-coordinator")
        self.assertEqual(sorted(p["port"] for p in service["spec"]["ports"]), [6000, 6001])
        ps = only_container(workload(items, "ps"))
        self.assertEqual(listen_port(ps), 6100)
        self.assertEqual(ps["livenessProbe"]["grpc"]["port"], 6100)
        self.assertEqual(flag_value(container_flags(ps), "coordinator"), "tributary-coordinator:6000")
        worker = only_container(workload(items, "worker"))
        self.assertEqual(flag_value(container_flags(worker), "http_port"), "6201")
        self.assertEqual(ports_by_name(worker)["http"], 6201)

    def test_persistence_can_be_turned_off(self):
        items = TOOLS.render(sets=["coordinator.persistence.enabled=false",
                                   "ps.persistence.enabled=false"])
        self.assertEqual(by_kind(items, "PersistentVolumeClaim"), {})
        self.assertNotIn("volumeClaimTemplates", workload(items, "ps")["spec"])
        for role, volume_name in (("coordinator", "state"), ("ps", "checkpoints")):
            volume = [v for v in pod_spec(workload(items, role))["volumes"]
                      if v["name"] == volume_name][0]
            self.assertEqual(volume["emptyDir"], {}, role)

    def test_colliding_ports_are_refused(self):
        result = TOOLS.template(sets=["ps.httpPort=50061"], check=False)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("ps.grpcPort and ps.httpPort are both 50061", result.stderr)

    def test_notes_tell_how_to_reach_the_dashboard_and_run_grpcurl(self):
        with FakeApiServer() as server:
            kubeconfig = server.write_kubeconfig(os.path.join(TOOLS.home, "kubeconfig-notes"))
            result = TOOLS.helm(["install", "--dry-run=client", "--disable-openapi-validation",
                                 RELEASE, TOOLS.chart, "--namespace", NAMESPACE,
                                 "--set", "controlToken.value=x"],
                                env={"KUBECONFIG": kubeconfig})
        notes = result.stdout[result.stdout.index("NOTES:"):]
        self.assertIn("port-forward service/tributary-coordinator 8080:8080 50051:50051", notes)
        self.assertIn("http://localhost:8080/", notes)
        self.assertIn("grpcurl -plaintext localhost:50051 tributary.v1.Coordinator/GetClusterStatus",
                      notes)
        self.assertIn("port-forward pod/tributary-ps-0 50061:50061", notes)
        self.assertIn("grpcurl -plaintext localhost:50061 tributary.v1.ParameterServer/GetShardStatus",
                      notes)
        self.assertIn('-H "authorization: Bearer $TOKEN"', notes)
        self.assertIn("get secret tributary-control-token", notes)


class PodSecurityTest(unittest.TestCase):
    """Every pod of the chart, in every variant, meets the "restricted" level."""

    VARIANTS = {
        "default": dict(),
        "gpu": dict(values_files=["GPU"]),
        "tributary submitter": dict(sets=["job.submit=true", "controlToken.value=t"]),
        "grpcurl submitter": dict(sets=["job.submit=true", "job.submitter=grpcurl"]),
        "tls": dict(sets=["tls.enabled=true", "tls.secretName=s", "job.submit=true"]),
    }

    @staticmethod
    def render_variant(variant):
        files = [ARGS.gpu_values if f == "GPU" else f for f in variant.get("values_files", [])]
        return TOOLS.render(values_files=files, sets=variant.get("sets", ()))

    @classmethod
    def setUpClass(cls):
        cls.rendered = {name: cls.render_variant(variant)
                        for name, variant in cls.VARIANTS.items()}

    def test_every_pod_has_the_runtime_default_seccomp_profile(self):
        checked = set()
        for variant, items in self.rendered.items():
            for (kind, name), spec in pods(items).items():
                with self.subTest(variant=variant, pod=name):
                    self.assertEqual(spec.get("securityContext", {}).get("seccompProfile"),
                                     {"type": "RuntimeDefault"})
                    for container in spec["containers"]:
                        # No container overrides the pod's profile.
                        self.assertNotIn("seccompProfile",
                                         container.get("securityContext", {}), name)
                checked.add((kind, name))
        self.assertEqual(checked, {("Deployment", "tributary-coordinator"),
                                   ("StatefulSet", "tributary-ps"),
                                   ("StatefulSet", "tributary-worker"),
                                   ("Job", "tributary-job-submit")})

    def test_every_pod_meets_the_restricted_pod_security_level(self):
        submitters = set()
        for variant, items in self.rendered.items():
            for (kind, name), spec in pods(items).items():
                with self.subTest(variant=variant, pod=name):
                    self.assertEqual(restricted_violations(spec), [])
                    for container in spec["containers"]:
                        context = container["securityContext"]
                        self.assertIs(context["allowPrivilegeEscalation"], False)
                        self.assertEqual(context["capabilities"]["drop"], ["ALL"])
                        self.assertIs(context["readOnlyRootFilesystem"], True)
                if kind == "Job":
                    submitters.add(spec["containers"][0]["image"].split(":")[0])
        self.assertEqual(submitters, {"tributary", "fullstorydev/grpcurl"})

    def test_the_check_sees_what_breaks_the_level(self):
        # The checker above is not vacuous: each of these breaks "restricted".
        cases = [
            (["podSecurityContext.seccompProfile=null"], "seccompProfile None"),
            (["podSecurityContext.seccompProfile.type=Unconfined"], "seccompProfile Unconfined"),
            (["securityContext.allowPrivilegeEscalation=true"], "allowPrivilegeEscalation"),
            (["securityContext.capabilities.drop=null"], "capabilities.drop lacks ALL"),
            (["worker.extraVolumes[0].name=host", "worker.extraVolumes[0].hostPath.path=/d"],
             "volume host is ['hostPath']"),
        ]
        for sets, violation in cases:
            with self.subTest(values=sets):
                items = TOOLS.render(sets=sets)
                found = restricted_violations(pod_spec(workload(items, "worker")))
                self.assertTrue(any(violation in v for v in found), found)


class DisruptionBudgetTest(unittest.TestCase):
    def test_a_drain_evicts_one_shard_at_a_time(self):
        items = TOOLS.render()
        budgets = by_kind(items, "PodDisruptionBudget")
        self.assertEqual(list(budgets), ["tributary-ps"])
        budget = budgets["tributary-ps"]
        self.assertEqual(budget["apiVersion"], "policy/v1")
        self.assertEqual(budget["spec"]["maxUnavailable"], 1)
        self.assertNotIn("minAvailable", budget["spec"])
        selector = budget["spec"]["selector"]
        # It selects the shards' pods, and only them.
        for role in WORKLOADS:
            labels = workload(items, role)["spec"]["template"]["metadata"]["labels"]
            self.assertEqual(selects(selector, labels), role == "ps", role)
        self.assertEqual(selector, workload(items, "ps")["spec"]["selector"])

    def test_max_unavailable_follows_the_values(self):
        for value, expected in (("2", 2), ("25%", "25%")):
            items = TOOLS.render(sets=["ps.replicas=4",
                                       "ps.podDisruptionBudget.maxUnavailable=" + value])
            budget = one(items, "PodDisruptionBudget", "tributary-ps")
            self.assertEqual(budget["spec"]["maxUnavailable"], expected)

    def test_only_rendered_when_it_protects_something(self):
        for sets in (["ps.podDisruptionBudget.enabled=false"], ["ps.replicas=1"]):
            with self.subTest(values=sets):
                self.assertEqual(by_kind(TOOLS.render(sets=sets), "PodDisruptionBudget"), {})

    def test_a_budget_that_would_block_every_drain_is_refused(self):
        for item in ("ps.podDisruptionBudget.maxUnavailable=0",
                     "ps.podDisruptionBudget.maxUnavailable=0%"):
            result = TOOLS.template(sets=[item], check=False)
            self.assertNotEqual(result.returncode, 0, item)
            self.assertIn("- ps.podDisruptionBudget.maxUnavailable:", result.stderr)


class ServiceMonitorTest(unittest.TestCase):
    def test_absent_by_default(self):
        self.assertEqual(by_kind(TOOLS.render(), "ServiceMonitor"), {})

    def test_scrapes_every_components_metrics_port(self):
        items = TOOLS.render(sets=["metrics.serviceMonitor.enabled=true",
                                   "metrics.serviceMonitor.interval=15s",
                                   "metrics.serviceMonitor.scrapeTimeout=10s",
                                   "metrics.serviceMonitor.labels.release=kube-prometheus",
                                   "worker.httpPort=9000"])
        monitor = one(items, "ServiceMonitor", "tributary")
        self.assertEqual(monitor["apiVersion"], "monitoring.coreos.com/v1")
        self.assertEqual(monitor["metadata"]["namespace"], NAMESPACE)
        self.assertEqual(monitor["metadata"]["labels"]["release"], "kube-prometheus")
        spec = monitor["spec"]
        self.assertEqual(spec["namespaceSelector"], {"matchNames": [NAMESPACE]})
        self.assertEqual(spec["endpoints"], [{"port": "http", "path": "/metrics",
                                              "scheme": "http", "interval": "15s",
                                              "scrapeTimeout": "10s"}])
        # It selects the three components' Services and nothing else, and each one's
        # `http` port reaches the container's --http_port.
        selected = {name for name, service in by_kind(items, "Service").items()
                    if selects(spec["selector"], service["metadata"]["labels"])}
        self.assertEqual(selected, {"tributary-coordinator", "tributary-ps", "tributary-worker"})
        for role in WORKLOADS:
            service = one(items, "Service", "tributary-" + role)
            port = [p for p in service["spec"]["ports"] if p["name"] == "http"][0]
            container = only_container(workload(items, role))
            self.assertEqual(ports_by_name(container)[port["targetPort"]],
                             int(flag_value(container_flags(container), "http_port")), role)
        self.assertEqual(spec["targetLabels"], ["app.kubernetes.io/component"])

    def test_without_a_timeout_prometheus_picks_it(self):
        items = TOOLS.render(sets=["metrics.serviceMonitor.enabled=true"])
        endpoint = one(items, "ServiceMonitor", "tributary")["spec"]["endpoints"][0]
        self.assertEqual(endpoint["interval"], "30s")
        self.assertNotIn("scrapeTimeout", endpoint)

    def test_bad_settings_are_refused(self):
        for item, named in (("metrics.serviceMonitor.interval=soon", "interval"),
                            ("metrics.serviceMonitor.scrapeTimeout=10", "scrapeTimeout"),
                            ("metrics.serviceMonitor.enable=true", "enable")):
            result = TOOLS.template(sets=[item], check=False)
            self.assertNotEqual(result.returncode, 0, item)
            self.assertIn("values don't meet the specifications of the schema", result.stderr)
            self.assertIn(named, result.stderr)


class PrometheusRuleAndDashboardTest(unittest.TestCase):
    def chart_file(self, name):
        with open(os.path.join(os.path.dirname(ARGS.chart), "files", name)) as f:
            return f.read()

    def test_absent_by_default(self):
        items = TOOLS.render()
        self.assertEqual(by_kind(items, "PrometheusRule"), {})
        self.assertNotIn("tributary-grafana-dashboard", by_kind(items, "ConfigMap"))

    def test_the_rule_carries_the_rules_file_as_it_is(self):
        items = TOOLS.render(sets=["metrics.prometheusRule.enabled=true",
                                   "metrics.prometheusRule.labels.release=kube-prometheus"])
        rule = one(items, "PrometheusRule", "tributary")
        self.assertEqual(rule["apiVersion"], "monitoring.coreos.com/v1")
        self.assertEqual(rule["metadata"]["namespace"], NAMESPACE)
        self.assertEqual(rule["metadata"]["labels"]["release"], "kube-prometheus")
        self.assertEqual(rule["metadata"]["labels"]["app.kubernetes.io/component"], "metrics")
        text = self.chart_file("prometheus-rules.yaml")
        groups = rule["spec"]["groups"]
        self.assertEqual([g["name"] for g in groups],
                         re.findall(r"^  - name: (\S+)", text, flags=re.M))
        rendered = [r.get("alert") or r.get("record") for g in groups for r in g["rules"]]
        self.assertEqual(rendered, re.findall(r"^      - (?:alert|record): (\S+)", text,
                                              flags=re.M))
        # Every expression and annotation template survives the chart unchanged (Helm
        # does not expand the alerts' own {{ $labels... }}).
        squash = lambda t: re.sub(r"\s+", " ", t).strip()
        for group in groups:
            for r in group["rules"]:
                self.assertIn(squash(r["expr"]), squash(text), r)
                for value in r.get("annotations", {}).values():
                    self.assertIn("{{", value + "{{", r)
                    self.assertIn(squash(value)[:40], squash(text), r)
        alerts = {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}
        self.assertIn("{{ $labels.instance }}", alerts["TributaryStraggler"]["annotations"]["summary"])

    def test_the_dashboard_configmap_is_labelled_for_grafanas_sidecar(self):
        items = TOOLS.render(sets=["metrics.grafanaDashboard.enabled=true"])
        config_map = one(items, "ConfigMap", "tributary-grafana-dashboard")
        self.assertEqual(config_map["metadata"]["labels"]["grafana_dashboard"], "1")
        dashboard = json.loads(config_map["data"]["tributary.json"])
        self.assertEqual(dashboard, json.loads(self.chart_file("grafana-dashboard.json")))
        self.assertEqual(dashboard["uid"], "tributary")
        items = TOOLS.render(sets=["metrics.grafanaDashboard.enabled=true",
                                   "metrics.grafanaDashboard.label=dashboards",
                                   "metrics.grafanaDashboard.labelValue=tributary",
                                   "metrics.grafanaDashboard.annotations.grafana_folder=ML"])
        config_map = one(items, "ConfigMap", "tributary-grafana-dashboard")
        self.assertEqual(config_map["metadata"]["labels"]["dashboards"], "tributary")
        self.assertNotIn("grafana_dashboard", config_map["metadata"]["labels"])
        self.assertEqual(config_map["metadata"]["annotations"]["grafana_folder"], "ML")

    def test_bad_settings_are_refused(self):
        for item, named in (("metrics.prometheusRule.enable=true", "enable"),
                            ("metrics.grafanaDashboard.label=bad label", "label"),
                            ("metrics.grafanaDashboard.labelValue=-x-", "labelValue")):
            result = TOOLS.template(sets=[item], check=False)
            self.assertNotEqual(result.returncode, 0, item)
            self.assertIn("values don't meet the specifications of the schema", result.stderr)
            self.assertIn(named, result.stderr)


class ComponentImagesTest(unittest.TestCase):
    def images(self, items):
        found = {}
        for role in WORKLOADS:
            container = only_container(workload(items, role))
            found[role] = (container["image"], container["imagePullPolicy"])
        if "tributary-job-submit" in by_kind(items, "Job"):
            container = only_container(one(items, "Job", "tributary-job-submit"))
            found["job"] = (container["image"], container["imagePullPolicy"])
        return found

    def test_one_shared_image_by_default(self):
        self.assertEqual(self.images(TOOLS.render(sets=["job.submit=true"])),
                         {role: ("tributary:0.1.0", "IfNotPresent")
                          for role in ("coordinator", "ps", "worker", "job")})

    def test_each_component_overrides_the_shared_image_field_by_field(self):
        items = TOOLS.render(sets=["job.submit=true",
                                   "image.repository=registry.example.com/tributary",
                                   "image.pullPolicy=Always",
                                   "coordinator.image.repository=registry.example.com/coord",
                                   "ps.image.tag=0.2.0",
                                   "worker.image.tag=0.1.0-cuda",
                                   "worker.image.pullPolicy=IfNotPresent",
                                   "job.image.repository=registry.example.com/cli",
                                   "job.image.tag=cli"])
        self.assertEqual(self.images(items), {
            "coordinator": ("registry.example.com/coord:0.1.0", "Always"),
            "ps": ("registry.example.com/tributary:0.2.0", "Always"),
            "worker": ("registry.example.com/tributary:0.1.0-cuda", "IfNotPresent"),
            "job": ("registry.example.com/cli:cli", "Always"),
        })

    def test_the_shared_tag_still_applies_to_every_component(self):
        # Values written before per-component images keep their meaning.
        items = TOOLS.render(sets=["job.submit=true", "image.tag=0.1.0-cuda"])
        for role, (image, _) in self.images(items).items():
            self.assertEqual(image, "tributary:0.1.0-cuda", role)

    def test_the_grpcurl_submitter_keeps_its_own_image(self):
        items = TOOLS.render(sets=["job.submit=true", "job.submitter=grpcurl",
                                   "job.image.tag=ignored"])
        self.assertEqual(self.images(items)["job"],
                         ("fullstorydev/grpcurl:v1.9.1", "IfNotPresent"))


class DataVolumeTest(unittest.TestCase):
    PVC = ["worker.dataVolume.enabled=true",
           "worker.dataVolume.source.persistentVolumeClaim.claimName=datasets"]

    def test_none_by_default(self):
        items = TOOLS.render()
        statefulset = workload(items, "worker")
        self.assertNotIn("data", [v["name"] for v in pod_spec(statefulset)["volumes"]])
        self.assertIsNone(flag_value(container_flags(only_container(statefulset)), "data_root"))

    def test_the_data_volume_is_mounted_and_becomes_the_data_root(self):
        items = TOOLS.render(sets=self.PVC + ["job.spec.dataset.format=IDX",
                                              "job.spec.dataset.directory=/data/mnist"])
        statefulset = workload(items, "worker")
        container = only_container(statefulset)
        mount = [m for m in container["volumeMounts"] if m["name"] == "data"][0]
        self.assertEqual(mount, {"name": "data", "mountPath": "/data", "readOnly": True})
        volume = [v for v in pod_spec(statefulset)["volumes"] if v["name"] == "data"][0]
        self.assertEqual(volume, {"name": "data",
                                  "persistentVolumeClaim": {"claimName": "datasets"}})
        self.assertEqual(flag_value(container_flags(container), "data_root"), "/data")
        self.assertIn("data_root", binary_flags(ARGS.worker))
        # Only the workers read data.
        for role in ("coordinator", "ps"):
            self.assertNotIn("data", [v["name"] for v in pod_spec(workload(items, role))["volumes"]])

    def test_an_explicit_data_root_must_hold_the_volume(self):
        items = TOOLS.render(sets=self.PVC + ["worker.dataVolume.mountPath=/mnt/data/mnist",
                                              "worker.dataRoot=/mnt/data"])
        flags = container_flags(only_container(workload(items, "worker")))
        self.assertEqual(flag_value(flags, "data_root"), "/mnt/data")
        result = TOOLS.template(sets=self.PVC + ["worker.dataRoot=/srv"], check=False)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn('worker.dataVolume.mountPath "/data" lies outside worker.dataRoot "/srv"',
                      result.stderr)
        # Without a data volume, dataRoot alone confines the workers.
        items = TOOLS.render(sets=["worker.dataRoot=/srv/data"])
        flags = container_flags(only_container(workload(items, "worker")))
        self.assertEqual(flag_value(flags, "data_root"), "/srv/data")

    def test_dataset_paths_outside_the_data_root_are_refused_when_rendering(self):
        cases = [
            (["job.spec.dataset.format=CSV", "job.spec.dataset.trainPath=/etc/passwd"],
             'job.spec.dataset.trainPath "/etc/passwd" lies outside the workers\' '
             '--data_root=/data'),
            (["job.spec.dataset.format=NPY", "job.spec.dataset.train_path=/data/x.npy",
              "job.spec.dataset.train_labels_path=/data/../y.npy"],
             'job.spec.dataset.trainLabelsPath "/data/../y.npy" lies outside'),
            # IDX without a directory reads the coordinator's default, not the volume.
            (["job.spec.dataset.format=IDX"],
             'job.spec.dataset.directory "/usr/share/datasets/fashion-mnist" (IDX\'s '
             'default when unset) lies outside'),
        ]
        for sets, message in cases:
            with self.subTest(values=sets):
                result = TOOLS.template(sets=self.PVC + sets, check=False)
                self.assertNotEqual(result.returncode, 0)
                self.assertIn(message, result.stderr)
        # Relative paths resolve on the worker: left to it.
        TOOLS.template(sets=self.PVC + ["job.spec.dataset.format=CSV",
                                        "job.spec.dataset.trainPath=train.csv"])

    def test_an_enabled_volume_needs_exactly_one_source(self):
        for sets, named in (
                (["worker.dataVolume.enabled=true"], "- worker.dataVolume.source:"),
                (self.PVC + ["worker.dataVolume.source.nfs.path=/x"], "- worker.dataVolume.source:"),
                (["worker.dataVolume.source.gitRepos.repository=x"], "worker.dataVolume.source"),
                (["worker.dataVolume.mountPath=data"], "- worker.dataVolume.mountPath:"),
                (["worker.dataRoot=data"], "- worker.dataRoot:")):
            with self.subTest(values=sets):
                result = TOOLS.template(sets=sets, check=False)
                self.assertNotEqual(result.returncode, 0)
                self.assertIn("values don't meet the specifications of the schema", result.stderr)
                self.assertIn(named, result.stderr)


class JobSpecSchemaTest(unittest.TestCase):
    """job.spec is checked by values.schema.json when the chart renders, and agrees
    with the coordinator's own validation (common/job_spec.cc) both ways."""

    # ({PATH: VALUE} given as --set-json job.spec.PATH=VALUE, the field the error must
    # name). Each is refused by ValidateJobSpec too, except those of COORDINATOR_ACCEPTS.
    BAD = [
        ({"batchSize": 64}, "job.spec"),  # An unknown field.
        ({"globalBatchSize": 0}, "job.spec.globalBatchSize"),
        ({"globalBatchSize": 65537}, "job.spec.globalBatchSize"),
        ({"global_batch_size": 100000}, "job.spec.global_batch_size"),
        ({"globalBatchSize": 12.5}, "job.spec.globalBatchSize"),
        ({"epochs": -1}, "job.spec.epochs"),
        ({"epochs": "two"}, "job.spec.epochs"),
        ({"epochs": 1000001}, "job.spec.epochs"),
        ({"maxSteps": 1099511627777}, "job.spec.maxSteps"),
        ({"mode": "SIDEWAYS"}, "job.spec.mode"),
        ({"mode": "TRAINING_MODE_UNSPECIFIED"}, "job.spec.mode"),
        ({"mode": 1}, "job.spec.mode"),  # Enums by name.
        ({"mode": "BOUNDED_STALENESS", "staleness": 1000001}, "job.spec.staleness"),
        ({"mode": "LOCAL_SGD", "syncEvery": 1000001}, "job.spec.syncEvery"),
        ({"mode": "LOCAL_SGD", "outer_optimizer": {"type": "ADAM"}},
         "job.spec.outer_optimizer.type"),
        ({"devices": "TPU"}, "job.spec.devices"),
        ({"wireDtype": "FLOAT64"}, "job.spec.wireDtype"),
        ({"wire_dtype": "DOUBLE"}, "job.spec.wire_dtype"),
        ({"nodesMin": 0}, "job.spec.nodesMin"),
        ({"nodesMax": 65537}, "job.spec.nodesMax"),
        ({"replicasPerWorker": 65}, "job.spec.replicasPerWorker"),
        ({"partitionBytes": 1002}, "job.spec.partitionBytes"),
        ({"partitionBytes": 128}, "job.spec.partitionBytes"),
        ({"seed": -1}, "job.spec.seed"),
        ({"seed": 0}, "job.spec.seed"),
        ({"name": "x" * 129}, "job.spec.name"),
        ({"model.name": "resnet"}, "job.spec.model.name"),
        ({"model.layerSizes": [784, 0, 10]}, "job.spec.model.layerSizes.1"),
        ({"model.layer_sizes": [784, 70000, 10]}, "job.spec.model.layer_sizes.1"),
        ({"model.layerSizes": [784]}, "job.spec.model.layerSizes"),
        ({"model": {"name": "cnn", "layerSizes": [128, 10], "convChannels": [32, 64, 128]}},
         "job.spec.model.convChannels"),
        ({"model": {"name": "cnn", "layerSizes": [128, 10], "inputShape": [1, 28, 28, 1]}},
         "job.spec.model.inputShape"),
        ({"model.dropout": 1}, "job.spec.model.dropout"),
        ({"model": {"name": "torchscript", "layerSizes": None,
                    "torchscript": {"sha256": "f" * 64}}, "devices": "GPU"}, "job.spec.devices"),
        ({"model": {"name": "torchscript", "torchscript": {"sha256": "f" * 64}}},
         "job.spec.model.layerSizes"),
        ({"model.torchscript": {"sha256": "f" * 64}}, "job.spec.model.torchscript"),
        ({"dataset.format": "PARQUET"}, "job.spec.dataset.format"),
        ({"dataset.syntheticClasses": 1}, "job.spec.dataset.syntheticClasses"),
        ({"dataset.synthetic_train_samples": 16777217},
         "job.spec.dataset.synthetic_train_samples"),
        ({"dataset.syntheticFeatures": 65537}, "job.spec.dataset.syntheticFeatures"),
        ({"optimizer.type": "LION"}, "job.spec.optimizer.type"),
        ({"optimizer.learningRate": -0.1}, "job.spec.optimizer.learningRate"),
        ({"optimizer.momentum": 1}, "job.spec.optimizer.momentum"),
        ({"optimizer.weight_decay": -1}, "job.spec.optimizer.weight_decay"),
        ({"optimizer.schedule": {"kind": "LINEAR"}}, "job.spec.optimizer.schedule.kind"),
        ({"optimizer.schedule": {"kind": "STEP", "stepSize": 10, "gamma": 1.5}},
         "job.spec.optimizer.schedule.gamma"),
    ]
    # Refused by the schema but accepted by the coordinator: a 0 (or UNSPECIFIED) it
    # replaces by the field's default (the chart asks to leave the field out instead),
    # and an enum by number (proto3 JSON allows it; the chart takes names).
    COORDINATOR_ACCEPTS = [{"globalBatchSize": 0}, {"nodesMin": 0}, {"seed": 0},
                           {"mode": "TRAINING_MODE_UNSPECIFIED"}, {"mode": 1}]

    # Accepted by both, at the bounds, under either name.
    GOOD = [
        {"globalBatchSize": 65536},
        {"global_batch_size": 256, "optimizer.learning_rate": 0.01},
        {"epochs": 0, "max_steps": 1099511627776},
        {"epochs": 1000000},
        {"mode": "BOUNDED_STALENESS", "staleness": 1000000},
        {"mode": "LOCAL_SGD", "sync_every": 1000000,
         "outerOptimizer": {"type": "MOMENTUM", "learningRate": 0.7, "nesterov": True}},
        {"nodesMin": 2, "nodes_max": 65536},
        {"replicas_per_worker": 64, "devices": "CPU", "wireDtype": "BFLOAT16"},
        {"partitionBytes": 256},
        {"seed": "18446744073709551615", "checkpoint_interval_steps": "100",
         "evalIntervalSteps": 50},
        {"name": "x" * 128},
        {"model": {"name": "cnn", "layerSizes": [128, 10], "conv_channels": [32, 64],
                   "inputShape": [1, 28, 28], "dropout": 0.5}},
        {"model": {"name": "logreg", "layerSizes": [784, 10]}},
        {"dataset": {"format": "SYNTHETIC", "syntheticClasses": 65536,
                     "synthetic_train_samples": 16777216, "syntheticTestSamples": 1,
                     "syntheticFeatures": 8}},
        {"dataset": {"format": "CSV", "trainPath": "/data/train.csv", "label_column": 3,
                     "csvHasHeader": True}},
        {"optimizer": {"type": "ADAMW", "beta1": 0, "beta2": 0.999, "epsilon": 1e-8,
                       "weightDecay": 0.01,
                       "schedule": {"kind": "COSINE", "min_lr": 0, "warmupSteps": "100"}}},
        {"optimizer.schedule": {"kind": "STEP", "step_size": 10, "gamma": 1}},
    ]

    @staticmethod
    def set_json(fields):
        return ["job.spec.%s=%s" % (path, json.dumps(value)) for path, value in fields.items()]

    @classmethod
    def setUpClass(cls):
        cls.default_spec = job_spec(TOOLS.render())

    def test_bad_specs_fail_helm_template_and_lint_naming_the_field(self):
        for fields, named in self.BAD:
            with self.subTest(spec=fields):
                for run in (TOOLS.template, TOOLS.lint):
                    result = run(set_json=self.set_json(fields), check=False)
                    output = result.stdout + result.stderr
                    self.assertNotEqual(result.returncode, 0, "accepted %s" % fields)
                    self.assertIn("values don't meet the specifications of the schema", output)
                    self.assertRegex(output, r"(?m)- %s: " % re.escape(named))

    def test_the_coordinator_refuses_them_too(self):
        for fields, named in self.BAD:
            spec = self.default_spec
            for path, value in fields.items():
                spec = merge_field(spec, path, value)
            accepted, message = submit_check(spec)
            with self.subTest(spec=fields):
                if fields in self.COORDINATOR_ACCEPTS:
                    self.assertTrue(accepted, message)
                else:
                    self.assertFalse(accepted, "the schema refuses %s, ValidateJobSpec "
                                               "accepts it" % fields)

    def test_good_specs_render_in_lower_camel_case_and_pass_validation(self):
        for fields in self.GOOD:
            with self.subTest(spec=fields):
                spec = job_spec(TOOLS.render(set_json=self.set_json(fields)))
                # What the hook submits: the values merged into the defaults, every
                # field under its lowerCamelCase name.
                expected = self.default_spec
                for path, value in fields.items():
                    expected = merge_field(expected, path, value)
                if not any(camel(path) == "nodesMax" for path in fields):
                    expected["nodesMax"] = max(2, expected.get("nodesMin", 1))
                self.assertEqual(spec, expected)
                accepted, message = submit_check(spec)
                self.assertTrue(accepted, message)

    def test_proto_names_win_over_the_defaults_lower_camel_case(self):
        spec = job_spec(TOOLS.render(sets=["job.spec.global_batch_size=512",
                                           "job.spec.nodes_min=2"]))
        self.assertEqual(spec["globalBatchSize"], 512)
        self.assertEqual(spec["nodesMin"], 2)
        self.assertEqual(spec["nodesMax"], 2)
        self.assertNotIn("global_batch_size", spec)

    def test_the_default_and_gpu_specs_pass_validation(self):
        for files in ([], [ARGS.gpu_values]):
            spec = job_spec(TOOLS.render(values_files=files))
            accepted, message = submit_check(spec)
            self.assertTrue(accepted, "%s: %s" % (files, message))

    def test_what_one_field_cannot_tell_is_checked_against_the_release(self):
        cases = [
            (["job.spec.nodesMin=3", "job.spec.nodesMax=2"],
             "job.spec.nodesMax (2) must be >= job.spec.nodesMin (3)"),
            (["job.spec.partitionBytes=8388608"],
             "job.spec.partitionBytes (8388608, 4194304 when unset) is larger than "
             "ps.maxPartitionBytes (4194304)"),
            (["ps.maxPartitionBytes=1048576"],
             "job.spec.partitionBytes (4194304, 4194304 when unset) is larger than "
             "ps.maxPartitionBytes (1048576)"),
        ]
        for sets, message in cases:
            with self.subTest(values=sets):
                result = TOOLS.template(sets=sets, check=False)
                self.assertNotEqual(result.returncode, 0)
                self.assertIn(message, result.stderr)
        TOOLS.template(sets=["ps.maxPartitionBytes=8388608", "job.spec.partitionBytes=8388608"])


class SchemaTest(unittest.TestCase):
    BAD_VALUES = [
        # (--set, what the error must name)
        ("bogus=1", "bogus"),
        ("ps.replica=3", "replica"),
        ("worker.gpus=-1", "gpus"),
        ("coordinator.grpcPort=70000", "grpcPort"),
        ("image.pullPolicy=Sometimes", "pullPolicy"),
        ("job.spec.mode=SYNCH", "mode"),
        ("job.spec.learningRate=0.1", "learningRate"),
        ("job.spec.optimizer.kind=ADAM", "kind"),
        ("coordinator.heartbeatTimeout=10", "heartbeatTimeout"),
        ("ps.replicas=0", "replicas"),
        ("worker.devices=tpu", "devices"),
        ("tls.enabled=true", "secretName"),
        ("worker.extraArgs={-v}", "extraArgs"),
        ("worker.resources.limit.cpu=1", "limit"),
        ("worker.tolerations[0].effect=Sometimes", "effect"),
    ]

    def test_bad_values_are_refused_by_the_schema(self):
        for item, named in self.BAD_VALUES:
            with self.subTest(values=item):
                result = TOOLS.template(sets=[item], check=False)
                self.assertNotEqual(result.returncode, 0, "accepted --set " + item)
                self.assertIn("values don't meet the specifications of the schema",
                              result.stderr)
                self.assertIn(named, result.stderr)

    def test_job_spec_schema_mirrors_proto_job_proto(self):
        with open(os.path.join(os.path.dirname(ARGS.chart), "values.schema.json")) as schema_file:
            definitions = json.load(schema_file)["definitions"]
        with open(ARGS.job_proto) as proto_file:
            proto = proto_file.read()

        def message_fields(message):
            body = re.search(r"message %s \{(.*?)\n\}" % message, proto, flags=re.S).group(1)
            return re.findall(r"^\s+(?:repeated\s+)?[\w.]+\s+(\w+)\s*=\s*\d+;", body,
                              flags=re.M)

        def enum_values(enum):
            body = re.search(r"enum %s \{(.*?)\n\}" % enum, proto + TENSOR_PROTO[0],
                             flags=re.S).group(1)
            return [v for v in re.findall(r"^\s+(\w+)\s*=", body, flags=re.M)
                    if not v.endswith("UNSPECIFIED")]

        for message, definition in (("JobSpec", "jobSpec"), ("ModelSpec", "modelSpec"),
                                    ("DatasetSpec", "datasetSpec"),
                                    ("OptimizerSpec", "optimizerSpec"),
                                    ("LrSchedule", "lrSchedule"),
                                    ("TorchScriptFile", "torchScriptFile")):
            properties = definitions[definition]["properties"]
            fields = message_fields(message)
            # Every field under its JSON name and its proto name (proto3 JSON accepts
            # both), the proto name with the very same schema.
            self.assertEqual(set(properties), {camel(f) for f in fields} | set(fields), message)
            for field in fields:
                if field != camel(field):
                    self.assertEqual(properties[field], {"$ref": "#/definitions/%s/properties/%s"
                                                         % (definition, camel(field))}, field)
            self.assertFalse(definitions[definition]["additionalProperties"], message)
        job = definitions["jobSpec"]["properties"]
        self.assertEqual(job["mode"]["enum"], enum_values("TrainingMode"))
        self.assertEqual(job["devices"]["enum"], enum_values("DeviceKind"))
        self.assertEqual(job["wireDtype"]["enum"], enum_values("DType"))
        self.assertEqual(definitions["optimizerSpec"]["properties"]["type"]["enum"],
                         enum_values("OptimizerType"))
        self.assertEqual(definitions["lrSchedule"]["properties"]["kind"]["enum"],
                         enum_values("LrScheduleKind"))
        self.assertEqual(definitions["datasetSpec"]["properties"]["format"]["enum"],
                         enum_values("DatasetFormat"))

    def test_every_object_in_the_schema_refuses_unknown_keys(self):
        with open(os.path.join(os.path.dirname(ARGS.chart), "values.schema.json")) as schema_file:
            schema = json.load(schema_file)
        # Maps of free-form names (labels, resources, volume sources, affinity terms)
        # constrain their values instead.
        open_maps = []

        def walk(node, path):
            if isinstance(node, dict):
                if node.get("type") == "object" and "properties" in node:
                    self.assertIs(node.get("additionalProperties"), False, path)
                elif node.get("type") == "object":
                    open_maps.append(path)
                for key, value in node.items():
                    walk(value, path + "/" + key)
            elif isinstance(node, list):
                for index, value in enumerate(node):
                    walk(value, "%s[%d]" % (path, index))
        walk(schema, "")
        self.assertTrue(open_maps)


class ReadmeTest(unittest.TestCase):
    """The chart's README documents every value: it cannot drift from values.yaml."""

    @classmethod
    def setUpClass(cls):
        # values.yaml as Helm itself reads it, as JSON: a copy of the chart with one more
        # template that prints .Values.
        chart = os.path.join(_tmpdir(), "tributary")
        shutil.copytree(TOOLS.chart, chart)
        with open(os.path.join(chart, "templates", "zz-values-json.yaml"), "w") as template:
            template.write("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: values-json\n"
                           "data:\n  values: {{ .Values | toJson | b64enc }}\n")
        rendered = TOOLS.helm(["template", RELEASE, chart, "--show-only",
                               "templates/zz-values-json.yaml"]).stdout
        encoded = re.search(r"^  values: (\S+)$", rendered, flags=re.M).group(1)
        cls.values = json.loads(base64.b64decode(encoded))
        with open(os.path.join(TOOLS.chart, "README.md")) as readme:
            cls.rows = {}
            for key, default in re.findall(r"^\| `([\w.]+)` \|[^|]*\|([^|]*)\|", readme.read(),
                                           flags=re.M):
                cls.rows[key] = default.strip()

    @staticmethod
    def leaves(node, path=()):
        """(dotted key, value) of every scalar, list and empty map of the values."""
        if isinstance(node, dict) and node:
            for key, value in node.items():
                yield from ReadmeTest.leaves(value, path + (key,))
        else:
            yield ".".join(path), node

    def lookup(self, key):
        node = self.values
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                raise KeyError(key)
            node = node[part]
        return node

    def test_every_leaf_value_is_documented_with_its_default(self):
        leaves = dict(self.leaves(self.values))
        self.assertGreater(len(leaves), 100)
        missing = sorted(set(leaves) - set(self.rows))
        self.assertEqual(missing, [], "values.yaml keys the chart README does not document")
        for key, value in leaves.items():
            with self.subTest(key=key):
                cell = re.fullmatch(r"`(.*)`", self.rows[key])
                self.assertIsNotNone(cell, "%s: default column %r" % (key, self.rows[key]))
                text = cell.group(1)
                if isinstance(value, str):
                    documented = json.loads(text) if text.startswith('"') else text
                else:
                    documented = json.loads(text)
                self.assertEqual(documented, value, "%s: README default" % key)

    def test_every_documented_key_exists(self):
        for key in self.rows:
            with self.subTest(key=key):
                self.lookup(key)


TENSOR_PROTO = [""]


def main():
    global ARGS, TOOLS
    parser = argparse.ArgumentParser()
    for name in ("helm", "kubectl", "chart", "gpu_values", "dockerfile", "coordinator",
                 "parameter_server", "worker", "cli", "job_proto", "tensor_proto"):
        parser.add_argument("--" + name, required=True)
    ARGS, rest = parser.parse_known_args()
    with open(ARGS.tensor_proto) as tensor:
        TENSOR_PROTO[0] = tensor.read()
    TOOLS = Tools()
    # Fails here, with the wrapper's "run scripts/setup", when Helm is missing.
    version = TOOLS.helm(["version", "--short"]).stdout.strip()
    if not version.startswith("v3.17."):
        raise SystemExit("helm is %s, the chart tests expect v3.17 (run scripts/setup)" % version)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
