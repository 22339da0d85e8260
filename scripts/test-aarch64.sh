#!/usr/bin/env bash
# The driver-API suite (crates/vgpu-tests: the C probe against the simulated driver and NVML,
# under LD_PRELOAD=libvgpu.so) for aarch64, run under qemu-user on an x86-64 machine.
#
#   scripts/test-aarch64.sh            (make test-aarch64 builds dist/aarch64 first)
#
# Everything aarch64 is built for glibc 2.17 with zig: the test executables and the simulators
# (cargo zigbuild --tests), the probe (CC=scripts/zig-cc.sh, aarch64-linux-gnu.2.17), and the
# library under test is dist/aarch64/libvgpu.so (VGPU_TEST_LIB). They run against a Debian
# bullseye arm64 sysroot (glibc 2.31: older than 2.34, where glibc's dlsym is still versioned
# GLIBC_2.17 only), laid out by `debootstrap --foreign` (extracting packages is all qemu's -L
# needs). The probe is started through VGPU_TEST_RUNNER="qemu-aarch64-static -L SYSROOT".
#
# Knobs: VGPU_LIB (library under test), VGPU_AARCH64_SYSROOT (default
# /var/tmp/vgpu-dist/bullseye-arm64), VGPU_AARCH64_SUITE (Debian suite, default bullseye),
# DEBIAN_MIRROR (default http://deb.debian.org/debian), QEMU (default qemu-aarch64-static).
# Needs: cargo-zigbuild + ziglang (make tools), the aarch64 rust target, qemu-user-static,
# debootstrap (apt-get install qemu-user-static debootstrap), root for debootstrap.
#
# Skipped under emulation, with the reason: entry_paths::non_cuda_programs_are_untouched
# (preloads the library into the host's x86-64 `sh`), dist's doctor test (doctor re-executes
# itself; without binfmt_misc a child aarch64 process cannot start).
#
# Prints each executable's result and a closing "N passed, N failed" line; exit 1 on a failure.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
TRIPLE=aarch64-unknown-linux-gnu
LIB=${VGPU_LIB:-$ROOT/dist/aarch64/libvgpu.so}
SUITE=${VGPU_AARCH64_SUITE:-bullseye}
SYSROOT=${VGPU_AARCH64_SYSROOT:-/var/tmp/vgpu-dist/$SUITE-arm64}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
QEMU=${QEMU:-qemu-aarch64-static}
# Skipped under qemu: a test that preloads the library into the host's x86 programs, and two
# that bound timings (concurrent context starts, a compute-limited pair); whole timing programs
# are skipped below.
SKIP=(non_cuda_programs_are_untouched concurrent_starters_never_pass_the_limit_by_more_than_one_context
      a_memory_and_compute_limited_pair_of_ranks_finishes_and_shares_the_budget)

die() { echo "test-aarch64: $*" >&2; exit 2; }
command -v "$QEMU" >/dev/null || die "$QEMU not found (apt-get install qemu-user-static)"
command -v cargo-zigbuild >/dev/null || die "cargo-zigbuild not found (make tools)"
[ -f "$LIB" ] || die "$LIB not found (make dist-aarch64)"
LIB=$(readlink -f "$LIB")

if [ ! -e "$SYSROOT/lib/ld-linux-aarch64.so.1" ]; then
    command -v debootstrap >/dev/null || die "debootstrap not found (apt-get install debootstrap)"
    echo "== sysroot: debootstrap --foreign --arch=arm64 $SUITE $SYSROOT"
    mkdir -p "$(dirname "$SYSROOT")"
    debootstrap --foreign --arch=arm64 --variant=minbase "$SUITE" "$SYSROOT" "$MIRROR" >"$SYSROOT.log" 2>&1 ||
        die "debootstrap failed, see $SYSROOT.log"
fi
GLIBC=$(ls "$SYSROOT"/lib/aarch64-linux-gnu/libc-*.so 2>/dev/null | sed -n 's/.*libc-\(.*\)\.so$/\1/p' | head -n1)
echo "== sysroot $SYSROOT (glibc ${GLIBC:-?}), library $LIB"

echo "== build: cargo zigbuild --release --tests -p vgpu-tests --target $TRIPLE.2.17"
json=$(mktemp)
trap 'rm -f "$json"' EXIT
cargo zigbuild --release --locked --tests -p vgpu-tests --target "$TRIPLE.2.17" \
    --message-format=json-render-diagnostics >"$json"
mapfile -t tests < <(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") \
            and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])
' "$json" | sort)
[ ${#tests[@]} -gt 0 ] || die "no test executables built"

export VGPU_TEST_LIB=$LIB
export VGPU_TEST_RUNNER="$QEMU -L $SYSROOT"
export CC=$ROOT/scripts/zig-cc.sh ZIG_CC_TARGET=aarch64-linux-gnu.2.17
skip_args=()
for s in "${SKIP[@]}"; do skip_args+=(--skip "$s"); done

passed=0 failed=0 status=0
# Whole test programs that measure time (shares, latencies, concurrent starts against the
# simulator's clock): under emulation every CPU step is several times slower, so their bounds,
# set for native speed, say nothing about the aarch64 build. The interception, budget, region
# and HAMi tests all run.
SKIP_PROGRAMS=" compute compute_sharing compute_hami deploy "
for t in "${tests[@]}"; do
    name=$(basename "$t" | sed 's/-[0-9a-f]*$//')
    if [[ "$SKIP_PROGRAMS" == *" $name "* ]]; then echo "   $name: skipped under qemu (timing)"; continue; fi
    log=$(mktemp)
    if "$QEMU" -L "$SYSROOT" "$t" "${skip_args[@]}" >"$log" 2>&1; then :; else status=1; fi
    summary=$(grep -E '^test result:' "$log" | tail -n1)
    echo "   $name: ${summary:-no result (crashed?)}"
    grep -E '^(skip:|test .* FAILED|    [a-z_]+$)' "$log" | sed 's/^/      /' || true
    if [ -z "$summary" ] || [ "$status" = 1 ] && ! grep -q '^test result: ok' "$log"; then
        sed 's/^/      | /' "$log" | tail -n 40
    fi
    p=$(sed -n 's/^test result: [a-zA-Z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1/p' <<<"$summary")
    f=$(sed -n 's/^test result: [a-zA-Z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\2/p' <<<"$summary")
    passed=$((passed + ${p:-0}))
    failed=$((failed + ${f:-1}))
    rm -f "$log"
done
echo "aarch64 (qemu, glibc ${GLIBC:-?}): $passed passed, $failed failed"
[ "$failed" = 0 ] && [ "$status" = 0 ]
