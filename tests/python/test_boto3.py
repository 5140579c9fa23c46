"""boto3 against quarry: the client most S3 users have, with its current defaults."""

import base64
import hashlib
import os
import time
import urllib.error
import urllib.request
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import ClientError

from conftest import error_code

MIB = 1 << 20


def test_put_get_head_delete(s3, bucket):
    data = os.urandom(2 * MIB + 3)
    out = s3.put_object(Bucket=bucket, Key="dir/obj.bin", Body=data, ContentType="application/x-test", Metadata={"k": "v"})
    assert out["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'

    got = s3.get_object(Bucket=bucket, Key="dir/obj.bin")
    assert got["Body"].read() == data
    assert got["ContentType"] == "application/x-test"
    assert got["Metadata"] == {"k": "v"}

    head = s3.head_object(Bucket=bucket, Key="dir/obj.bin")
    assert head["ContentLength"] == len(data)
    assert head["ETag"] == out["ETag"]

    rng = s3.get_object(Bucket=bucket, Key="dir/obj.bin", Range="bytes=1048570-1048580")
    assert rng["Body"].read() == data[1048570:1048581]
    assert rng["ContentRange"] == f"bytes 1048570-1048580/{len(data)}"

    s3.delete_object(Bucket=bucket, Key="dir/obj.bin")
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="dir/obj.bin")
    assert error_code(e.value) == "NoSuchKey"


def test_checksum_mode_is_what_boto3_sends(s3, bucket):
    s3.put_object(Bucket=bucket, Key="small", Body=b"hello world")
    assert s3.get_object(Bucket=bucket, Key="small")["Body"].read() == b"hello world"
    puts = [x for x in s3.sent if x[0] == "PutObject"]
    assert puts, s3.sent
    _, sha, trailer = puts[-1]
    assert bool(trailer) == s3.trailer_mode, puts
    if trailer:
        assert sha == "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
        assert trailer.lower() == "x-amz-checksum-crc32"
    else:
        assert sha not in (None, "UNSIGNED-PAYLOAD") and len(sha) == 64, sha


def test_wrong_crc32_is_rejected(s3, bucket):
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="bad", Body=b"some data", ChecksumCRC32="AAAAAA==")
    assert error_code(e.value) == "BadDigest", e.value.response
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="bad")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_sha256_checksum_is_stored_and_returned(s3, bucket):
    # In trailer mode the SHA-256 arrives after the data: it must still be stored and returned.
    data = os.urandom(300_000)
    want = base64.b64encode(hashlib.sha256(data).digest()).decode()
    out = s3.put_object(Bucket=bucket, Key="summed", Body=data, ChecksumAlgorithm="SHA256")
    assert out.get("ChecksumSHA256") == want, out
    _, _, trailer = [x for x in s3.sent if x[0] == "PutObject"][-1]
    if s3.trailer_mode:
        assert (trailer or "").lower() == "x-amz-checksum-sha256", s3.sent
    head = s3.head_object(Bucket=bucket, Key="summed", ChecksumMode="ENABLED")
    assert head.get("ChecksumSHA256") == want, head
    assert head.get("ChecksumType") == "FULL_OBJECT", head
    assert "ChecksumSHA256" not in s3.head_object(Bucket=bucket, Key="summed")
    got = s3.get_object(Bucket=bucket, Key="summed", ChecksumMode="ENABLED")
    assert got["Body"].read() == data
    assert got.get("ChecksumSHA256") == want


def test_upload_file_20_mib(s3, bucket, tmp_path):
    # The default TransferConfig: a managed multipart upload in 8 MiB parts, with boto3's default
    # CRC32 part checksums (a COMPOSITE object checksum), and a parallel ranged download.
    cfg = TransferConfig()
    src = tmp_path / "src.bin"
    data = os.urandom(20 * MIB + 17)
    src.write_bytes(data)
    s3.upload_file(str(src), bucket, "big/file.bin", Config=cfg)
    ops = [x[0] for x in s3.sent]
    assert "PutObject" not in ops, ops
    assert ops.count("CreateMultipartUpload") == 1, ops
    assert ops.count("UploadPart") == 3, ops
    assert ops.count("CompleteMultipartUpload") == 1, ops
    for _, _, trailer in [x for x in s3.sent if x[0] == "UploadPart"]:
        assert bool(trailer) == s3.trailer_mode

    head = s3.head_object(Bucket=bucket, Key="big/file.bin")
    assert head["ContentLength"] == len(data)
    md5s = b"".join(hashlib.md5(data[i : i + 8 * MIB]).digest() for i in range(0, len(data), 8 * MIB))
    assert head["ETag"] == f'"{hashlib.md5(md5s).hexdigest()}-3"', head
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []

    dst = tmp_path / "dst.bin"
    s3.download_file(bucket, "big/file.bin", str(dst), Config=cfg)
    assert hashlib.sha256(dst.read_bytes()).digest() == hashlib.sha256(data).digest()
    assert s3.get_object(Bucket=bucket, Key="big/file.bin")["Body"].read() == data
    part = s3.get_object(Bucket=bucket, Key="big/file.bin", PartNumber=3)
    assert part["PartsCount"] == 3
    assert part["Body"].read() == data[16 * MIB :]


def test_list_objects_v2_paginator(s3, bucket):
    keys = sorted([f"k/{i:03d}" for i in range(23)] + ["a b", "top", "k/sub/x", "k/sub/y", "ü/日本"])
    for k in keys:
        s3.put_object(Bucket=bucket, Key=k, Body=k.encode())

    pages = list(s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, PaginationConfig={"PageSize": 4}))
    got = [o["Key"] for p in pages for o in p.get("Contents", [])]
    assert got == keys
    assert len(pages) == -(-len(keys) // 4)
    sizes = {o["Key"]: o["Size"] for p in pages for o in p.get("Contents", [])}
    assert all(sizes[k] == len(k.encode()) for k in keys)

    pages = list(
        s3.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix="k/", Delimiter="/", PaginationConfig={"PageSize": 5}
        )
    )
    got_keys = [o["Key"] for p in pages for o in p.get("Contents", [])]
    got_prefixes = [c["Prefix"] for p in pages for c in p.get("CommonPrefixes", [])]
    assert got_keys == [k for k in keys if k.startswith("k/") and "/" not in k[2:]]
    assert got_prefixes == ["k/sub/"]

    # boto3 sends EncodingType=url on every listing by default and decodes the keys.
    v1 = [o["Key"] for p in s3.get_paginator("list_objects").paginate(Bucket=bucket, PaginationConfig={"PageSize": 7}) for o in p.get("Contents", [])]
    assert v1 == keys


def test_delete_and_bucket_errors(s3, bucket):
    s3.put_object(Bucket=bucket, Key="x", Body=b"1")
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket=bucket)
    assert error_code(e.value) == "BucketNotEmpty"
    s3.delete_object(Bucket=bucket, Key="x")
    s3.delete_object(Bucket=bucket, Key="never-there")  # 204 for an absent key
    s3.delete_bucket(Bucket=bucket)
    with pytest.raises(ClientError) as e:
        s3.list_objects_v2(Bucket=bucket)
    assert error_code(e.value) == "NoSuchBucket"


def _fetch(url, method="GET", data=None, headers=None):
    """(status, headers, body) of a plain urllib request, errors included."""
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def test_presigned_url_with_boto3_default_is_sigv2(quarry, bucket):
    # The fixture's client sets no signature_version. boto3 then signs API calls with SigV4
    # (client.meta.config says "s3v4") but presigns S3 URLs with SigV2 (HmacV1QueryAuth) in regions
    # that accept it, such as us-east-1: the URL's shape below proves which one was used.
    client = quarry.client()
    data = os.urandom(300_000)
    key = "presigned/a b+c \u00fc.bin"
    client.put_object(Bucket=bucket, Key=key, Body=data)

    url = client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=300)
    query = parse_qs(urlsplit(url).query)
    assert set(query) == {"AWSAccessKeyId", "Expires", "Signature"}, f"not a SigV2 URL: {url}"
    status, _, body = _fetch(url)
    assert status == 200, body
    assert body == data

    # Response overrides are signed sub-resources.
    url = client.generate_presigned_url(
        "get_object",
        Params={
            "Bucket": bucket,
            "Key": key,
            "ResponseContentType": "image/jpeg",
            "ResponseContentDisposition": 'attachment; filename="x y.bin"',
        },
        ExpiresIn=300,
    )
    assert "Signature=" in url and "X-Amz-Signature" not in url, url
    status, headers, body = _fetch(url)
    assert status == 200, body
    assert headers["Content-Type"] == "image/jpeg"
    assert headers["Content-Disposition"] == 'attachment; filename="x y.bin"'
    assert body == data

    # Tampered, expired, or signed with the wrong secret: refused, and nothing is served.
    # (The Expires of this URL, not of the first one: a second may have passed in between, and
    # then replacing the first one's value would change nothing.)
    expires = parse_qs(urlsplit(url).query)["Expires"][0]
    tampered = url.replace(f"Expires={expires}", f"Expires={int(expires) + 3600}")
    assert tampered != url
    status, _, body = _fetch(tampered)
    assert status == 403 and b"<Code>SignatureDoesNotMatch</Code>" in body, body
    expired = client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=-10)
    assert int(parse_qs(urlsplit(expired).query)["Expires"][0]) < time.time()
    status, _, body = _fetch(expired)
    assert status == 403 and b"<Code>AccessDenied</Code>" in body and b"Request has expired" in body, body
    wrong = boto3.client(
        "s3",
        endpoint_url=quarry.endpoint,
        aws_access_key_id=query["AWSAccessKeyId"][0],
        aws_secret_access_key="not-the-secret",
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}),
    )
    status, _, body = _fetch(wrong.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}))
    assert status == 403 and b"<Code>SignatureDoesNotMatch</Code>" in body, body

    # A presigned PUT signs the Content-Type (botocore also copies it into the query).
    url = client.generate_presigned_url(
        "put_object", Params={"Bucket": bucket, "Key": "up.txt", "ContentType": "text/plain"}, ExpiresIn=300
    )
    assert "AWSAccessKeyId=" in url, url
    status, _, body = _fetch(url, "PUT", b"hello v2", {"Content-Type": "text/plain"})
    assert status == 200, body
    got = client.get_object(Bucket=bucket, Key="up.txt")
    assert got["Body"].read() == b"hello v2"
    assert got["ContentType"] == "text/plain"
    status, _, body = _fetch(url, "PUT", b"other", {"Content-Type": "text/html"})
    assert status == 403 and b"<Code>SignatureDoesNotMatch</Code>" in body, body
