#!/usr/bin/env bash
# Where a compat case dies under vgpu: the case run under the limiter with Python's
# faulthandler (the Python stack at a fatal signal), with the controller's debug lines, with
# brackets unheld (VGPU_HOLD_BRACKETS=0: no pinned word, no restart probe), and under gdb
# (every thread's native stack at the signal).
#
#   bash tests/gpu/compat/backtrace.sh LIB CASE [VAR=VALUE ...]    (e.g. CUDA_DEVICE_SM_LIMIT=50)
set -u
LIB=$(readlink -f "$1"); CASE=$2; shift 2
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
W=$(mktemp -d /tmp/vgpu-bt.XXXXXX)
export PYTHONUNBUFFERED=1
n=0
for extra in "" "LIBCUDA_LOG_LEVEL=4" "VGPU_HOLD_BRACKETS=0"; do
    n=$((n + 1))
    echo "== $CASE $* $extra"
    env LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_SHARED_CACHE="$W/$n.cache" "$@" $extra \
        timeout -k 5 120 python3 -X faulthandler "$HERE/cases.py" "$CASE" 2>&1 | tail -40
    echo "== rc ${PIPESTATUS[0]}"
done
if command -v gdb > /dev/null; then
    echo "== gdb"
    args=(-batch -ex "set startup-with-shell off" -ex "set pagination off"
          -ex "set environment LD_PRELOAD $LIB"
          -ex "set environment CUDA_DEVICE_MEMORY_SHARED_CACHE $W/gdb.cache")
    for kv in "$@"; do args+=(-ex "set environment ${kv%%=*} ${kv#*=}"); done
    timeout -k 5 180 gdb "${args[@]}" -ex run -ex "info threads" -ex "thread apply all bt 25" \
        --args python3 "$HERE/cases.py" "$CASE" 2>&1 | grep -v '^\[New Thread\|^\[Thread .* exited' | tail -150
else
    echo "== no gdb"
fi
rm -rf "$W"
