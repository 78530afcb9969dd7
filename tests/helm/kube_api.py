"""A stand-in for the Kubernetes API requests of the chart: the one a pod makes itself,
the bookies' rack init container (files/node_rack.py) reading its node, `GET
/api/v1/nodes/<name>`; and Helm's `lookup` of a Secret at an upgrade (discovery of the
core group `GET /api/v1`, then `GET /api/v1/namespaces/<ns>/secrets/<name>`). HTTPS,
with a bearer token."""

from __future__ import annotations

import base64
import json
import re
import ssl
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.cluster.gateway import make_self_signed_cert

NODE_PREFIX = "/api/v1/nodes/"
SECRETS_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/secrets/([^/?]+)$")
# What discovery of the core group says of the resources served here.
CORE_RESOURCES: dict[str, Any] = {
    "kind": "APIResourceList",
    "apiVersion": "v1",
    "groupVersion": "v1",
    "resources": [
        {
            "name": "nodes",
            "singularName": "node",
            "namespaced": False,
            "kind": "Node",
            "verbs": ["get"],
        },
        {
            "name": "secrets",
            "singularName": "secret",
            "namespaced": True,
            "kind": "Secret",
            "verbs": ["get"],
        },
    ],
}


class FakeKubeApi:
    """HTTPS on 127.0.0.1 with a throwaway certificate; answers the nodes and Secrets it
    was given (404 for others, 401 without the token) and records the paths asked."""

    def __init__(self, directory: Path, nodes: Mapping[str, Mapping[str, str]]) -> None:
        self.cert, key = make_self_signed_cert(directory)
        self.token = "service-account-token-of-the-test"
        self.nodes = {name: dict(labels) for name, labels in nodes.items()}
        # (namespace, name) -> the Secret's data, as Kubernetes keeps it (base64 values).
        self.secrets: dict[tuple[str, str], dict[str, str]] = {}
        self.paths: list[str] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> FakeKubeApi:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def put_secret(self, namespace: str, name: str, string_data: Mapping[str, str]) -> None:
        """A Secret in the cluster, from its stringData (kept as data, base64)."""
        self.secrets[(namespace, name)] = {
            key: base64.b64encode(value.encode()).decode() for key, value in string_data.items()
        }

    def answer(self, path: str, authorization: str | None) -> tuple[int, dict[str, Any]]:
        self.paths.append(path)
        if authorization != f"Bearer {self.token}":
            return 401, status(401)
        if path.partition("?")[0] == "/api/v1":
            return 200, CORE_RESOURCES
        secret = SECRETS_PATH.match(path)
        if secret:
            return self._secret(secret.group(1), secret.group(2))
        name = path[len(NODE_PREFIX) :] if path.startswith(NODE_PREFIX) else None
        if name not in self.nodes:
            return 404, status(404)
        return 200, {"kind": "Node", "metadata": {"name": name, "labels": self.nodes[name]}}

    def _secret(self, namespace: str, name: str) -> tuple[int, dict[str, Any]]:
        if (namespace, name) not in self.secrets:
            return 404, status(404)
        return 200, {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "type": "Opaque",
            "data": self.secrets[(namespace, name)],
        }

    def kubeconfig(self) -> str:
        """A kubeconfig for this API (Helm's client: `lookup` at a rendering)."""
        return json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "fake",
                        "cluster": {
                            "server": f"https://127.0.0.1:{self.port}",
                            "certificate-authority": str(self.cert),
                        },
                    }
                ],
                "users": [{"name": "test", "user": {"token": self.token}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "test"}}],
                "current-context": "fake",
            }
        )

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server name
                status, body = api.answer(self.path, self.headers.get("Authorization"))
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        return Handler


def status(code: int) -> dict[str, Any]:
    """Kubernetes' Status object for an error (client-go reads NotFound from its reason)."""
    reasons = {401: "Unauthorized", 404: "NotFound"}
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": reasons[code],
        "code": code,
    }
