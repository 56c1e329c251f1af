#!/usr/bin/env bash
# End-to-end test on bmv2: compile p4/v1model, start simple_switch_grpc on
# veth pairs whose other ends sit in network namespaces made here, program
# the switch with `inagg ctl --target bmv2`, and all-reduce with one
# `inagg agent` per namespace (int32 exact, then float32), checking every
# result; then replay the conformance vectors (tests/conformance/) on the
# switch's ports as raw frames with `inagg conformance --target bmv2`.
#
#   tests/bmv2/run.sh                 # 3 workers, K = 64, 100000 elements
#   WORKERS=4 LEN=1000000 tests/bmv2/run.sh
#
#        ns ibh<id>w0        ns ibh<id>w1        ns ibh<id>w2
#        veth0 10.0.0.1      veth0 10.0.0.2      veth0 10.0.0.3
#        02:00:00:00:00:01   02:00:00:00:00:02   02:00:00:00:00:03
#             |                   |                   |
#        ibs<id>w0 (port 1)  ibs<id>w1 (port 2)  ibs<id>w2 (port 3)
#        +-------------- simple_switch_grpc ---------------+
#        aggregation address 10.0.0.254:47000 (static neighbour
#        02:00:00:00:00:fe in every namespace), P4Runtime on 127.0.0.1
#
# Needs p4c-bm2-ss (or p4c), simple_switch_grpc, iproute2 and root. Where
# any is missing it prints "skipped: <what>" and exits 0, so CI without them
# stays green. Everything it creates (namespaces, veth pairs, the switch
# process, a temporary directory) is removed on exit.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
name="tests/bmv2/run.sh"

skip() {
    echo "$name: skipped: $*"
    exit 0
}

if ! command -v p4c-bm2-ss >/dev/null 2>&1 && ! command -v p4c >/dev/null 2>&1; then
    skip "p4c not on PATH (nor p4c-bm2-ss)"
fi
command -v simple_switch_grpc >/dev/null 2>&1 || skip "simple_switch_grpc not on PATH"
command -v ip >/dev/null 2>&1 || skip "ip not on PATH (iproute2)"
[ "$(id -u)" -eq 0 ] || skip "not root (network namespaces and veth pairs need it)"

workers=${WORKERS:-3}
k=${K:-64}
len=${LEN:-100000}
pool=${POOL:-256}
grpc_port=${GRPC_PORT:-$((20000 + $$ % 20000))}
grpc="127.0.0.1:$grpc_port"
id=$(( $$ % 100000 ))
tmp=$(mktemp -d "${TMPDIR:-/tmp}/inagg-bmv2.XXXXXX")
switch_pid=""
namespaces=()
switch_ports=()

cleanup() {
    local status=$?
    if [ -n "$switch_pid" ]; then
        kill "$switch_pid" 2>/dev/null || true
        wait "$switch_pid" 2>/dev/null || true
    fi
    for ns in ${namespaces[@]+"${namespaces[@]}"}; do ip netns del "$ns" 2>/dev/null || true; done
    for p in ${switch_ports[@]+"${switch_ports[@]}"}; do ip link del "$p" 2>/dev/null || true; done
    if [ "$status" -ne 0 ] && [ -f "$tmp/switch.log" ]; then
        echo "$name: last lines of the switch log:" >&2
        tail -n 30 "$tmp/switch.log" >&2 || true
    fi
    rm -rf "$tmp"
    exit "$status"
}
trap cleanup EXIT INT TERM

fail() {
    echo "$name: FAILED: $*" >&2
    echo "0 passed, 1 failed"
    exit 1
}

# 1. The program and the control plane.
echo "$name: building p4/v1model (K=$k) and inagg"
P4_BUILD_DIR="$tmp/p4" K="$k" "$repo/p4/build.sh" v1model
p4info="$tmp/p4/v1model/inagg.p4info.bin"
json="$tmp/p4/v1model/inagg.json"
[ -f "$p4info" ] && [ -f "$json" ] || fail "p4/build.sh did not produce $p4info and $json"
(cd "$repo" && cargo build --release --quiet)
inagg="$repo/target/release/inagg"

# 2. Namespaces and veth pairs; the topology file for the control plane.
topology="$tmp/topology.toml"
echo "[workers]" >"$topology"
ifaces=()
for ((w = 0; w < workers; w++)); do
    ns="ibh${id}w$w"
    sw="ibs${id}w$w"
    host="ibh${id}w$w"
    addr="10.0.0.$((w + 1))"
    mac=$(printf "02:00:00:00:00:%02x" $((w + 1)))
    ip netns add "$ns"
    namespaces+=("$ns")
    ip link add "$sw" type veth peer name "$host"
    switch_ports+=("$sw")
    ip link set "$host" netns "$ns"
    ip -n "$ns" link set "$host" name veth0
    ip -n "$ns" link set veth0 address "$mac"
    ip -n "$ns" addr add "$addr/24" dev veth0
    ip -n "$ns" link set veth0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" neigh replace 10.0.0.254 lladdr 02:00:00:00:00:fe dev veth0 nud permanent
    ip link set "$sw" up
    sysctl -qw "net.ipv6.conf.$sw.disable_ipv6=1" 2>/dev/null || true
    if command -v ethtool >/dev/null 2>&1; then
        ip netns exec "$ns" ethtool -K veth0 tx off >/dev/null 2>&1 || true
        ethtool -K "$sw" tx off >/dev/null 2>&1 || true
    fi
    ifaces+=(-i "$((w + 1))@$sw")
    echo "\"$addr\" = { port = $((w + 1)), mac = \"$mac\" }" >>"$topology"
done

# 3. The switch, no program yet, with priority queues.
echo "$name: starting simple_switch_grpc on $grpc"
simple_switch_grpc --device-id 0 "${ifaces[@]}" --no-p4 \
    -- --grpc-server-addr "$grpc" --priority-queues 8 >"$tmp/switch.log" 2>&1 &
switch_pid=$!
for ((i = 0; i < 100; i++)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$grpc_port") 2>/dev/null; then break; fi
    kill -0 "$switch_pid" 2>/dev/null || fail "simple_switch_grpc exited (log above)"
    sleep 0.1
done

ctl() {
    "$inagg" ctl --target bmv2 --addr "$grpc" --topology "$topology" "$@"
}

# 4. Program it: push the pipeline, install the job.
ctl --p4info "$p4info" --bmv2-json "$json" info || fail "pushing the pipeline"
worker_list=$(seq -s, -f "10.0.0.%g:5000" 1 "$workers")
ctl job create --id 1 --workers "$worker_list" --pool-base 0 --pool-size "$pool" \
    --elements "$k" || fail "creating the job"
ctl job show 1

# 5. All-reduce, one agent per namespace.
passed=0
for dtype in i32 f32; do
    pids=()
    for ((w = 0; w < workers; w++)); do
        ip netns exec "ibh${id}w$w" "$inagg" agent --switch 10.0.0.254:47000 \
            --bind "10.0.0.$((w + 1)):5000" --job 1 --worker "$w" --workers "$workers" \
            --pool-size "$pool" --elements "$k" --dtype "$dtype" --len "$len" \
            --verify --json --timeout 20 >"$tmp/agent-$dtype-$w.json" 2>"$tmp/agent-$dtype-$w.err" &
        pids+=($!)
    done
    for ((w = 0; w < workers; w++)); do
        if ! wait "${pids[$w]}"; then
            cat "$tmp/agent-$dtype-$w.err" >&2
            ctl counters >&2 || true
            fail "$dtype all-reduce: worker $w"
        fi
        grep -q '"verified": *true' "$tmp/agent-$dtype-$w.json" ||
            fail "$dtype all-reduce: worker $w's result did not verify"
    done
    echo "$name: $dtype all-reduce of $len elements over $workers workers verified"
    passed=$((passed + 1))
done
ctl counters

# 6. Remove the job; the switch holds nothing after.
ctl job delete 1
[ "$(ctl --json job list | tr -d ' \n')" = "[]" ] || fail "job 1 still listed after delete"
passed=$((passed + 1))

# 7. The conformance vectors on the wire. They use K = 8, so a second build;
#    a second switch, in a namespace of its own that also holds the other
#    ends of its ports, where `inagg conformance` sends every vector's packets
#    as raw frames and captures what the switch sends back.
kill "$switch_pid" 2>/dev/null || true
wait "$switch_pid" 2>/dev/null || true
switch_pid=""
echo "$name: building p4/v1model (K=8) for the conformance vectors"
P4_BUILD_DIR="$tmp/p4-k8" K=8 "$repo/p4/build.sh" v1model
cns="ibc$id"
ip netns add "$cns"
namespaces+=("$cns")
ip -n "$cns" link set lo up
ctop="$tmp/conformance-topology.toml"
"$inagg" conformance "$repo/tests/conformance" --print-topology >"$ctop"
cifaces=()
cpairs=()
for p in $(sed -n 's/^# ports: //p' "$ctop" | tr ',' ' '); do
    ip -n "$cns" link add "cs$p" type veth peer name "ch$p"
    ip -n "$cns" link set "cs$p" up
    ip -n "$cns" link set "ch$p" up
    ip netns exec "$cns" sysctl -qw "net.ipv6.conf.cs$p.disable_ipv6=1" "net.ipv6.conf.ch$p.disable_ipv6=1" 2>/dev/null || true
    cifaces+=(-i "$p@cs$p")
    cpairs+=("ch$p=$p")
done
ip netns exec "$cns" simple_switch_grpc --device-id 0 "${cifaces[@]}" --no-p4 \
    -- --grpc-server-addr "$grpc" --priority-queues 8 >"$tmp/switch.log" 2>&1 &
switch_pid=$!
for ((i = 0; i < 100; i++)); do
    if ip netns exec "$cns" bash -c "exec 3<>/dev/tcp/127.0.0.1/$grpc_port" 2>/dev/null; then break; fi
    kill -0 "$switch_pid" 2>/dev/null || fail "simple_switch_grpc (conformance) exited (log above)"
    sleep 0.1
done
ip netns exec "$cns" "$inagg" conformance "$repo/tests/conformance" \
    --target bmv2 --addr "$grpc" --topology "$ctop" \
    --p4info "$tmp/p4-k8/v1model/inagg.p4info.bin" --bmv2-json "$tmp/p4-k8/v1model/inagg.json" \
    --ports "$(IFS=,; echo "${cpairs[*]}")" \
    --switch 10.0.0.100:47000 --switch-mac 02:5e:00:00:00:01 ||
    fail "conformance vectors on bmv2"
passed=$((passed + 1))

echo "$name: bmv2 end to end passed"
echo "$passed passed, 0 failed"
