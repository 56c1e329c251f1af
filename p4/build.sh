#!/usr/bin/env bash
# Compiles the inagg P4 programs with whichever compilers are installed.
#
#   p4/build.sh [v1model|tna|all] [-DNAME=VALUE ...]
#
#   v1model  p4/v1model/inagg.p4 with p4c-bm2-ss (or `p4c --target bmv2
#            --arch v1model`) into p4/build/v1model/: inagg.json (bmv2),
#            inagg.p4info.txt and inagg.p4info.bin (P4Info, text and binary)
#   tna      p4/tna/inagg.p4 with bf-p4c into p4/build/tna/ (the compiler's
#            output directory, with bf-rt.json and inagg.p4info.txt)
#   all      both (the default)
#
# -D arguments go to every compiler: -DK=32 (elements per packet), -DSLOTS=4096,
# -DINAGG_UDP_PORT=..., -DINAGG_RECIRC_PORT=... (TNA). K=... and SLOTS=... in
# the environment do the same. P4_BUILD_DIR moves the output (default
# p4/build); TOFINO_TARGET=tofino2 compiles the TNA program for Tofino 2.
#
# A compiler that is not on PATH is reported and skipped, and the script
# still exits 0; a compiler that is present and fails makes it exit 1.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${P4_BUILD_DIR:-$here/build}
targets=()
defines=()

usage() {
    sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

for arg in "$@"; do
    case $arg in
        v1model|tna) targets+=("$arg") ;;
        all) targets+=(v1model tna) ;;
        -D*) defines+=("$arg") ;;
        -h|--help) usage; exit 0 ;;
        *) echo "build.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
    esac
done
[ ${#targets[@]} -eq 0 ] && targets=(v1model tna)
[ -n "${K:-}" ] && defines+=("-DINAGG_K=$K")
[ -n "${SLOTS:-}" ] && defines+=("-DINAGG_SLOTS=$SLOTS")

failed=0
built=0
skipped=0
skip=""   # set by a build function that found no compiler

build_v1model() {
    local dir=$out/v1model src=$here/v1model/inagg.p4
    local p4info="$dir/inagg.p4info.txt,$dir/inagg.p4info.bin"
    if command -v p4c-bm2-ss >/dev/null 2>&1; then
        mkdir -p "$dir"
        echo "v1model: p4c-bm2-ss $src -> $dir"
        p4c-bm2-ss --std p4-16 ${defines[@]+"${defines[@]}"} \
            -o "$dir/inagg.json" --p4runtime-files "$p4info" "$src"
    elif command -v p4c >/dev/null 2>&1; then
        mkdir -p "$dir"
        echo "v1model: p4c --target bmv2 --arch v1model $src -> $dir"
        p4c --target bmv2 --arch v1model --std p4-16 ${defines[@]+"${defines[@]}"} \
            -o "$dir" --p4runtime-files "$p4info" "$src"
    else
        skip="neither p4c-bm2-ss nor p4c is on PATH (install p4lang's p4c to build the bmv2 program)"
    fi
}

build_tna() {
    local dir=$out/tna src=$here/tna/inagg.p4
    local target=${TOFINO_TARGET:-tofino}
    if command -v bf-p4c >/dev/null 2>&1; then
        mkdir -p "$dir"
        echo "tna: bf-p4c --target $target --arch tna $src -> $dir"
        bf-p4c --std p4-16 --target "$target" --arch tna ${defines[@]+"${defines[@]}"} \
            -o "$dir" --bf-rt-schema "$dir/bf-rt.json" \
            --p4runtime-files "$dir/inagg.p4info.txt" "$src"
    else
        skip="bf-p4c is not on PATH (it comes with Intel's Tofino SDE, or with p4c built with its Tofino back end)"
    fi
}

for target in "${targets[@]}"; do
    status=0
    skip=""
    "build_$target" || status=$?
    if [ -n "$skip" ]; then
        skipped=$((skipped + 1))
        echo "$target: skipped: $skip"
    elif [ "$status" -eq 0 ]; then
        built=$((built + 1))
        echo "$target: built into $out/$target"
    else
        failed=$((failed + 1))
        echo "$target: FAILED (compiler exit status $status)" >&2
    fi
done

echo "p4/build.sh: $built built, $skipped skipped, $failed failed"
[ "$failed" -eq 0 ]
