#!/usr/bin/env bash
# Compiles the inagg P4 programs with whichever compilers are installed.
#
#   p4/build.sh [v1model|tna|all|check] [-DNAME=VALUE ...]
#
#   v1model  p4/v1model/inagg.p4 with p4c-bm2-ss (or `p4c --target bmv2
#            --arch v1model`) into p4/build/v1model/: inagg.json (bmv2),
#            inagg.p4info.txt and inagg.p4info.bin (P4Info, text and binary)
#   tna      p4/tna/inagg.p4 with bf-p4c into p4/build/tna/ (the compiler's
#            output directory, with bf-rt.json and inagg.p4info.txt), then
#            p4/resources.py's report of the stages, memories, ALUs and PHV
#            it uses
#   all      both (the default)
#   check    p4test (p4c's front and mid end, no back end) on both programs:
#            p4/v1model against v1model.p4, p4/tna against the Tofino
#            architecture files (tna.p4, tofino1_arch.p4, ...). They are
#            found in TNA_P4INCLUDE, else in bf-p4c's p4include beside
#            p4test or in p4c's source tree (P4C_SRC/backends/tofino/bf-p4c/
#            p4include). Nothing is written.
#
# -D arguments go to every compiler: -DK=32 (elements per packet; K = 64 by
# default, on Tofino 1 with the values in two passes; another K in one),
# -DSLOTS=4096,
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
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
}

for arg in "$@"; do
    case $arg in
        v1model|tna|check) targets+=("$arg") ;;
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
    local target=${TOFINO_TARGET:-tofino} arch=tna tk=()
    [ "$target" = tofino2 ] && arch=t2na
    # Tofino 1 fits K = 64, the protocol's, only with the values in two
    # passes (p4/README.md, "TNA resources"): K = 64 (the default, or given)
    # is built so there; another K in one pass.
    local k
    k=$(printf '%s\n' ${defines[@]+"${defines[@]}"} | sed -n 's/^-D\(INAGG_\)\{0,1\}K=//p' | tail -n 1)
    if [ "$target" = tofino ] && [ "${k:-64}" = 64 ]; then
        tk=(-DINAGG_SPLIT_VALUES)
        echo "tna: K = 64 on Tofino 1, the values in two passes (-DINAGG_SPLIT_VALUES)"
    fi
    if command -v bf-p4c >/dev/null 2>&1; then
        mkdir -p "$dir"
        echo "tna: bf-p4c --target $target --arch $arch $src -> $dir"
        bf-p4c --std p4-16 --target "$target" --arch "$arch" -g ${tk[@]+"${tk[@]}"} ${defines[@]+"${defines[@]}"} \
            -o "$dir" --bf-rt-schema "$dir/bf-rt.json" \
            --p4runtime-files "$dir/inagg.p4info.txt" "$src" || return
        # The compiler's own resource report, per stage and in total.
        if command -v python3 >/dev/null 2>&1; then
            python3 "$here/resources.py" "$dir"
        fi
    else
        skip="bf-p4c is not on PATH (it comes with Intel's Tofino SDE, or with p4c built with its Tofino back end)"
    fi
}

# The Tofino architecture files for p4test: TNA_P4INCLUDE, or where p4c
# keeps them (an install's share/p4c/p4include, a build tree's p4include,
# the source tree).
tna_include() {
    local p4test dir
    p4test=$(command -v p4test) || return 1
    for dir in ${TNA_P4INCLUDE:-} \
        "$(dirname "$p4test")/../share/p4c/p4include" \
        "$(dirname "$p4test")/p4include" \
        ${P4C_SRC:+"$P4C_SRC/backends/tofino/bf-p4c/p4include"} \
        "$(dirname "$p4test")/../backends/tofino/bf-p4c/p4include"; do
        if [ -f "$dir/tna.p4" ]; then
            echo "$dir"
            return 0
        fi
    done
    return 1
}

build_check() {
    if ! command -v p4test >/dev/null 2>&1; then
        skip="p4test is not on PATH (it comes with p4c)"
        return 0
    fi
    echo "check: p4test $here/v1model/inagg.p4"
    p4test --std p4-16 ${defines[@]+"${defines[@]}"} "$here/v1model/inagg.p4" || return
    local tna
    if ! tna=$(tna_include); then
        echo "check: p4/tna not checked: no tna.p4 in TNA_P4INCLUDE, beside p4test or in P4C_SRC"
        return 0
    fi
    echo "check: p4test -I $tna -D__TARGET_TOFINO__=1 $here/tna/inagg.p4"
    p4test --std p4-16 -I "$tna" -D__TARGET_TOFINO__=1 ${defines[@]+"${defines[@]}"} \
        "$here/tna/inagg.p4"
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
        if [ "$target" = check ]; then
            echo "$target: p4test accepted the programs"
        else
            echo "$target: built into $out/$target"
        fi
    else
        failed=$((failed + 1))
        echo "$target: FAILED (compiler exit status $status)" >&2
    fi
done

echo "p4/build.sh: $built built, $skipped skipped, $failed failed"
[ "$failed" -eq 0 ]
