#!/usr/bin/env bash
# A real two-node MPI cluster on one machine, as root, with no sshd and no global change.
#
#   bash scripts/twonode.sh up                 # create node-a, node-b and the login namespace
#   bash scripts/twonode.sh run 2+2 CMD...     # mpiexec across them: 2 ranks on node-a, 2 on node-b
#   bash scripts/twonode.sh rate 20mbit|off    # token-bucket rate limit on both veths (tc tbf)
#   bash scripts/twonode.sh down               # end every process started here, by its PID
#   bash scripts/twonode.sh check              # exit 0 if this machine can host the cluster
#   bash scripts/twonode.sh slurm up           # after `up`: slurmctld on login, a slurmd per node
#   bash scripts/twonode.sh slurm CMD...       # CMD (srun, sbatch, sinfo...) on the login node
#   bash scripts/twonode.sh slurm down         # stop that Slurm, by its PIDs (`down` does too)
#   bash scripts/twonode.sh lose node-b        # node loss: every process of it killed, link down
#   bash scripts/twonode.sh revive node-b      # link up again (and its slurmd, under `slurm up`)
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
#
# `slurm up` adds a two-node Slurm (Debian's packages; installed by scripts/slurm-settings.sh when
# missing): its own munged (own socket and key under the state directory), slurmctld in the
# login namespace (host `login`, 10.77.0.254) and one slurmd in each node's namespaces
# (`slurmd -N node-a`, own spool directory and PID file), all reading one slurm.conf of two nodes
# through SLURM_CONF; nothing of a single-node Slurm on this machine is touched. `slurm CMD`
# runs CMD in the login namespace with SLURM_CONF set, bounded by TWONODE_LIMIT.
set -euo pipefail
# shellcheck source=scripts/slurm-settings.sh
source "$(dirname "$0")/slurm-settings.sh"
state=${TWONODE_STATE:-/tmp/hpcdist-twonode}
limit=${TWONODE_LIMIT:-600}
nodes=(node-a node-b)
net=10.77.0

usage() {
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
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
    # PID 1 of the node sets it up, then waits until killed (then the kernel ends the rest),
    # reaping the orphans the node's processes leave (a plain `sleep` as PID 1 would not).
    unshare --fork --kill-child --pid --mount-proc --net --uts --ipc --propagation private \
      bash -c "hostname $name && mount -t tmpfs tmpfs /dev/shm \
        && mount --bind '$state/hosts' /etc/hosts && ip link set lo up \
        && touch '$state/ready-$name' \
        && exec bash -c 'while :; do sleep 3600 & wait \$!; done'" </dev/null >/dev/null 2>&1 &
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

# End every process left in the given nodes (default both), by PID, keeping each node's PID 1.
reap() {
  local node pid ns p
  for node in "${@:-${nodes[@]}}"; do
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
  slurm_down
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

# The login node's namespaces, for commands run there.
login_ns() { echo "nsenter -t $(cat "$state/login.pid") --net --uts --mount --wd=$PWD --"; }

slurm_up() {
  is_up || { echo "twonode: the cluster is not up (run \`$0 up\` first)" >&2; return 1; }
  local dir=$state/slurm node i
  if [ -s "$dir/pids" ] && kill -0 $(cat "$dir/pids") 2>/dev/null; then return 0; fi
  slurm_install
  rm -rf "$dir"
  mkdir -p "$dir/ctld" "$dir/munge" "$dir/node-a" "$dir/node-b"
  chown munge:munge "$dir/munge"
  chmod 0755 "$dir/munge"  # munged wants its socket directory searchable by all
  dd if=/dev/urandom bs=1 count=1024 of="$dir/munge/munge.key" 2>/dev/null
  chown munge:munge "$dir/munge/munge.key"
  chmod 0400 "$dir/munge/munge.key"
  local socket=$dir/munge/munge.socket
  cat >"$dir/slurm.conf" <<CONF
ClusterName=twonode
SlurmctldHost=login($net.254)
$(slurm_settings)
AuthInfo=socket=$socket
CredType=cred/munge
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/%n
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmdTimeout=10
NodeName=node-a NodeAddr=$net.1 CPUs=8 RealMemory=4000 State=UNKNOWN
NodeName=node-b NodeAddr=$net.2 CPUs=8 RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=node-a,node-b Default=YES MaxTime=INFINITE State=UP
CONF
  # munged's own socket: reachable by path from every node (unix sockets are not per network
  # namespace), so one munged serves the login node and both nodes, as a shared key would.
  runuser -u munge -- /usr/sbin/munged --socket="$socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
    --seed-file="$dir/munge/munged.seed"
  for i in $(seq 50); do [ -s "$dir/munge/munged.pid" ] && break; sleep 0.1; done
  $(login_ns) env SLURM_CONF="$dir/slurm.conf" /usr/sbin/slurmctld -f "$dir/slurm.conf"
  for node in "${nodes[@]}"; do
    nsenter -t "$(cat "$state/$node.pid")" --net --uts --mount --ipc --pid -- \
      env SLURM_CONF="$dir/slurm.conf" /usr/sbin/slurmd -f "$dir/slurm.conf" -N "$node"
  done
  local pids=() f pid
  for f in munge/munged slurmctld slurmd-node-a slurmd-node-b; do
    for i in $(seq 50); do [ -s "$dir/$f.pid" ] && break; sleep 0.1; done
    [ -s "$dir/$f.pid" ] || { echo "twonode: $f did not start (see $dir/*.log)" >&2; return 1; }
    pid=$(cat "$dir/$f.pid")
    case $f in slurmd-*) pid=$(host_pid "${f#slurmd-}" "$pid") ;; esac
    pids+=("$pid")
  done
  echo "${pids[*]}" >"$dir/pids"  # as this namespace numbers them
  local ready
  for i in $(seq 60); do
    ready=$($(login_ns) env SLURM_CONF="$dir/slurm.conf" sinfo -h -o '%n %T' 2>/dev/null || true)
    if [ "$(grep -cE ' (idle|mixed|allocated)' <<<"$ready")" = 2 ]; then
      echo "twonode: slurm ready (node-a, node-b)"
      return 0
    fi
    sleep 0.5
  done
  echo "twonode: the Slurm nodes did not become idle: $ready (see $dir/*.log)" >&2
  return 1
}

# The PID here of the process that NODE's PID namespace numbers NSPID (from /proc/*/status).
host_pid() {
  local ns p
  ns=$(readlink "/proc/$(cat "$state/$1.pid")/ns/pid")
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/ns/pid" 2>/dev/null)" = "$ns" ] || continue
    if [ "$(awk '/^NSpid:/ {print $NF}' "$p/status" 2>/dev/null)" = "$2" ]; then
      echo "${p#/proc/}"
      return
    fi
  done
  echo "twonode: no process $2 in $1" >&2
  return 1
}

slurm_down() {
  local dir=$state/slurm pid
  [ -s "$dir/pids" ] || { rm -rf "$dir"; return 0; }
  for pid in $(cat "$dir/pids"); do kill "$pid" 2>/dev/null || true; done
  for pid in $(cat "$dir/pids"); do
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -9 "$pid" 2>/dev/null || true
  done
  rm -rf "$dir"
}

# A node lost as a whole: its processes (slurmd, job steps) killed and its link down, so that
# nothing on it answers any more; its PID 1 stays, for `revive`.
lose() {
  is_up || { echo "twonode: the cluster is not up" >&2; return 1; }
  [ -s "$state/$1.pid" ] || { echo "twonode: no node $1" >&2; return 1; }
  nsenter -t "$(cat "$state/$1.pid")" --net ip link set eth0 down
  reap "$1"
}

revive() {
  is_up || { echo "twonode: the cluster is not up" >&2; return 1; }
  [ -s "$state/$1.pid" ] || { echo "twonode: no node $1" >&2; return 1; }
  local pid dir=$state/slurm i
  pid=$(cat "$state/$1.pid")
  nsenter -t "$pid" --net ip link set eth0 up
  [ -s "$dir/pids" ] || return 0
  rm -f "$dir/slurmd-$1.pid"
  nsenter -t "$pid" --net --uts --mount --ipc --pid -- \
    env SLURM_CONF="$dir/slurm.conf" /usr/sbin/slurmd -f "$dir/slurm.conf" -N "$1"
  for i in $(seq 50); do [ -s "$dir/slurmd-$1.pid" ] && break; sleep 0.1; done
  local fresh
  fresh=$(host_pid "$1" "$(cat "$dir/slurmd-$1.pid")")
  # the PID list: munged, slurmctld, slurmd of node-a, slurmd of node-b
  local list=($(cat "$dir/pids"))
  [ "$1" = node-a ] && list[2]=$fresh || list[3]=$fresh
  echo "${list[*]}" >"$dir/pids"
  slurm scontrol update NodeName="$1" State=RESUME >/dev/null 2>&1 || true
  for i in $(seq 60); do
    case $(slurm sinfo -h -n "$1" -o %T 2>/dev/null) in idle*|mixed*|allocated*) return 0 ;; esac
    sleep 0.5
  done
  echo "twonode: $1 did not come back into Slurm" >&2
  return 1
}

slurm() {
  case "${1:-}" in
    up) slurm_up ;;
    down) slurm_down ;;
    "") usage ;;
    *)
      [ -s "$state/slurm/pids" ] || { echo "twonode: slurm is not up" >&2; return 1; }
      timeout --kill-after=10 "$limit" $(login_ns) env SLURM_CONF="$state/slurm/slurm.conf" "$@"
      ;;
  esac
}

case "${1:-}" in
  up) trap down_quiet EXIT; up; trap - EXIT ;;  # a failed `up` leaves nothing behind
  down) down_quiet ;;
  run) shift; run "$@" ;;
  rate) [ $# -eq 2 ] || usage; rate "$2" ;;
  check) why=$(unavailable); [ -z "$why" ] || { echo "$why"; exit 1; } ;;
  slurm) shift; slurm "$@" ;;
  lose) [ $# -eq 2 ] || usage; lose "$2" ;;
  revive) [ $# -eq 2 ] || usage; revive "$2" ;;
  *) usage ;;
esac
