#!/usr/bin/env bash
# usage: slurm_test.sh SIGMARUN WORKER WORK_DIR
# sigmarun under a real single-host Slurm: munged, slurmctld and slurmd are
# started here on loopback (ports of their own, state in WORK_DIR), then
# `srun -n 2 sigmarun ...` runs two agents of one job, each taking its node
# rank, the job's size and id and the root's host from Slurm's environment
# (no such flags), and a worker on the second agent is SIGKILLed: the job
# must recover from memory and finish. Exits 77 (skipped) with the reason
# only when the Slurm or munge programs are not installed, and not even then
# under SIGMA_TEST_REQUIRE_TOOLS (the test command, which installs them);
# daemons that are installed but do not start, or a node that does not come
# up, fail the test.
set -euo pipefail
sigmarun=$1 worker=$2 work=$3

skip() {
  echo "skipped: $*"
  [ -n "${SIGMA_TEST_REQUIRE_TOOLS:-}" ] && { echo "failing instead: SIGMA_TEST_REQUIRE_TOOLS is set"; exit 1; }
  exit 77
}
broken() {
  echo "FAILED: $*"
  exit 1
}
for prog in munged munge slurmctld slurmd srun sinfo; do
  command -v "$prog" > /dev/null || skip "$prog is not installed (Debian slurm-wlm and munge)"
done

rm -rf "$work"
mkdir -p "$work/state" "$work/spool"
work=$(cd "$work" && pwd)
# The daemons are stopped, and waited for, however the test ends.
stop() {
  # This cluster's jobs first (SLURM_CONF names it), then its daemons.
  if [ -n "${SLURM_CONF:-}" ]; then
    scancel --quiet --full "--user=$(id -un)" 2> /dev/null || true
    for _ in $(seq 25); do
      [ -z "$(squeue -h 2> /dev/null)" ] && break
      sleep 0.2
    done
  fi
  local pids=()
  for daemon in slurmd slurmctld munged; do
    [ -f "$work/$daemon.pid" ] && pids+=("$(cat "$work/$daemon.pid")")
  done
  [ ${#pids[@]} -eq 0 ] && return 0
  kill "${pids[@]}" 2> /dev/null || true
  for _ in $(seq 50); do
    kill -0 "${pids[@]}" 2> /dev/null || return 0
    sleep 0.2
  done
  kill -9 "${pids[@]}" 2> /dev/null || true
}
trap stop EXIT
logs() {
  for f in "$work"/*.log; do
    echo "--- $f"
    tail -20 "$f"
  done
}

# munge: a key of this test's own, its own socket.
head -c 1024 /dev/urandom > "$work/munge.key"
chmod 400 "$work/munge.key"
munged --force --key-file="$work/munge.key" --socket="$work/munge.socket" --pid-file="$work/munged.pid" \
  --log-file="$work/munged.log" --seed-file="$work/munged.seed" || broken "munged did not start: $(tail -3 "$work/munged.log")"

# Two free loopback ports for slurmctld and slurmd.
read -r ctld_port slurmd_port < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
# The node is this host, by its name (the root agent is reached by the
# node name Slurm gives it, as on a cluster).
host=$(hostname -s)
getent hosts "$host" > /dev/null || broken "this host's name $host does not resolve"
export SLURM_CONF="$work/slurm.conf"
cat > "$SLURM_CONF" << CONF
ClusterName=sigmatest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=$(id -un)
SlurmdUser=$(id -un)
AuthType=auth/munge
AuthInfo=socket=$work/munge.socket
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
PlugStackConfig=$work/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
touch "$work/plugstack.conf"
slurmctld -i || { logs; broken "slurmctld did not start"; }
slurmd -N "$host" || { logs; broken "slurmd did not start"; }
for _ in $(seq 100); do
  sinfo -h -o %T 2> /dev/null | grep -q idle && break
  sleep 0.2
done
sinfo -h -o %T | grep -q idle || { logs; broken "the Slurm node did not come up: $(sinfo 2>&1)"; }

# The job: two agents (tasks) with 2 ranks and 1 spare each; device 3 is
# rank 3, on the second agent.
job="$work/job"
# Agents on several hosts authenticate each other with a per-job secret;
# srun hands the environment to every task.
SIGMA_JOB_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
export SIGMA_JOB_SECRET
set +e
timeout -k 10 180 srun -n 2 -t 3 "$sigmarun" --nproc 2 --spares 1 --job-dir "$job" --no-progress \
  -- "$worker" --steps 120 --kill-at 40 --kill-device 3 > "$work/srun.log" 2>&1
rc=$?
set -e
cat "$work/srun.log"
[ "$rc" -eq 0 ] || { logs; echo "srun sigmarun exited $rc"; exit 1; }
grep -q "Slurm job [0-9]* step 0: agent 1 of 2" "$work/srun.log" || { echo "agent 1 did not take its place from Slurm"; exit 1; }
python3 - "$job" << 'PY'
import json, sys
job = sys.argv[1]
report = json.load(open(f"{job}/report.json"))
assert report["status"] == "done", report["status"]
assert report["world"] == 4, report["world"]
incidents = report["incidents"]
assert len(incidents) == 1 and incidents[0]["restore"] == "memory", incidents
start = [json.loads(l) for l in open(f"{job}/incidents.jsonl") if '"start"' in l][0]
assert start["job_id"].startswith("slurm-") and start["nnodes"] == 2, start
print(f"slurm: job {start['job_id']}, 2 agents, world 4, device 3 killed and restored from memory")
PY
[ -d "$job/node-1/logs" ] || { echo "the second agent's folder is missing"; exit 1; }
echo "slurm test: ok"
