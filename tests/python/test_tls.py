"""HTTPS: one quarry server with a certificate made by `quarry admin cert generate` (a CA of its
own), and the real clients against it, each given the CA with its own setting and otherwise run
with its defaults: boto3 (`verify=`), the aws cli (`--ca-bundle`), rclone (`--ca-cert`), s3cmd
(`ca_certs_file`), `quarry admin` (`--ca-cert`) and the container's health check script. Each
client is also shown refusing the server without the CA setting (the control that the setting is
what makes it work). Every step checks the bytes that come back.
"""

import hashlib
import os
import pathlib
import ssl
import subprocess
import tempfile
import time
import urllib.request
import uuid

import boto3
import botocore.exceptions
import pytest
from botocore.config import Config

from conftest import (
    ACCESS_KEY,
    REPO,
    SECRET_KEY,
    START_TIMEOUT,
    client_env,
    client_program,
    free_port,
    quarry_bin,
    run_client,
)

MIB = 1 << 20


class HttpsServer:
    def __init__(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="quarry-py-tls-")
        root = pathlib.Path(self.tmp.name)
        self.certs = root / "certs"
        self.ca_dir = root / "ca"
        out = subprocess.run(
            [str(quarry_bin()), "admin", "cert", "generate", "--out", str(self.certs),
             "--ca-dir", str(self.ca_dir), "127.0.0.1", "localhost"],
            capture_output=True, text=True, timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert "Made a new CA" in out.stdout, out.stdout
        self.ca = self.ca_dir / "ca.crt"
        dirs = [root / f"d{i}" for i in range(1, 5)]
        for d in dirs:
            d.mkdir()
        self.port = free_port()
        self.endpoint = f"https://127.0.0.1:{self.port}"
        env = dict(os.environ)
        env.update(QUARRY_ROOT_USER=ACCESS_KEY, QUARRY_ROOT_PASSWORD=SECRET_KEY, HOME=str(root),
                   QUARRY_CERTS_DIR=str(self.certs))
        env.setdefault("RUST_LOG", "info")
        self.log_path = root / "quarry.log"
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [str(quarry_bin()), "server", *map(str, dirs), "--address", f"127.0.0.1:{self.port}"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, cwd=root, env=env,
        )
        ctx = ssl.create_default_context(cafile=str(self.ca))
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert self.proc.poll() is None, self.log_path.read_text(errors="replace")
            try:
                with urllib.request.urlopen(f"{self.endpoint}/health/live", timeout=1, context=ctx) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            assert time.monotonic() < deadline, self.log_path.read_text(errors="replace")
            time.sleep(0.05)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()
        self.tmp.cleanup()

    def boto3(self, verify):
        return boto3.client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY, region_name="us-east-1", verify=verify,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
        )


@pytest.fixture(scope="module")
def https():
    s = HttpsServer()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def https_bucket(https):
    name = f"tls-{uuid.uuid4().hex[:16]}"
    https.boto3(str(https.ca)).create_bucket(Bucket=name)
    return name


def test_boto3_with_the_ca_and_without(https, https_bucket):
    s3 = https.boto3(str(https.ca))
    data = os.urandom(6 * MIB + 5)  # boto3 sends a checksum trailer over HTTPS
    s3.put_object(Bucket=https_bucket, Key="k", Body=data)
    assert s3.get_object(Bucket=https_bucket, Key="k")["Body"].read() == data
    with pytest.raises(botocore.exceptions.SSLError):
        https.boto3(True).list_buckets()


def test_aws_cli_with_ca_bundle(https, https_bucket, tmp_path):
    aws = client_program("aws")
    home = tmp_path / "home"
    home.mkdir()
    env = client_env(home, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
                     AWS_DEFAULT_REGION="us-east-1")
    src = tmp_path / "up.bin"
    src.write_bytes(os.urandom(9 * MIB + 1))  # multipart at the cli's 8 MiB threshold
    base = [aws, "--endpoint-url", https.endpoint, "--ca-bundle", https.ca]
    run_client([*base, "s3", "cp", src, f"s3://{https_bucket}/up.bin"], env)
    back = tmp_path / "back.bin"
    run_client([*base, "s3", "cp", f"s3://{https_bucket}/up.bin", back], env)
    assert back.read_bytes() == src.read_bytes()
    refused = subprocess.run([str(a) for a in [aws, "--endpoint-url", https.endpoint, "s3", "ls"]],
                             env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0
    assert "SSL" in refused.stderr or "certificate" in refused.stderr, refused.stderr


def test_rclone_with_ca_cert(https, https_bucket, tmp_path):
    rclone = client_program("rclone")
    home = tmp_path / "home"
    home.mkdir()
    conf = tmp_path / "rclone.conf"
    conf.write_text(
        "[quarry]\ntype = s3\nprovider = Other\n"
        f"access_key_id = {ACCESS_KEY}\nsecret_access_key = {SECRET_KEY}\n"
        f"endpoint = {https.endpoint}\nregion = us-east-1\n"
    )
    env = client_env(home)
    src = tmp_path / "src"
    src.mkdir()
    data = os.urandom(7 * MIB + 3)
    (src / "f.bin").write_bytes(data)
    base = [rclone, "--config", conf, "--s3-upload-cutoff", "5M", "--s3-chunk-size", "5M", "--retries", "1"]
    run_client([*base, "--ca-cert", https.ca, "copy", src, f"quarry:{https_bucket}/r"], env)
    dst = tmp_path / "dst"
    run_client([*base, "--ca-cert", https.ca, "copy", f"quarry:{https_bucket}/r", dst], env)
    assert (dst / "f.bin").read_bytes() == data
    refused = subprocess.run([str(a) for a in [*base, "lsd", "quarry:"]], env=env,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0
    assert "certificate" in refused.stderr, refused.stderr


def test_s3cmd_with_ca_certs_file(https, https_bucket, tmp_path):
    s3cmd = client_program("s3cmd")
    home = tmp_path / "home"
    home.mkdir()
    host = https.endpoint.removeprefix("https://")
    cfg = tmp_path / "s3cfg"
    base_cfg = (
        f"[default]\naccess_key = {ACCESS_KEY}\nsecret_key = {SECRET_KEY}\n"
        f"host_base = {host}\nhost_bucket = {host}\nuse_https = True\n"
    )
    cfg.write_text(base_cfg + f"ca_certs_file = {https.ca}\n")
    env = client_env(home)
    src = tmp_path / "s.bin"
    src.write_bytes(os.urandom(300_000))
    run_client([s3cmd, "-c", cfg, "put", src, f"s3://{https_bucket}/s.bin"], env, cwd=tmp_path)
    back = tmp_path / "s.back"
    run_client([s3cmd, "-c", cfg, "get", f"s3://{https_bucket}/s.bin", back], env, cwd=tmp_path)
    assert hashlib.md5(back.read_bytes()).digest() == hashlib.md5(src.read_bytes()).digest()
    cfg.write_text(base_cfg)
    refused = subprocess.run([s3cmd, "-c", str(cfg), "ls"], env=env, capture_output=True, text=True,
                             timeout=120, cwd=tmp_path)
    assert refused.returncode != 0
    assert "certificate" in (refused.stdout + refused.stderr).lower(), refused.stderr


def test_quarry_admin_and_the_health_check_speak_https(https):
    env = client_env(pathlib.Path(https.tmp.name), QUARRY_ROOT_USER=ACCESS_KEY,
                     QUARRY_ROOT_PASSWORD=SECRET_KEY)
    out = run_client([quarry_bin(), "admin", "drives", "--endpoint", https.endpoint, "--ca-cert", https.ca], env)
    assert "online" in out, out
    refused = subprocess.run([str(quarry_bin()), "admin", "drives", "--endpoint", https.endpoint],
                             env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0
    assert "certificate" in refused.stderr.lower() or "tls" in refused.stderr.lower(), refused.stderr
    hc = REPO / "docker" / "healthcheck.sh"
    ok = subprocess.run(["sh", str(hc)], env={**env, "QUARRY_ADDRESS": f"127.0.0.1:{https.port}",
                                             "QUARRY_CERTS_DIR": str(https.certs)},
                        capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0, ok.stderr
    # Without the certificate directory the script asks in plain HTTP, which an HTTPS server
    # does not answer: the check fails (the control).
    bad = subprocess.run(["sh", str(hc)], env={**env, "QUARRY_ADDRESS": f"127.0.0.1:{https.port}",
                                              "QUARRY_CERTS_DIR": "/nonexistent"},
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode != 0
