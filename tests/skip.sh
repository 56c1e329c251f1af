# Shared by the shell suites (sourced, not run): `report_skip SUITE REASON`
# says what the suite cannot run here and why, and appends the line
# `SUITE<TAB>SCRIPT<TAB>REASON` to $INAGG_SKIP_LOG when it is set (the table
# scripts/test ends with); a suite that INAGG_REQUIRE lists fails instead.
# The Rust suites do the same through inagg_testbed::skip.
#
# The sourcing script sets `name` first.

report_skip() {
    local suite=$1 require=${INAGG_REQUIRE:-}
    shift
    case ",${require// /}," in
    *",$suite,"*)
        echo "$name: FAILED: the $suite suite is required here (INAGG_REQUIRE) but cannot run: $*" >&2
        exit 1
        ;;
    esac
    echo "$name: skipped: $*"
    if [ -n "${INAGG_SKIP_LOG:-}" ]; then
        printf '%s\t%s\t%s\n' "$suite" "$name" "$*" >>"$INAGG_SKIP_LOG"
    fi
}
