#!/usr/bin/env python3
"""A simple PUT/GET throughput loop against any S3 endpoint (boto3), until quarry-bench exists.

    .venv/bin/python scripts/put-get-loop.py --endpoint http://127.0.0.1:9000 \
        --access-key KEY --secret-key SECRET --size 1MiB --count 200 --concurrency 4

Uploads `count` objects of `size` bytes with `concurrency` threads, downloads each once and
checks its bytes, deletes them, and prints MiB/s and requests/s for both phases. The payload is
random and generated once; the client's own cost (Python, boto3's checksums) is part of what is
measured, so compare servers with the same client, side by side, rather than reading absolutes.
"""

import argparse
import concurrent.futures as cf
import hashlib
import os
import time
import uuid

import boto3
from botocore.config import Config

UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "": 1}


def parse_size(s: str) -> int:
    for unit in ("KiB", "MiB", "GiB"):
        if s.endswith(unit):
            return int(float(s[: -len(unit)]) * UNITS[unit])
    return int(s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--endpoint", default="http://127.0.0.1:9000")
    ap.add_argument("--access-key", default=os.environ.get("AWS_ACCESS_KEY_ID"))
    ap.add_argument("--secret-key", default=os.environ.get("AWS_SECRET_ACCESS_KEY"))
    ap.add_argument("--bucket", default="put-get-loop")
    ap.add_argument("--size", default="1MiB")
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--concurrency", type=int, default=4)
    args = ap.parse_args()
    if not args.access_key or not args.secret_key:
        ap.error("give --access-key/--secret-key (or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)")

    size = parse_size(args.size)
    s3 = boto3.client(
        "s3",
        endpoint_url=args.endpoint,
        aws_access_key_id=args.access_key,
        aws_secret_access_key=args.secret_key,
        region_name="us-east-1",
        config=Config(
            s3={"addressing_style": "path"},
            max_pool_connections=args.concurrency * 2,
            retries={"max_attempts": 1},
        ),
    )
    try:
        s3.create_bucket(Bucket=args.bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    payload = os.urandom(size)
    digest = hashlib.md5(payload).hexdigest()
    prefix = uuid.uuid4().hex
    keys = [f"{prefix}/{i}" for i in range(args.count)]

    def put(key: str) -> None:
        etag = s3.put_object(Bucket=args.bucket, Key=key, Body=payload)["ETag"].strip('"')
        if etag != digest:
            raise RuntimeError(f"{key}: ETag {etag} is not the MD5 {digest}")

    def get(key: str) -> None:
        body = s3.get_object(Bucket=args.bucket, Key=key)["Body"].read()
        if len(body) != size or hashlib.md5(body).hexdigest() != digest:
            raise RuntimeError(f"{key}: wrong bytes back")

    def phase(name: str, fn) -> None:
        start = time.perf_counter()
        with cf.ThreadPoolExecutor(args.concurrency) as pool:
            list(pool.map(fn, keys))
        secs = time.perf_counter() - start
        mib = size * len(keys) / (1 << 20)
        print(f"{name:4} {args.size:>7} x{len(keys):<5} c={args.concurrency}: "
              f"{mib / secs:8.1f} MiB/s {len(keys) / secs:8.1f} req/s ({secs:.2f} s)")

    phase("PUT", put)
    phase("GET", get)
    with cf.ThreadPoolExecutor(args.concurrency) as pool:
        list(pool.map(lambda k: s3.delete_object(Bucket=args.bucket, Key=k), keys))


if __name__ == "__main__":
    main()
