"""Browser features through boto3: presigned POST (form uploads) and bucket CORS with preflight."""

import os
import urllib.error
import urllib.request
import uuid

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from conftest import ACCESS_KEY, SECRET_KEY


def _fetch(url, method="GET", data=None, headers=None):
    """(status, headers, body) of a plain urllib request, errors included."""
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def _form(fields, filename, content_type, data):
    """A multipart/form-data body: the fields in order, then the file."""
    boundary = uuid.uuid4().hex
    out = []
    for name, value in fields.items():
        out.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    out.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
        f"Content-Type: {content_type}\r\n\r\n".encode()
    )
    out.append(data)
    out.append(f"\r\n--{boundary}--\r\n".encode())
    return b"".join(out), f"multipart/form-data; boundary={boundary}"


def _v4_client(quarry):
    # boto3 presigns with SigV2 by default in us-east-1; Quarry's POST policies are SigV4.
    return boto3.client(
        "s3",
        endpoint_url=quarry.endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name="us-east-1",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )


def test_presigned_post(quarry, bucket):
    client = _v4_client(quarry)
    post = client.generate_presigned_post(
        bucket,
        "uploads/${filename}",
        Fields={"Content-Type": "text/plain", "x-amz-meta-origin": "browser"},
        Conditions=[
            {"Content-Type": "text/plain"},
            {"x-amz-meta-origin": "browser"},
            ["content-length-range", 1, 100_000],
        ],
        ExpiresIn=600,
    )
    assert post["fields"]["x-amz-algorithm"] == "AWS4-HMAC-SHA256"
    data = os.urandom(50_000)
    body, ctype = _form(post["fields"], "notes.txt", "application/octet-stream", data)
    status, _, resp = _fetch(post["url"], "POST", body, {"Content-Type": ctype})
    assert status == 204, resp
    got = client.get_object(Bucket=bucket, Key="uploads/notes.txt")
    assert got["Body"].read() == data
    assert got["ContentType"] == "text/plain"
    assert got["Metadata"] == {"origin": "browser"}

    # Over the content-length-range: refused, nothing stored.
    body, ctype = _form(post["fields"], "big.txt", "text/plain", os.urandom(100_001))
    status, _, resp = _fetch(post["url"], "POST", body, {"Content-Type": ctype})
    assert status == 400 and b"<Code>EntityTooLarge</Code>" in resp, resp
    with pytest.raises(ClientError) as e:
        client.head_object(Bucket=bucket, Key="uploads/big.txt")
    assert e.value.response["Error"]["Code"] in ("404", "NoSuchKey")

    # A field changed after signing breaks the policy.
    fields = dict(post["fields"])
    fields["Content-Type"] = "text/html"
    body, ctype = _form(fields, "x.txt", "text/html", b"<script/>")
    status, _, resp = _fetch(post["url"], "POST", body, {"Content-Type": ctype})
    assert status == 403 and b"<Code>AccessDenied</Code>" in resp, resp


def test_bucket_cors_and_preflight(quarry, bucket):
    client = quarry.client()
    with pytest.raises(ClientError) as e:
        client.get_bucket_cors(Bucket=bucket)
    assert e.value.response["Error"]["Code"] == "NoSuchCORSConfiguration"
    client.put_bucket_cors(
        Bucket=bucket,
        CORSConfiguration={
            "CORSRules": [
                {
                    "AllowedOrigins": ["https://app.example.com"],
                    "AllowedMethods": ["GET", "PUT", "POST"],
                    "AllowedHeaders": ["*"],
                    "ExposeHeaders": ["ETag"],
                    "MaxAgeSeconds": 120,
                }
            ]
        },
    )
    rules = client.get_bucket_cors(Bucket=bucket)["CORSRules"]
    assert rules == [
        {
            "AllowedOrigins": ["https://app.example.com"],
            "AllowedMethods": ["GET", "PUT", "POST"],
            "AllowedHeaders": ["*"],
            "ExposeHeaders": ["ETag"],
            "MaxAgeSeconds": 120,
        }
    ]
    url = f"{quarry.endpoint}/{bucket}/any/key"
    status, headers, body = _fetch(
        url,
        "OPTIONS",
        headers={
            "Origin": "https://app.example.com",
            "Access-Control-Request-Method": "PUT",
            "Access-Control-Request-Headers": "content-type,x-amz-date",
        },
    )
    assert status == 200, body
    assert headers["Access-Control-Allow-Origin"] == "https://app.example.com"
    assert headers["Access-Control-Allow-Headers"] == "content-type, x-amz-date"
    assert headers["Access-Control-Max-Age"] == "120"
    status, _, body = _fetch(
        url, "OPTIONS", headers={"Origin": "https://evil.example.org", "Access-Control-Request-Method": "GET"}
    )
    assert status == 403 and b"<Code>AccessForbidden</Code>" in body, body

    client.delete_bucket_cors(Bucket=bucket)
    with pytest.raises(ClientError) as e:
        client.get_bucket_cors(Bucket=bucket)
    assert e.value.response["Error"]["Code"] == "NoSuchCORSConfiguration"
