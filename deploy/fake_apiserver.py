"""A read-only stand-in for the Kubernetes API server, for client-side dry runs.

`kubectl apply --dry-run=client` and `helm install --dry-run=client` still ask a server
which kinds exist (discovery), whether each object exists already, and (Helm) which
releases exist. This answers those questions on a loopback port with the built-in
resources of Kubernetes 1.31 (and the Prometheus Operator's monitoring.coreos.com/v1
kinds, as a cluster with its CRDs installed serves them), an empty cluster and no
stored releases, so the real clients parse, map and print the chart's manifests
without a cluster. It never accepts a write.
"""

import http.server
import json
import os
import threading
import urllib.parse

# (group/version, resource, kind, namespaced) of the kinds a chart may use.
RESOURCES = [
    ("v1", "configmaps", "ConfigMap", True),
    ("v1", "endpoints", "Endpoints", True),
    ("v1", "namespaces", "Namespace", False),
    ("v1", "persistentvolumeclaims", "PersistentVolumeClaim", True),
    ("v1", "persistentvolumes", "PersistentVolume", False),
    ("v1", "pods", "Pod", True),
    ("v1", "secrets", "Secret", True),
    ("v1", "serviceaccounts", "ServiceAccount", True),
    ("v1", "services", "Service", True),
    ("apps/v1", "daemonsets", "DaemonSet", True),
    ("apps/v1", "deployments", "Deployment", True),
    ("apps/v1", "replicasets", "ReplicaSet", True),
    ("apps/v1", "statefulsets", "StatefulSet", True),
    ("batch/v1", "cronjobs", "CronJob", True),
    ("batch/v1", "jobs", "Job", True),
    ("networking.k8s.io/v1", "ingresses", "Ingress", True),
    ("networking.k8s.io/v1", "networkpolicies", "NetworkPolicy", True),
    ("policy/v1", "poddisruptionbudgets", "PodDisruptionBudget", True),
    ("rbac.authorization.k8s.io/v1", "roles", "Role", True),
    ("rbac.authorization.k8s.io/v1", "rolebindings", "RoleBinding", True),
    # CustomResourceDefinitions of the Prometheus Operator.
    ("monitoring.coreos.com/v1", "podmonitors", "PodMonitor", True),
    ("monitoring.coreos.com/v1", "servicemonitors", "ServiceMonitor", True),
    ("monitoring.coreos.com/v1", "prometheusrules", "PrometheusRule", True),
]

VERSION = {"major": "1", "minor": "31", "gitVersion": "v1.31.0", "platform": "linux/amd64"}


def _group_versions():
    seen = []
    for group_version, _, _, _ in RESOURCES:
        if group_version not in seen:
            seen.append(group_version)
    return seen


def _resource_list(group_version):
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": [
            {
                "name": resource,
                "singularName": kind.lower(),
                "namespaced": namespaced,
                "kind": kind,
                "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
            }
            for gv, resource, kind, namespaced in RESOURCES
            if gv == group_version
        ],
    }


def _api_prefix(group_version):
    return "/api/v1" if group_version == "v1" else "/apis/" + group_version


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        self.server.requests.append("%s %s" % (self.command, self.path))

    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _not_found(self, what):
        self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                         "reason": "NotFound", "code": 404, "message": what + " not found"})

    def do_GET(self):  # noqa: N802 - http.server's name
        path = urllib.parse.urlparse(self.path).path.rstrip("/")
        if path == "/version":
            return self._send(200, VERSION)
        if path == "/api":
            return self._send(200, {"kind": "APIVersions", "versions": ["v1"],
                                    "serverAddressByClientCIDRs": []})
        if path == "/apis":
            groups = []
            for group_version in _group_versions():
                if group_version == "v1":
                    continue
                group, version = group_version.split("/")
                entry = {"groupVersion": group_version, "version": version}
                groups.append({"name": group, "versions": [entry], "preferredVersion": entry})
            return self._send(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        for group_version in _group_versions():
            prefix = _api_prefix(group_version)
            if path == prefix:
                return self._send(200, _resource_list(group_version))
            if not path.startswith(prefix + "/"):
                continue
            parts = path[len(prefix) + 1:].split("/")
            if len(parts) >= 2 and parts[0] == "namespaces" and len(parts) != 2:
                parts = parts[2:]  # namespaces/NS/resource[/name]
            for gv, resource, kind, _ in RESOURCES:
                if gv == group_version and parts and parts[0] == resource:
                    if len(parts) == 1:  # A list: the cluster is empty.
                        return self._send(200, {"kind": kind + "List", "apiVersion": gv,
                                                "metadata": {"resourceVersion": "1"},
                                                "items": []})
                    return self._not_found("%s %s" % (resource, "/".join(parts[1:])))
        return self._not_found(path)

    def _refuse(self):
        self._send(405, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                         "reason": "MethodNotAllowed", "code": 405,
                         "message": "the fake API server is read-only (" + self.command + ")"})

    do_POST = do_PUT = do_PATCH = do_DELETE = _refuse  # noqa: N815


class FakeApiServer:
    """Serves on 127.0.0.1:<free port> on a thread; use as a context manager."""

    def __init__(self):
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.requests = []
        # A short poll interval: shutdown() waits for the loop's next poll (0.5 s by
        # default, which a test rendering many manifests pays each time).
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self._server.server_address[1]

    @property
    def requests(self):
        return list(self._server.requests)

    def write_kubeconfig(self, path, namespace="default"):
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "contexts": [{"name": "fake",
                          "context": {"cluster": "fake", "namespace": namespace, "user": "fake"}}],
            "current-context": "fake",
            "users": [{"name": "fake", "user": {}}],
        }
        with open(path, "w") as out:
            json.dump(config, out)  # JSON is YAML: kubectl and Helm read it as is.
        os.chmod(path, 0o600)
        return path

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
