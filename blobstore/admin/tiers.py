"""`blobstore admin tier add|ls|rm`: the cold tiers lifecycle transitions move objects to.

blobstore admin tier add COLD file:///mnt/cold --storage-class STANDARD_IA
blobstore admin tier add ARCHIVE s3://archive-bucket/blobstore \\
    --endpoint http://minio:9000 --access-key AK --secret-key-file /run/secrets/tier \\
    --storage-class GLACIER --storage-class DEEP_ARCHIVE
blobstore admin tier ls
blobstore admin tier rm COLD

A lifecycle rule's StorageClass names a tier by its name (`<StorageClass>COLD
</StorageClass>`) or by an S3 class bound to it with --storage-class. `add` checks
the definition, then writes, reads back and deletes a probe file on the tier: a bad
URI, a bucket that does not exist or wrong credentials change nothing. An S3 tier's
secret key comes from --secret-key-file or the environment (BLOBSTORE_TIER_SECRET_KEY),
never from the command line, and is stored sealed under the cluster key
(--cluster-key-file, BLOBSTORE_CLUSTER_KEY_FILE or BLOBSTORE_CLUSTER_KEY); no command
prints it. `rm` refuses a tier that still holds segments (objects live there).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from blobstore.admin._output import Output, add_common_arguments, admin_session, run_async
from blobstore.runtime.errors import UsageError
from blobstore.runtime.sealing import ClusterKey, load_cluster_key
from blobstore.tier.fs import TierFiles, TierUnavailableError
from blobstore.tier.tiers import TierSpec, TierStore, new_spec

SECRET_ENV = "BLOBSTORE_TIER_SECRET_KEY"
SECRET_FILE_BYTES_MAX = 4096


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument("action", choices=["add", "ls", "rm"], help="add, ls or rm")
    parser.add_argument("name", nargs="?", help="the tier's name (add, rm)")
    parser.add_argument(
        "uri", nargs="?", help="add: file:///path, s3://bucket[/prefix] or hdfs://host:port/path"
    )
    parser.add_argument(
        "--storage-class",
        action="append",
        default=[],
        metavar="CLASS",
        help="add: an S3 storage class rules may name for this tier (repeatable)",
    )
    parser.add_argument("--endpoint", default="", help="add, s3: the endpoint, http(s)://host:port")
    parser.add_argument("--region", default="", help="add, s3: the region (default us-east-1)")
    parser.add_argument("--access-key", default="", help="add, s3: the access key")
    parser.add_argument(
        "--secret-key-file",
        metavar="PATH",
        help=f"add, s3: a file holding the secret key (or env {SECRET_ENV})",
    )
    parser.add_argument(
        "--cluster-key-file",
        metavar="PATH",
        help="the cluster key the secret is sealed under (default: env "
        "BLOBSTORE_CLUSTER_KEY_FILE, or BLOBSTORE_CLUSTER_KEY)",
    )


def secret_key(args: argparse.Namespace) -> str:
    """The S3 secret key from --secret-key-file or the environment ('' for none)."""
    if args.secret_key_file:
        try:
            raw = Path(args.secret_key_file).read_bytes()[: SECRET_FILE_BYTES_MAX + 1]
        except OSError as e:
            raise UsageError(f"--secret-key-file {args.secret_key_file}: {e.strerror}") from None
        if len(raw) > SECRET_FILE_BYTES_MAX:
            raise UsageError(f"--secret-key-file {args.secret_key_file}: not a secret key")
        return raw.decode(errors="replace").strip()
    return os.environ.get(SECRET_ENV, "").strip()


def spec_of(args: argparse.Namespace, cluster_key: ClusterKey | None) -> TierSpec:
    if not args.name or not args.uri:
        raise UsageError("tier add needs a NAME and a URI (see `blobstore admin tier --help`)")
    return new_spec(
        args.name,
        args.uri,
        cluster_key,
        storage_classes=tuple(args.storage_class),
        endpoint=args.endpoint,
        region=args.region,
        access_key=args.access_key,
        secret_key=secret_key(args),
    )


def probe(spec: TierSpec, cluster_key: ClusterKey | None) -> None:
    """The tier answers as defined, or one line that says why not."""
    try:
        TierFiles(spec, cluster_key).probe()
    except TierUnavailableError as e:
        raise UsageError(f"{e} (nothing was changed)") from None


async def _add(zk_hosts: str, spec: TierSpec, cluster_key: ClusterKey | None) -> None:
    async with admin_session(zk_hosts) as zk:
        store = TierStore(zk)
        if any(t.name == spec.name for t in await store.list()):
            raise UsageError(f"tier {spec.name} exists already")
        probe(spec, cluster_key)
        await store.add(spec)


async def _list(zk_hosts: str) -> list[TierSpec]:
    async with admin_session(zk_hosts) as zk:
        return await TierStore(zk).list()


async def _remove(zk_hosts: str, name: str, cluster_key: ClusterKey | None) -> None:
    async with admin_session(zk_hosts) as zk:
        store = TierStore(zk)
        spec = await store.get(name)
        try:
            held = sum(1 for _ in TierFiles(spec, cluster_key).segments())
        except TierUnavailableError as e:
            raise UsageError(f"{e}: cannot tell whether it holds objects (not removed)") from None
        if held:
            raise UsageError(
                f"tier {name} holds {held} segment{'s' * (held != 1)}: objects live there "
                "(not removed)"
            )
        await store.remove(name)


def run(args: argparse.Namespace) -> int:
    output = Output(bool(args.json))
    if args.action == "ls":
        tiers = run_async(lambda: _list(args.zk))
        show(output, tiers)
        return 0
    if not args.name:
        raise UsageError(f"tier {args.action} needs a NAME")
    cluster_key = load_cluster_key(args.cluster_key_file, required=False)
    if args.action == "add":
        spec = spec_of(args, cluster_key)
        run_async(lambda: _add(args.zk, spec, cluster_key))
        message = f"tier {spec.name} added: {spec.uri}"
    else:
        run_async(lambda: _remove(args.zk, args.name, cluster_key))
        message = f"tier {args.name} removed"
    if output.json_mode:
        output.emit_json({"result": message})
    else:
        output.note(message)
    return 0


def show(output: Output, tiers: list[TierSpec]) -> None:
    if output.json_mode:
        output.emit_json([t.public() for t in tiers])
        return
    rows = [
        [
            t.name,
            t.uri,
            ", ".join(t.storage_classes),
            t.endpoint,
            t.access_key,
            "(sealed)" if t.sealed_secret else "",
        ]
        for t in tiers
    ]
    output.table(
        "tiers", ["name", "uri", "storage classes", "endpoint", "access key", "secret"], rows
    )
