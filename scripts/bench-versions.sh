#!/usr/bin/env bash
# What a key's version count costs through S3, in one run on one node (4 drives, 2+2): a key
# with one version beside a key grown to VERSIONS versions (PUTs of small bodies, one at a time,
# in a versioned bucket). Prints, for each key, the median and p99 of GET of the latest, HEAD,
# GET of the oldest by versionId, one ListObjectVersions page (1,000 entries, first and from the
# middle) and ListObjectsV2 of the key's prefix, each timed as presigned requests on one kept-alive
# connection (the server's time and the transfer, not boto3's parsing); and how long a PUT took
# as the key grew.
# Release binaries: `cargo build --release -p quarry` first. Needs python3 with boto3.
#
#   scripts/bench-versions.sh
#
# Environment: BIN_DIR (default target/release), DATA (default ./data/bench-versions), VERSIONS
# (default 10000), REPS (timed calls per operation, default 50), PORT (default 9360).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN_DIR=${BIN_DIR:-target/release}
DATA=${DATA:-./data/bench-versions}
VERSIONS=${VERSIONS:-10000}
REPS=${REPS:-50}
PORT=${PORT:-9360}
export QUARRY_ROOT_USER=benchadmin QUARRY_ROOT_PASSWORD=bench-secret-key-123
mkdir -p "$DATA"
DATA=$(cd "$DATA" && pwd)

source scripts/lib/bench-servers.sh

start_single "$PORT"

python3 - "http://127.0.0.1:$PORT" "$VERSIONS" "$REPS" <<'PY'
import http.client, os, statistics, sys, time
import boto3
from botocore.config import Config

endpoint, versions, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                  aws_access_key_id=os.environ["QUARRY_ROOT_USER"],
                  aws_secret_access_key=os.environ["QUARRY_ROOT_PASSWORD"],
                  config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
B = "versions"
s3.create_bucket(Bucket=B)
s3.put_bucket_versioning(Bucket=B, VersioningConfiguration={"Status": "Enabled"})

first = {}
first["one/key"] = s3.put_object(Bucket=B, Key="one/key", Body=b"v0")["VersionId"]
put_ms, t_all = [], time.monotonic()
for i in range(versions):
    t = time.monotonic()
    vid = s3.put_object(Bucket=B, Key="many/key", Body=b"v%d" % i)["VersionId"]
    put_ms.append((time.monotonic() - t) * 1000)
    if i == 0:
        first["many/key"] = vid
    if (i + 1) % 1000 == 0:
        print(f"  {i + 1} versions, the last 1,000 PUTs: median "
              f"{statistics.median(put_ms[-1000:]):.1f} ms", file=sys.stderr, flush=True)
print(f"PUT of version 1..{versions}: {time.monotonic() - t_all:.0f} s in all; median ms of "
      f"the first 100 {statistics.median(put_ms[:100]):.2f}, of the last 100 "
      f"{statistics.median(put_ms[-100:]):.2f}")

conn = http.client.HTTPConnection(endpoint.split("//")[1])

def timed(method, op, **params):
    """Median and p99 ms of REPS calls of a presigned URL on one kept-alive connection: the
    server's time and the transfer, not the client's XML parsing."""
    url = s3.generate_presigned_url(op, Params=dict(Bucket=B, **params), ExpiresIn=3600)
    path = url.split(endpoint, 1)[1]
    ms = []
    for i in range(reps + 1):
        t = time.monotonic()
        conn.request(method, path)
        r = conn.getresponse()
        r.read()
        if r.status != 200:
            sys.exit(f"{op} {params}: HTTP {r.status}")
        if i:  # the first call warms
            ms.append((time.monotonic() - t) * 1000)
    ms.sort()
    return statistics.median(ms), ms[min(len(ms) - 1, int(len(ms) * 0.99))]

def middle_marker(key):
    """The markers of the page that starts halfway down the key's versions."""
    kwargs, pages = {}, []
    while True:
        r = s3.list_object_versions(Bucket=B, Prefix=key, MaxKeys=1000, **kwargs)
        pages.append(kwargs)
        if not r.get("IsTruncated"):
            break
        kwargs = {"KeyMarker": r["NextKeyMarker"], "VersionIdMarker": r["NextVersionIdMarker"]}
    return pages[len(pages) // 2]

rows = []
for key in ("one/key", "many/key"):
    n = 1 if key == "one/key" else versions
    prefix = key.split("/")[0] + "/"
    r = s3.list_object_versions(Bucket=B, Prefix=key, MaxKeys=1000)
    page = len(r.get("Versions", [])) + len(r.get("DeleteMarkers", []))
    ops = [
        ("GET latest", "GET", "get_object", {"Key": key}),
        ("HEAD", "HEAD", "head_object", {"Key": key}),
        ("GET oldest by versionId", "GET", "get_object", {"Key": key, "VersionId": first[key]}),
        (f"ListObjectVersions first page ({page})", "GET", "list_object_versions",
         {"Prefix": key, "MaxKeys": 1000}),
        ("ListObjectVersions middle page", "GET", "list_object_versions",
         dict(middle_marker(key), Prefix=key, MaxKeys=1000)),
        ("ListObjectsV2 of the prefix", "GET", "list_objects_v2", {"Prefix": prefix}),
    ]
    for name, method, op, params in ops:
        rows.append((name, n, *timed(method, op, **params)))

one = {r[0].split(" (")[0]: r for r in rows if r[1] == 1}
print(f"{'operation':<36} {'1 version p50/p99 ms':>22} {f'{versions} versions p50/p99 ms':>26} {'p50 ratio':>10}")
for name, n, p50, p99 in rows:
    if n == 1:
        continue
    o = one[name.split(" (")[0]]
    print(f"{name:<36} {o[2]:>10.2f} /{o[3]:>9.2f} {p50:>13.2f} /{p99:>10.2f} {p50 / o[2]:>9.1f}x")
PY
