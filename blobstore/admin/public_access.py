"""The cluster's (account-level) public access block: S3's four settings, applied to
every bucket on top of the bucket's own block (each setting on if on in either).

blobstore admin public-access-block                  # show it (all off: none set)
blobstore admin public-access-block set --all        # block all public access
blobstore admin public-access-block set --block-public-acls --ignore-public-acls
blobstore admin public-access-block rm               # back to none

`set` replaces the whole block: a setting not named is off. Gateways see a change
within seconds (they keep the block under a ZooKeeper watch). The JSON form
(`--json`) gives the four settings under S3's names.
"""

from __future__ import annotations

import argparse
from dataclasses import fields

from blobstore.access.account import (
    delete_account_block,
    get_account_block,
    put_account_block,
)
from blobstore.access.policy_public import PublicAccessBlock
from blobstore.admin._output import Output, add_common_arguments, admin_session, run_async
from blobstore.runtime.errors import UsageError

# Our field -> S3's name for it (PublicAccessBlockConfiguration).
S3_NAMES = {
    "block_public_acls": "BlockPublicAcls",
    "ignore_public_acls": "IgnorePublicAcls",
    "block_public_policy": "BlockPublicPolicy",
    "restrict_public_buckets": "RestrictPublicBuckets",
}
assert set(S3_NAMES) == {f.name for f in fields(PublicAccessBlock)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument(
        "action",
        nargs="?",
        choices=["show", "set", "rm"],
        default="show",
        help="show (the default), set (replace the block), rm (remove it)",
    )
    parser.add_argument("--all", action="store_true", help="with set: all four settings on")
    for name, s3_name in S3_NAMES.items():
        flag = "--" + name.replace("_", "-")
        parser.add_argument(flag, action="store_true", help=f"with set: {s3_name} on")


def block_of(args: argparse.Namespace) -> PublicAccessBlock:
    """The block `set` asks for (a decision apart from the write)."""
    if args.all:
        return PublicAccessBlock(True, True, True, True)
    return PublicAccessBlock(**{name: bool(getattr(args, name)) for name in S3_NAMES})


def settings_of(block: PublicAccessBlock | None) -> dict[str, bool]:
    block = block or PublicAccessBlock()
    return {s3_name: bool(getattr(block, name)) for name, s3_name in S3_NAMES.items()}


async def _apply(zk_hosts: str, action: str, block: PublicAccessBlock) -> PublicAccessBlock | None:
    async with admin_session(zk_hosts) as zk:
        if action == "set":
            await put_account_block(zk, block)
        elif action == "rm":
            await delete_account_block(zk)
        return await get_account_block(zk)


def run(args: argparse.Namespace) -> int:
    named = args.all or any(getattr(args, name) for name in S3_NAMES)
    if named and args.action != "set":
        raise UsageError("the settings go with `set` (e.g. `public-access-block set --all`)")
    output = Output(bool(args.json))
    current = run_async(lambda: _apply(args.zk, args.action, block_of(args)))
    settings = settings_of(current)
    if output.json_mode:
        output.emit_json(settings)
        return 0
    rows = [[name, "on" if on else "off"] for name, on in settings.items()]
    output.table("the cluster's public access block", ["setting", "state"], rows)
    return 0
