#!/usr/bin/env bash
# Runs one command inside a small QEMU VM whose Debian kernel has Soft-RoCE (rdma_rxe), so the real
# verbs path can be exercised on machines without an RDMA NIC or kernel support (see SOFTROCE.md).
#
#   scripts/vm/run.sh [--] CMD [ARG...]
#
# The guest sees the host's / read-only over 9p (so CMD can be a binary just built on the host, with
# the host's libraries) and runs CMD as root in a chroot of it, in the same working directory, with:
#   - eth0 up with the addresses $QUARRY_VM_ADDRS (default 10.55.0.1 .2 .3 .4, /24), no route out
#     (QEMU user network with restrict=on: nothing leaves the VM);
#   - rxe0 on eth0 (one RoCE v2 GID per address), port ACTIVE before CMD starts;
#   - `ulimit -l unlimited`; tmpfs on /tmp and /run; QUARRY_VM=1, QUARRY_VM_ADDRS in the environment.
# The guest console (CMD's output included) streams to this script's stdout; CMD's output and exit
# code also go to a writable 9p share (target/vm/run.*, removed afterwards). This script exits with
# CMD's exit code, 124 if the VM ran out of time, 125 if the VM died before CMD finished.
# Warm runs take about 10 s plus CMD (QEMU TCG on 2 cores; nested KVM hangs here, SOFTROCE.md).
#
# First run (as root on a fresh Debian): installs qemu-system-x86, rdma-core, ... with apt-get,
# downloads the kernel package that linux-image-amd64 depends on (apt-get download; ~70 MB) and
# unpacks it under target/vm/. Later runs reuse that cache and do not touch the network.
#
# Environment:
#   QUARRY_VM_DIR      cache and run directory (default: <repo>/target/vm)
#   QUARRY_VM_TIMEOUT  seconds before the VM is killed (default 240)
#   QUARRY_VM_ADDRS    IPv4 addresses for eth0 (default "10.55.0.1 10.55.0.2 10.55.0.3 10.55.0.4")
#   QUARRY_VM_MEM      guest memory in MiB (default 2048)
#   QUARRY_VM_QUIET=1  do not stream the guest console, print only CMD's output at the end
#   QUARRY_VM_CPU      QEMU CPU model (default max)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VM_DIR=${QUARRY_VM_DIR:-$ROOT/target/vm}
TIMEOUT=${QUARRY_VM_TIMEOUT:-240}
ADDRS=${QUARRY_VM_ADDRS:-10.55.0.1 10.55.0.2 10.55.0.3 10.55.0.4}
MEM=${QUARRY_VM_MEM:-2048}

[ "${1:-}" = "--" ] && shift
if [ "$#" -eq 0 ]; then
    echo "usage: $0 [--] CMD [ARG...]" >&2
    exit 2
fi

log() { printf '[vm] %s\n' "$*" >&2; }
die() { printf '[vm] error: %s\n' "$*" >&2; exit 125; }

# ---------------------------------------------------------------------------------------------
# Host packages
# ---------------------------------------------------------------------------------------------
APT_UPDATED=0
apt_update_once() {
    if [ "$APT_UPDATED" -eq 0 ]; then
        log "apt-get update"
        $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
        APT_UPDATED=1
    fi
}
# Root (or sudo) is needed only to install missing packages; QEMU itself runs unprivileged.
SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO=sudo; fi
# rdma-core: the `rdma` tool is in iproute2; providers (librxe) in ibverbs-providers.
PKGS=(qemu-system-x86 rdma-core ibverbs-providers ibverbs-utils librdmacm1 busybox-static kmod iproute2 gzip xz-utils)
missing=()
for p in "${PKGS[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ] || die "need root (or sudo) to install: ${missing[*]}"
    apt_update_once
    log "apt-get install ${missing[*]}"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi
BUSYBOX=/bin/busybox
[ -x "$BUSYBOX" ] || BUSYBOX=$(command -v busybox)
# The initramfs has no libraries: busybox must be the static one (busybox-static).
if ldd "$BUSYBOX" >/dev/null 2>&1; then die "$BUSYBOX is dynamically linked; install busybox-static"; fi

mkdir -p "$VM_DIR"

# ---------------------------------------------------------------------------------------------
# Kernel (cached): the image package linux-image-amd64 depends on, unpacked, with depmod run.
# ---------------------------------------------------------------------------------------------
KDIR=$VM_DIR/kernel
if [ ! -s "$KDIR/KVER" ]; then
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}' || true)
    if [ -z "$pkg" ]; then
        apt_update_once
        pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
    fi
    [ -n "$pkg" ] || die "cannot find the kernel package linux-image-amd64 depends on"
    log "downloading kernel package $pkg"
    rm -rf "$VM_DIR/deb" "$KDIR.tmp"
    mkdir -p "$VM_DIR/deb" "$KDIR.tmp"
    (cd "$VM_DIR/deb" && apt-get download -o APT::Sandbox::User=root "$pkg" >&2) || { apt_update_once; (cd "$VM_DIR/deb" && apt-get download -o APT::Sandbox::User=root "$pkg" >&2); }
    dpkg -x "$VM_DIR"/deb/*.deb "$KDIR.tmp"
    kver=$(ls "$KDIR.tmp/lib/modules" | head -n1)
    [ -n "$kver" ] && ls "$KDIR.tmp/boot/vmlinuz-$kver" >/dev/null || die "unexpected layout in $pkg"
    depmod -b "$KDIR.tmp" "$kver"
    # Under TCG, decompressing the xz bzImage costs ~5 s per boot: keep the uncompressed ELF,
    # which QEMU boots directly through its PVH entry point (Debian kernels have CONFIG_PVH=y).
    if grep -q '^CONFIG_PVH=y' "$KDIR.tmp/boot/config-$kver" 2>/dev/null; then
        img=$KDIR.tmp/boot/vmlinuz-$kver
        pos=$(grep -abo $'\xfd7zXZ\x00' "$img" | head -n1 | cut -d: -f1 || true)
        if [ -n "$pos" ] && { tail -c +$((pos + 1)) "$img" || true; } | xz -dc --single-stream >"$KDIR.tmp/boot/vmlinux-pvh" 2>/dev/null &&
            [ "$(head -c4 "$KDIR.tmp/boot/vmlinux-pvh" | od -An -c | tr -d ' ')" = '177ELF' ]; then
            log "uncompressed kernel for PVH boot"
        else
            rm -f "$KDIR.tmp/boot/vmlinux-pvh"
        fi
    fi
    echo "$kver" >"$KDIR.tmp/KVER"
    rm -rf "$KDIR" "$VM_DIR/deb"
    mv "$KDIR.tmp" "$KDIR"
fi
KVER=$(cat "$KDIR/KVER")
MODDIR=$KDIR/lib/modules/$KVER
KERNEL=$KDIR/boot/vmlinuz-$KVER
[ -s "$KDIR/boot/vmlinux-pvh" ] && KERNEL=$KDIR/boot/vmlinux-pvh

# ---------------------------------------------------------------------------------------------
# Initramfs (cached by content): static busybox, the modules below with their dependencies, /init.
# ---------------------------------------------------------------------------------------------
# 9p root, virtio NIC, Soft-RoCE; crc32_generic is needed by rdma_rxe (loaded by name, not a
# dependency); the rdma_cm modules let librdmacm work too.
MODULES=(virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci
    9pnet 9pnet_virtio netfs fscache 9p
    crc32_generic failover net_failover virtio_net udp_tunnel ip6_udp_tunnel
    ib_core ib_uverbs rdma_rxe configfs ib_cm iw_cm rdma_cm rdma_ucm)

INIT=$(cat <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
while read -r m; do
    insmod "/lib/modules/$m" || echo "[vm] insmod $m failed"
done </modules.list
mkdir -p /newroot /vmout
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=loose,ro hostroot /newroot || echo "[vm] cannot mount the host root"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 vmout /vmout || echo "[vm] cannot mount the output share"
mount --bind /proc /newroot/proc
mount --bind /sys /newroot/sys
mount --bind /dev /newroot/dev
# Host paths under /tmp the command needs (the repository, the target dir: CI may clone under
# /tmp) stay visible through the guest's own tmpfs on /tmp: bound aside, then back on top of it.
i=0
for p in $(cat /vmout/keep-paths 2>/dev/null); do
    case "$p" in
    /tmp/*)
        mkdir -p "/keep$i" && mount --bind "/newroot$p" "/keep$i" && echo "$p /keep$i" >>/keep.list
        i=$((i + 1))
        ;;
    esac
done
mount -t tmpfs tmpfs /newroot/run
mount -t tmpfs tmpfs /newroot/tmp
if [ -f /keep.list ]; then
    while read -r p k; do
        mkdir -p "/newroot$p" && mount --bind "$k" "/newroot$p"
    done </keep.list
fi
mkdir -p /newroot/dev/shm /newroot/dev/pts /newroot/run/vmout
mount -t tmpfs tmpfs /newroot/dev/shm
mount -t devpts devpts /newroot/dev/pts
mount --bind /vmout /newroot/run/vmout
chroot /newroot /bin/bash /run/vmout/guest.sh
sync
poweroff -f
EOF
)

resolve_modules() {
    # Prints module paths (relative to $MODDIR) in load order: each module after its dependencies.
    # Built-in modules are skipped; an unknown one is an error.
    declare -A seen=()
    local out=()
    visit() {
        local path=$1 dep
        [ -n "${seen[$path]:-}" ] && return 0
        seen[$path]=1
        for dep in $(awk -v p="$path:" '$1 == p { $1 = ""; print }' "$MODDIR/modules.dep"); do
            visit "$dep"
        done
        out+=("$path")
    }
    local name path
    for name in "${MODULES[@]}"; do
        path=$(awk -F: -v n="$name" '{ b = $1; sub(/.*\//, "", b); sub(/\.ko(\.(xz|zst|gz))?$/, "", b); gsub(/-/, "_", b); if (b == n) { print $1; exit } }' "$MODDIR/modules.dep")
        if [ -z "$path" ]; then
            if grep -Eq "/${name//_/[-_]}\.ko" "$MODDIR/modules.builtin" 2>/dev/null; then continue; fi
            die "kernel module $name not found in $KVER"
        fi
        visit "$path"
    done
    printf '%s\n' "${out[@]}"
}

mapfile -t MODPATHS < <(resolve_modules)
KEY=$( { echo "$KVER"; printf '%s\n' "${MODPATHS[@]}"; echo "$INIT"; sha256sum "$BUSYBOX"; } | sha256sum | cut -c1-16)
INITRD=$VM_DIR/initramfs-$KEY.cpio.gz
if [ ! -s "$INITRD" ]; then
    log "building initramfs ($KVER, ${#MODPATHS[@]} modules)"
    stage=$(mktemp -d "$VM_DIR/initramfs.XXXXXX")
    mkdir -p "$stage"/{bin,proc,sys,dev,lib/modules,newroot,vmout}
    cp "$BUSYBOX" "$stage/bin/busybox"
    : >"$stage/modules.list"
    for p in "${MODPATHS[@]}"; do
        base=$(basename "$p")
        case "$base" in
        *.ko.xz) xz -dc "$MODDIR/$p" >"$stage/lib/modules/${base%.xz}"; base=${base%.xz} ;;
        *.ko.zst) zstd -qdc "$MODDIR/$p" >"$stage/lib/modules/${base%.zst}"; base=${base%.zst} ;;
        *.ko.gz) gzip -dc "$MODDIR/$p" >"$stage/lib/modules/${base%.gz}"; base=${base%.gz} ;;
        *) cp "$MODDIR/$p" "$stage/lib/modules/$base" ;;
        esac
        echo "$base" >>"$stage/modules.list"
    done
    printf '%s\n' "$INIT" >"$stage/init"
    chmod +x "$stage/init"
    (cd "$stage" && find . | "$BUSYBOX" cpio -o -H newc 2>/dev/null | gzip -1 >"$INITRD.tmp")
    mv "$INITRD.tmp" "$INITRD"
    rm -rf "$stage"
    # Keep only the newest initramfs.
    find "$VM_DIR" -maxdepth 1 -name 'initramfs-*.cpio.gz' ! -name "initramfs-$KEY.cpio.gz" -delete
fi

# ---------------------------------------------------------------------------------------------
# The guest side: network, rxe0, then CMD in the chroot.
# ---------------------------------------------------------------------------------------------
RUN=$(mktemp -d "$VM_DIR/run.XXXXXX")
TAIL_PID=""
cleanup() {
    if [ -n "$TAIL_PID" ]; then kill "$TAIL_PID" 2>/dev/null || true; fi
    rm -rf "$RUN"
}
trap cleanup EXIT
{
    echo '#!/bin/bash'
    echo 'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp TMPDIR=/tmp'
    echo 'export QUARRY_VM=1'
    printf 'export QUARRY_VM_ADDRS=%q\n' "$ADDRS"
    printf 'cd %q 2>/dev/null || cd /\n' "$(pwd)"
    printf 'QUARRY_VM_CMD=%q\n' "$*"
    cat <<'EOF'
fail() { echo "[vm] setup failed: $*"; echo 125 >/run/vmout/rc; exit 125; }
ip link set lo up
ip link set eth0 up || fail "no eth0"
for a in $QUARRY_VM_ADDRS; do ip addr add "$a/24" dev eth0 || fail "ip addr add $a"; done
rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add rxe0"
# Wait (bounded) until the port is ACTIVE and every address has its GID.
want=$(for a in $QUARRY_VM_ADDRS; do IFS=. read -r x y z w <<<"$a"; printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x\n' "$x" "$y" "$z" "$w"; done)
for i in $(seq 1 100); do
    ok=1
    grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null || ok=0
    gids=$(cd /sys/class/infiniband/rxe0/ports/1/gids 2>/dev/null && cat $(seq 0 31) 2>/dev/null || true)
    for g in $want; do grep -q "$g" <<<"$gids" || ok=0; done
    [ "$ok" = 1 ] && break
    sleep 0.1
done
[ "$ok" = 1 ] || fail "rxe0 not ready: $(cat /sys/class/infiniband/rxe0/ports/1/state 2>&1)"
ulimit -l unlimited
echo "[vm] rxe0 ready on $QUARRY_VM_ADDRS; running: $QUARRY_VM_CMD"
EOF
    printf '%q ' "$@"
    echo '</dev/null 2>&1 | tee /run/vmout/output.log'
    echo 'rc=${PIPESTATUS[0]}'
    echo 'echo "[vm] exit code $rc"'
    echo 'echo "$rc" >/run/vmout/rc'
    echo 'sync'
} >"$RUN/guest.sh"
# Host paths the guest must see even under its tmpfs /tmp (see the init script).
{
    echo "$ROOT"
    [ -n "${CARGO_TARGET_DIR:-}" ] && echo "$CARGO_TARGET_DIR"
    echo "$VM_DIR"
} >"$RUN/keep-paths"

log "booting $KVER (TCG, timeout ${TIMEOUT}s): $*"
t0=$(date +%s)
: >"$RUN/console.log"
if [ "${QUARRY_VM_QUIET:-0}" != 1 ]; then
    tail -n +1 -f "$RUN/console.log" &
    TAIL_PID=$!
fi
set +e
timeout -k 5 "$TIMEOUT" qemu-system-x86_64 \
    -accel tcg -cpu "${QUARRY_VM_CPU:-max}" -m "$MEM" -smp 2 \
    -nodefaults -display none -no-reboot \
    -serial "file:$RUN/console.log" \
    -kernel "$KERNEL" -initrd "$INITRD" \
    -append "console=ttyS0 quiet loglevel=3 panic=-1" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    -virtfs "local,path=$RUN,mount_tag=vmout,security_model=none" \
    -netdev user,id=n0,restrict=on -device virtio-net-pci,netdev=n0 \
    </dev/null >"$RUN/qemu.log" 2>&1
qrc=$?
set -e
sleep 0.2
if [ -n "$TAIL_PID" ]; then
    kill "$TAIL_PID" 2>/dev/null || true
    wait "$TAIL_PID" 2>/dev/null || true
    TAIL_PID=""
fi
dt=$(($(date +%s) - t0))
if [ "${QUARRY_VM_QUIET:-0}" = 1 ] && [ -f "$RUN/output.log" ]; then cat "$RUN/output.log"; fi

if [ -s "$RUN/rc" ]; then
    rc=$(cat "$RUN/rc")
    log "guest command exited $rc (VM ${dt}s)"
    exit "$rc"
fi
if [ "$qrc" -eq 124 ] || [ "$qrc" -eq 137 ]; then
    log "timeout: the VM did not finish within ${TIMEOUT}s"
    exit 124
fi
log "the VM stopped (qemu exit $qrc, ${dt}s) before the command finished; qemu said:"
cat "$RUN/qemu.log" >&2
[ "${QUARRY_VM_QUIET:-0}" = 1 ] && tail -n 30 "$RUN/console.log" >&2
exit 125
