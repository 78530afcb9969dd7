"""A stand-in for the one Kubernetes API request a pod of the chart makes itself: the
bookies' rack init container (files/node_rack.py) reading its node, `GET
/api/v1/nodes/<name>`, over HTTPS with the pod's service account token."""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.cluster.gateway import make_self_signed_cert

NODE_PREFIX = "/api/v1/nodes/"


class FakeKubeApi:
    """HTTPS on 127.0.0.1 with a throwaway certificate; answers the nodes it was given
    (404 for others, 401 without the token) and records the paths asked."""

    def __init__(self, directory: Path, nodes: Mapping[str, Mapping[str, str]]) -> None:
        self.cert, key = make_self_signed_cert(directory)
        self.token = "service-account-token-of-the-test"
        self.nodes = {name: dict(labels) for name, labels in nodes.items()}
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

    def answer(self, path: str, authorization: str | None) -> tuple[int, dict[str, Any]]:
        self.paths.append(path)
        if authorization != f"Bearer {self.token}":
            return 401, {"kind": "Status", "code": 401}
        name = path[len(NODE_PREFIX) :] if path.startswith(NODE_PREFIX) else None
        if name not in self.nodes:
            return 404, {"kind": "Status", "code": 404}
        return 200, {"kind": "Node", "metadata": {"name": name, "labels": self.nodes[name]}}

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
