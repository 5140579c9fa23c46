"""Server-side encryption with boto3, where it behaves differently from aws-sdk-s3: boto3 fills in
the SSE-C key's MD5 itself, and its transfer manager sends the customer key on every part of a
multipart upload and on every ranged GET of a parallel download. The session's server has the
built-in key service (conftest: QUARRY_KMS_SECRET_KEY, keys `pykey-1` and `pykey-2`) and accepts
SSE-C keys over its plain-HTTP test port (QUARRY_SSE_C_ALLOW_HTTP=1)."""

import os
import pathlib

import pytest
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from conftest import error_code

KEY_A = b"A" * 32
KEY_B = b"B" * 32
MARKER = b"quarry-plaintext-marker-4f1c9a"


def ssec(key: bytes) -> dict:
    return {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": key}


def body(n: int) -> bytes:
    """n bytes holding the marker every 64 KiB, so any plaintext package on a drive shows."""
    chunk = MARKER + os.urandom(65536 - len(MARKER))
    return (chunk * (n // 65536 + 1))[:n]


def drive_files(quarry, bucket: str):
    for d in quarry.dirs:
        root = pathlib.Path(d) / bucket
        if root.exists():
            yield from (p for p in root.rglob("*") if p.is_file())


def test_sse_c_round_trip_and_refusals(quarry, bucket):
    s3 = quarry.client()
    data = body(300_000)
    put = s3.put_object(Bucket=bucket, Key="c", Body=data, **ssec(KEY_A))
    assert put["SSECustomerAlgorithm"] == "AES256"
    got = s3.get_object(Bucket=bucket, Key="c", **ssec(KEY_A))
    assert got["Body"].read() == data
    assert got["SSECustomerAlgorithm"] == "AES256"
    rng = s3.get_object(Bucket=bucket, Key="c", Range="bytes=65530-131080", **ssec(KEY_A))
    assert rng["Body"].read() == data[65530:131081]
    head = s3.head_object(Bucket=bucket, Key="c", **ssec(KEY_A))
    assert head["ContentLength"] == len(data)

    # Refusals, each beside the passing calls above.
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c")
    assert error_code(e.value) == "InvalidRequest"
    # Another key: 400 InvalidArgument, as ceph/s3-tests and tests/s3/sse.rs expect.
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", **ssec(KEY_B))
    assert error_code(e.value) == "InvalidArgument"
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="c", **ssec(KEY_B))
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400

    files = list(drive_files(quarry, bucket))
    assert files, "the object's files are on the drives"
    for f in files:
        assert MARKER not in f.read_bytes(), f"plaintext in {f}"


def test_transfer_manager_multipart_and_parallel_ranged_download(quarry, bucket, tmp_path):
    """upload_file and download_file with SSE-C: parts and ranged GETs, each with the key."""
    s3 = quarry.client()
    src = tmp_path / "src"
    src.write_bytes(body(12 * 1024 * 1024 + 7))
    cfg = TransferConfig(multipart_threshold=5 * 1024 * 1024, multipart_chunksize=5 * 1024 * 1024,
                         max_concurrency=4)
    s3.upload_file(str(src), bucket, "big", ExtraArgs=ssec(KEY_A), Config=cfg)
    head = s3.head_object(Bucket=bucket, Key="big", **ssec(KEY_A))
    assert head["ContentLength"] == src.stat().st_size
    assert head["ETag"].endswith('-3"'), head["ETag"]
    dst = tmp_path / "dst"
    s3.download_file(bucket, "big", str(dst), ExtraArgs=ssec(KEY_A), Config=cfg)
    assert dst.read_bytes() == src.read_bytes()
    with pytest.raises(ClientError):
        s3.download_file(bucket, "big", str(tmp_path / "no"), ExtraArgs=ssec(KEY_B), Config=cfg)
    for f in drive_files(quarry, bucket):
        assert MARKER not in f.read_bytes(), f"plaintext in {f}"


def test_sse_s3_kms_bucket_default_and_copies(quarry, bucket):
    s3 = quarry.client()
    data = body(200_000)
    s3.put_object(Bucket=bucket, Key="s3", Body=data, ServerSideEncryption="AES256")
    got = s3.get_object(Bucket=bucket, Key="s3")
    assert got["Body"].read() == data
    assert got["ServerSideEncryption"] == "AES256"

    s3.put_object(Bucket=bucket, Key="kms", Body=data, ServerSideEncryption="aws:kms",
                  SSEKMSKeyId="pykey-2")
    head = s3.head_object(Bucket=bucket, Key="kms")
    assert head["ServerSideEncryption"] == "aws:kms"
    assert head["SSEKMSKeyId"].endswith("pykey-2"), head["SSEKMSKeyId"]
    assert s3.get_object(Bucket=bucket, Key="kms")["Body"].read() == data
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="nokey", Body=b"x", ServerSideEncryption="aws:kms",
                      SSEKMSKeyId="no-such-key")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] in (400, 403)

    # The bucket's default applies to a PUT without headers, and says so.
    s3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={
        "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]})
    rule = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert rule["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    put = s3.put_object(Bucket=bucket, Key="default", Body=data)
    assert put["ServerSideEncryption"] == "AES256"

    # Copies between SSE-C, SSE-S3 and plain.
    s3.put_object(Bucket=bucket, Key="c", Body=data, **ssec(KEY_A))
    s3.copy_object(Bucket=bucket, Key="c-to-s3", CopySource={"Bucket": bucket, "Key": "c"},
                   CopySourceSSECustomerAlgorithm="AES256", CopySourceSSECustomerKey=KEY_A,
                   ServerSideEncryption="AES256")
    assert s3.get_object(Bucket=bucket, Key="c-to-s3")["Body"].read() == data
    s3.copy_object(Bucket=bucket, Key="s3-to-c", CopySource={"Bucket": bucket, "Key": "s3"},
                   **ssec(KEY_B))
    assert s3.get_object(Bucket=bucket, Key="s3-to-c", **ssec(KEY_B))["Body"].read() == data
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="refused", CopySource={"Bucket": bucket, "Key": "c"},
                       CopySourceSSECustomerAlgorithm="AES256", CopySourceSSECustomerKey=KEY_B)
    assert error_code(e.value) == "InvalidArgument"
    s3.delete_bucket_encryption(Bucket=bucket)
    plain = s3.copy_object(Bucket=bucket, Key="s3-to-plain", CopySource={"Bucket": bucket, "Key": "s3"})
    assert "ServerSideEncryption" not in plain
    assert s3.get_object(Bucket=bucket, Key="s3-to-plain")["Body"].read() == data

    # Only the plain copy shows the plaintext on the drives (in its data shards; the control
    # that the search finds plaintext where there is some).
    seen = {str(f): MARKER in f.read_bytes() for f in drive_files(quarry, bucket)}
    assert any(found for f, found in seen.items() if "s3-to-plain" in f), seen
    assert not [f for f, found in seen.items() if found and "s3-to-plain" not in f], seen
