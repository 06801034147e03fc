"""Object storage over fsspec, shared by the pod helper (``taugrid.podstorage``) and the
server's reader (``taugrid.executors.objectstore``): the bucket's layout for a run, the
filesystem for a workspace's ``storage.url``, and errors said in one line.

Layout under ``<url>``::

    runs/<run id>/checkpoints/step-0000001234/{tau-checkpoint.json, ...}
    runs/<run id>/outputs/...

fsspec (and s3fs, for ``s3://``) is imported only when a filesystem is opened, so the pod
helper's other commands and the modules importing this one stay light.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from taugrid.errors import TauError

SCHEMES = ("s3",)
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_PREFIX_PART = re.compile(r"[A-Za-z0-9._=+-]+")
KEY_ID_ENV = "AWS_ACCESS_KEY_ID"
SECRET_KEY_ENV = "AWS_SECRET_ACCESS_KEY"
_MAX_REASON = 200


class StorageError(TauError):
    """The object storage cannot be used (URL, credentials, endpoint, bucket)."""

    code = "storage_unavailable"


def url_problem(url: str) -> str | None:
    """Why ``url`` is not a usable ``s3://bucket[/prefix]``, else None (pure; the policy
    loader says it at the value's position)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in SCHEMES:
        return f"must be s3://bucket[/prefix], got {url!r}"
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        return (
            f"bucket {bucket!r} is not an S3 bucket name: 3 to 63 lowercase letters, "
            "digits, '.' and '-', starting and ending with a letter or digit"
        )
    parts = prefix.rstrip("/").split("/") if prefix.strip("/") else []
    if any(p in (".", "..") or not _PREFIX_PART.fullmatch(p) for p in parts):
        return (
            f"prefix {prefix!r} must be '/'-separated parts of letters, digits and "
            "'._=+-' (no empty, '.' or '..' parts)"
        )
    return None


def endpoint_problem(url: str) -> str | None:
    """Why ``url`` is not an ``http(s)://host[:port][/path]`` endpoint, else None. No
    user or password in it: credentials come from a Secret, never from the policy."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("http", "https"):
        return f"must be an http:// or https:// URL, got {url!r}"
    host = rest.split("/", 1)[0]
    if "@" in host:
        return "must not carry a user or password (use credentials_secret)"
    if not host or any(c in url for c in "?# \t"):
        return f"must be http(s)://host[:port][/path] without query or fragment, got {url!r}"
    return None


@dataclass(frozen=True)
class Location:
    """A workspace's ``storage.url`` (and endpoint) as fsspec paths: ``root`` is
    ``bucket/prefix`` without the scheme or a trailing '/'."""

    url: str
    endpoint_url: str | None = None

    @property
    def root(self) -> str:
        return self.url.partition("://")[2].strip("/")

    def run(self, run_id: str) -> str:
        if not re.fullmatch(r"[a-z0-9][-a-z0-9]*", run_id):
            raise StorageError(f"{run_id!r} is not a run id")
        return f"{self.root}/runs/{run_id}"

    def checkpoints(self, run_id: str) -> str:
        return f"{self.run(run_id)}/checkpoints"

    def outputs(self, run_id: str) -> str:
        return f"{self.run(run_id)}/outputs"


def open_fs(loc: Location, key: str | None = None, secret: str | None = None) -> Any:
    """The filesystem of ``loc``. Credentials: the ones given, else the standard
    AWS variables (the pod's, from the credentials Secret), else s3fs's chain. No cache
    of listings or instances: the workload's sidecar changes the bucket under a reader."""
    problem = url_problem(loc.url)
    if problem is not None:
        raise StorageError(f"storage url {problem}")
    try:
        import fsspec
    except ImportError:
        raise StorageError(
            "object storage needs fsspec and s3fs (pip install 'taugrid[s3]')"
        ) from None
    options: dict[str, Any] = {
        "skip_instance_cache": True,
        "use_listings_cache": False,
        # A few quick retries: an unreachable endpoint is said in seconds, not minutes.
        "config_kwargs": {"connect_timeout": 10, "retries": {"max_attempts": 3}},
    }
    key = key or os.environ.get(KEY_ID_ENV) or None
    secret = secret or os.environ.get(SECRET_KEY_ENV) or None
    if key and secret:
        options.update(key=key, secret=secret)
    if loc.endpoint_url:
        options["client_kwargs"] = {"endpoint_url": loc.endpoint_url}
    try:
        return fsspec.filesystem(loc.url.partition("://")[0], **options)
    except ImportError:
        raise StorageError(
            "object storage needs s3fs for s3:// URLs (pip install 'taugrid[s3]')"
        ) from None


def describe(
    exc: BaseException, loc: Location, what: str, secrets: tuple[str | None, ...] = ()
) -> StorageError:
    """``exc`` from fsspec/botocore as one line naming ``what`` failed where, without
    anything secret: the reason is the error's first line, with ``secrets`` and any
    credential value from the environment blotted out, and cut short."""
    where = loc.url + (f" (endpoint {loc.endpoint_url})" if loc.endpoint_url else "")
    text = _reason(exc, secrets)
    if isinstance(exc, PermissionError):
        why = f"access denied ({text}): check the credentials Secret and the bucket's policy"
    elif isinstance(exc, FileNotFoundError):
        why = "the bucket does not exist" if "bucket" in text.lower() else f"not found ({text})"
    else:
        name = type(exc).__name__
        why = f"{name}: {text}" if text else name
        if "connect" in why.lower() or "endpoint" in text.lower():
            why = f"cannot reach the storage endpoint ({why})"
    return StorageError(f"{what} at {where}: {why}")


def _reason(exc: BaseException, secrets: tuple[str | None, ...]) -> str:
    """The error's first line, any credential value in it blotted out, cut short."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else ""
    for value in (*secrets, os.environ.get(KEY_ID_ENV), os.environ.get(SECRET_KEY_ENV)):
        if value:
            text = text.replace(value, "***")
    return text[:_MAX_REASON] + "..." if len(text) > _MAX_REASON else text
