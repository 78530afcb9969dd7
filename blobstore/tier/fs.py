"""A tier's filesystem, through pyarrow.fs: the same layer in the job and the gateways.

`TierFiles` opens the tier's filesystem once and names its files: segments under
`<base>/segments/`, probes under `<base>/probes/`. Every failure to reach the tier is
a `TierUnavailableError` that names the tier and never its secret.
"""

from __future__ import annotations

import secrets
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow
import pyarrow.fs as pafs

from blobstore.runtime.sealing import ClusterKey
from blobstore.tier.tiers import TierSpec

SEGMENTS_DIR = "segments"
PROBES_DIR = "probes"
SEGMENT_SUFFIX = ".seg"
CONNECT_TIMEOUT_S = 5.0
REQUEST_TIMEOUT_S = 30.0
S3_ATTEMPTS = 3


class TierUnavailableError(Exception):
    """The tier could not be reached or refused a request (the message names it)."""

    def __init__(self, tier: str, action: str, error: BaseException) -> None:
        super().__init__(f"tier {tier}: {action}: {_describe(error)}")
        self.tier = tier


def _describe(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def open_filesystem(spec: TierSpec, cluster_key: ClusterKey | None) -> tuple[Any, str]:
    """(the pyarrow filesystem, the tier's base path in it)."""
    parts = urllib.parse.urlsplit(spec.uri)
    if spec.scheme == "file":
        return pafs.LocalFileSystem(), parts.path
    if spec.scheme == "s3":
        endpoint = urllib.parse.urlsplit(spec.endpoint) if spec.endpoint else None
        filesystem = pafs.S3FileSystem(
            access_key=spec.access_key or None,
            secret_key=spec.secret(cluster_key) or None,
            anonymous=not spec.access_key,
            region=spec.region or "us-east-1",
            endpoint_override=endpoint.netloc if endpoint else None,
            scheme=endpoint.scheme if endpoint else "https",
            connect_timeout=CONNECT_TIMEOUT_S,
            request_timeout=REQUEST_TIMEOUT_S,
            retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=S3_ATTEMPTS),
            allow_bucket_creation=False,
            allow_bucket_deletion=False,
        )
        return filesystem, f"{parts.netloc}{parts.path}".rstrip("/")
    assert spec.scheme == "hdfs", spec.scheme
    return pafs.HadoopFileSystem(parts.hostname or "default", parts.port or 8020), parts.path


@dataclass
class TierFiles:
    """One tier's files."""

    spec: TierSpec
    cluster_key: ClusterKey | None = field(default=None, repr=False)
    _filesystem: Any = field(default=None, repr=False)
    _base: str = ""

    @property
    def name(self) -> str:
        return self.spec.name

    def _fs(self) -> Any:
        if self._filesystem is None:
            try:
                self._filesystem, self._base = open_filesystem(self.spec, self.cluster_key)
            except (OSError, pyarrow.ArrowException) as e:
                raise TierUnavailableError(self.name, "cannot open its filesystem", e) from None
        return self._filesystem

    def _make_parent(self, path: str) -> None:
        """A file system's directory for `path` (an object store has none to make: a
        marker object would only litter the bucket)."""
        if self.spec.scheme != "s3":
            self._fs().create_dir(path.rpartition("/")[0], recursive=True)

    def segment_path(self, segment_id: str) -> str:
        self._fs()
        return f"{self._base}/{SEGMENTS_DIR}/{segment_id}{SEGMENT_SUFFIX}"

    def open_output(self, segment_id: str) -> Any:
        """A new segment's output stream (sequential writes; close it to finish)."""
        path = self.segment_path(segment_id)
        try:
            self._make_parent(path)
            return self._fs().open_output_stream(path)
        except (OSError, pyarrow.ArrowException) as e:
            raise TierUnavailableError(self.name, f"cannot create {path}", e) from None

    def open_input(self, segment_id: str) -> Any:
        """A segment for random reads: `size()` and `read_at(nbytes, offset)`."""
        path = self.segment_path(segment_id)
        try:
            return self._fs().open_input_file(path)
        except (OSError, pyarrow.ArrowException) as e:
            raise TierUnavailableError(self.name, f"cannot open {path}", e) from None

    def delete_segment(self, segment_id: str) -> None:
        path = self.segment_path(segment_id)
        try:
            self._fs().delete_file(path)
        except FileNotFoundError:
            return
        except (OSError, pyarrow.ArrowException) as e:
            raise TierUnavailableError(self.name, f"cannot delete {path}", e) from None

    def segments(self) -> Iterator[tuple[str, int]]:
        """(segment id, size) of every segment file on the tier."""
        self._fs()
        selector = pafs.FileSelector(f"{self._base}/{SEGMENTS_DIR}", allow_not_found=True)
        try:
            infos = self._fs().get_file_info(selector)
        except (OSError, pyarrow.ArrowException) as e:
            raise TierUnavailableError(self.name, "cannot list its segments", e) from None
        for info in infos:
            if info.type == pafs.FileType.File and info.base_name.endswith(SEGMENT_SUFFIX):
                yield info.base_name[: -len(SEGMENT_SUFFIX)], int(info.size or 0)

    def probe(self) -> None:
        """Write, read back and delete a small file: the tier is usable as defined."""
        self._fs()
        path = f"{self._base}/{PROBES_DIR}/probe-{secrets.token_hex(8)}"
        data = secrets.token_bytes(64)
        try:
            self._make_parent(path)
            with self._fs().open_output_stream(path) as out:
                out.write(data)
            with self._fs().open_input_file(path) as source:
                back = source.read_at(len(data), 0)
            self._fs().delete_file(path)
        except (OSError, pyarrow.ArrowException) as e:
            raise TierUnavailableError(
                self.name, f"cannot write and read {self.spec.uri}", e
            ) from None
        if back != data:
            raise TierUnavailableError(
                self.name, "probe", RuntimeError("a probe file read back different bytes")
            )
