"""s3cmd (Debian's package) against quarry, configured as a new user writes ~/.s3cfg (here a
temporary file passed with -c): keys, `host_base` and `host_bucket` both the endpoint's host:port
(so requests are path style) and `use_https = False`; nothing else.

s3cmd's defaults then sign with SigV4 for region "US" (its `bucket_location` default); S3 answers
AuthorizationHeaderMalformed naming the right region in `<Region>`, and s3cmd retries with it.
The same steps run once more with `signature_v2 = True` (header SigV2). Every step checks the
bytes that come back, not only the exit code.
"""

import hashlib
import os
import urllib.request
import uuid

import pytest

from conftest import ACCESS_KEY, SECRET_KEY, client_env, client_program, run_client, tree_bytes

MIB = 1 << 20


@pytest.fixture(params=["default", "signature_v2"])
def s3cmd(request, quarry, tmp_path):
    program = client_program("s3cmd")
    home = tmp_path / "home"
    home.mkdir()
    host = quarry.endpoint.removeprefix("http://")
    cfg = tmp_path / "s3cfg"
    text = (
        "[default]\n"
        f"access_key = {ACCESS_KEY}\n"
        f"secret_key = {SECRET_KEY}\n"
        f"host_base = {host}\n"
        f"host_bucket = {host}\n"
        "use_https = False\n"
    )
    if request.param == "signature_v2":
        text += "signature_v2 = True\n"
    cfg.write_text(text)
    env = client_env(home)

    def run(*args):
        return run_client([program, "-c", cfg, *args], env, cwd=tmp_path)

    return run


def test_s3cmd_everyday_commands(s3cmd, quarry, tmp_path):
    bucket = f"s3cmd-{uuid.uuid4().hex[:16]}"
    small = tmp_path / "small.bin"
    small.write_bytes(os.urandom(50_000))
    # Above s3cmd's 15 MiB multipart chunk size: two parts.
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(17 * MIB + 3))

    assert f"Bucket 's3://{bucket}/' created" in s3cmd("mb", f"s3://{bucket}")
    s3cmd("put", small, f"s3://{bucket}/dir/small.bin")
    s3cmd("put", big, f"s3://{bucket}/big.bin")
    head = quarry.client().head_object(Bucket=bucket, Key="big.bin")
    assert head["ETag"].endswith('-2"'), head["ETag"]
    for key, src in [("dir/small.bin", small), ("big.bin", big)]:
        down = tmp_path / f"got-{src.name}"
        s3cmd("get", "--force", f"s3://{bucket}/{key}", down)
        assert down.read_bytes() == src.read_bytes(), key

    rows = [line.split(maxsplit=3) for line in s3cmd("ls", "--recursive", f"s3://{bucket}").splitlines()]
    assert sorted((r[3], int(r[2])) for r in rows) == [
        (f"s3://{bucket}/big.bin", big.stat().st_size),
        (f"s3://{bucket}/dir/small.bin", small.stat().st_size),
    ]
    assert f"s3://{bucket}" in s3cmd("ls").split()

    info = s3cmd("info", f"s3://{bucket}/dir/small.bin")
    assert f"MD5 sum:   {hashlib.md5(small.read_bytes()).hexdigest()}" in info, info
    assert f"File size: {small.stat().st_size}" in info, info
    assert "FULL_CONTROL" in info, info
    info = s3cmd("info", f"s3://{bucket}")
    assert "Location:  us-east-1" in info, info
    assert "FULL_CONTROL" in info, info

    # signurl: a SigV2 presigned URL, fetched with plain HTTP.
    url = s3cmd("signurl", f"s3://{bucket}/dir/small.bin", "+300").strip()
    with urllib.request.urlopen(url, timeout=30) as r:
        assert r.read() == small.read_bytes()

    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    files = {"a.txt": b"a\n", "sub/b.bin": os.urandom(70_000), "sub/c d.txt": b"space in name"}
    for name, data in files.items():
        (src / name).write_bytes(data)
    up = s3cmd("sync", f"{src}/", f"s3://{bucket}/sync/")
    assert up.count("upload:") == len(files), up
    again = s3cmd("sync", f"{src}/", f"s3://{bucket}/sync/")
    assert "upload:" not in again, again
    dst = tmp_path / "dst"
    down = s3cmd("sync", f"s3://{bucket}/sync/", f"{dst}/")
    assert down.count("download:") == len(files), down
    assert tree_bytes(dst) == files
    again = s3cmd("sync", f"s3://{bucket}/sync/", f"{dst}/")
    assert "download:" not in again, again

    assert f"delete: 's3://{bucket}/dir/small.bin'" in s3cmd("del", f"s3://{bucket}/dir/small.bin")
    left = [line.split(maxsplit=3)[3] for line in s3cmd("ls", "--recursive", f"s3://{bucket}").splitlines()]
    assert sorted(left) == sorted([f"s3://{bucket}/big.bin"] + [f"s3://{bucket}/sync/{n}" for n in files])
    s3cmd("del", "--recursive", "--force", f"s3://{bucket}")
    assert s3cmd("ls", "--recursive", f"s3://{bucket}") == ""
    s3cmd("rb", f"s3://{bucket}")
    assert f"s3://{bucket}" not in s3cmd("ls").split()
