"""boto3 against quarry: the client most S3 users have, with its current defaults."""

import hashlib
import os

import pytest
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

MIB = 1 << 20


def error_code(exc: ClientError) -> str:
    return exc.response.get("Error", {}).get("Code", "")


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


def test_upload_file_20_mib(s3, bucket, tmp_path):
    # Multipart upload is not built yet: keep the managed transfer to one PutObject.
    # TODO(multipart): drop multipart_threshold once CreateMultipartUpload/UploadPart exist.
    cfg = TransferConfig(multipart_threshold=1 << 30, max_concurrency=4)
    src = tmp_path / "src.bin"
    data = os.urandom(20 * MIB + 17)
    src.write_bytes(data)
    s3.upload_file(str(src), bucket, "big/file.bin", Config=cfg)
    puts = [x for x in s3.sent if x[0] == "PutObject"]
    assert len(puts) == 1, f"one PutObject, no multipart: {s3.sent}"
    assert bool(puts[0][2]) == s3.trailer_mode, puts

    head = s3.head_object(Bucket=bucket, Key="big/file.bin")
    assert head["ContentLength"] == len(data)
    assert head["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'

    dst = tmp_path / "dst.bin"
    s3.download_file(bucket, "big/file.bin", str(dst), Config=cfg)
    assert hashlib.sha256(dst.read_bytes()).digest() == hashlib.sha256(data).digest()
    assert s3.get_object(Bucket=bucket, Key="big/file.bin")["Body"].read() == data


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
