"""pytest fixtures: start the quarry binary like the Rust harness does and hand out boto3 clients.

The binary is `$QUARRY_BIN` or `<repo>/target/debug/quarry` (run `cargo build -p quarry` first).
One server per test session, on a free 127.0.0.1 port and temporary drive directories; every test
uses its own bucket.
"""

import os
import pathlib
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

ACCESS_KEY = "quarrytestadmin"
SECRET_KEY = "quarry-test-secret-key-0123456789"
REPO = pathlib.Path(__file__).resolve().parents[2]
START_TIMEOUT = 20.0


def quarry_bin() -> pathlib.Path:
    env = os.environ.get("QUARRY_BIN")
    if env:
        return pathlib.Path(env)
    target = os.environ.get("CARGO_TARGET_DIR")
    base = pathlib.Path(target) if target else REPO / "target"
    return base / "debug" / "quarry"


def error_code(exc: ClientError) -> str:
    """The S3 error code of a refused call."""
    return exc.response.get("Error", {}).get("Code", "")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class QuarryServer:
    def __init__(self, drives: int = 4):
        binary = quarry_bin()
        if not binary.exists():
            raise RuntimeError(f"quarry binary not found at {binary}: run `cargo build -p quarry` first")
        self.tmp = tempfile.TemporaryDirectory(prefix="quarry-py-")
        root = pathlib.Path(self.tmp.name)
        self.dirs = [root / f"d{i}" for i in range(1, drives + 1)]
        for d in self.dirs:
            d.mkdir()
        self.log_path = root / "quarry.log"
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ)
        env["QUARRY_ROOT_USER"] = ACCESS_KEY
        env["QUARRY_ROOT_PASSWORD"] = SECRET_KEY
        # Plain HTTP whatever the machine holds: the default certificate directory is
        # ~/.quarry/certs, so HOME is this server's own directory.
        env["HOME"] = str(root)
        env.pop("QUARRY_CERTS_DIR", None)
        # No web console unless a test asks for one (the default port is shared by every test).
        env["QUARRY_CONSOLE_ADDRESS"] = "off"
        # The built-in key service with two keys, and SSE-C keys over this plain-HTTP port
        # (test_sse.py).
        env["QUARRY_KMS_SECRET_KEY"] = (
            "pykey-1:MTExMTExMTExMTExMTExMTExMTExMTExMTExMTExMTE=,"
            "pykey-2:MjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjI="
        )
        env["QUARRY_SSE_C_ALLOW_HTTP"] = "1"
        env.setdefault("RUST_LOG", "info")
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [str(binary), "server", *map(str, self.dirs), "--address", f"127.0.0.1:{self.port}"],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=root,
            env=env,
        )
        self._wait_live()

    def log_tail(self, n: int = 40) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def _wait_live(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        url = f"{self.endpoint}/health/live"
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"quarry exited during start-up ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"quarry not live on {url} within {START_TIMEOUT}s:\n{self.log_tail()}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()

    def client(self, trailer: bool = False):
        """A boto3 S3 client with current defaults (CRC32 request checksums when supported).

        botocore sends the checksum as an `aws-chunked` trailer with
        `x-amz-content-sha256: STREAMING-UNSIGNED-PAYLOAD-TRAILER` only over HTTPS; over plain HTTP it
        signs the payload and sends `x-amz-checksum-crc32` as a header. With `trailer=True` the client
        takes the HTTPS path on plain HTTP (the same switch botocore flips for https URLs), so both
        ways boto3 uploads are exercised against this plain-HTTP test server.
        """
        c = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name="us-east-1",
            config=Config(
                s3={"addressing_style": "path"},
                retries={"max_attempts": 1, "mode": "standard"},
                connect_timeout=5,
                read_timeout=120,
            ),
        )
        c.trailer_mode = trailer
        c.sent = []  # (operation, x-amz-content-sha256, x-amz-trailer) of each request sent

        def record(request, **kwargs):
            def header(name):
                v = request.headers.get(name)
                return v.decode() if isinstance(v, bytes) else v

            op = kwargs.get("event_name", "").split(".")[-1]
            c.sent.append((op, header("x-amz-content-sha256"), header("X-Amz-Trailer")))

        c.meta.events.register("before-send.s3", record)
        if trailer:

            def use_trailer(params, **kwargs):
                algo = params.get("context", {}).get("checksum", {}).get("request_algorithm")
                if isinstance(algo, dict) and algo.get("in") == "header":
                    algo["in"] = "trailer"

            c.meta.events.register("before-call.s3.PutObject", use_trailer)
            c.meta.events.register("before-call.s3.UploadPart", use_trailer)
        return c


@pytest.fixture(scope="session")
def quarry():
    server = QuarryServer(drives=4)
    try:
        yield server
    finally:
        server.stop()
        server.tmp.cleanup()


@pytest.fixture(params=["header-checksum", "trailer-checksum"])
def s3(request, quarry):
    return quarry.client(trailer=request.param == "trailer-checksum")


@pytest.fixture
def bucket(quarry):
    name = f"py-{uuid.uuid4().hex[:16]}"
    quarry.client().create_bucket(Bucket=name)
    return name


# ---------------------------------------------------------------------------------------------
# Real client programs (aws cli, rclone, s3cmd): run as a new user would, isolated from the
# machine's own configuration.
# ---------------------------------------------------------------------------------------------


def client_program(name: str) -> str:
    """The path of a client program: the venv's own (aws cli) first, then $PATH.

    A missing client skips its tests, unless QUARRY_REQUIRE_CLIENTS=1 (scripts/test sets it after
    installing them), where it fails them.
    """
    import shutil
    import sys

    venv = pathlib.Path(sys.executable).parent / name
    found = str(venv) if venv.exists() else shutil.which(name)
    if found:
        return found
    if os.environ.get("QUARRY_REQUIRE_CLIENTS") == "1":
        pytest.fail(f"{name} is not installed (scripts/test installs it)")
    pytest.skip(f"{name} is not installed")


def client_env(home: pathlib.Path, **extra: str) -> dict:
    """The environment for a client program: this one without any AWS_*, RCLONE_* or proxy
    settings of the machine, and HOME in a temporary directory, so no ~/.aws, ~/.s3cfg or
    ~/.config/rclone is read or written."""
    dropped = ("AWS_", "RCLONE_", "S3CMD")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.upper().startswith(dropped) and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")
    }
    env["HOME"] = str(home)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.update(extra)
    return env


def run_client(args: list, env: dict, cwd=None, timeout: float = 120) -> str:
    """Runs a client program, fails the test with its output unless it exits 0, returns stdout."""
    r = subprocess.run(
        [str(a) for a in args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    if r.returncode != 0:
        pytest.fail(f"{' '.join(map(str, args))} exited {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}")
    return r.stdout


def tree_bytes(root: pathlib.Path) -> dict:
    """{relative path: bytes} of every file under root."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
