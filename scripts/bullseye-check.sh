#!/usr/bin/env bash
# Proves that the dist build loads and enforces under an old glibc, not only by its symbol
# versions: a Debian bullseye chroot (glibc 2.31, as Ubuntu 20.04) runs the simulator suite
# (crates/vgpu-tests and crates/vgpu-cli's integration tests) and `vgpu doctor` with
# dist/libvgpu.so and dist/vgpu, then a probe under /etc/ld.so.preload the way HAMi loads the
# library. The same chroot shows that the plain `cargo build --release` library does not load
# there ("GLIBC_2.34 not found").
#
#   scripts/bullseye-check.sh          (as root; make dist first; make bullseye-check)
#
# Built on the host for glibc 2.17 with zig (cargo zigbuild --tests): the test executables and
# the simulated libcuda/libnvidia-ml, which are not part of dist but must run in the chroot too.
# The test executables and simulators go to /opt/vgpu-test/deps in the chroot (the harness works
# beside its executable: a short path keeps the probe's path within the region's 64-byte
# command field); probe.c, dist/ and `vgpu` go to the same absolute paths as on the host (the
# tests find them by paths compiled in). The probe is compiled inside by bullseye's gcc. Only
# /proc is mounted into the chroot, and unmounted on exit.
#
# Knobs: VGPU_BULLSEYE_ROOT (default /var/tmp/vgpu-dist/bullseye; created by debootstrap when
# missing, kept for the next run), DEBIAN_MIRROR (default http://deb.debian.org/debian).
# Needs: debootstrap (apt-get install debootstrap), cargo-zigbuild + ziglang (make tools), root.
# Exit 0 when every check passed; prints a closing "N passed, N failed" line.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
CH=${VGPU_BULLSEYE_ROOT:-/var/tmp/vgpu-dist/bullseye}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
TRIPLE=x86_64-unknown-linux-gnu
TARGET=$(realpath -m "${CARGO_TARGET_DIR:-target}")
TD=$TARGET/$TRIPLE/release
T=/opt/vgpu-test

die() { echo "bullseye-check: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "needs root (chroot, mount)"
[ -f dist/libvgpu.so ] && [ -f dist/vgpu ] || die "dist/ not built (make dist)"
command -v cargo-zigbuild >/dev/null || die "cargo-zigbuild not found (make tools)"
case "$CH" in /?*/?*) ;; *) die "VGPU_BULLSEYE_ROOT must be an absolute path two levels deep" ;; esac

# 1. The chroot.
if [ ! -x "$CH/usr/bin/gcc" ]; then
    command -v debootstrap >/dev/null || die "debootstrap not found (apt-get install debootstrap)"
    echo "== debootstrap bullseye $CH"
    mkdir -p "$(dirname "$CH")"
    debootstrap --variant=minbase --include=gcc,libc6-dev,binutils bullseye "$CH" "$MIRROR" \
        >"$CH.log" 2>&1 || die "debootstrap failed, see $CH.log"
fi

# 2. Host builds: the tests and simulators for glibc 2.17, and the plain library for the
#    negative check.
echo "== build: cargo zigbuild --release --tests -p vgpu-tests -p vgpu-cli --target $TRIPLE.2.17"
json=$(mktemp)
cleanup() {
    rm -f "$json"
    rm -f "$CH/etc/ld.so.preload"
    if mountpoint -q "$CH/proc"; then umount "$CH/proc"; fi
}
trap cleanup EXIT
cargo zigbuild --release --locked --tests -p vgpu-tests -p vgpu-cli --target "$TRIPLE.2.17" \
    --message-format=json-render-diagnostics >"$json"
mapfile -t tests < <(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") \
            and m.get("executable"):
        print(m["executable"])
' "$json" | sort)
[ ${#tests[@]} -gt 0 ] || die "no test executables built"
echo "== build: cargo build --release -p vgpu-preload (the plain library, for comparison)"
cargo build --release --locked -p vgpu-preload 2>&1 | tail -n1

# 3. Stage at the same absolute paths. Everything named libvgpu.so or vgpu is the dist build.
rm -rf "${CH:?}$ROOT"
rm -rf "${CH:?}$T"
mkdir -p "$CH$TD" "$CH$T/deps" "$CH$ROOT/crates/vgpu-tests" "$CH$ROOT/dist" "$CH/opt/plain" "$CH/opt/sim"
cp -a crates/vgpu-tests/c "$CH$ROOT/crates/vgpu-tests/"
cp dist/libvgpu.so dist/vgpu "$CH$ROOT/dist/"
cp dist/vgpu "$CH$TD/vgpu"
cp dist/libvgpu.so "$CH$T/deps/libvgpu.so"
cp "$TD/deps/libvgpu_sim_cuda.so" "$TD/deps/libvgpu_sim_nvml.so" "$CH$T/deps/"
for t in "${tests[@]}"; do cp "$t" "$CH$T/deps/"; done
cp "$TARGET/release/libvgpu.so" "$CH/opt/plain/libvgpu.so"
ln -sf "$T/deps/libvgpu_sim_cuda.so" "$CH/opt/sim/libcuda.so.1"
ln -sf "$T/deps/libvgpu_sim_cuda.so" "$CH/opt/sim/libcuda.so"
ln -sf "$T/deps/libvgpu_sim_nvml.so" "$CH/opt/sim/libnvidia-ml.so.1"
mountpoint -q "$CH/proc" || mount -t proc proc "$CH/proc"

inside() { chroot "$CH" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@"; }
passed=0 failed=0
check() { # NAME OK(0/1)
    if [ "$2" = 0 ]; then passed=$((passed + 1)); echo "   PASS $1"; else failed=$((failed + 1)); echo "   FAIL $1"; fi
}

echo "== chroot: $(inside ldd --version | head -n1)"
echo "   dist/libvgpu.so needs: $(scripts/check-glibc.sh dist/libvgpu.so | sed -n 's/.*needed: //p')"

# 4. The plain build does not load there.
echo "== plain cargo build --release library (target/release/libvgpu.so) in bullseye"
out=$(inside env LD_PRELOAD=/opt/plain/libvgpu.so /bin/true 2>&1) && rc=0 || rc=$?
echo "   LD_PRELOAD: exit $rc: $out" | head -n3
grep -q "GLIBC_2.34' not found" <<<"$out"
check "plain library: GLIBC_2.34 not found under LD_PRELOAD" $?
echo /opt/plain/libvgpu.so >"$CH/etc/ld.so.preload"
out=$(inside /bin/echo still-running 2>&1) && rc=0 || rc=$?
rm -f "$CH/etc/ld.so.preload"
echo "   /etc/ld.so.preload: exit $rc: $out" | head -n3
grep -q "GLIBC_2.34' not found" <<<"$out"
check "plain library: GLIBC_2.34 not found under /etc/ld.so.preload" $?

# 5. vgpu doctor (dist) with the dist library and the simulated driver.
echo "== dist/vgpu doctor --lib dist/libvgpu.so"
out=$(inside env LD_LIBRARY_PATH=/opt/sim VGPU_SIM_MEM=16g CUDA_DEVICE_SM_LIMIT=25 \
    "$ROOT/dist/vgpu" doctor --lib "$ROOT/dist/libvgpu.so" 2>&1) && rc=0 || rc=$?
sed 's/^/   | /' <<<"$out"
[ "$rc" = 0 ] && grep -q "PASS allocation limit" <<<"$out" && grep -q "PASS compute limit" <<<"$out"
check "vgpu doctor (exit $rc)" $?

# 6. HAMi's way: /etc/ld.so.preload names the library; a 1 GiB limit holds.
echo "== /etc/ld.so.preload = dist/libvgpu.so, CUDA_DEVICE_MEMORY_LIMIT=1g"
inside gcc -O1 -o /opt/probe "$ROOT/crates/vgpu-tests/c/probe.c" -L/opt/sim -lcuda -ldl -lpthread
echo "$ROOT/dist/libvgpu.so" >"$CH/etc/ld.so.preload"
out=$(inside env LD_LIBRARY_PATH=/opt/sim VGPU_SIM_MEM=16g CUDA_DEVICE_MEMORY_LIMIT=1g \
    CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/bullseye-check.cache \
    /opt/probe init ctx alloc:512m alloc:512m meminfo 2>&1) && rc=0 || rc=$?
rm -f "$CH/etc/ld.so.preload" "$CH/tmp/bullseye-check.cache"
grep -v '^probe:' <<<"$out" | sed 's/^/   | /'
grep -q '^OK meminfo free=[0-9]* total=1073741824$' <<<"$out" && grep -q '^ERR alloc 2' <<<"$out"
check "ld.so.preload: second 512 MiB refused under 1 GiB, total=1 GiB" $?

# 7. The simulator suite.
echo "== test executables (VGPU_TEST_LIB=$ROOT/dist/libvgpu.so)"
tpassed=0 tfailed=0
for t in "${tests[@]}"; do
    name=$(basename "$t" | sed 's/-[0-9a-f]*$//')
    # deploy validates manifests with the host's promtool and Python validators: not the library
    if [ "$name" = deploy ]; then echo "   $name: skipped (manifest validation, host tools)"; continue; fi
    log=$(mktemp)
    inside env VGPU_TEST_LIB="$ROOT/dist/libvgpu.so" "$T/deps/$(basename "$t")" >"$log" 2>&1 && rc=0 || rc=$?
    summary=$(grep -E '^test result:' "$log" | tail -n1)
    echo "   $name: ${summary:-no result, exit $rc}"
    if [ "$rc" != 0 ]; then
        grep -E '^test .* FAILED|panicked|^ERROR' "$log" | head -n 20 | sed 's/^/      | /'
    fi
    p=$(sed -n 's/^test result: [a-zA-Z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1/p' <<<"$summary")
    f=$(sed -n 's/^test result: [a-zA-Z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\2/p' <<<"$summary")
    tpassed=$((tpassed + ${p:-0}))
    tfailed=$((tfailed + ${f:-1}))
    [ "$rc" = 0 ] || [ "${f:-1}" != 0 ] || tfailed=$((tfailed + 1))
    rm -f "$log"
done
echo "   tests in bullseye: $tpassed passed, $tfailed failed"
check "simulator suite in bullseye ($tpassed tests)" "$([ "$tfailed" = 0 ] && echo 0 || echo 1)"

echo "bullseye-check: $passed passed, $failed failed"
[ "$failed" = 0 ]
