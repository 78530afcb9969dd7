"""Write the bookie's rack, read from a label of its node (an init container of bookies).

    node_rack.py --node NODE --label topology.kubernetes.io/zone --default /default-rack --out FILE

The downward API exposes no node labels, so this asks the API server for the pod's node
(`get nodes`, granted by the chart's ClusterRole) with the pod's service account. The
rack is "/" + the label's value, or --default when the node has no such label. The
bookie's container passes the file's content as --rack.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import urllib.parse
import urllib.request
from pathlib import Path

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TIMEOUT_S = 30.0


def rack_of(labels: dict[str, str], label: str, default: str) -> str:
    value = labels.get(label, "")
    return f"/{value}" if value else default


def node_labels(node: str) -> dict[str, str]:
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = os.environ["KUBERNETES_SERVICE_PORT"]
    if ":" in host:
        host = f"[{host}]"  # IPv6
    url = f"https://{host}:{port}/api/v1/nodes/{urllib.parse.quote(node)}"
    token = (SERVICE_ACCOUNT / "token").read_text().strip()
    context = ssl.create_default_context(cafile=str(SERVICE_ACCOUNT / "ca.crt"))
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context) as response:
        node_object = json.load(response)
    labels: dict[str, str] = node_object.get("metadata", {}).get("labels", {})
    return labels


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--node", required=True, help="the pod's node (spec.nodeName)")
    parser.add_argument("--label", required=True, help="node label holding the rack")
    parser.add_argument("--default", required=True, help="rack when the label is missing")
    parser.add_argument("--out", type=Path, required=True, help="file to write the rack to")
    return parser


def main(argv: list[str]) -> int:
    args = argument_parser().parse_args(argv)
    try:
        labels = node_labels(args.node)
    except (OSError, KeyError, ValueError) as e:
        print(f"node_rack: cannot read node {args.node}: {e}", file=sys.stderr)
        return 1
    rack = rack_of(labels, args.label, args.default)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(rack)
    print(f"node_rack: node {args.node} {args.label}={labels.get(args.label)!r}: rack {rack}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
