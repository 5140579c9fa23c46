#!/usr/bin/env python3
"""S3 traffic of the Docker test (scripts/docker-test.sh), with boto3.

    docker-s3.py mb  ENDPOINT BUCKET
    docker-s3.py put ENDPOINT BUCKET SET    PUT SET's three objects
    docker-s3.py get ENDPOINT BUCKET SET    GET them back and compare every byte

A set is three objects named SET/empty, SET/1mib-plus-1 and SET/20mib-multipart (0 B,
1 MiB + 1 B in one PUT, 20 MiB in four 5 MiB parts), whose bytes are derived from their names,
so a later `get` (through another node, after a node was killed or healed) knows what to expect
without anything kept on disk. Credentials: QUARRY_ROOT_USER / QUARRY_ROOT_PASSWORD. Every call
has a bounded timeout and no retries: a failure is reported, not hidden. Exit status 0 when every
step held, 1 otherwise (the message says which object and what differed).
"""

import hashlib
import os
import random
import sys

import boto3
from botocore.config import Config

MIB = 1024 * 1024
PART = 5 * MIB
OBJECTS = (("empty", 0, False), ("1mib-plus-1", MIB + 1, False), ("20mib-multipart", 20 * MIB, True))


def client(endpoint):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=os.environ["QUARRY_ROOT_USER"],
        aws_secret_access_key=os.environ["QUARRY_ROOT_PASSWORD"],
        region_name="us-east-1",
        config=Config(
            s3={"addressing_style": "path"},
            connect_timeout=10,
            read_timeout=60,
            retries={"max_attempts": 1, "mode": "standard"},
        ),
    )


def body(key, size):
    """The object's bytes: pseudo-random, seeded by its key."""
    return random.Random(key).randbytes(size)


def put(s3, bucket, key, data, multipart):
    if not multipart:
        s3.put_object(Bucket=bucket, Key=key, Body=data)
        return
    up = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    parts = []
    for n, off in enumerate(range(0, len(data), PART), 1):
        etag = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=n, Body=data[off : off + PART])["ETag"]
        parts.append({"PartNumber": n, "ETag": etag})
    s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up, MultipartUpload={"Parts": parts})


def main(argv):
    if len(argv) < 3 or argv[0] not in ("mb", "put", "get") or (argv[0] != "mb" and len(argv) != 4):
        print(__doc__, file=sys.stderr)
        return 2
    op, endpoint, bucket = argv[0], argv[1], argv[2]
    s3 = client(endpoint)
    if op == "mb":
        s3.create_bucket(Bucket=bucket)
        print(f"docker-s3: made bucket {bucket} through {endpoint}")
        return 0
    failed = 0
    for name, size, multipart in OBJECTS:
        key = f"{argv[3]}/{name}"
        want = body(key, size)
        if op == "put":
            put(s3, bucket, key, want, multipart)
            print(f"docker-s3: PUT {key} ({size} B{', multipart' if multipart else ''}) through {endpoint}")
            continue
        got = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        if got != want:
            first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            print(
                f"docker-s3: GET {key} through {endpoint}: {len(got)} B, want {size} B; "
                f"first difference at byte {first}; sha256 {hashlib.sha256(got).hexdigest()[:16]} "
                f"want {hashlib.sha256(want).hexdigest()[:16]}",
                file=sys.stderr,
            )
            failed += 1
        else:
            print(f"docker-s3: GET {key} ({size} B) through {endpoint}: byte-exact")
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Exception as e:  # a failed S3 call: say which and fail (the test reports the step)
        print(f"docker-s3: {' '.join(sys.argv[1:])}: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
