#!/usr/bin/env bash
# Checks the images the way a node uses them, without a GPU and without pulling anything.
#
# The exporter image (dockerfiles/Dockerfile.exporter), with no Docker daemon:
#   E1. builds the root file system that Dockerfile describes: its FROM debian:bookworm-slim is
#       stood in for by a debootstrap --variant=minbase bookworm root (VGPU_BOOKWORM_ROOT,
#       created once), then its COPY lines are applied; USER, ENTRYPOINT and CMD are read;
#   E2. a "GPU container" (the probe on the simulated driver, under dist/libvgpu.so) holds
#       memory in a region under the stand-in node's /usr/local/vgpu/containers/<podUID>_<ctr>/;
#   E3. starts the exporter from that root as deploy/kubernetes/daemonset.yaml does: the image's
#       ENTRYPOINT and CMD (the DaemonSet's command and args), as the image's USER (65534),
#       chrooted into the root mounted read-only, with the DaemonSet's host paths bind-mounted
#       read-only (its --listen moved to a free loopback port), and scrapes it.
#
# With a Docker daemon (DOCKER_HOST) and the bullseye chroot, also the library image:
#   1. builds vgpu's library image (dockerfiles/Dockerfile) from dist/;
#   2. builds a stand-in device-plugin image (the bullseye chroot of scripts/bullseye-check.sh,
#      imported, holding a non-vgpu "HAMi-core" as /k8s-vgpu/lib/nvidia/libvgpu.so and
#      libvgpu.so.v2.10.0, as HAMi's image does) and puts vgpu into it with
#      dockerfiles/Dockerfile.device-plugin;
#   3. starts the plugin image with the node's hook directory mounted and runs the copy step
#      HAMi and Volcano run at start-up (everything in /k8s-vgpu/lib/nvidia/ to /usr/local/vgpu/);
#   4. starts a "GPU container" (glibc 2.31) with the mounts HAMi's Allocate gives one: the
#      versioned library read-only at /usr/local/vgpu/libvgpu.so, the container's cache
#      directory at /usr/local/vgpu, ld.so.preload at /etc/ld.so.preload, /tmp/vgpulock, and
#      CUDA_DEVICE_MEMORY_LIMIT_0=1024m; the simulated driver stands in for the GPU. A probe
#      allocates 512 MiB twice: the second must be refused;
#   5. runs `vgpu doctor` from the plugin image against its own library.
#
#   scripts/image-check.sh       (make image-check; root; dist/ built by make dist)
#
# Without a daemon steps 1-5 print SKIP lines with the reason (they are not counted).
# Knobs: DOCKER_HOST (the daemon), VGPU_BULLSEYE_ROOT (default /var/tmp/vgpu-dist/bullseye;
# scripts/bullseye-check.sh creates it), VGPU_BOOKWORM_ROOT (default
# /var/tmp/vgpu-dist/bookworm-minbase), DEBIAN_MIRROR (default http://deb.debian.org/debian),
# VGPU_IMAGE_CHECK_DIR (default /var/tmp/vgpu-dist/image-check: the stand-in node's
# directories). Needs: root, unshare, chroot, debootstrap (apt-get install debootstrap), cc,
# python3, cargo-zigbuild (make tools).
# Prints a closing "N passed, N failed" line; exit 1 on a failure.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
CH=${VGPU_BULLSEYE_ROOT:-/var/tmp/vgpu-dist/bullseye}
NODE=${VGPU_IMAGE_CHECK_DIR:-/var/tmp/vgpu-dist/image-check}
TRIPLE=x86_64-unknown-linux-gnu
SIMS=$(realpath -m "${CARGO_TARGET_DIR:-target}")/$TRIPLE/release/deps
BOOKWORM=${VGPU_BOOKWORM_ROOT:-/var/tmp/vgpu-dist/bookworm-minbase}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
export DOCKER_BUILDKIT=${DOCKER_BUILDKIT:-0}

die() { echo "image-check: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "needs root (chroot, mount namespaces)"
[ -f dist/libvgpu.so ] && [ -f dist/vgpu ] || die "dist/ not built (make dist)"
case "$NODE" in /?*/?*) ;; *) die "VGPU_IMAGE_CHECK_DIR must be an absolute path two levels deep" ;; esac

echo "== simulators for glibc 2.17 (cargo zigbuild -p vgpu-sim-cuda -p vgpu-sim-nvml)"
cargo zigbuild --release --locked -p vgpu-sim-cuda -p vgpu-sim-nvml --target "$TRIPLE.2.17" 2>&1 | tail -n1

# docker build, quiet unless it fails (the legacy builder's deprecation notice is noise here).
build() {
    local out
    out=$(docker build -q "$@" 2>&1) || { echo "$out" >&2; die "docker build $* failed"; }
}

passed=0 failed=0
check() { # NAME STATUS
    if [ "$2" = 0 ]; then passed=$((passed + 1)); echo "   PASS $1"; else failed=$((failed + 1)); echo "   FAIL $1"; fi
}

# The stand-in node.
rm -rf "${NODE:?}"
mkdir -p "$NODE/hook" "$NODE/sim" "$NODE/bin" "$NODE/ctr" "$NODE/vgpulock" "$NODE/plugin/k8s-vgpu/lib/nvidia"
chmod 0777 "$NODE/ctr" "$NODE/vgpulock"
cp "$SIMS/libvgpu_sim_cuda.so" "$NODE/sim/libcuda.so.1"
cp "$SIMS/libvgpu_sim_cuda.so" "$NODE/sim/libcuda.so"
cp "$SIMS/libvgpu_sim_nvml.so" "$NODE/sim/libnvidia-ml.so.1"

# ---------------------------------------------------------------------------------------------
# The exporter image, without a daemon.

if [ ! -x "$BOOKWORM/usr/bin/env" ]; then
    command -v debootstrap >/dev/null || die "debootstrap not found (apt-get install debootstrap)"
    echo "== debootstrap --variant=minbase bookworm $BOOKWORM (the stand-in for debian:bookworm-slim)"
    rm -rf "$BOOKWORM.tmp"
    mkdir -p "$(dirname "$BOOKWORM")"
    debootstrap --variant=minbase bookworm "$BOOKWORM.tmp" "$MIRROR" >"$BOOKWORM.log" 2>&1 ||
        die "debootstrap failed, see $BOOKWORM.log"
    mv "$BOOKWORM.tmp" "$BOOKWORM"
fi

ROOTFS=$NODE/exporter-rootfs
echo "== the root file system of dockerfiles/Dockerfile.exporter, built without a daemon"
python3 - dockerfiles/Dockerfile.exporter "$ROOTFS" "$BOOKWORM" "$NODE/exporter-image.json" <<'PY' || die "cannot build the exporter's root file system"
import json, os, re, shlex, shutil, subprocess, sys
dockerfile, rootfs, bookworm, out = sys.argv[1:]
# The bases this check can stand in for, and what stands in.
BASES = {"debian:bookworm-slim": bookworm}
text = re.sub(r"\\\n", " ", open(dockerfile).read())
args, image = {}, {"user": "0:0", "entrypoint": [], "cmd": [], "expose": [], "from": None}
def expand(s):
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)], s)
for line in text.splitlines():
    line = line.strip()
    if not line or line.startswith("#"):
        continue
    op, _, rest = line.partition(" ")
    op = op.upper()
    if op == "FROM":
        base = rest.strip()
        if base not in BASES:
            sys.exit(f"FROM {base}: no daemonless stand-in (known: {', '.join(BASES)})")
        image["from"] = base
        subprocess.run(["cp", "-a", BASES[base] + "/.", rootfs], check=True)
    elif op == "ARG":
        k, _, v = rest.partition("=")
        args[k.strip()] = v.strip()
    elif op in ("LABEL", "EXPOSE"):
        if op == "EXPOSE":
            image["expose"] += rest.split()
    elif op == "COPY":
        parts = [expand(p) for p in shlex.split(rest)]
        if any(p.startswith("--") for p in parts):
            sys.exit(f"COPY {rest}: flags are not understood here")
        *srcs, dst = parts
        for src in srcs:
            target = os.path.join(rootfs, dst.lstrip("/"))
            if dst.endswith("/"):
                target = os.path.join(target, os.path.basename(src))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if os.path.isdir(src):
                shutil.copytree(src, target, symlinks=True, dirs_exist_ok=True)
            else:
                shutil.copy2(src, target)
            print(f"   | COPY {src} -> {dst}")
    elif op == "USER":
        image["user"] = rest.strip()
    elif op in ("ENTRYPOINT", "CMD"):
        image[op.lower()] = json.loads(rest)
    else:
        sys.exit(f"{op}: not understood by this check (only FROM, ARG, LABEL, COPY, USER, EXPOSE, ENTRYPOINT, CMD)")
json.dump(image, open(out, "w"))
print(f"   | FROM {image['from']} (debootstrap minbase), USER {image['user']}, "
      f"ENTRYPOINT {image['entrypoint']}, CMD {image['cmd']}")
PY
img() { python3 -c 'import json,sys; v=json.load(open(sys.argv[1]))[sys.argv[2]]; print("\n".join(v) if isinstance(v, list) else v)' "$NODE/exporter-image.json" "$1"; }
user=$(img user)
mapfile -t entrypoint < <(img entrypoint)
mapfile -t cmd < <(img cmd)
# The DaemonSet's host paths, on the stand-in node (all read-only in the DaemonSet).
HOST=$NODE/host
mkdir -p "$HOST/usr/local/vgpu/containers" "$HOST/tmp/vgpu/containers" "$HOST/tmp/vgpulock"
chmod 0777 "$HOST/tmp/vgpulock"

echo "== a GPU container on the stand-in node: 512 MiB held under a 1 GiB limit (dist/libvgpu.so)"
cc -O1 -o "$NODE/bin/probe-host" crates/vgpu-tests/c/probe.c -L"$NODE/sim" -lcuda -ldl -lpthread
POD_UID=4b1f0c2e-6a3d-4e5f-8a9b-0c1d2e3f4a5b
CTRDIR=$HOST/usr/local/vgpu/containers/${POD_UID}_trainer
mkdir -p "$CTRDIR"
chmod 0777 "$CTRDIR"
mkfifo "$NODE/probe.in"
env -u POD_NAMESPACE -u POD_NAME -u CONTAINER_NAME LD_PRELOAD=$ROOT/dist/libvgpu.so LD_LIBRARY_PATH=$NODE/sim VGPU_SIM_MEM=16g VGPU_SIM_DEVICES=1 \
    CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE=$CTRDIR/0c9e.cache VGPU_NODE_DIR=$HOST/tmp/vgpulock \
    "$NODE/bin/probe-host" init ctx alloc:512m hold <"$NODE/probe.in" >"$NODE/probe.out" 2>&1 &
probe_pid=$!
exec 8>"$NODE/probe.in"
for _ in $(seq 100); do grep -q '^OK hold' "$NODE/probe.out" 2>/dev/null && break; sleep 0.1; done

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
run=("${entrypoint[@]}" "${cmd[@]}")
for i in "${!run[@]}"; do [ "${run[$i]}" = --listen ] && run[$((i + 1))]=127.0.0.1:$port; done
echo "== the exporter from that root: ${run[*]} as $user, root read-only, host paths read-only"
mounts=""
for d in usr/local/vgpu/containers tmp/vgpu/containers tmp/vgpulock; do
    mkdir -p "$ROOTFS/$d"
    mounts+="mount --bind '$HOST/$d' '$ROOTFS/$d' && mount -o remount,bind,ro '$ROOTFS/$d' && "
done
unshare -m --propagation private sh -c "mount --bind '$ROOTFS' '$ROOTFS' && mount -o remount,bind,ro '$ROOTFS' && \
    mount -t proc proc '$ROOTFS/proc' && $mounts exec chroot --userspec='$user' '$ROOTFS' \"\$@\"" sh "${run[@]}" \
    >"$NODE/exporter.log" 2>&1 &
exporter_pid=$!
cleanup() {
    kill "$exporter_pid" "$probe_pid" 2>/dev/null || true
    exec 8>&- 2>/dev/null || true
}
trap cleanup EXIT
scrape=""
for _ in $(seq 100); do
    scrape=$(python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
        "http://127.0.0.1:$port/metrics" 2>/dev/null) && break
    sleep 0.1
done
sed 's/^/   | /' "$NODE/exporter.log"
grep -E '^vgpu_memory_(used|limit)_bytes' <<<"$scrape" | sed 's/^/   | /'
child=$(pgrep -P "$exporter_pid" || echo "$exporter_pid")
[ -n "$scrape" ] && grep -q "^# TYPE vgpu_build_info gauge" <<<"$scrape"
check "the exporter started from the image's root and answered /metrics" $?
uid=$(awk '/^Uid:/ {print $2}' "/proc/$child/status" 2>/dev/null)
rootdir=$(readlink "/proc/$child/root" 2>/dev/null)
[ "$uid" = "${user%%:*}" ] && [ "$rootdir" = "$ROOTFS" ] && cmp -s "$ROOTFS/usr/local/bin/vgpu" dist/vgpu
check "it runs dist/vgpu as uid $uid (the image's USER ${user}) inside $rootdir" $?
want_used=$(( (303 + 512) << 20 ))
grep -qE "^vgpu_memory_used_bytes\{.*container=\"trainer\",pod_uid=\"$POD_UID\",device=\"0\".*\} $want_used\$" <<<"$scrape" &&
    grep -qE "^vgpu_memory_limit_bytes\{.*pod_uid=\"$POD_UID\",device=\"0\".*\} $((1 << 30))\$" <<<"$scrape"
check "it reads the container's region through the read-only host path: 815 MiB used of 1 GiB" $?
cleanup
trap - EXIT

# ---------------------------------------------------------------------------------------------
# The library and device-plugin images, with a Docker daemon.

if ! command -v docker >/dev/null || ! docker info >/dev/null 2>&1 || [ ! -x "$CH/usr/bin/gcc" ]; then
    why="no Docker daemon at ${DOCKER_HOST:-the default socket}"
    [ -x "$CH/usr/bin/gcc" ] || why="$why or no bullseye chroot at $CH (scripts/bullseye-check.sh)"
    command -v docker >/dev/null || why="docker not found"
    echo "== SKIP the library and device-plugin images: $why"
    echo "image-check: $passed passed, $failed failed"
    [ "$failed" = 0 ]
    exit
fi

echo "== base image: docker import $CH (Debian bullseye, glibc 2.31)"
if ! docker image inspect vgpu-check-base:bullseye >/dev/null 2>&1; then
    tar -C "$CH" --exclude=./proc --exclude=./work --exclude=./opt -c . |
        docker import - vgpu-check-base:bullseye >/dev/null
fi
docker run --rm -v "$ROOT/crates/vgpu-tests/c:/src:ro" -v "$NODE/sim:/opt/sim:ro" -v "$NODE/bin:/out" \
    vgpu-check-base:bullseye gcc -O1 -o /out/probe /src/probe.c -L/opt/sim -lcuda -ldl -lpthread

echo "== stand-in device-plugin image (a non-vgpu library as HAMi-core, libvgpu.so.v2.10.0)"
P=$NODE/plugin/k8s-vgpu/lib/nvidia
cp "$SIMS/libvgpu_sim_nvml.so" "$P/libvgpu.so.v2.10.0"
cp "$SIMS/libvgpu_sim_nvml.so" "$P/libvgpu.so"
echo /usr/local/vgpu/libvgpu.so >"$P/ld.so.preload"
printf 'FROM vgpu-check-base:bullseye\nCOPY k8s-vgpu /k8s-vgpu\n' >"$NODE/plugin/Dockerfile"
build -t vgpu-check-plugin:v2.10.0 "$NODE/plugin"

echo "== docker build -f dockerfiles/Dockerfile -t vgpu:check ."
build -f dockerfiles/Dockerfile -t vgpu:check .
files=$(docker create vgpu:check /none)
docker export "$files" | tar -t | sort | grep -v '/$' | sed 's/^/   | /'
docker rm "$files" >/dev/null
echo "== docker build -f dockerfiles/Dockerfile.device-plugin (DEVICE_PLUGIN_IMAGE=vgpu-check-plugin:v2.10.0)"
build -f dockerfiles/Dockerfile.device-plugin \
    --build-arg DEVICE_PLUGIN_IMAGE=vgpu-check-plugin:v2.10.0 --build-arg VGPU_IMAGE=vgpu:check \
    -t vgpu-check-plugin:v2.10.0-vgpu .

echo "== plugin start-up: cp -f /k8s-vgpu/lib/nvidia/* to the node's /usr/local/vgpu"
docker run --rm -v "$NODE/hook:/usr/local/vgpu" vgpu-check-plugin:v2.10.0-vgpu \
    sh -c 'cp -f /k8s-vgpu/lib/nvidia/* /usr/local/vgpu/'
ls -la "$NODE/hook" | sed 's/^/   | /'
cmp -s "$NODE/hook/libvgpu.so.v2.10.0" dist/libvgpu.so && cmp -s "$NODE/hook/libvgpu.so" dist/libvgpu.so
check "the node's libvgpu.so and libvgpu.so.v2.10.0 are dist/libvgpu.so" $?

echo "== GPU container with HAMi's mounts, CUDA_DEVICE_MEMORY_LIMIT_0=1024m"
out=$(docker run --rm \
    -v "$NODE/ctr:/usr/local/vgpu" \
    -v "$NODE/hook/libvgpu.so.v2.10.0:/usr/local/vgpu/libvgpu.so:ro" \
    -v "$NODE/hook/ld.so.preload:/etc/ld.so.preload:ro" \
    -v "$NODE/vgpulock:/tmp/vgpulock" \
    -v "$NODE/sim:/opt/sim:ro" -v "$NODE/bin:/opt/bin:ro" \
    -e LD_LIBRARY_PATH=/opt/sim -e VGPU_SIM_MEM=16g \
    -e CUDA_DEVICE_MEMORY_LIMIT_0=1024m -e CUDA_DEVICE_SM_LIMIT=0 \
    -e CUDA_DEVICE_MEMORY_SHARED_CACHE=/usr/local/vgpu/0e3c9a52-check.cache \
    vgpu-check-base:bullseye /opt/bin/probe init ctx alloc:512m alloc:512m meminfo 2>&1) && rc=0 || rc=$?
grep -v '^probe:' <<<"$out" | sed 's/^/   | /'
[ "$rc" = 0 ] && grep -q '^ERR alloc 2' <<<"$out" && grep -q '^OK meminfo free=[0-9]* total=1073741824$' <<<"$out"
check "ld.so.preload loads dist/libvgpu.so; the second 512 MiB is refused under 1 GiB" $?
ls -la "$NODE/ctr" | sed 's/^/   | /'
size=$(stat -c %s "$NODE/ctr/0e3c9a52-check.cache" 2>/dev/null || echo 0)
[ "$size" -ge 2008952 ]
check "the container's region file is in its cache directory ($size bytes, HAMi's monitor needs >= 2008952)" $?

echo "== vgpu doctor in the plugin image"
out=$(docker run --rm -v "$NODE/sim:/opt/sim:ro" -e LD_LIBRARY_PATH=/opt/sim -e VGPU_SIM_MEM=16g \
    vgpu-check-plugin:v2.10.0-vgpu /k8s-vgpu/bin/vgpu doctor --lib /k8s-vgpu/lib/nvidia/libvgpu.so.v2.10.0 2>&1) &&
    rc=0 || rc=$?
sed 's/^/   | /' <<<"$out"
[ "$rc" = 0 ] && grep -q 'PASS allocation limit' <<<"$out"
check "vgpu doctor (exit $rc)" $?

echo "image-check: $passed passed, $failed failed"
[ "$failed" = 0 ]
