"""`blobstore admin user|group|policy ...`: the users of the cluster, kept in ZooKeeper.

Each command is an object with `add_arguments(parser)` and `run(args)`, registered in
`cli.py`. Changes are compare-and-set writes (blobstore/access/users.py): two operators
at once lose nothing. Running gateways see every change within seconds, no restart.

Adding a user or rotating its key seals the new secret under the cluster key:
`--cluster-key-file PATH`, or BLOBSTORE_CLUSTER_KEY_FILE, or BLOBSTORE_CLUSTER_KEY (the
key itself, base64). `blobstore standalone` keeps one in DATA/cluster.key.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from blobstore.access.user_records import (
    BUILTIN_POLICIES,
    GRACE_S_MAX,
    POLICY_BYTES_MAX,
    AccessError,
    GroupRecord,
    NoSuchGroupError,
    UserRecord,
)
from blobstore.access.users import UserStore
from blobstore.admin._output import Output, add_common_arguments, admin_session, run_async
from blobstore.runtime.errors import UsageError
from blobstore.runtime.sealing import load_cluster_key

Action = Callable[[UserStore, argparse.Namespace, Output], Awaitable[None]]


def utc_text(timestamp: float | None) -> str:
    if timestamp is None:
        return ""
    return f"{datetime.datetime.fromtimestamp(timestamp, datetime.UTC):%Y-%m-%d %H:%M:%SZ}"


def _sub_parser(
    actions: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str
) -> argparse.ArgumentParser:
    parser = actions.add_parser(name, help=help_text, description=help_text)
    add_common_arguments(parser)
    return parser


def _add_cluster_key_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster-key-file",
        metavar="PATH",
        help="the cluster key the secret is sealed under (default: env "
        "BLOBSTORE_CLUSTER_KEY_FILE, or BLOBSTORE_CLUSTER_KEY)",
    )


def _run(args: argparse.Namespace, actions: dict[str, Action], needs_key: set[str]) -> int:
    action = getattr(args, "action", None)
    if action is None:
        raise UsageError(f"{args.admin_command} needs an action: {', '.join(actions)}")
    cluster_key = None
    if action in needs_key:
        cluster_key = load_cluster_key(getattr(args, "cluster_key_file", None))
    output = Output(bool(args.json))

    async def main() -> None:
        async with admin_session(args.zk) as zk:
            try:
                await actions[action](UserStore(zk, cluster_key), args, output)
            except AccessError as e:
                raise UsageError(str(e)) from None

    run_async(main)
    return 0


def _print_key(output: Output, heading: str, access_key: str, secret_key: str) -> None:
    if output.json_mode:
        output.emit_json({"access_key": access_key, "secret_key": secret_key})
        return
    output.note(heading)
    output.note(f"  access key: {access_key}")
    output.note(f"  secret key: {secret_key}")
    output.note("The secret key is shown only now: keep it.")


def user_document(record: UserRecord) -> dict[str, Any]:
    """A user as `user ls --json` prints it (never a sealed secret)."""
    return {
        "name": record.name,
        "status": record.status,
        "access_keys": [
            {"access_key": k.access_key, "created": k.created, "expires": k.expires}
            for k in record.access_keys
        ],
        "policies": list(record.policies),
        "groups": list(record.groups),
        "created": record.created,
    }


def _keys_text(record: UserRecord) -> str:
    return ", ".join(
        k.access_key + (f" (until {utc_text(k.expires)})" if k.expires is not None else "")
        for k in record.access_keys
    )


# ---------------------------------------------------------------------- user


async def _user_add(store: UserStore, args: argparse.Namespace, output: Output) -> None:
    if bool(args.access_key) != bool(args.secret_key):
        raise UsageError("give both --access-key and --secret-key, or neither")
    pair = await store.add_user(
        args.name, args.access_key, args.secret_key, args.policy or (), args.group or ()
    )
    _print_key(output, f"user {args.name} added", pair.access_key, pair.secret_key)


async def _user_ls(store: UserStore, args: argparse.Namespace, output: Output) -> None:
    users = await store.list_users()
    if output.json_mode:
        output.emit_json([user_document(u) for u in users])
        return
    rows = [
        (
            u.name,
            u.status,
            _keys_text(u),
            ", ".join(u.policies),
            ", ".join(u.groups),
            utc_text(u.created),
        )
        for u in users
    ]
    output.table(
        f"{len(users)} user(s)",
        ["user", "status", "access keys", "policies", "groups", "created (UTC)"],
        rows,
    )


async def _user_rm(store: UserStore, args: argparse.Namespace, output: Output) -> None:
    await store.remove_user(args.name)
    _done(output, f"user {args.name} removed")


async def _user_rotate(store: UserStore, args: argparse.Namespace, output: Output) -> None:
    if not 0 <= args.grace <= GRACE_S_MAX:
        raise UsageError(f"--grace {args.grace:g}: must be 0..{GRACE_S_MAX:g} seconds")
    pair = await store.rotate_key(args.name, args.grace)
    old = f"the old key works for another {args.grace:g} s" if args.grace else ""
    heading = f"user {args.name}: new key" + (f" ({old})" if old else "; the old key is gone")
    _print_key(output, heading, pair.access_key, pair.secret_key)


async def _user_disable(store: UserStore, args: argparse.Namespace, output: Output) -> None:
    await store.set_enabled(args.name, False)
    _done(output, f"user {args.name} disabled")


async def _user_enable(store: UserStore, args: argparse.Namespace, output: Output) -> None:
    await store.set_enabled(args.name, True)
    _done(output, f"user {args.name} enabled")


async def _user_attach(store: UserStore, args: argparse.Namespace, output: Output) -> None:
    await store.attach_user_policies(args.name, args.policies)
    _done(output, f"user {args.name}: attached {', '.join(args.policies)}")


async def _user_detach(store: UserStore, args: argparse.Namespace, output: Output) -> None:
    await store.detach_user_policies(args.name, args.policies)
    _done(output, f"user {args.name}: detached {', '.join(args.policies)}")


def _done(output: Output, message: str) -> None:
    """What a change prints: a line, or {"ok": true, "message": ...} with --json."""
    if output.json_mode:
        output.emit_json({"ok": True, "message": message})
    else:
        output.note(message)


class UserCommand:
    """Users and their access keys.

    blobstore admin user add NAME [--policy P]... [--group G]...  # prints the new key pair
    blobstore admin user add NAME --json          # {"access_key": ..., "secret_key": ...}
    blobstore admin user add NAME --access-key K --secret-key S   # a given key pair
    blobstore admin user ls
    blobstore admin user rotate-key NAME [--grace SECONDS]        # a new key pair
    blobstore admin user disable NAME | enable NAME | rm NAME
    blobstore admin user attach NAME POLICY... | detach NAME POLICY...

    A new user has no permissions until a policy is attached to it or to one of its
    groups: the built-in readwrite, readonly, writeonly and admin, or one added with
    `blobstore admin policy add`. rotate-key replaces the user's key: the old one stops
    working at once, or after --grace seconds. A disabled user's keys stop working
    (InvalidAccessKeyId) until it is enabled again.
    """

    ACTIONS: dict[str, Action] = {
        "add": _user_add,
        "ls": _user_ls,
        "rm": _user_rm,
        "rotate-key": _user_rotate,
        "disable": _user_disable,
        "enable": _user_enable,
        "attach": _user_attach,
        "detach": _user_detach,
    }

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        add_common_arguments(parser)
        actions = parser.add_subparsers(dest="action", metavar="ACTION")
        add = _sub_parser(actions, "add", "add a user with a new (or given) key pair")
        add.add_argument("name", help="user name: letters, digits, + = , . @ _ - (up to 64)")
        add.add_argument("--access-key", help="use this access key instead of a new one")
        add.add_argument("--secret-key", help="use this secret key instead of a new one")
        add.add_argument("--policy", action="append", help="attach this policy (repeatable)")
        add.add_argument("--group", action="append", help="put the user in this group (repeatable)")
        _add_cluster_key_argument(add)
        _sub_parser(actions, "ls", "list the users, their keys, policies and groups")
        _sub_parser(actions, "rm", "remove a user and its keys").add_argument("name")
        rotate = _sub_parser(actions, "rotate-key", "give a user a new key pair")
        rotate.add_argument("name")
        rotate.add_argument(
            "--grace",
            type=float,
            default=0.0,
            metavar="SECONDS",
            help="keep the old key working this long (default 0: it stops at once)",
        )
        _add_cluster_key_argument(rotate)
        _sub_parser(actions, "disable", "stop a user's keys from working").add_argument("name")
        _sub_parser(actions, "enable", "let a disabled user's keys work again").add_argument("name")
        for name, verb in (("attach", "attach policies to"), ("detach", "detach policies from")):
            sub = _sub_parser(actions, name, f"{verb} a user")
            sub.add_argument("name")
            sub.add_argument("policies", nargs="+", metavar="POLICY")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        return _run(args, UserCommand.ACTIONS, {"add", "rotate-key"})


# ---------------------------------------------------------------------- group


async def _group_add(store: UserStore, args: argparse.Namespace, output: Output) -> None:
    try:
        await store.get_group(args.group)
    except NoSuchGroupError:
        await store.add_group(args.group, args.policy or ())
        created = True
    else:
        if args.policy:
            await store.set_group_policies(args.group, added=args.policy)
        created = False
    await store.add_members(args.group, args.users)
    members = f": added {', '.join(args.users)}" if args.users else ""
    _done(output, f"group {args.group} {'created' if created else 'updated'}{members}")


async def _group_rm(store: UserStore, args: argparse.Namespace, output: Output) -> None:
    if args.users:
        await store.remove_members(args.group, args.users)
        _done(output, f"group {args.group}: removed {', '.join(args.users)}")
    else:
        await store.remove_group(args.group)
        _done(output, f"group {args.group} removed")


async def _group_ls(store: UserStore, args: argparse.Namespace, output: Output) -> None:
    groups = await store.list_groups()
    users = await store.list_users()
    members = {g.name: [u.name for u in users if g.name in u.groups] for g in groups}
    if output.json_mode:
        output.emit_json([_group_document(g, members[g.name]) for g in groups])
        return
    rows = [
        (g.name, ", ".join(g.policies), ", ".join(members[g.name]), utc_text(g.created))
        for g in groups
    ]
    output.table(f"{len(groups)} group(s)", ["group", "policies", "members", "created (UTC)"], rows)


def _group_document(group: GroupRecord, members: list[str]) -> dict[str, Any]:
    return {
        "name": group.name,
        "policies": list(group.policies),
        "members": members,
        "created": group.created,
    }


async def _group_members(store: UserStore, args: argparse.Namespace, output: Output) -> None:
    members = await store.group_members(args.group)
    if output.json_mode:
        output.emit_json(members)
    else:
        output.table(
            f"group {args.group}: {len(members)} member(s)", ["user"], [(m,) for m in members]
        )


async def _group_attach(store: UserStore, args: argparse.Namespace, output: Output) -> None:
    await store.set_group_policies(args.group, added=args.policies)
    _done(output, f"group {args.group}: attached {', '.join(args.policies)}")


async def _group_detach(store: UserStore, args: argparse.Namespace, output: Output) -> None:
    await store.set_group_policies(args.group, removed=args.policies)
    _done(output, f"group {args.group}: detached {', '.join(args.policies)}")


class GroupCommand:
    """Groups: their members get the policies attached to the group.

    blobstore admin group add GROUP [USER...] [--policy P]...  # create it, add members
    blobstore admin group rm GROUP USER...                     # remove members
    blobstore admin group rm GROUP                             # remove the group (no members left)
    blobstore admin group ls
    blobstore admin group members GROUP
    blobstore admin group attach GROUP POLICY... | detach GROUP POLICY...
    """

    ACTIONS: dict[str, Action] = {
        "add": _group_add,
        "rm": _group_rm,
        "ls": _group_ls,
        "members": _group_members,
        "attach": _group_attach,
        "detach": _group_detach,
    }

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        add_common_arguments(parser)
        actions = parser.add_subparsers(dest="action", metavar="ACTION")
        add = _sub_parser(actions, "add", "create a group (if new) and add users to it")
        add.add_argument("group")
        add.add_argument("users", nargs="*", metavar="USER")
        add.add_argument("--policy", action="append", help="attach this policy (repeatable)")
        rm = _sub_parser(actions, "rm", "remove users from a group, or (no users) the group")
        rm.add_argument("group")
        rm.add_argument("users", nargs="*", metavar="USER")
        _sub_parser(actions, "ls", "list the groups, their policies and members")
        _sub_parser(actions, "members", "list a group's members").add_argument("group")
        for name, verb in (("attach", "attach policies to"), ("detach", "detach policies from")):
            sub = _sub_parser(actions, name, f"{verb} a group")
            sub.add_argument("group")
            sub.add_argument("policies", nargs="+", metavar="POLICY")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        return _run(args, GroupCommand.ACTIONS, set())


# ---------------------------------------------------------------------- policy


def read_policy_text(source: str) -> str:
    """The document in a file, or on stdin for `-`; UsageError when unreadable."""
    try:
        if source == "-":
            text = sys.stdin.read(POLICY_BYTES_MAX + 1)
        else:
            with open(Path(source), encoding="utf-8") as f:
                text = f.read(POLICY_BYTES_MAX + 1)
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"policy file {source}: {getattr(e, 'strerror', None) or e}") from None
    return text


async def _policy_add(store: UserStore, args: argparse.Namespace, output: Output) -> None:
    created = await store.put_policy(args.name, read_policy_text(args.file))
    _done(output, f"policy {args.name} {'added' if created else 'replaced'}")


async def _policy_ls(store: UserStore, args: argparse.Namespace, output: Output) -> None:
    policies = await store.list_policies()
    if output.json_mode:
        output.emit_json([{"name": n, "builtin": b} for n, b in policies])
        return
    rows = [(n, "built in" if b else "") for n, b in policies]
    output.table(
        f"{len(policies)} polic{'y' if len(policies) == 1 else 'ies'}", ["policy", ""], rows
    )


async def _policy_rm(store: UserStore, args: argparse.Namespace, output: Output) -> None:
    await store.remove_policy(args.name)
    _done(output, f"policy {args.name} removed")


async def _policy_show(store: UserStore, args: argparse.Namespace, output: Output) -> None:
    text = await store.get_policy(args.name)
    if output.json_mode:
        output.emit_json({"name": args.name, "document": json.loads(text)})
        return
    sys.stdout.write(text if text.endswith("\n") else text + "\n")  # the document, as stored


class PolicyCommand:
    """Identity policies (S3's policy language), attached to users and groups.

    blobstore admin policy add NAME FILE      # FILE holds the JSON document (- : stdin);
                                              # an existing NAME is replaced
    blobstore admin policy ls
    blobstore admin policy show NAME          # the document as stored
    blobstore admin policy rm NAME            # only when no user or group has it attached

    Built in, as MinIO's canned policies (they cannot be changed or removed):
    readwrite (s3:* on every bucket), readonly (s3:GetBucketLocation, s3:GetObject),
    writeonly (s3:PutObject), admin (s3:* and the cluster's administration). The users
    the gateway was started with (BLOBSTORE_ACCESS_KEY, a users file) hold admin.
    """

    ACTIONS: dict[str, Action] = {
        "add": _policy_add,
        "ls": _policy_ls,
        "rm": _policy_rm,
        "show": _policy_show,
    }

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        add_common_arguments(parser)
        actions = parser.add_subparsers(dest="action", metavar="ACTION")
        add = _sub_parser(actions, "add", "add (or replace) a policy from a JSON file")
        add.add_argument("name")
        add.add_argument("file", metavar="FILE", help="the policy document; - reads stdin")
        _sub_parser(actions, "ls", "list the policies (built-in ones too)")
        _sub_parser(actions, "rm", "remove a policy no one has attached").add_argument("name")
        _sub_parser(actions, "show", "print a policy document").add_argument("name")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        return _run(args, PolicyCommand.ACTIONS, set())


assert set(BUILTIN_POLICIES) == {"readwrite", "readonly", "writeonly", "admin"}, "documented above"
