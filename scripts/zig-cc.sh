#!/usr/bin/env bash
# A C compiler for another target: zig cc (PyPI `ziglang`) for $ZIG_CC_TARGET (default
# aarch64-linux-gnu.2.17). The test harness compiles its probe with $CC; scripts/test-aarch64.sh
# points CC here.
exec python3 -m ziglang cc -target "${ZIG_CC_TARGET:-aarch64-linux-gnu.2.17}" "$@"
