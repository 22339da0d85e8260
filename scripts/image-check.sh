#!/usr/bin/env bash
# Checks the images the way a node uses them, without a GPU and without pulling anything:
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
#   scripts/image-check.sh       (make image-check; root; needs a running Docker daemon)
#
# Knobs: DOCKER_HOST (the daemon), VGPU_BULLSEYE_ROOT (default /var/tmp/vgpu-dist/bullseye;
# scripts/bullseye-check.sh creates it), VGPU_IMAGE_CHECK_DIR (default
# /var/tmp/vgpu-dist/image-check: the stand-in node's directories).
# Prints a closing "N passed, N failed" line; exit 1 on a failure.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
CH=${VGPU_BULLSEYE_ROOT:-/var/tmp/vgpu-dist/bullseye}
NODE=${VGPU_IMAGE_CHECK_DIR:-/var/tmp/vgpu-dist/image-check}
TRIPLE=x86_64-unknown-linux-gnu
SIMS=$ROOT/target/$TRIPLE/release/deps
export DOCKER_BUILDKIT=${DOCKER_BUILDKIT:-0}

die() { echo "image-check: $*" >&2; exit 2; }
command -v docker >/dev/null || die "docker not found"
docker info >/dev/null 2>&1 || die "no Docker daemon at ${DOCKER_HOST:-the default socket}"
[ -f dist/libvgpu.so ] && [ -f dist/vgpu ] || die "dist/ not built (make dist)"
[ -x "$CH/usr/bin/gcc" ] || die "$CH has no bullseye chroot (run scripts/bullseye-check.sh)"
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
