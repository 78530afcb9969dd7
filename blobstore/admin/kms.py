"""`blobstore admin kms key create|ls|rotate`: the master keys of the built-in key
service (blobstore/kms/keys.py), kept in ZooKeeper sealed under the cluster key.

blobstore admin kms key create --alias backups --description "backup buckets"
blobstore admin kms key ls
blobstore admin kms key rotate alias/backups

`create` prints the new key's id; S3 clients name it, or `alias/NAME`, in
x-amz-server-side-encryption-aws-kms-key-id. `rotate` makes a new version the primary:
new data keys are wrapped under it, and those wrapped under older versions still open.
No command prints key material. The cluster key comes from --cluster-key-file,
BLOBSTORE_CLUSTER_KEY_FILE or BLOBSTORE_CLUSTER_KEY (`ls` does not need it).
"""

from __future__ import annotations

import argparse
import time

from blobstore.admin._output import Output, add_common_arguments, admin_session, run_async
from blobstore.kms.keys import KeyStore, MasterKey
from blobstore.runtime.errors import UsageError
from blobstore.runtime.sealing import ClusterKey, load_cluster_key


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument("noun", choices=["key"], help="key")
    parser.add_argument("action", choices=["create", "ls", "rotate"], help="create, ls or rotate")
    parser.add_argument("key", nargs="?", help="rotate: the key's id or alias/NAME")
    parser.add_argument("--alias", default="", help="create: a name to call the key by")
    parser.add_argument("--description", default="", help="create: what the key is for")
    parser.add_argument(
        "--cluster-key-file",
        metavar="PATH",
        help="the cluster key master keys are sealed under (default: env "
        "BLOBSTORE_CLUSTER_KEY_FILE, or BLOBSTORE_CLUSTER_KEY)",
    )


async def _create(zk_hosts: str, key: ClusterKey, alias: str, description: str) -> MasterKey:
    async with admin_session(zk_hosts) as zk:
        return await KeyStore(zk, key).create(alias, description)


async def _list(zk_hosts: str) -> list[MasterKey]:
    async with admin_session(zk_hosts) as zk:
        return await KeyStore(zk, None).list()


async def _rotate(zk_hosts: str, key: ClusterKey, key_ref: str) -> MasterKey:
    async with admin_session(zk_hosts) as zk:
        return await KeyStore(zk, key).rotate(key_ref)


def run(args: argparse.Namespace) -> int:
    output = Output(bool(args.json))
    if args.action == "ls":
        show(output, run_async(lambda: _list(args.zk)))
        return 0
    cluster_key = load_cluster_key(args.cluster_key_file)
    assert cluster_key is not None  # required: load_cluster_key raised otherwise
    if args.action == "create":
        key = run_async(lambda: _create(args.zk, cluster_key, args.alias, args.description))
        message = f"kms key {key.key_id} created" + (f" (alias/{key.alias})" if key.alias else "")
    else:
        if not args.key:
            raise UsageError("kms key rotate needs a KEY (its id or alias/NAME)")
        key = run_async(lambda: _rotate(args.zk, cluster_key, args.key))
        message = f"kms key {key.key_id} rotated: version {key.primary} is the primary"
    if output.json_mode:
        output.emit_json({"result": message, "key": key.public()})
    else:
        output.note(message)
    return 0


def show(output: Output, keys: list[MasterKey]) -> None:
    if output.json_mode:
        output.emit_json([k.public() for k in keys])
        return
    rows = [
        [
            k.key_id,
            f"alias/{k.alias}" if k.alias else "",
            str(k.primary),
            str(len(k.versions)),
            time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(k.created)),
            k.description,
        ]
        for k in keys
    ]
    output.table(
        "kms keys", ["key id", "alias", "primary", "versions", "created (UTC)", "description"], rows
    )
