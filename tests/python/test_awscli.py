"""The aws cli (v1, from PyPI into the project's venv) against quarry, as a new user runs it:
`--endpoint-url`, credentials in the environment, region us-east-1, nothing else configured.

Every step checks the bytes that come back (downloaded and compared), not only the exit code.
"""

import hashlib
import json
import os
import pathlib
import urllib.request
import uuid

import pytest

from conftest import ACCESS_KEY, SECRET_KEY, client_env, client_program, run_client, tree_bytes

MIB = 1 << 20


@pytest.fixture
def aws(quarry, tmp_path):
    """Runs `aws <args>` against quarry; returns stdout."""
    program = client_program("aws")
    home = tmp_path / "home"
    home.mkdir()
    env = client_env(
        home,
        AWS_ACCESS_KEY_ID=ACCESS_KEY,
        AWS_SECRET_ACCESS_KEY=SECRET_KEY,
        AWS_DEFAULT_REGION="us-east-1",
        # Point the config files at nothing, whatever HOME holds.
        AWS_CONFIG_FILE=str(home / "no-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(home / "no-credentials"),
    )

    def run(*args, cwd=None):
        return run_client([program, "--endpoint-url", quarry.endpoint, *args], env, cwd=cwd)

    return run


def new_bucket(aws) -> str:
    name = f"cli-{uuid.uuid4().hex[:16]}"
    out = aws("s3", "mb", f"s3://{name}")
    assert out.strip() == f"make_bucket: {name}"
    return name


def test_cp_head_presign(aws, tmp_path):
    bucket = new_bucket(aws)
    small = tmp_path / "small.bin"
    small.write_bytes(os.urandom(100_000))
    # Above the cli's 8 MiB multipart threshold: three parts of 8 MiB.
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(17 * MIB + 5))

    aws("s3", "cp", "--no-progress", small, f"s3://{bucket}/dir/small.bin")
    aws("s3", "cp", "--no-progress", big, f"s3://{bucket}/big.bin")
    for key, src in [("dir/small.bin", small), ("big.bin", big)]:
        down = tmp_path / f"down-{src.name}"
        aws("s3", "cp", "--no-progress", f"s3://{bucket}/{key}", down)
        assert down.read_bytes() == src.read_bytes(), key

    head = json.loads(aws("s3api", "head-object", "--bucket", bucket, "--key", "dir/small.bin"))
    assert head["ContentLength"] == small.stat().st_size
    assert head["ETag"] == f'"{hashlib.md5(small.read_bytes()).hexdigest()}"'
    head = json.loads(aws("s3api", "head-object", "--bucket", bucket, "--key", "big.bin"))
    assert head["ContentLength"] == big.stat().st_size
    assert head["ETag"].endswith('-3"'), head["ETag"]

    listing = aws("s3", "ls", "--recursive", f"s3://{bucket}")
    rows = sorted((line.split()[3], int(line.split()[2])) for line in listing.splitlines())
    assert rows == [("big.bin", big.stat().st_size), ("dir/small.bin", small.stat().st_size)]

    # `s3 presign` signs with SigV2 query parameters in the cli v1; a plain GET fetches it.
    url = aws("s3", "presign", f"s3://{bucket}/dir/small.bin", "--expires-in", "300").strip()
    assert url.startswith("http://127.0.0.1:"), url
    with urllib.request.urlopen(url, timeout=30) as r:
        assert r.read() == small.read_bytes()


def test_sync_both_ways_twice(aws, tmp_path):
    bucket = new_bucket(aws)
    src = tmp_path / "src"
    (src / "sub" / "deeper").mkdir(parents=True)
    files = {
        "a.txt": b"hello\n",
        "empty": b"",
        "sub/b.bin": os.urandom(300_000),
        "sub/deeper/c with space.bin": os.urandom(5000),
        "sub/deeper/d+plus&amp.bin": os.urandom(7),
    }
    for name, data in files.items():
        (src / name).write_bytes(data)
    remote = f"s3://{bucket}/synced"

    up = aws("s3", "sync", "--no-progress", src, remote)
    assert len(up.splitlines()) == len(files), up
    assert aws("s3", "sync", "--no-progress", src, remote) == ""

    dst = tmp_path / "dst"
    down = aws("s3", "sync", "--no-progress", remote, dst)
    assert len(down.splitlines()) == len(files), down
    assert tree_bytes(dst) == files
    assert aws("s3", "sync", "--no-progress", remote, dst) == ""

    # A changed file is the only one sent again, and it arrives intact.
    (src / "sub/b.bin").write_bytes(b"changed")
    up = aws("s3", "sync", "--no-progress", src, remote)
    assert up.strip().startswith("upload:") and "sub/b.bin" in up and len(up.splitlines()) == 1, up
    aws("s3", "sync", "--no-progress", remote, dst)
    assert tree_bytes(dst) == tree_bytes(src)


def test_list_objects_v2_pagination_and_rm_recursive(aws, tmp_path):
    bucket = new_bucket(aws)
    keys = [f"page/{i:02d}" for i in range(7)]
    tree = tmp_path / "tree"
    for key in [*keys, "other"]:
        (tree / key).parent.mkdir(parents=True, exist_ok=True)
        (tree / key).write_bytes(key.encode() * 10)
    up = aws("s3", "cp", "--no-progress", "--recursive", tree, f"s3://{bucket}/")
    assert len(up.splitlines()) == len(keys) + 1, up

    # --page-size: the cli asks 2 keys a request and follows the continuation tokens itself.
    out = json.loads(aws("s3api", "list-objects-v2", "--bucket", bucket, "--prefix", "page/", "--page-size", "2"))
    assert [o["Key"] for o in out["Contents"]] == keys
    # --max-items: pages of 3 for the user, resumed with --starting-token.
    seen, token = [], None
    for _ in range(5):
        args = ["s3api", "list-objects-v2", "--bucket", bucket, "--prefix", "page/", "--page-size", "2", "--max-items", "3"]
        if token:
            args += ["--starting-token", token]
        out = json.loads(aws(*args))
        page = [o["Key"] for o in out.get("Contents", [])]
        assert len(page) <= 3
        seen += page
        token = out.get("NextToken")
        if not token:
            break
    assert seen == keys

    # The bytes of one of them, to be sure the listing names real objects.
    got = tmp_path / "got"
    aws("s3", "cp", "--no-progress", f"s3://{bucket}/page/03", got)
    assert got.read_bytes() == b"page/03" * 10

    removed = aws("s3", "rm", "--recursive", f"s3://{bucket}/page/")
    assert sorted(line.split("s3://")[1] for line in removed.splitlines()) == [f"{bucket}/{k}" for k in keys]
    left = aws("s3", "ls", "--recursive", f"s3://{bucket}")
    assert [line.split()[-1] for line in left.splitlines()] == ["other"]
    aws("s3", "rm", "--recursive", f"s3://{bucket}")
    assert aws("s3", "ls", "--recursive", f"s3://{bucket}") == ""
    aws("s3", "rb", f"s3://{bucket}")
    assert bucket not in aws("s3", "ls")


def test_iam_user_policy_and_assume_role(aws, quarry, tmp_path):
    """`aws iam` makes a user, its key and its policy; the key is allowed and refused as the policy
    says; `aws sts assume-role` gives that user a session narrowed by a session policy, and
    `aws sts get-session-token` one with the user's own permissions."""
    import subprocess

    bucket = new_bucket(aws)
    other = new_bucket(aws)
    user = f"cli-{uuid.uuid4().hex[:8]}"
    aws("iam", "create-user", "--user-name", user)
    key = json.loads(aws("iam", "create-access-key", "--user-name", user))["AccessKey"]
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": "s3:*", "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]}
        ],
    }
    aws("iam", "put-user-policy", "--user-name", user, "--policy-name", "rw", "--policy-document", json.dumps(policy))
    assert json.loads(aws("iam", "list-user-policies", "--user-name", user))["PolicyNames"] == ["rw"]

    def as_(access, secret, token=None):
        home = tmp_path / f"home-{access}"
        home.mkdir(exist_ok=True)
        extra = {"AWS_SESSION_TOKEN": token} if token else {}
        env = client_env(
            home,
            AWS_ACCESS_KEY_ID=access,
            AWS_SECRET_ACCESS_KEY=secret,
            AWS_DEFAULT_REGION="us-east-1",
            AWS_CONFIG_FILE=str(home / "no-config"),
            AWS_SHARED_CREDENTIALS_FILE=str(home / "no-credentials"),
            **extra,
        )
        program = client_program("aws")

        def run(*args, refused=None):
            cmd = [program, "--endpoint-url", quarry.endpoint, *args]
            if refused is None:
                return run_client(cmd, env)
            r = subprocess.run([str(a) for a in cmd], env=env, capture_output=True, text=True, timeout=120)
            assert r.returncode != 0, f"{args} should be refused: {r.stdout}"
            assert refused in r.stderr, r.stderr
            return r.stderr

        return run

    body = tmp_path / "body.txt"
    body.write_bytes(b"hello from the cli user")
    alice = as_(key["AccessKeyId"], key["SecretAccessKey"])
    alice("s3api", "put-object", "--bucket", bucket, "--key", "k", "--body", str(body))
    alice("s3api", "put-object", "--bucket", other, "--key", "k", "--body", str(body), refused="AccessDenied")
    # The control: root may write there.
    aws("s3api", "put-object", "--bucket", other, "--key", "k", "--body", str(body))

    who = json.loads(alice("sts", "get-caller-identity"))
    assert who["Arn"] == f"arn:aws:iam::000000000000:user/{user}"

    read_only = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{bucket}/*"}],
    }
    creds = json.loads(
        alice(
            "sts", "assume-role",
            "--role-arn", "arn:aws:iam::000000000000:role/any",
            "--role-session-name", "cli-session",
            "--duration-seconds", "900",
            "--policy", json.dumps(read_only),
        )
    )["Credentials"]
    assert creds["SessionToken"] and creds["Expiration"]
    session = as_(creds["AccessKeyId"], creds["SecretAccessKey"], creds["SessionToken"])
    down = tmp_path / "down.txt"
    session("s3api", "get-object", "--bucket", bucket, "--key", "k", str(down))
    assert down.read_bytes() == body.read_bytes()
    session("s3api", "put-object", "--bucket", bucket, "--key", "k2", "--body", str(body), refused="AccessDenied")
    # Without its token the session's key is unknown.
    as_(creds["AccessKeyId"], creds["SecretAccessKey"])(
        "s3api", "get-object", "--bucket", bucket, "--key", "k", str(down), refused="InvalidAccessKeyId"
    )

    # `aws sts get-session-token`: the user's own permissions, unnarrowed: it writes where alice
    # may and is refused where she is not.
    token = json.loads(alice("sts", "get-session-token", "--duration-seconds", "900"))["Credentials"]
    own = as_(token["AccessKeyId"], token["SecretAccessKey"], token["SessionToken"])
    own("s3api", "put-object", "--bucket", bucket, "--key", "k3", "--body", str(body))
    own("s3api", "put-object", "--bucket", other, "--key", "k3", "--body", str(body), refused="AccessDenied")
