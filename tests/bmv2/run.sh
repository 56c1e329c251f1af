#!/usr/bin/env bash
# End-to-end test on bmv2: compile p4/v1model (and check that other K and
# SLOTS compile, and that p4test takes both programs), start
# simple_switch_grpc on veth pairs whose other ends sit in network
# namespaces made here, program it with `inagg ctl --target bmv2`, and
# all-reduce with one `inagg agent` per namespace:
#
#   1. int32 (exact) and float32 all-reduces with 2, 3 and 4 workers;
#   2. the same under loss: iptables in two workers' namespaces drops every
#      Nth datagram each way (contributions and results), so agents query
#      the switch and resend what it lacks, and it answers with statuses
#      and stored results; the job's query and resend counters must move;
#   3. the controller: `inagg controller --target bmv2` admits two jobs by
#      name, agents register over a management network and all-reduce; a
#      job deleted and re-created starts on clean slots; the controller
#      restarted re-installs its jobs from its state; the switch restarted
#      mid-all-reduce: the controller re-installs, the agents resume exactly;
#   4. an aggregation tree: a second simple_switch_grpc as the leaf of a job
#      whose root is the first, one all-reduce across both;
#   5. the conformance vectors (tests/conformance/) replayed as raw frames on
#      a third switch's ports with `inagg conformance --target bmv2`.
#
#   tests/bmv2/run.sh                      # all of it
#   TLS=1 tests/bmv2/run.sh                # the same, every control channel over TLS
#   LEN=300000 WORKERS="4" tests/bmv2/run.sh
#
#        ns ibh<id>w0 ... w3:  veth0 10.0.0.(w+1)/24, MAC 02:00:00:00:00:0(w+1)
#                              mgmt  192.168.77.(w+1)/24 (to the controller)
#             |   (switch port w+1)
#        +------ simple_switch_grpc "root" (P4Runtime 127.0.0.1:GRPC) ------+
#        aggregation address 10.0.0.254:47000 (static neighbour
#        02:00:00:00:00:fe in every namespace); port 9 to the leaf
#
# Needs p4c-bm2-ss (or p4c), simple_switch_grpc, iproute2, iptables and
# root. Where any is missing it prints "skipped: <what>" and exits 0, so CI
# without them stays green. Everything it creates (namespaces, veth pairs,
# the switch processes, a temporary directory) is removed on exit.
set -euo pipefail

name="tests/bmv2/run.sh"
# shellcheck source=tests/bmv2/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
counts=${WORKERS:-2 3 4}
k=${K:-64}
len=${LEN:-100000}
pool=${POOL:-256}

# --- 1. The programs and the control plane --------------------------------
echo "$name: building p4/v1model (K=$k) and inagg"
P4_BUILD_DIR="$tmp/p4" K="$k" "$repo/p4/build.sh" v1model >/dev/null
p4info="$tmp/p4/v1model/inagg.p4info.bin"
json="$tmp/p4/v1model/inagg.json"
[ -f "$p4info" ] && [ -f "$json" ] || fail "p4/build.sh did not produce $p4info and $json"
for setting in "K=32 SLOTS=1024" "K=256 SLOTS=16384" "K=8 SLOTS=64"; do
    env $setting P4_BUILD_DIR="$tmp/p4-other" "$repo/p4/build.sh" v1model >/dev/null ||
        fail "p4/v1model does not compile with $setting"
done
pass "p4/v1model compiles with K=$k and with K=32/SLOTS=1024, K=256/SLOTS=16384, K=8/SLOTS=64"
if command -v p4test >/dev/null 2>&1; then
    "$repo/p4/build.sh" check >"$tmp/p4test.out" 2>&1 || { cat "$tmp/p4test.out" >&2; fail "p4test"; }
    grep -q "p4/tna not checked" "$tmp/p4test.out" && echo "$name: $(grep 'not checked' "$tmp/p4test.out")"
    pass "p4test takes both programs"
fi
(cd "$repo" && cargo build --release --quiet)
inagg="$repo/target/release/inagg"

max_workers=4
make_hosts "$max_workers"
token="bmv2-run-$id"
ctl_addr="192.168.77.254:$((port_base + 7))"
setup_tls "$ctl_addr"

# --- The root switch: ports 1-4 to the workers, 9 to the leaf switch. ------
leaf_link="ibl$id"
ip link add "${leaf_link}a" type veth peer name "${leaf_link}b"
links+=("${leaf_link}a")
ip link set "${leaf_link}a" up
ip link set "${leaf_link}b" up
grpc_port=$port_base
grpc="127.0.0.1:$grpc_port"
echo "$name: starting simple_switch_grpc on $grpc"
root_ports="1@ibs${id}w0 2@ibs${id}w1 3@ibs${id}w2 4@ibs${id}w3 9@${leaf_link}a"
start_switch - "$grpc_port" $((port_base + 1)) "$root_ports" root
root_pid=$switch_pid
topology="$tmp/topology.toml"
{
    echo "[workers]"
    for ((w = 0; w < max_workers; w++)); do
        printf '"10.0.0.%d" = { port = %d, mac = "02:00:00:00:00:%02x" }\n' $((w + 1)) $((w + 1)) $((w + 1))
    done
    echo '"10.0.0.253" = { port = 9, mac = "02:00:00:00:01:fe" }'
} >"$topology"

ctl() {
    "$inagg" ctl --target bmv2 --addr "$grpc" --topology "$topology" "$@"
}

ctl --p4info "$p4info" --bmv2-json "$json" info >/dev/null || fail "pushing the pipeline"
pass "pipeline pushed (SetForwardingPipelineConfig)"

# --- 2. All-reduces with 2, 3 and 4 workers -------------------------------
for n in $counts; do
    job=$((10 + n))
    workers=$(seq -s, -f "10.0.0.%g:5000" 1 "$n")
    ctl job create --id "$job" --workers "$workers" --pool-base 0 --pool-size "$pool" \
        --elements "$k" >/dev/null || fail "creating job $job"
    for dtype in i32 f32; do
        start=$(date +%s.%N)
        allreduce "$job" "$n" "$dtype"
        secs=$(python3 -c "import sys; print(round($(date +%s.%N) - $start, 2))")
        pass "$dtype all-reduce of $len elements over $n workers verified ($secs s, $retransmissions retransmissions)"
    done
    ctl job delete "$job" >/dev/null
done
[ "$(ctl --json job list | tr -d ' \n')" = "[]" ] || fail "jobs still listed after delete"
pass "every job deleted; the switch lists none"

# --- 2b. Priority classes: class 5 on queue 7 (bmv2's --priority-queues 8,
#     served first), an all-reduce tagged class 5 through it, the map read
#     back, then cleared. A queue bmv2 lacks would drop every result. -------
ctl priority 5 7 >/dev/null || fail "mapping class 5 to queue 7"
ctl priority 6 3 >/dev/null || fail "mapping class 6 to queue 3"
map=$(ctl --json queues | python3 -c 'import json,sys; print(sorted((m["class"], m["queue"]) for m in json.load(sys.stdin)["map"]))')
[ "$map" = "[(5, 7), (6, 3)]" ] || fail "priority_to_queue reads back $map"
ctl job create --id 30 --workers 10.0.0.1:5000,10.0.0.2:5000 --pool-base 0 --pool-size "$pool" \
    --elements "$k" >/dev/null || fail "creating job 30"
allreduce 30 2 i32 --priority 5
ctl job delete 30 >/dev/null
ctl priority 5 0 >/dev/null && ctl priority 6 0 >/dev/null || fail "moving classes 5 and 6 back to queue 0"
[ "$(ctl --json queues | python3 -c 'import json,sys; print(json.load(sys.stdin)["map"])')" = "[]" ] ||
    fail "priority_to_queue still has entries"
pass "class 5 on queue 7: an all-reduce tagged class 5 verified; the map read back and cleared"

# --- 3. Under loss: iptables drops every 9th datagram from the switch and
#     every 11th to it in workers 0 and 1's namespaces. ---------------------
for w in 0 1; do
    ip netns exec "ibh${id}w$w" iptables -A INPUT -p udp --dport 5000 \
        -m statistic --mode nth --every 9 --packet 0 -j DROP
    ip netns exec "ibh${id}w$w" iptables -A OUTPUT -p udp --dport 47000 \
        -m statistic --mode nth --every 11 --packet 0 -j DROP
done
ctl job create --id 20 --workers 10.0.0.1:5000,10.0.0.2:5000,10.0.0.3:5000 --pool-base 0 \
    --pool-size 64 --elements "$k" >/dev/null || fail "creating job 20"
for dtype in i32 f32; do
    pool=64 allreduce 20 3 "$dtype"
    [ "$retransmissions" -gt 0 ] || fail "no retransmission under loss ($dtype)"
    pass "$dtype all-reduce over 3 workers under loss verified ($retransmissions retransmissions)"
done
ctl --json job show 20 >"$tmp/job20.json"
python3 - "$tmp/job20.json" <<'EOF' || fail "job 20's counters do not show queries answered and results resent"
import json, sys
job = json.load(open(sys.argv[1]))
c = job.get("counters", job)
resent = c.get("resent_results", 0)
queries = c.get("queries", 0)
print("tests/bmv2/run.sh: job 20 counters:", {k: v for k, v in c.items() if isinstance(v, int) and v})
sys.exit(0 if resent > 0 and queries > 0 else 1)
EOF
pass "the switch answered the agents' queries and resent stored results to workers whose result was lost"
ctl job delete 20 >/dev/null
for w in 0 1; do ip netns exec "ibh${id}w$w" iptables -F; done

# --- 4. The controller ------------------------------------------------------
state="$tmp/controller.redb"
start_controller() {
    "$inagg" controller --target bmv2 --switch "$grpc" --topology "$topology" \
        --p4info "$p4info" --bmv2-json "$json" --switch-data 10.0.0.254:47000 --listen "$ctl_addr" --token "$token" "${api_tls[@]}" \
        --state "$state" --reconcile-ms 200 >>"$tmp/controller.log" 2>&1 &
    controller_pid=$!
    pids+=($controller_pid)
    for ((i = 0; i < 100; i++)); do
        if (exec 3<>"/dev/tcp/${ctl_addr%:*}/${ctl_addr#*:}") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    fail "the controller did not listen on $ctl_addr"
}
cctl() {
    "$inagg" ctl --controller "$ctl_addr" --token "$token" "$@"
}
# Ranks 0..$3-1 of job $1 in namespaces from $2 on, dtype $4, $5
# elements (default $len).
controller_allreduce() {
    local job=$1 first=$2 n=$3 dtype=$4 elements=${5:-$len} agents=() r
    for ((r = 0; r < n; r++)); do
        local w=$((first + r))
        ip netns exec "ibh${id}w$w" "$inagg" agent --controller "$ctl_addr" --token "$token" \
            --job "$job" --rank "$r" --bind "10.0.0.$((w + 1)):5000" --dtype "$dtype" \
            --len "$elements" --verify --json --timeout 30 >"$tmp/agent-$w.json" 2>"$tmp/agent-$w.err" &
        agents+=($!)
    done
    for ((r = 0; r < n; r++)); do
        local w=$((first + r))
        wait "${agents[$r]}" || { cat "$tmp/agent-$w.err" >&2; cctl job list >&2 || true; fail "controller job $job, rank $r"; }
        grep -q '"verified": *true' "$tmp/agent-$w.json" || fail "controller job $job: rank $r did not verify"
    done
}
start_controller
cctl job create --name alpha --count 2 --slots 64 >/dev/null || fail "creating job alpha"
cctl job create --name beta --count 2 --slots 128 >/dev/null || fail "creating job beta"
controller_allreduce alpha 0 2 i32 &
a=$!
controller_allreduce beta 2 2 f32 &
b=$!
wait "$a" || fail "job alpha through the controller"
wait "$b" || fail "job beta through the controller"
pass "the controller placed alpha and beta on the switch; both all-reduced at once"
cctl job delete alpha >/dev/null || fail "deleting alpha"
cctl job create --name alpha --count 2 --slots 64 >/dev/null || fail "re-creating alpha"
controller_allreduce alpha 0 2 i32
pass "alpha deleted and re-created starts on clean slots"
# The switch restarts in the middle of an all-reduce, its tables and
# program gone: the controller pushes the pipeline and installs alpha
# again, and the agents resume (a member that holds a round's result
# announces it to the switch) with exact sums. The restart comes once the
# switch has sent alpha (its job of 64 slots) some results, whatever the
# machine's speed: an all-reduce of 8 x LEN elements has many more to go.
: >"$tmp/agent-0.json"
controller_allreduce alpha 0 2 i32 $((8 * len)) &
a=$!
under_way() {
    local i
    for ((i = 0; i < 600; i++)); do
        ctl --json job list 2>/dev/null | python3 -c '
import json, sys
jobs = [j for j in json.load(sys.stdin) if j["spec"]["pool_size"] == 64]
sys.exit(0 if jobs and jobs[0]["counters"]["results"] >= 64 else 1)' && return 0
        sleep 0.05
    done
    return 1
}
under_way || fail "alpha sent the switch no results (600 looks, 50 ms apart)"
[ ! -s "$tmp/agent-0.json" ] || fail "alpha finished before the switch restart"
kill "$root_pid"
wait "$root_pid" 2>/dev/null || true
start_switch - "$grpc_port" $((port_base + 1)) "$root_ports" root
root_pid=$switch_pid
wait "$a" || fail "alpha across a switch restart"
pass "the switch restarted mid-all-reduce: the controller installed alpha again, the agents resumed, sums exact"
# The controller and the switch both restart: the switch comes back empty,
# without a program; the controller pushes the pipeline and re-installs
# both jobs from its state.
kill "$controller_pid"
wait "$controller_pid" 2>/dev/null || true
kill "$root_pid"
wait "$root_pid" 2>/dev/null || true
start_switch - "$grpc_port" $((port_base + 1)) "$root_ports" root
root_pid=$switch_pid
start_controller
controller_allreduce beta 2 2 i32
controller_allreduce alpha 0 2 f32
ctl --json job list >"$tmp/jobs.json"
[ "$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$tmp/jobs.json")" = 2 ] ||
    fail "the switch does not hold both jobs after the restarts: $(cat "$tmp/jobs.json")"
pass "controller and switch restarted: the pipeline pushed again, both jobs re-installed from the state, both all-reduce"
cctl job delete alpha >/dev/null
cctl job delete beta >/dev/null
kill "$controller_pid"
wait "$controller_pid" 2>/dev/null || true

# --- 5. An aggregation tree: the leaf switch holds workers 2 and 3 (its
#     members 0 and 1), the root holds workers 0 and 1 and the leaf. The
#     leaf's aggregation address is 10.0.0.253 (MAC 02:00:00:00:01:fe): a
#     switch sends its partial sums from the address its workers send to,
#     and the root knows its members by address. -------------------------
lns="ibq$id"
ip netns add "$lns"
namespaces+=("$lns")
ip -n "$lns" link set lo up
ip link set "${leaf_link}b" netns "$lns"
ip -n "$lns" link set "${leaf_link}b" up
# Workers 2 and 3 move to the leaf: the switch ends of their data veths
# join the leaf's namespace as its ports 1 and 2, and the root restarts
# without them.
kill "$root_pid" 2>/dev/null || true
wait "$root_pid" 2>/dev/null || true
for w in 2 3; do
    ip link set "ibs${id}w$w" netns "$lns"
    ip -n "$lns" link set "ibs${id}w$w" up
    ip -n "ibh${id}w$w" neigh replace 10.0.0.253 lladdr 02:00:00:00:01:fe dev veth0 nud permanent
done
start_switch - "$grpc_port" $((port_base + 1)) "1@ibs${id}w0 2@ibs${id}w1 9@${leaf_link}a" root
root_pid=$switch_pid
leaf_grpc_port=$((port_base + 2))
start_switch "$lns" "$leaf_grpc_port" $((port_base + 3)) \
    "1@ibs${id}w2 2@ibs${id}w3 9@${leaf_link}b" leaf
ctl --p4info "$p4info" --bmv2-json "$json" info >/dev/null || fail "pushing the pipeline (root)"
leaf_topology="$tmp/leaf-topology.toml"
cat >"$leaf_topology" <<EOF
[workers]
"10.0.0.3" = { port = 1, mac = "02:00:00:00:00:03" }
"10.0.0.4" = { port = 2, mac = "02:00:00:00:00:04" }
"10.0.0.254" = { port = 9, mac = "02:00:00:00:00:fe" }
EOF
leaf_ctl() {
    ip netns exec "$lns" "$inagg" ctl --target bmv2 --addr "127.0.0.1:$leaf_grpc_port" \
        --topology "$leaf_topology" "$@"
}
leaf_ctl --p4info "$p4info" --bmv2-json "$json" info >/dev/null || fail "pushing the pipeline (leaf)"
ctl job create --id 30 --workers 10.0.0.1:5000,10.0.0.2:5000,10.0.0.253:47000 --pool-base 0 \
    --pool-size 64 --elements "$k" >/dev/null || fail "creating the root's job"
leaf_ctl job create --id 30 --workers 10.0.0.3:5000,10.0.0.4:5000 --pool-base 0 --pool-size 64 \
    --elements "$k" --upstream 10.0.0.254:47000/30/2 >/dev/null || fail "creating the leaf's job"
tree_agents=()
for w in 0 1 2 3; do
    member=$((w < 2 ? w : w - 2))
    switch=$((w < 2 ? 254 : 253))
    ip netns exec "ibh${id}w$w" "$inagg" agent --switch "10.0.0.$switch:47000" \
        --bind "10.0.0.$((w + 1)):5000" --job 30 --worker "$member" --tree-rank "$w" --workers 4 \
        --pool-size 64 --elements "$k" --dtype i32 --len "$len" --verify --json --timeout 30 \
        >"$tmp/agent-$w.json" 2>"$tmp/agent-$w.err" &
    tree_agents+=($!)
done
for w in 0 1 2 3; do
    wait "${tree_agents[$w]}" || { cat "$tmp/agent-$w.err" >&2; leaf_ctl counters >&2 || true; fail "tree: worker $w"; }
    grep -q '"verified": *true' "$tmp/agent-$w.json" || fail "tree: worker $w did not verify"
done
pass "one int32 all-reduce across two switches (leaf and root) verified"

# --- 6. The conformance vectors on the wire. They use K = 8, so a second
#     build; a third switch, in a namespace of its own that also holds the
#     other ends of its ports, where `inagg conformance` sends every
#     vector's packets as raw frames and captures what the switch sends back.
echo "$name: building p4/v1model (K=8) for the conformance vectors"
P4_BUILD_DIR="$tmp/p4-k8" K=8 "$repo/p4/build.sh" v1model >/dev/null
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
    cifaces+=("$p@cs$p")
    cpairs+=("ch$p=$p")
done
cgrpc_port=$((port_base + 4))
start_switch "$cns" "$cgrpc_port" $((port_base + 5)) "${cifaces[*]}" conformance
ip netns exec "$cns" "$inagg" conformance "$repo/tests/conformance" \
    --target bmv2 --addr "127.0.0.1:$cgrpc_port" --topology "$ctop" \
    --p4info "$tmp/p4-k8/v1model/inagg.p4info.bin" --bmv2-json "$tmp/p4-k8/v1model/inagg.json" \
    --ports "$(IFS=,; echo "${cpairs[*]}")" \
    --switch 10.0.0.100:47000 --switch-mac 02:5e:00:00:00:01 >"$tmp/conformance.out" 2>&1 || {
    cat "$tmp/conformance.out" >&2
    fail "conformance vectors on bmv2"
}
pass "conformance vectors on bmv2's ports: $(tail -n 1 "$tmp/conformance.out")"

echo "$name: bmv2 end to end passed"
echo "$passed passed, 0 failed"
