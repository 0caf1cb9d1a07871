#!/usr/bin/env bash
# A real two-node MPI cluster on one machine, as root, with no sshd and no global change.
#
#   bash scripts/twonode.sh up                 # create node-a, node-b and the login namespace
#   bash scripts/twonode.sh run 2+2 CMD...     # mpiexec across them: 2 ranks on node-a, 2 on node-b
#   bash scripts/twonode.sh rate 20mbit|off    # token-bucket rate limit on both veths (tc tbf)
#   bash scripts/twonode.sh down               # end every process started here, by its PID
#   bash scripts/twonode.sh check              # exit 0 if this machine can host the cluster
#
# Each node is a set of namespaces (network, UTS, mount, IPC, PID) held by one `unshare` process:
# its own hostname, its own /etc/hosts (bind-mounted inside its mount namespace only), its own
# tmpfs /dev/shm and its own PIDs. A third "login" namespace (network, UTS, mount) holds a Linux
# bridge with a veth to each node, addresses 10.77.0.0/24. mpiexec (MPICH hydra) runs in the
# login namespace with `-launcher rsh -launcher-exec WRAPPER`: the wrapper enters the named
# node's namespaces with nsenter. Ending a node's PID 1 ends every process of that node.
#
# `run` without an earlier `up` brings the cluster up and always takes it down again (trap);
# after `up`, every `run` reuses it until `down`. `run` is bounded by TWONODE_LIMIT seconds
# (default 600). Layout A+B: A ranks on node-a, B on node-b (B may be 0).
# State (PIDs, hosts file, wrapper) lives in TWONODE_STATE (default /tmp/hpcdist-twonode).
set -euo pipefail
state=${TWONODE_STATE:-/tmp/hpcdist-twonode}
limit=${TWONODE_LIMIT:-600}
nodes=(node-a node-b)
net=10.77.0

usage() {
  sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# Why the cluster cannot be built here, or nothing.
unavailable() {
  [ "$(id -u)" = 0 ] || { echo "not root"; return; }
  for tool in unshare nsenter ip; do
    command -v "$tool" >/dev/null || { echo "$tool not found"; return; }
  done
  if ! unshare --net --uts --ipc --mount --pid --fork true 2>/dev/null; then
    echo "namespaces unavailable (unshare --net --uts --ipc --mount --pid failed)"
    return
  fi
  if ! unshare --net sh -c 'ip link add t0 type bridge && ip link add v0 type veth peer name v1' \
    2>/dev/null; then
    echo "bridge or veth unavailable in a network namespace"
  fi
}

is_up() { [ -s "$state/pids" ] && kill -0 $(cat "$state/pids") 2>/dev/null; }

# The PID of a namespace holder's child (PID 1 of the node's PID namespace), once it exists.
child_of() {
  local pid=$1 i child=
  for i in $(seq 100); do
    child=$(cat "/proc/$pid/task/$pid/children" 2>/dev/null | awk '{print $1}')
    [ -n "$child" ] && [ -e "$state/ready-$2" ] && { echo "$child"; return; }
    sleep 0.05
  done
  echo "twonode: $2 did not start" >&2
  return 1
}

up() {
  local why
  why=$(unavailable)
  [ -z "$why" ] || { echo "twonode: cannot build the cluster: $why" >&2; return 1; }
  is_up && return 0
  down_quiet
  mkdir -p "$state"
  rm -f "$state"/ready-*
  {
    echo "127.0.0.1 localhost"
    echo "$net.254 login"
    echo "$net.1 node-a"
    echo "$net.2 node-b"
  } >"$state/hosts"
  local holders=() pids=() i name
  for i in 0 1; do
    name=${nodes[$i]}
    # PID 1 of the node sets it up, then sleeps until killed (then the kernel ends the rest).
    unshare --fork --kill-child --pid --mount-proc --net --uts --ipc --propagation private \
      bash -c "hostname $name && mount -t tmpfs tmpfs /dev/shm \
        && mount --bind '$state/hosts' /etc/hosts && ip link set lo up \
        && touch '$state/ready-$name' && exec sleep infinity" </dev/null >/dev/null 2>&1 &
    holders+=($!)
    disown $!
  done
  unshare --net --uts --mount --propagation private \
    bash -c "hostname login && mount --bind '$state/hosts' /etc/hosts && ip link set lo up \
      && touch '$state/ready-login' && exec sleep infinity" </dev/null >/dev/null 2>&1 &
  local login=$!
  disown $login
  echo "${holders[*]} $login" >"$state/pids"
  for i in 0 1; do
    pids+=("$(child_of "${holders[$i]}" "${nodes[$i]}")")
  done
  for i in $(seq 100); do [ -e "$state/ready-login" ] && break; sleep 0.05; done
  echo "${pids[0]}" >"$state/node-a.pid"
  echo "${pids[1]}" >"$state/node-b.pid"
  echo "$login" >"$state/login.pid"
  local L="nsenter -t $login --net --uts --mount"
  $L ip link add br0 type bridge
  $L ip addr add "$net.254/24" dev br0
  $L ip link set br0 up
  for i in 0 1; do
    name=${nodes[$i]}
    $L ip link add "veth-$name" type veth peer name eth0 netns "${pids[$i]}"
    $L ip link set "veth-$name" master br0 up
    nsenter -t "${pids[$i]}" --net ip addr add "$net.$((i + 1))/24" dev eth0
    nsenter -t "${pids[$i]}" --net ip link set eth0 up
  done
  cat >"$state/rsh" <<EOF
#!/usr/bin/env bash
# hydra's rsh launcher: rsh [OPTIONS] HOST CMD...; run CMD in HOST's namespaces.
while [ "\${1:-}" != "\${1#-}" ]; do shift; done
host=\$1; shift
pid=\$(cat "$state/\$host.pid") || { echo "twonode: unknown host \$host" >&2; exit 255; }
exec nsenter -t "\$pid" --net --uts --mount --ipc --pid --wd="\$PWD" -- bash -c "\$*"
EOF
  chmod +x "$state/rsh"
}

# End every process left in a node (a job past its limit), by PID, keeping the node's PID 1.
reap() {
  local node pid ns p
  for node in "${nodes[@]}"; do
    [ -s "$state/$node.pid" ] || continue
    pid=$(cat "$state/$node.pid")
    ns=$(readlink "/proc/$pid/ns/pid" 2>/dev/null) || continue
    for p in /proc/[0-9]*; do
      p=${p#/proc/}
      [ "$p" = "$pid" ] && continue
      [ "$(readlink "/proc/$p/ns/pid" 2>/dev/null)" = "$ns" ] && kill -9 "$p" 2>/dev/null || true
    done
  done
}

down_quiet() {
  local pid
  if [ -s "$state/pids" ]; then
    # a node's PID 1 takes only SIGKILL from outside; its holder (unshare) then exits
    for pid in $(cat "$state"/node-*.pid 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    for pid in $(cat "$state/pids"); do kill "$pid" 2>/dev/null || true; done
    for pid in $(cat "$state/pids"); do
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
      kill -9 "$pid" 2>/dev/null || true
    done
  fi
  if [ -d "$state" ]; then
    rm -f "$state"/pids "$state"/*.pid "$state"/ready-* "$state"/hosts "$state"/rsh
    rmdir "$state" 2>/dev/null || true
  fi
}

rate() {
  is_up || { echo "twonode: the cluster is not up" >&2; return 1; }
  local login node
  login=$(cat "$state/login.pid")
  for node in "${nodes[@]}"; do
    nsenter -t "$login" --net tc qdisc del dev "veth-$node" root 2>/dev/null || true
    if [ "$1" != off ]; then
      # burst: 10 ms at the rate (at least 32 KiB); packets wait up to 200 ms in the queue
      nsenter -t "$login" --net tc qdisc add dev "veth-$node" root tbf rate "$1" \
        burst "${TWONODE_BURST:-64kb}" latency 200ms
    fi
  done
}

run() {
  [ $# -ge 2 ] || usage
  local layout=$1; shift
  local a=${layout%+*} b=${layout#*+}
  [[ "$a" =~ ^[0-9]+$ && "$b" =~ ^[0-9]+$ && "$layout" == *+* ]] \
    || { echo "twonode: layout must be A+B (ranks on node-a + node-b), got '$layout'" >&2; exit 2; }
  local own=0
  if ! is_up; then
    own=1
    trap 'down_quiet' EXIT INT TERM
    up
  fi
  local hosts="node-a:$a"
  [ "$b" -gt 0 ] && hosts="$hosts,node-b:$b"
  local mpiexec
  mpiexec=$(command -v mpiexec)
  local rc=0
  timeout --kill-after=10 "$limit" nsenter -t "$(cat "$state/login.pid")" --net --uts --mount \
    --wd="$PWD" -- env -u HPCDIST_RANKS_PER_NODE "$mpiexec" -launcher rsh \
    -launcher-exec "$state/rsh" -hosts "$hosts" -n $((a + b)) "$@" || rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "twonode: the job did not finish within ${limit}s; its processes were ended" >&2
  fi
  reap
  return $rc
}

case "${1:-}" in
  up) trap down_quiet EXIT; up; trap - EXIT ;;  # a failed `up` leaves nothing behind
  down) down_quiet ;;
  run) shift; run "$@" ;;
  rate) [ $# -eq 2 ] || usage; rate "$2" ;;
  check) why=$(unavailable); [ -z "$why" ] || { echo "$why"; exit 1; } ;;
  *) usage ;;
esac
