#!/usr/bin/env bash
# Lists every versioned glibc symbol an ELF file needs and fails if one is newer than the
# oldest glibc vgpu supports (2.17, the oldest Rust supports: CentOS 7, UBI 7, Ubuntu 14.04+).
#
#   scripts/check-glibc.sh [--max 2.17] FILE...
#
# Reads both the dynamic symbol table (which symbol wants which version) and the version-needs
# section (every version the loader will demand), so a version needed without a symbol still
# counts. Exit 0: every file is within the limit; 1: a file needs a newer glibc; 2: usage or a
# file that cannot be read.
set -euo pipefail

max=2.17
if [ "${1:-}" = --max ]; then
    max=$2
    shift 2
fi
if [ $# -eq 0 ]; then
    echo "usage: $0 [--max X.Y] FILE..." >&2
    exit 2
fi
command -v readelf >/dev/null || { echo "check-glibc: readelf not found (binutils)" >&2; exit 2; }

# newer A B: true when version A sorts after version B (2.2.5 < 2.17 < 2.34).
newer() { [ "$1" != "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -n1)" = "$1" ]; }

bad=0
for f in "$@"; do
    if ! readelf -h "$f" >/dev/null 2>&1; then
        echo "check-glibc: $f: not an ELF file" >&2
        exit 2
    fi
    # "  12: 0000000000000000  0 FUNC  GLOBAL DEFAULT  UND dlvsym@GLIBC_2.2.5 (3)"
    syms=$(readelf --dyn-syms -W "$f" | awk '$0 ~ /@GLIBC_[0-9]/ { print $8 }' | sed 's/ *(.*//' | sort -u)
    # "  0x0010:   Name: GLIBC_2.17  Flags: none  Version: 5"
    needed=$(readelf -V -W "$f" | sed -n 's/.*Name: GLIBC_\([0-9.]*\).*/\1/p' | sort -u -V)
    versions=$(printf '%s\n' "$syms" | sed -n 's/.*@GLIBC_\([0-9.]*\)$/\1/p' | cat - <(printf '%s\n' "$needed") |
        sed '/^$/d' | sort -u -V)
    newest=$(printf '%s\n' "$versions" | tail -n1)
    echo "== $f"
    echo "   glibc versions needed: $(printf '%s\n' "$versions" | tr '\n' ' ')"
    echo "   versioned symbols: $(printf '%s\n' "$syms" | sed '/^$/d' | wc -l)"
    over=""
    for v in $versions; do
        if newer "$v" "$max"; then
            over="$over $v"
        fi
    done
    if [ -n "$over" ]; then
        bad=1
        echo "   FAIL: needs glibc newer than $max:$over"
        for v in $over; do
            printf '%s\n' "$syms" | grep -F "@GLIBC_$v" | sed 's/^/     /' || true
        done
    else
        echo "   OK: newest is GLIBC_${newest:-none} <= $max"
    fi
    if [ "${VERBOSE:-0}" = 1 ]; then
        printf '%s\n' "$syms" | sed 's/^/     /'
    fi
done
exit $bad
