# Shared by tests/bmv2/run.sh and tests/bmv2/bench.sh (sourced, not run):
# the checks for the tools, a temporary directory and a cleanup trap that
# removes every namespace, link and process made here, worker namespaces,
# and simple_switch_grpc started on veth ports.
#
# The sourcing script sets `name` first.

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

# shellcheck source=tests/skip.sh
. "$repo/tests/skip.sh"
skip() {
    report_skip bmv2 "$*"
    exit 0
}

if ! command -v p4c-bm2-ss >/dev/null 2>&1 && ! command -v p4c >/dev/null 2>&1; then
    skip "p4c not on PATH (nor p4c-bm2-ss)"
fi
command -v simple_switch_grpc >/dev/null 2>&1 || skip "simple_switch_grpc not on PATH"
command -v ip >/dev/null 2>&1 || skip "ip not on PATH (iproute2)"
command -v iptables >/dev/null 2>&1 || skip "iptables not on PATH (the loss section needs it)"
[ "$(id -u)" -eq 0 ] || skip "not root (network namespaces and veth pairs need it)"

id=$(( $$ % 100000 ))
port_base=$((20000 + ($$ % 2000) * 8))
tmp=$(mktemp -d "${TMPDIR:-/tmp}/inagg-bmv2.XXXXXX")
pids=()
namespaces=()
links=()
passed=0

cleanup() {
    local status=$?
    for pid in ${pids[@]+"${pids[@]}"}; do kill "$pid" 2>/dev/null || true; done
    for pid in ${pids[@]+"${pids[@]}"}; do wait "$pid" 2>/dev/null || true; done
    for ns in ${namespaces[@]+"${namespaces[@]}"}; do ip netns del "$ns" 2>/dev/null || true; done
    for l in ${links[@]+"${links[@]}"}; do ip link del "$l" 2>/dev/null || true; done
    if [ "$status" -ne 0 ]; then
        for log in "$tmp"/*.log; do
            [ -f "$log" ] || continue
            echo "$name: last lines of $(basename "$log"):" >&2
            tail -n 15 "$log" >&2 || true
        done
    fi
    rm -rf "$tmp"
    exit "$status"
}
trap cleanup EXIT INT TERM

fail() {
    echo "$name: FAILED: $*" >&2
    echo "$passed passed, 1 failed"
    exit 1
}

pass() {
    passed=$((passed + 1))
    echo "$name: ok: $*"
}

# Makes $1 worker namespaces ibh<id>w0..: veth0 10.0.0.(w+1)/24 towards a
# switch port (its other end, ibs<id>w<w>, stays here), MAC
# 02:00:00:00:00:(w+1), the switch's aggregation address 10.0.0.254 as a
# static neighbour; and mgmt 192.168.77.(w+1)/24 on a bridge here
# (192.168.77.254), for what is not data (a controller).
make_hosts() {
    mgmt="ibm$id"
    ip link add "$mgmt" type bridge
    links+=("$mgmt")
    ip addr add 192.168.77.254/24 dev "$mgmt"
    ip link set "$mgmt" up
    for ((w = 0; w < $1; w++)); do
        ns="ibh${id}w$w"
        ip netns add "$ns"
        namespaces+=("$ns")
        ip -n "$ns" link set lo up
        ip link add "ibs${id}w$w" type veth peer name "ibx${id}w$w"
        links+=("ibs${id}w$w")
        ip link set "ibx${id}w$w" netns "$ns"
        ip -n "$ns" link set "ibx${id}w$w" name veth0
        ip -n "$ns" link set veth0 address "$(printf "02:00:00:00:00:%02x" $((w + 1)))"
        ip -n "$ns" addr add "10.0.0.$((w + 1))/24" dev veth0
        ip -n "$ns" link set veth0 up
        ip -n "$ns" neigh replace 10.0.0.254 lladdr 02:00:00:00:00:fe dev veth0 nud permanent
        ip link set "ibs${id}w$w" up
        sysctl -qw "net.ipv6.conf.ibs${id}w$w.disable_ipv6=1" 2>/dev/null || true
        ip link add "ibm${id}w$w" type veth peer name "ibn${id}w$w"
        links+=("ibm${id}w$w")
        ip link set "ibn${id}w$w" netns "$ns"
        ip -n "$ns" link set "ibn${id}w$w" name mgmt
        ip -n "$ns" addr add "192.168.77.$((w + 1))/24" dev mgmt
        ip -n "$ns" link set mgmt up
        ip link set "ibm${id}w$w" master "$mgmt" up
    done
}

# Starts simple_switch_grpc in namespace $1 (or here with "-") with P4Runtime
# on port $2 and Thrift on $3, ports "$4..." as -i arguments; its log is
# $tmp/$5.log. Waits until P4Runtime answers; its pid is left in $switch_pid.
start_switch() {
    local ns=$1 grpc_port=$2 thrift=$3 log=$5 exec=()
    local -a ports=($4)
    [ "$ns" = - ] || exec=(ip netns exec "$ns")
    local args=()
    for p in "${ports[@]}"; do args+=(-i "$p"); done
    # A bmv2 built without Thrift has no --thrift-port (P4Runtime is all
    # the tests use).
    local thrift_args=()
    if simple_switch_grpc --help 2>&1 | grep -q -- --thrift-port; then
        thrift_args=(--thrift-port "$thrift")
    fi
    "${exec[@]}" simple_switch_grpc --device-id 0 "${args[@]}" "${thrift_args[@]}" --no-p4 \
        -- --grpc-server-addr "127.0.0.1:$grpc_port" --priority-queues 8 "${grpc_tls[@]}" \
        >"$tmp/$log.log" 2>&1 &
    pids+=($!)
    local pid=$!
    switch_pid=$pid
    for ((i = 0; i < 200; i++)); do
        if "${exec[@]}" bash -c "exec 3<>/dev/tcp/127.0.0.1/$grpc_port" 2>/dev/null; then return 0; fi
        kill -0 "$pid" 2>/dev/null || fail "simple_switch_grpc ($log) exited"
        sleep 0.1
    done
    fail "simple_switch_grpc ($log) did not open 127.0.0.1:$grpc_port"
}

# With TLS=1, every control channel speaks TLS: a CA and a certificate for
# 127.0.0.1 and the controller's address $1 are made with openssl; the P4
# Runtime servers want a client certificate (mutual TLS) and the
# controller's API a server one. Every inagg command finds its files in
# the environment (INAGG_SWITCH_TLS_*, INAGG_TLS_CA). Sets grpc_tls (the
# switches' options) and api_tls (the controller's: --insecure in clear,
# as its address is off loopback).
setup_tls() {
    grpc_tls=()
    api_tls=(--insecure)
    [ "${TLS:-0}" = 1 ] || return 0
    command -v openssl >/dev/null 2>&1 || skip "openssl not on PATH (TLS=1 makes certificates with it)"
    local d="$tmp/pki"
    mkdir -p "$d"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
        -subj /CN=inagg-bmv2-ca -keyout "$d/ca.key" -out "$d/ca.pem" 2>/dev/null
    local who
    for who in server client; do
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$who" \
            -keyout "$d/$who.key" -out "$d/$who.csr" 2>/dev/null
        openssl x509 -req -in "$d/$who.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -days 1 \
            -out "$d/$who.pem" -extfile <(echo "subjectAltName=IP:127.0.0.1,IP:${1%:*}") 2>/dev/null
    done
    grpc_tls=(--grpc-server-ssl --grpc-server-cacert "$d/ca.pem" --grpc-server-cert "$d/server.pem"
        --grpc-server-key "$d/server.key" --grpc-server-with-client-auth)
    api_tls=(--tls-cert "$d/server.pem" --tls-key "$d/server.key")
    export INAGG_SWITCH_TLS_CA="$d/ca.pem" INAGG_SWITCH_TLS_CERT="$d/client.pem" \
        INAGG_SWITCH_TLS_KEY="$d/client.key" INAGG_TLS_CA="$d/ca.pem"
    echo "$name: TLS on every control channel (mutual TLS to the switches)"
}

# The value of key $2 in the JSON object in file $1.
json_field() {
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}

# Runs one agent per worker of job $1 ($2 workers, members 0..$2-1 in
# namespaces w0..), dtype $3, extra agent flags after, with the caller's
# $inagg, ctl, $pool, $k and $len (and $agent_timeout, 30 s by default); fails
# on any error or unverified result. Sums the agents' retransmissions into
# $retransmissions.
retransmissions=0
allreduce() {
    local job=$1 n=$2 dtype=$3
    shift 3
    local agents=() w
    for ((w = 0; w < n; w++)); do
        ip netns exec "ibh${id}w$w" "$inagg" agent --switch 10.0.0.254:47000 \
            --bind "10.0.0.$((w + 1)):5000" --job "$job" --worker "$w" --workers "$n" \
            --pool-size "$pool" --elements "$k" --dtype "$dtype" --len "$len" \
            --verify --json --timeout "${agent_timeout:-30}" "$@" >"$tmp/agent-$w.json" 2>"$tmp/agent-$w.err" &
        agents+=($!)
    done
    retransmissions=0
    for ((w = 0; w < n; w++)); do
        if ! wait "${agents[$w]}"; then
            cat "$tmp/agent-$w.err" >&2
            ctl counters >&2 || true
            fail "job $job, $dtype all-reduce: worker $w"
        fi
        grep -q '"verified": *true' "$tmp/agent-$w.json" ||
            fail "job $job, $dtype: worker $w's result did not verify"
        retransmissions=$((retransmissions + $(json_field "$tmp/agent-$w.json" retransmissions)))
    done
}
