#!/usr/bin/env bash
# Makes the base image of the Docker test, once: a Debian bookworm minbase with rdma-core's
# runtime libraries and providers and curl (the packages docker/Dockerfile's runtime-base stage
# installs), made by debootstrap from the Debian mirror this machine's apt already uses and loaded
# with `docker import`, so nothing comes from an image registry. Prints the image's tag,
# quarry-base:bookworm-<key>, where the key is a hash of the package list and the recipe below:
# the image is the cache (a tagged local image survives between runs and clones); change the list
# or the recipe and a new one is made.
#
#   scripts/docker-base.sh            make it unless it exists; print the tag
#   DOCKER=/usr/bin/docker scripts/docker-base.sh
#
# Needs root, debootstrap and a running Docker engine. Logs go to stderr, the tag to stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

DOCKER=${DOCKER:-docker}
SUITE=bookworm
# Keep in step with the runtime-base stage of docker/Dockerfile (scripts/check-docker.sh checks).
PACKAGES=(libibverbs1 ibverbs-providers ca-certificates curl)
# Bump when the steps below change what the image holds.
RECIPE=1

say() { printf 'docker-base: %s\n' "$*" >&2; }

key=$(printf '%s\n' "recipe $RECIPE" "suite $SUITE" "variant minbase" "${PACKAGES[@]}" |
    sha256sum | cut -c1-12)
TAG="quarry-base:$SUITE-$key"

if "$DOCKER" image inspect "$TAG" >/dev/null 2>&1; then
    say "$TAG exists"
    echo "$TAG"
    exit 0
fi

command -v debootstrap >/dev/null 2>&1 || { say "debootstrap is not installed (apt-get install debootstrap)"; exit 1; }
[ "$(id -u)" -eq 0 ] || { say "debootstrap needs root"; exit 1; }

# The mirror apt uses for the suite's Packages (deb822 or one-line sources alike).
# shellcheck disable=SC2016 # apt's own $(FIELD) syntax
mirror=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(IDENTIFIER)' 2>/dev/null |
    awk -v suite="$SUITE" '$2 == suite && $3 == "Packages" { print $1; exit }')
if [ -z "$mirror" ]; then
    say "apt has no source for $SUITE (see /etc/apt/sources.list*; run apt-get update)"
    exit 1
fi

mkdir -p target/docker
exec 9>target/docker/base.lock
flock -w 900 9 || { say "another run has held target/docker/base.lock for 15 minutes"; exit 1; }
# Another run may have made it while this one waited.
if "$DOCKER" image inspect "$TAG" >/dev/null 2>&1; then
    echo "$TAG"
    exit 0
fi

work="$(pwd)/target/docker/base-$key"
cleanup() {
    # debootstrap mounts proc and sys inside the tree and may leave them mounted when it fails:
    # unmount everything under it before removing it (and never cross into another filesystem).
    if [ -d "$work" ]; then
        findmnt -rn -o TARGET | awk -v w="$work/" 'index($0, w) == 1' | sort -r |
            while read -r m; do umount -l "$m" || true; done
        rm -rf --one-file-system "$work"
    fi
}
trap cleanup EXIT
cleanup
mkdir -p "$work"

say "debootstrap --variant=minbase $SUITE from $mirror with ${PACKAGES[*]}"
t0=$(date +%s)
if ! debootstrap --variant=minbase --include="$(IFS=,; echo "${PACKAGES[*]}")" \
    "$SUITE" "$work/rootfs" "$mirror" >"$work.log" 2>&1; then
    say "debootstrap failed; the end of its log ($work.log):"
    tail -n 30 "$work.log" >&2
    exit 1
fi

# Slim it as the -slim images are: no package caches or lists, docs, man pages or locales (and
# dpkg keeps them out of anything installed later).
r="$work/rootfs"
rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/cache/apt/*.bin "$r"/var/lib/apt/lists/* \
    "$r"/usr/share/man/* "$r"/usr/share/info/* "$r"/usr/share/locale/* "$r"/var/log/*.log \
    "$r"/var/cache/debconf/*-old "$r"/var/lib/dpkg/*-old
find "$r/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
find "$r/usr/share/doc" -mindepth 1 -type d -empty -delete
cat >"$r/etc/dpkg/dpkg.cfg.d/docker-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF

say "docker import as $TAG"
tar --numeric-owner -C "$r" -cf - . |
    "$DOCKER" import --change 'CMD ["/bin/bash"]' \
        --message "debootstrap $SUITE minbase + ${PACKAGES[*]}" - "$TAG" >/dev/null
say "made $TAG in $(($(date +%s) - t0))s"
echo "$TAG"
