#!/usr/bin/env bash
# Builds the libraries a GPU run carries in .gpu/ (ignored; `carry: [".gpu"]`), so that the
# device's minutes go to the run, not to rebuilding what the last session had:
#   .gpu/libvgpu.so, .gpu/vgpu   this tree (HEAD plus any uncommitted change)
#   .gpu/libvgpu-b.so            with -b PATCH: HEAD with PATCH applied (gen3_bench.py's "varb")
#   .gpu/libvgpu-c.so            with -c REV: the library at REV (gen3_bench.py's "varc"),
#                                or with -p PATCH: HEAD with PATCH applied
#   .gpu/commit.txt              which commit (and patch) each one is
# Release builds for this machine's glibc (the device machine runs them as built here),
# debug info stripped. Variants build in worktrees under target/, removed afterwards.
# Usage: scripts/gpu-kit.sh [-b tests/gpu/gen3/shareddepth.patch] [-c c1e746c | -p PATCH]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
patch="" base="" cpatch=""
while getopts "b:c:p:h" o; do
  case $o in
    b) patch=$(realpath "$OPTARG") ;;
    c) base=$OPTARG ;;
    p) cpatch=$(realpath "$OPTARG") ;;
    *) sed -n '2,12p' "$0"; exit 2 ;;
  esac
done
if [ -n "$base" ] && [ -n "$cpatch" ]; then
  echo "gpu-kit: -c and -p both build .gpu/libvgpu-c.so; give one" >&2
  exit 2
fi
objcopy=$(command -v objcopy || true)

# build DIR TARGET_DIR OUT_LIB [OUT_CLI]: a release build of the library (and the CLI) in DIR.
build() {
  local dir=$1 target=$2 lib=$3 cli=${4:-}
  local pkgs=(-p vgpu-preload)
  [ -n "$cli" ] && pkgs+=(-p vgpu-cli)
  (cd "$dir" && CARGO_TARGET_DIR="$target" cargo build --release --locked "${pkgs[@]}")
  install -m 0755 "$target/release/libvgpu.so" "$lib"
  [ -n "$cli" ] && install -m 0755 "$target/release/vgpu" "$cli"
  if [ -n "$objcopy" ]; then
    "$objcopy" --strip-debug "$lib"
    [ -n "$cli" ] && "$objcopy" --strip-debug "$cli"
  fi
  return 0
}

# worktree REV NAME: a detached worktree of REV under target/, in $wt (removed on exit; not
# called in a subshell, so that the exit trap sees it).
worktree() {
  wt="$root/target/gpu-kit-$2"
  git worktree remove --force "$wt" 2>/dev/null || true
  git worktree add -f --detach -q "$wt" "$1"
  trees+=("$wt")
}
trees=()
cleanup() {
  for t in "${trees[@]}"; do git worktree remove --force "$t" 2>/dev/null || true; done
  git worktree prune
}
trap cleanup EXIT

mkdir -p .gpu
head=$(git rev-parse --short HEAD)
dirty=""
git diff --quiet HEAD || dirty="-dirty"
build "$root" "$root/target/gpu-kit" .gpu/libvgpu.so .gpu/vgpu
{
  echo "libvgpu.so, vgpu: $head$dirty ($(date -u +%F))"
} > .gpu/commit.txt

# variant NAME REV [PATCH]: .gpu/libvgpu-NAME.so, the library at REV with PATCH applied.
variant() {
  local name=$1 rev=$2 p=${3:-}
  worktree "$rev" "$name"
  [ -n "$p" ] && git -C "$wt" apply "$p"
  build "$wt" "$root/target/gpu-kit-$name" ".gpu/libvgpu-$name.so"
  echo "libvgpu-$name.so: $(git rev-parse --short "$rev")${p:+ + $(basename "$p")}" >> .gpu/commit.txt
}

rm -f .gpu/libvgpu-b.so .gpu/libvgpu-c.so
[ -n "$patch" ] && variant b HEAD "$patch"
if [ -n "$base" ]; then
  variant c "$base"
elif [ -n "$cpatch" ]; then
  variant c HEAD "$cpatch"
fi
# What each library says it is (its version string names its commit).
for l in .gpu/libvgpu*.so; do
  printf '%s: %s\n' "$l" "$(strings "$l" | grep -o 'commit [0-9a-f]*[-a-z]*' | head -1)"
done
cat .gpu/commit.txt
du -ch .gpu/* | tail -1
