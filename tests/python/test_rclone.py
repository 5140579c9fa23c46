"""rclone (Debian's package) against quarry: an `s3` remote with `provider = Other`, the endpoint
and the keys, as a new user writes it in rclone.conf (here a temporary one, passed with --config).

rclone's default upload cutoff is 200 MiB, too big for a quick test, so the runs set
`--s3-upload-cutoff 5M --s3-chunk-size 5M`: a 12 MiB file then goes up as three parts, and
rclone keeps its MD5 in `X-Amz-Meta-Md5chksum` (a multipart ETag is not an MD5).
Every step checks the bytes that come back, not only the exit code.
"""

import hashlib
import os
import subprocess
import uuid

import pytest

from conftest import ACCESS_KEY, SECRET_KEY, client_env, client_program, run_client, tree_bytes

MIB = 1 << 20


@pytest.fixture
def rclone(quarry, tmp_path):
    program = client_program("rclone")
    home = tmp_path / "home"
    home.mkdir()
    conf = tmp_path / "rclone.conf"
    conf.write_text(
        "[quarry]\n"
        "type = s3\n"
        "provider = Other\n"
        f"access_key_id = {ACCESS_KEY}\n"
        f"secret_access_key = {SECRET_KEY}\n"
        f"endpoint = {quarry.endpoint}\n"
        "region = us-east-1\n"
    )
    env = client_env(home)
    base = [program, "--config", conf, "--s3-upload-cutoff", "5M", "--s3-chunk-size", "5M", "--retries", "1"]

    def run(*args, check=True):
        if check:
            return run_client([*base, *args], env)
        return subprocess.run(
            [str(a) for a in [*base, *args]], env=env, capture_output=True, text=True, timeout=120
        )

    return run


def test_copy_check_sync_delete(rclone, quarry, tmp_path):
    bucket = f"rc-{uuid.uuid4().hex[:16]}"
    src = tmp_path / "src"
    (src / "dir").mkdir(parents=True)
    files = {
        "big.bin": os.urandom(12 * MIB + 7),  # above the 5 MiB chunk size: multipart
        "dir/small.txt": b"small file\n",
        "dir/random.bin": os.urandom(200_000),
        "dir/with space.txt": b"spaces",
    }
    for name, data in files.items():
        (src / name).write_bytes(data)

    rclone("mkdir", f"quarry:{bucket}")
    rclone("copy", src, f"quarry:{bucket}/copy")
    listed = rclone("lsf", "-R", "--files-only", f"quarry:{bucket}/copy").splitlines()
    assert sorted(listed) == sorted(files)

    # check compares sizes and MD5s: the single-part ETags, and for big.bin rclone's own metadata.
    rclone("check", src, f"quarry:{bucket}/copy")
    sums = dict(reversed(line.split("  ", 1)) for line in rclone("md5sum", f"quarry:{bucket}/copy").splitlines())
    assert sums == {name: hashlib.md5(data).hexdigest() for name, data in files.items()}
    head = quarry.client().head_object(Bucket=bucket, Key="copy/big.bin")
    assert head["ETag"].endswith('-3"'), head["ETag"]
    assert head["Metadata"].get("md5chksum"), head["Metadata"]
    # ...and really compares: a local change is found.
    (src / "dir/small.txt").write_bytes(b"small file, changed\n")
    differs = rclone("check", src, f"quarry:{bucket}/copy", check=False)
    assert differs.returncode != 0 and "1 differences found" in differs.stderr, differs.stderr
    (src / "dir/small.txt").write_bytes(files["dir/small.txt"])

    # The bytes, downloaded.
    down = tmp_path / "down"
    rclone("copy", f"quarry:{bucket}/copy", down)
    assert tree_bytes(down) == files
    assert rclone("cat", f"quarry:{bucket}/copy/dir/small.txt").encode() == files["dir/small.txt"]

    # sync mirrors, deletions included.
    rclone("sync", src, f"quarry:{bucket}/mirror")
    (src / "dir/random.bin").unlink()
    (src / "new.txt").write_bytes(b"new")
    rclone("sync", src, f"quarry:{bucket}/mirror")
    mirror = tmp_path / "mirror"
    rclone("copy", f"quarry:{bucket}/mirror", mirror)
    assert tree_bytes(mirror) == tree_bytes(src)
    rclone("check", src, f"quarry:{bucket}/mirror")

    rclone("delete", f"quarry:{bucket}/copy")
    assert rclone("lsf", "-R", "--files-only", f"quarry:{bucket}/copy") == ""
    assert sorted(rclone("lsf", "-R", "--files-only", f"quarry:{bucket}").splitlines()) == sorted(
        f"mirror/{name}" for name in tree_bytes(src)
    )
    rclone("purge", f"quarry:{bucket}")
    assert bucket not in rclone("lsf", "quarry:")
