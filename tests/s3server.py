"""A real S3-compatible server for tests: moto's server mode in its own process on 127.0.0.1.

The pipeline talks to it through s3fs exactly as it would to AWS: only the standard AWS
environment variables (AWS_ENDPOINT_URL and test credentials) point it there.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def s3_server():
    """Yields the environment variables that point AWS clients at a fresh local S3 server."""
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the moto S3 server did not start") from None
                time.sleep(0.2)
        yield {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
