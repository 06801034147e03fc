"""A real S3 API on loopback for tests: moto's server mode (``ThreadedMotoServer``) in
this process, on a free port, speaking HTTP to s3fs/botocore exactly as a bucket would.

A module of its own (tests/ is on sys.path through its conftest), like servicecheck.py:
``from s3server import s3`` makes the fixture available. Without moto (or s3fs) the
tests skip with the reason, unless TAU_REQUIRE_SERVICES=1, where they fail.
"""

from __future__ import annotations

import logging
import os
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from servicecheck import require_module

KEY_ID = "AKIATAUGRIDTEST00001"
SECRET = "tau-test-secret/do-not-print-me"


@dataclass
class S3Server:
    endpoint: str  # http://127.0.0.1:PORT

    def fs(self, key: str = KEY_ID, secret: str = SECRET) -> Any:
        import s3fs

        return s3fs.S3FileSystem(
            key=key,
            secret=secret,
            client_kwargs={"endpoint_url": self.endpoint},
            skip_instance_cache=True,
            use_listings_cache=False,
        )

    def bucket(self) -> str:
        """A new, empty bucket: each test gets its own, so none sees another's keys."""
        name = f"tau-{uuid.uuid4().hex[:12]}"
        self.fs().mkdir(name)
        return name

    def env(self) -> dict[str, str]:
        """The credentials a pod gets from its Secret, for a helper started as a process;
        nothing of this machine's AWS configuration leaks in."""
        return {
            "AWS_ACCESS_KEY_ID": KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }

    def require_auth(self, on: bool) -> None:
        """With ``on``, every request needs an access key moto knows (none of ours does:
        a bad-credentials server); off again, any key is accepted."""
        request = urllib.request.Request(
            f"{self.endpoint}/moto-api/reset-auth",
            data=b"0" if on else b"inf",
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        urllib.request.urlopen(request, timeout=10).close()


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    require_module("moto", "moto[server] is needed for a real S3 API (pip install 'moto[server]')")
    require_module("s3fs", "s3fs is needed for object storage (pip install 'taugrid[s3]')")
    from moto.server import ThreadedMotoServer

    # werkzeug logs every request at INFO: keep the tests' output to what matters.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield S3Server(f"http://{host}:{port}")
    finally:
        server.stop()
