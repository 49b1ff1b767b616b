#!/usr/bin/env bash
# ctest multihost: a job over several hosts, the hosts being network namespaces.
#
#   run.sh <hyperrun> <mh_worker> [tp_train]
#
# Builds 3 hosts hyper-h0-$$ .. hyper-h2-$$ (namespaces; eth0 = 10.77.0.1 .. 10.77.0.3/24,
# lo up) joined by veth pairs to a bridge in a fourth namespace hyper-br-$$ (ports v0..v2).
# Nothing is added to the caller's namespace: all traffic stays on those namespaces and
# loopback. Every host runs its own hyperrun (--nnodes N --node-rank K --master-addr
# 10.77.0.1), with GLOO_SOCKET_IFNAME=eth0 so that Gloo advertises the host's address.
#
# Workloads, each checked against slicing a known global tensor (tests/multihost/mh_worker.cc)
# or the single-device model (tp_train):
#   1. redistribute: every pair of 2-D layouts on the mesh [3 hosts, 2 ranks];
#   2. async TP: tp_train (hookable block) on 2 hosts x 2 ranks, checkpoint, resumed on
#      2 hosts x 1 rank as the plain torch::nn block;
#   3. checkpoint: save to a shared dir, load resharded (world 2, 3); each host given its own
#      dir is refused on every rank with the directory SaveError, nothing committed.
# Faults (every surviving rank must report a clear error, CommError or SaveError, or say
# that its launcher stopped it after a sibling's error, within its timeout; nothing hangs;
# the previous checkpoint still loads):
#   4. host 2's link cut (bridge port down) mid-collective;
#   5. 100% packet loss on host 1 (tc netem; link down where netem is missing) mid-save;
#   6. host 2's ranks killed (SIGKILL) mid-collective.
# Exit 77 (ctest SKIP_RETURN_CODE) with a message only when namespaces cannot be built.
set -uo pipefail
hyperrun="$(realpath "$1")"
worker="$(realpath "$2")"
tp_train="${3:+$(realpath "$3")}"

skip() { echo "multihost: SKIPPED: $*" >&2; exit 77; }
fail() { echo "multihost: FAILED: $*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
# Can we build namespaces at all?
export PATH="$PATH:/usr/sbin:/sbin"
command -v ip >/dev/null || skip "no 'ip' command (install iproute2: scripts/deps.sh)"

id=$$
br="hyper-br-$id"
hosts=(hyper-h0-$id hyper-h1-$id hyper-h2-$id)
nhosts=${#hosts[@]}
tmp=$(mktemp -d /tmp/hyper-multihost.XXXXXX)
pids=()   # background hyperruns still to reap
created=()

cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  for ns in "${created[@]}"; do
    # Processes left inside our namespaces are ours (stragglers of a failed case).
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! err=$(ip netns add "$br" 2>&1); then
  skip "cannot create a network namespace as uid $(id -u) (needs root or CAP_NET_ADMIN +" \
    "CAP_SYS_ADMIN; 'ip netns add' said: $err)"
fi
created+=("$br")
if ! err=$(ip -n "$br" link add br0 type bridge 2>&1); then
  skip "cannot create a bridge in a namespace: $err"
fi
ip -n "$br" link set br0 up || fail "bridge up"
for k in "${!hosts[@]}"; do
  ns=${hosts[$k]}
  ip netns add "$ns" || fail "ip netns add $ns"
  created+=("$ns")
  if ! err=$(ip -n "$br" link add "v$k" type veth peer name eth0 netns "$ns" 2>&1); then
    skip "cannot create a veth pair: $err"
  fi
  ip -n "$br" link set "v$k" master br0 up || fail "v$k up"
  ip -n "$ns" addr add "10.77.0.$((k + 1))/24" dev eth0 || fail "address on $ns"
  ip -n "$ns" link set eth0 up || fail "eth0 up in $ns"
  ip -n "$ns" link set lo up || fail "lo up in $ns"
done
echo "multihost: hosts ${hosts[*]} (10.77.0.1-3 on eth0), bridge in $br"

netem=1
if ! ip netns exec "${hosts[1]}" tc qdisc add dev eth0 root netem delay 1ms 2>/dev/null; then
  netem=0
  echo "multihost: note: tc netem is not available here; the mid-save cut uses 'ip link set down'"
else
  ip netns exec "${hosts[1]}" tc qdisc del dev eth0 root
fi

# ---------------------------------------------------------------------------------------------
# Running a job over the hosts

port=29600
# start_job NAME NHOSTS NPROC -- prog args...: one hyperrun per host, in the background, logs
# in $tmp/NAME.K; "@HOST@" in an argument becomes the host index.
start_job() {
  local name=$1 nh=$2 np=$3
  shift 4
  port=$((port + 1))
  job_pids=()
  for ((k = 0; k < nh; ++k)); do
    local args=("${@//@HOST@/$k}")
    ip netns exec "${hosts[$k]}" env GLOO_SOCKET_IFNAME=eth0 \
      "$hyperrun" --nnodes "$nh" --node-rank "$k" --master-addr 10.77.0.1 --master-port "$port" \
      -n "$np" --timeout 120 -- "${args[@]}" >"$tmp/$name.$k" 2>&1 &
    job_pids+=($!)
    pids+=($!)
  done
}

# wait_job NAME LIMIT_S: waits for the job's hyperruns (at most LIMIT_S s, else a hang: they are
# killed and the test fails); sets job_rc[k] and job_seconds.
wait_job() {
  local name=$1 limit=$2 start=$SECONDS
  job_rc=()
  while true; do
    local running=0
    for p in "${job_pids[@]}"; do kill -0 "$p" 2>/dev/null && running=1; done
    ((running)) || break
    if ((SECONDS - start > limit)); then
      for p in "${job_pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
      show "$name"
      fail "$name: hyperruns still running after ${limit} s (a hang)"
    fi
    sleep 0.1
  done
  for k in "${!job_pids[@]}"; do
    wait "${job_pids[$k]}"
    job_rc[$k]=$?
  done
  job_seconds=$((SECONDS - start))
  pids=()
}

show() {
  for f in "$tmp/$1".*; do
    echo "---- $(basename "$f")"
    cat "$f"
  done
}

# run_ok NAME NHOSTS NPROC -- prog args: every hyperrun must exit 0.
run_ok() {
  local name=$1
  start_job "$@"
  wait_job "$name" 150
  show "$name"
  for k in "${!job_rc[@]}"; do
    [[ ${job_rc[$k]} -eq 0 ]] || fail "$name: host $k's hyperrun exited ${job_rc[$k]}"
  done
}

# expect_lines NAME REGEX COUNT: COUNT lines of the job's logs match REGEX.
expect_lines() {
  local n
  n=$(cat "$tmp/$1".* | grep -cE "$2")
  [[ $n -eq $3 ]] || fail "$1: expected $3 lines matching '$2', found $n"
}

# wait_ready PREFIX COUNT: until COUNT files PREFIX.* exist (30 s at most).
wait_ready() {
  local start=$SECONDS
  while [[ $(ls "$1".* 2>/dev/null | wc -l) -lt $2 ]]; do
    ((SECONDS - start < 30)) || fail "ranks did not become ready ($1)"
    sleep 0.05
  done
}

# check_fault NAME SURVIVORS_HOSTS NPROC AFTER_S TIMEOUT_S: every rank of the given hosts
# reported a clear error (or was stopped by its hyperrun after a sibling's), at least one per
# host reported the error itself, each hyperrun exited non-zero (not its own --timeout), all
# within TIMEOUT_S + 15 s of the fault.
check_fault() {
  local name=$1 survivors=$2 np=$3 elapsed=$4 timeout_s=$5
  ((elapsed <= timeout_s + 15)) || fail "$name: the job took ${elapsed} s after the fault"
  for k in $survivors; do
    local log="$tmp/$name.$k" own=0
    [[ ${job_rc[$k]} -ne 0 ]] || fail "$name: host $k's hyperrun exited 0 after the fault"
    [[ ${job_rc[$k]} -ne 124 ]] || fail "$name: host $k's hyperrun hit its own --timeout"
    for ((l = 0; l < np; ++l)); do
      local r=$((k * np + l))
      if grep -qE "^\[rank $r\]: mh_worker: rank $r: (CommError|SaveError) after [0-9.]+ s: .+" "$log"; then
        own=$((own + 1))
        local s
        s=$(grep -oE "^\[rank $r\]: mh_worker: rank $r: (CommError|SaveError) after [0-9.]+" "$log" |
            head -1 | grep -oE '[0-9.]+$')
        awk -v s="$s" -v t="$timeout_s" 'BEGIN { exit !(s <= t + 5) }' ||
          fail "$name: rank $r reported its error ${s} s after its last success (timeout ${timeout_s} s)"
      elif ! grep -qE "^\[rank $r\]: mh_worker: rank $r: stopped by SIGTERM" "$log"; then
        fail "$name: rank $r reported no error (log $log)"
      fi
    done
    ((own >= 1)) || fail "$name: no rank of host $k reported the error itself"
    grep -qE "^hyperrun: node $k: rank [0-9]+ \(pid [0-9]+\) exited with code 3" "$log" ||
      fail "$name: host $k's hyperrun did not name the failed rank"
  done
}

# load_ok NAME DIR STEP NPROC: a single-node load of DIR on host 0 (loopback), resharded to
# [S(1)] over NPROC ranks; values checked against G(STEP).
load_ok() {
  local name=$1 dir=$2 step=$3 np=$4 out rc=0
  out=$(ip netns exec "${hosts[0]}" "$hyperrun" -n "$np" --timeout 120 -- \
        "$worker" load --dir "$dir" --step "$step" --timeout-ms 30000 2>&1) || rc=$?
  echo "$out"
  [[ $rc -eq 0 ]] || fail "$name: loading $dir exited $rc"
  n=$(grep -cE "^\[rank [0-9]+\]: mh_worker: rank [0-9]+: loaded step $step from $dir: values equal" <<<"$out")
  [[ $n -eq $np ]] || fail "$name: $n of $np ranks loaded $dir correctly"
}

timeout_ms=5000
timeout_s=5
t_all=$SECONDS

# ---------------------------------------------------------------------------------------------
# 1. redistribute over 3 hosts x 2 ranks
run_ok redistribute 3 2 -- "$worker" redistribute --timeout-ms 30000
expect_lines redistribute '^\[rank [0-5]\]: mh_worker: rank [0-5]: redistribute: 81 transitions on mesh of 2 dims ok$' 6
echo "multihost: redistribute ok"

# 2. async TP training over 2 hosts, checkpoint to the shared dir, resume on 2 hosts x 1 rank
if [[ -n "$tp_train" ]]; then
  run_ok tp_save 2 2 -- "$tp_train" --model hookable --steps 2 --save "$tmp/shared/tp"
  expect_lines tp_save '^\[rank 0\]: step 2 .* ok$' 1
  expect_lines tp_save '^\[rank 0\]: saved .* step 2 to ' 1
  run_ok tp_load 2 1 -- "$tp_train" --load "$tmp/shared/tp"
  expect_lines tp_load '^\[rank 0\]: loaded step 2: all .* parameters equal' 1
  expect_lines tp_load '^\[rank 0\]: tp_train: ok$' 1
  echo "multihost: async TP training (hookable block) + resharded resume (plain torch::nn block) ok"
else
  echo "multihost: note: tp_train not built (HYPER_BUILD_EXAMPLES=OFF); async TP case left out"
fi

# 3. checkpoint: a shared dir loads resharded; each host given its own dir (a directory rank 0
#    cannot see) is refused on every rank (hyper::dcp's directory check: a .metadata there would
#    reference files on other hosts), and nothing is committed in any of them.
mkdir -p "$tmp/host0" "$tmp/host1" "$tmp/host2"
run_ok save 3 2 -- "$worker" save --dir "$tmp/shared/ckpt" --step 1 --timeout-ms 30000
expect_lines save '^\[rank [0-5]\]: mh_worker: rank [0-5]: saved step 1$' 6
load_ok save "$tmp/shared/ckpt" 1 3
load_ok save "$tmp/shared/ckpt" 1 2
start_job save_own 3 2 -- "$worker" save --dir "$tmp/host@HOST@/ckpt" --step 1 --timeout-ms 30000
wait_job save_own 150
show save_own
for k in 0 1 2; do
  [[ ${job_rc[$k]} -ne 0 ]] || fail "save_own: host $k's hyperrun exited 0 (per-host dirs must be refused)"
  [[ ! -e "$tmp/host$k/ckpt/.metadata" ]] || fail "save_own: host $k's dir holds a .metadata"
done
n=$(cat "$tmp"/save_own.* | grep -cE "SaveError: .*checkpoint directory '[^']*/host[12]/ckpt' is not rank 0's")
[[ $n -ge 3 ]] || fail "save_own: expected every host to report the directory SaveError, found $n lines"
echo "multihost: checkpoint saved on 6 ranks, loaded on 3 and 2 ok; per-host dirs refused on every host"

# 4. host 2's link cut mid-collective (its bridge port down: packets vanish, no reset)
start_job cut_collective 3 2 -- "$worker" collective-loop --ready "$tmp/ready_cc" \
  --timeout-ms $timeout_ms --max-seconds 60
wait_ready "$tmp/ready_cc" 6
sleep 0.2
ip -n "$br" link set v2 down
cut=$SECONDS
wait_job cut_collective $((timeout_s + 30))
after=$((SECONDS - cut))
show cut_collective
ip -n "$br" link set v2 up
check_fault cut_collective "0 1 2" 2 "$after" $timeout_s
echo "multihost: link cut mid-collective: every rank reported its error; all hosts' hyperruns" \
  "exited ${after} s after the cut (timeout ${timeout_s} s)"

# 5. host 1 loses every packet mid-save (save loop: step1, step2, ... in the shared dir)
start_job cut_save 3 2 -- "$worker" save-loop --dir "$tmp/shared/loop" --ready "$tmp/ready_cs" \
  --timeout-ms $timeout_ms --max-seconds 60 --rows 1024 --cols 1024
wait_ready "$tmp/ready_cs" 6
sleep 0.3
if ((netem)); then
  ip netns exec "${hosts[1]}" tc qdisc add dev eth0 root netem loss 100% || fail "netem"
else
  ip -n "${hosts[1]}" link set eth0 down
fi
cut=$SECONDS
wait_job cut_save $((timeout_s + 30))
after=$((SECONDS - cut))
show cut_save
if ((netem)); then ip netns exec "${hosts[1]}" tc qdisc del dev eth0 root; else
  ip -n "${hosts[1]}" link set eth0 up; fi
check_fault cut_save "0 1 2" 2 "$after" $timeout_s
# Step 1 and the last committed step load with their values (a step dir without .metadata is
# the interrupted save; nothing in it is read).
committed=0
last=0
for d in "$tmp"/shared/loop/step*; do
  [[ -f "$d/.metadata" ]] || continue
  committed=$((committed + 1))
  step=${d##*/step}
  ((step > last)) && last=$step
done
for step in 1 $last; do
  d="$tmp/shared/loop/step$step"
  out=$(ip netns exec "${hosts[0]}" "$hyperrun" -n 2 --timeout 120 -- "$worker" load --dir "$d" \
        --step "$step" --rows 1024 --cols 1024 --timeout-ms 30000 2>&1) ||
    { echo "$out"; fail "cut_save: committed checkpoint $d does not load"; }
  [[ $(grep -c "values equal" <<<"$out") -eq 2 ]] || { echo "$out"; fail "cut_save: $d values"; }
done
((committed >= 1)) || fail "cut_save: no committed checkpoint left"
echo "multihost: cut mid-save: every rank reported its error; hyperruns exited ${after} s after" \
  "the cut; $committed of $(ls -d "$tmp"/shared/loop/step* | wc -l) step dirs committed," \
  "steps 1 and $last load with the right values"

# 6. host 2's ranks killed mid-collective
start_job kill_host 3 2 -- "$worker" collective-loop --ready "$tmp/ready_kh" \
  --timeout-ms $timeout_ms --max-seconds 60
wait_ready "$tmp/ready_kh" 6
sleep 0.2
# hyperrun's children are its ranks (/proc's children list; ps where the kernel lacks it).
h2=${job_pids[2]}
victims=$(cat "/proc/$h2/task/$h2/children" 2>/dev/null || ps -o pid= --ppid "$h2")
[[ -n "$victims" ]] || fail "kill_host: host 2's ranks not found"
kill -KILL $victims
cut=$SECONDS
wait_job kill_host $((timeout_s + 30))
after=$((SECONDS - cut))
show kill_host
check_fault kill_host "0 1" 2 "$after" $timeout_s
[[ ${job_rc[2]} -eq 137 ]] || fail "kill_host: host 2's hyperrun exited ${job_rc[2]} (expected 137)"
grep -qE "^hyperrun: node 2: rank [45] \(pid [0-9]+\) was killed by signal 9 \(SIGKILL\)" \
  "$tmp/kill_host.2" || fail "kill_host: host 2's hyperrun did not name the killed rank"
load_ok kill_host "$tmp/shared/ckpt" 1 2
echo "multihost: host's ranks killed: the others reported their error; hyperruns exited" \
  "${after} s after the kill"

echo "multihost: ok ($((SECONDS - t_all)) s)"
