#!/usr/bin/env bash
# ListObjectsV2 page latency in a large flat prefix: the whole prefix walked in order twice, then
# pages of 1000 keys after a random key, with the drives' sorted listings and objects' metadata
# kept (the default) beside --list-cache-bytes 0 (each page reads and sorts the prefix's
# directory and reads every key's metadata file on every drive), on a single node (4 drives, 2+2) and a
# 4-node loopback cluster (4 x 4 drives, sets of 4), with 1 and 8 walkers at once, warm and (as
# root) with the kernel's caches dropped before every page. Release binary: `cargo build
# --release -p quarry` first.
#
#   scripts/bench-list.sh
#
# The keys are made on the drives directly, not PUT: each is a directory holding a hard link to
# the metadata of a real object of its erasure set (listing reads only the metadata), so a
# million keys take a minute instead of hours. In the cluster, key i goes to set i mod 4.
#
# Environment: BIN_DIR (default target/release), DATA (default ./data/bench-list; on a disk: a
# million keys on four drives are 4 M directories, about 16 GB of directory blocks on ext4, and
# tmpfs counts each hard link as an inode), KEYS (single node, each more than 1001, default
# "100000 1000000", empty skips the single node), CLUSTER_KEYS (default 1000000; 0 skips the
# cluster), PAGES (per walker, default 40),
# READ_PAGES (per walker with --list-cache-bytes 0, where a page of a million keys costs seconds;
# default PAGES/4), COLD_PAGES (default 10; 0 skips the cold runs), PORT (default 9400), LAYOUT
# (`flat`, the default: keys flat/k00000000… in one directory; `nested`: nest/d00000/k00…, 100
# keys a directory, so a page crosses ten directories, each small enough to be read per page).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN_DIR=${BIN_DIR:-target/release}
DATA=${DATA:-./data/bench-list}
KEYS=${KEYS-"100000 1000000"}
CLUSTER_KEYS=${CLUSTER_KEYS:-1000000}
PAGES=${PAGES:-40}
READ_PAGES=${READ_PAGES:-$(((PAGES + 3) / 4))}
COLD_PAGES=${COLD_PAGES:-10}
PORT=${PORT:-9400}
LAYOUT=${LAYOUT:-flat}
case "$LAYOUT" in
flat) TOP=flat SUFFIX= ;;
nested) TOP=nest SUFFIX=" nested" ;;
*) echo "LAYOUT must be flat or nested" >&2; exit 2 ;;
esac
export LAYOUT
export QUARRY_ROOT_USER=benchadmin QUARRY_ROOT_PASSWORD=bench-secret-key-123
mkdir -p "$DATA"
DATA=$(cd "$DATA" && pwd)
BUCKET=benchlist

source scripts/lib/bench-servers.sh

s3() { # METHOD HOST PATH [curl args...]
    local m=$1 h=$2 p=$3
    shift 3
    curl -fsS -X "$m" --aws-sigv4 "aws:amz:us-east-1:s3" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
        --user "$QUARRY_ROOT_USER:$QUARRY_ROOT_PASSWORD" "$@" "http://$h$p"
}

# Creates the bucket and 32 small objects (so that every erasure set of a cluster holds one).
seed() { # HOST
    s3 PUT "$1" "/$BUCKET" -o /dev/null
    for i in $(seq 0 31); do
        printf 'seed %s\n' "$i" | s3 PUT "$1" "/$BUCKET/seed-$i" --data-binary @- -o /dev/null
    done
}

# Makes N keys flat/k00000000… on the drives (directories), each set's keys linking the
# metadata of a seed object of that set on each of its drives.
fill() { # N DRIVE...
    python3 - "$BUCKET" "$@" <<'PY'
import os, shutil, sys
bucket, n, drives = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
sets = {}
for d in drives:
    b = os.path.join(d, bucket)
    seeds = sorted(s for s in os.listdir(b) if s.startswith("seed-")
                   and os.path.isfile(os.path.join(b, s, "quarry.meta")))
    if seeds:
        sets.setdefault(seeds[0], []).append(b)
groups = [sets[k] for k in sorted(sets)]
print(f"  {n} keys over {len(groups)} erasure set(s) of {[len(g) for g in groups]} drives", flush=True)
for g, bdirs in enumerate(groups):
    for b in bdirs:
        seed = os.path.join(b, sorted(s for s in os.listdir(b) if s.startswith("seed-"))[0], "quarry.meta")
        os.makedirs(os.path.join(b, "flat"), exist_ok=True)
        copy, links = None, 0
        for i in range(g, n, len(groups)):
            if links % 50000 == 0:  # ext4 allows 65,000 links to a file
                copy = os.path.join(b, f".seed-copy-{links}")
                shutil.copyfile(seed, copy)
            if os.environ["LAYOUT"] == "nested":
                k = os.path.join(b, "nest", f"d{i // 100:05d}", f"k{i % 100:02d}")
                os.makedirs(os.path.dirname(k), exist_ok=True)
            else:
                k = os.path.join(b, "flat", f"k{i:08d}")
            os.mkdir(k)
            os.link(copy, os.path.join(k, "quarry.meta"))
            links += 1
PY
}

# The name of key I (its path in the bucket).
key_name() { # I
    if [ "$LAYOUT" = nested ]; then
        printf 'nest/d%05d/k%02d' $(($1 / 100)) $(($1 % 100))
    else
        printf 'flat/k%08d' "$1"
    fi
}

# One walker: PAGES pages after random keys (with SEQ=1: in order, page i after key 1000 i),
# each checked (1000 keys, the first the one after the marker), their times appended to OUT.
walker() { # HOST N PAGES OUT COLD
    local host=$1 n=$2 pages=$3 out=$4 cold=$5 i r m t first page="$4.$BASHPID"
    for ((i = 0; i < pages; i++)); do
        if [ "${SEQ:-0}" = 1 ]; then
            r=$((i * 1000))
        else
            r=$(((RANDOM * 32768 + RANDOM) % (n - 1001)))
        fi
        m=$(key_name "$r")
        if [ "$cold" = 1 ]; then echo 3 >/proc/sys/vm/drop_caches; fi
        t=$(s3 GET "$host" "/$BUCKET?list-type=2&max-keys=1000&prefix=$TOP%2F&start-after=${m//\//%2F}" \
            -o "$page" -w '%{time_total}')
        first=$(grep -o '<Key>[^<]*</Key>' "$page" | sed -n 1p)
        if [ "$(grep -o '<Key>' "$page" | wc -l)" != 1000 ] ||
            [ "$first" != "<Key>$(key_name $((r + 1)))</Key>" ]; then
            echo "page after $m: not the 1000 keys after it (first: $first); servers' logs: $DATA/*.log" >&2
            return 1
        fi
        echo "$t" >>"$out"
    done
    rm -f "$page"
}

# W walkers at once over the hosts (round robin); prints p50, p90 and pages per second.
measure() { # LABEL N W PAGES COLD HOST...
    local label=$1 n=$2 w=$3 pages=$4 cold=$5 out j t0 t1 wp=()
    shift 5
    local hs=("$@")
    out=$(mktemp "$DATA/times.XXXXXX")
    t0=$(date +%s.%N)
    for ((j = 0; j < w; j++)); do
        walker "${hs[$((j % ${#hs[@]}))]}" "$n" "$pages" "$out" "$cold" &
        wp+=($!)
    done
    for p in "${wp[@]}"; do wait "$p"; done
    t1=$(date +%s.%N)
    # Pages per second only when warm: a cold run's time includes dropping the caches.
    sort -n "$out" | awk -v label="$label" -v t0="$t0" -v t1="$t1" -v cold="$cold" '
        { v[NR] = $1 }
        END { printf "%-52s p50 %8.2f ms  p90 %8.2f ms", label, 1000 * v[int(NR * 0.5) + 1],
              1000 * v[int(NR * 0.9) + 1]
              if (cold) printf "\n"; else printf "  %7.1f pages/s\n", NR / (t1 - t0) }'
    rm -f "$out"
}

# Both cache settings, 1 and 8 walkers, and cold, against the running servers (restarted by
# START for each setting).
run_all() { # NAME N START HOST...
    local name=$1 n=$2 start=$3 setting pages
    shift 3
    for setting in kept read; do
        stop_all
        if [ "$setting" = read ]; then
            export QUARRY_LIST_CACHE_BYTES=0
            pages=$READ_PAGES
        else
            unset QUARRY_LIST_CACHE_BYTES
            pages=$PAGES
        fi
        KEEP_DATA=1 $start
        measure "warm-up" "$n" 1 3 0 "$@" >/dev/null
        # The whole prefix in order, twice: the second walk finds what the first read kept
        # (objects' metadata; the directory's listing is kept after the first page).
        SEQ=1 measure "$name $n keys, $setting, 1 walker, whole walk" "$n" 1 $(((n - 1001) / 1000)) 0 "$@"
        SEQ=1 measure "$name $n keys, $setting, 1 walker, whole walk again" "$n" 1 $(((n - 1001) / 1000)) 0 "$@"
        measure "$name $n keys, $setting, 1 walker" "$n" 1 "$pages" 0 "$@"
        measure "$name $n keys, $setting, 8 walkers" "$n" 8 "$pages" 0 "$@"
        if [ "$COLD_PAGES" -gt 0 ] && [ -w /proc/sys/vm/drop_caches ]; then
            measure "$name $n keys, $setting, 1 walker, caches dropped" "$n" 1 "$COLD_PAGES" 1 "$@"
        fi
    done
    unset QUARRY_LIST_CACHE_BYTES
    stop_all
}

for n in $KEYS; do
    echo "== single node, $n keys, $LAYOUT"
    start_single "$PORT"
    seed "127.0.0.1:$PORT"
    fill "$n" "$DATA"/single/d{1..4}
    sleep 3 # listings are kept once a directory is 2 s old
    run_all "single$SUFFIX" "$n" "start_single $PORT" "127.0.0.1:$PORT"
    rm -rf "$DATA/single"
done

if [ "$CLUSTER_KEYS" -gt 0 ]; then
    echo "== 4-node cluster, $CLUSTER_KEYS keys, $LAYOUT"
    start_cluster "$PORT"
    seed "${hosts[0]}"
    fill "$CLUSTER_KEYS" "$DATA"/cluster/node*/d*
    sleep 3
    run_all "cluster$SUFFIX" "$CLUSTER_KEYS" "start_cluster $PORT" "${hosts[@]}"
    rm -rf "$DATA/cluster"
fi
