#!/usr/bin/env bash
# A partitioned build on a real Slurm cluster: `make test-slurm` (not part of `make test`).
#
# Runs as root. Installs Debian's slurm-wlm and munge when sbatch/slurmctld are missing, starts a
# one-node cluster on loopback (munged, slurmctld and slurmd, all state in a temporary directory),
# then, on a copy of pipelines/demo.yaml and its inputs:
#   1. builds it locally (`chatshards -q build --locked`): the reference;
#   2. submits examples/slurm/build.sbatch as a job array of N tasks and
#      examples/slurm/merge.sbatch with --dependency=afterok on it, exactly as the README says;
#   3. checks that every job COMPLETED, that the merge started after the last part ended, and that
#      the merged output equals the reference byte for byte;
#   4. reruns one array task alone and checks that the parts directory and the output are
#      byte-identical to what they were before.
# On any failure it prints the jobs' logs and the daemons' logs. On exit it cancels the jobs it
# submitted, stops the daemons it started (by pid) and removes its temporary directory: nothing
# else is touched.
#
# Environment:
#   CHATSHARDS        the binary (default: `cargo build --release`, then
#                     $CARGO_TARGET_DIR/release/chatshards, CARGO_TARGET_DIR defaulting to
#                     $HOME/.cache/chatshards/target)
#   SLURM_TEST_PARTS  N, the number of parts (default 3)
#   SLURM_TEST_TIMEOUT  seconds to wait for all the jobs together (default 600)
#   SLURM_TEST_KEEP=1 keep the temporary directory (its path is printed) for a look afterwards
#   SLURM_SELFTEST=1  test the cluster and the job mechanics without `build --parts`/`merge`: the
#                     jobs run a stand-in for the binary (written to the temporary directory), whose
#                     `build --parts N` writes a small deterministic file per part and whose `merge`
#                     checks that all N parts are there and then runs a whole
#                     `chatshards build --locked`. Everything else (the sbatch scripts, the array,
#                     the dependency, the waits, the comparison, the rerun) is the same.
#   SLURM_SELFTEST_FAIL_PART=I  (with SLURM_SELFTEST=1) the stand-in fails on part I: the test must
#                     then fail, with the merge cancelled and the logs printed, within the timeout.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
N=${SLURM_TEST_PARTS:-3}
TIMEOUT=${SLURM_TEST_TIMEOUT:-600}
SELFTEST=${SLURM_SELFTEST:-0}
T0=$SECONDS

say() { echo "slurm-test: $*" >&2; }
die() { say "FAIL: $*"; exit 1; }
elapsed() { echo "$((SECONDS - T0))s"; }

[ "$(id -u)" = 0 ] || die "run as root (slurmd runs the jobs as the submitting user and needs root)"
[[ $N =~ ^[1-9][0-9]*$ ]] || die "SLURM_TEST_PARTS must be a positive integer, not '$N'"

# --- Slurm and munge -------------------------------------------------------------------------
missing=0
for tool in sbatch squeue scontrol sinfo scancel slurmctld slurmd munged; do
    command -v "$tool" >/dev/null || missing=1
done
if [ $missing = 1 ]; then
    say "installing slurm-wlm and munge (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi
say "$(slurmctld -V)"

# Our cluster only: no SLURM_CONF, SBATCH_PARTITION, SLURM_JOB_ID... from the caller's own Slurm.
for v in $(compgen -v | grep -E '^(SLURM|SBATCH|SQUEUE|SINFO|SCONTROL)_' | grep -vE '^SLURM_(TEST_|SELFTEST)' || true); do
    unset "$v"
done

# --- The binary -----------------------------------------------------------------------------
if [ -z "${CHATSHARDS:-}" ]; then
    export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/chatshards/target}
    (cd "$REPO" && cargo build --release --quiet)
    CHATSHARDS=$CARGO_TARGET_DIR/release/chatshards
fi
[ -x "$CHATSHARDS" ] || CHATSHARDS=$(command -v "$CHATSHARDS" || true)
{ [ -n "$CHATSHARDS" ] && [ -x "$CHATSHARDS" ]; } || die "CHATSHARDS is not an executable"
CHATSHARDS=$(realpath "$CHATSHARDS")
if [ "$SELFTEST" != 1 ] && ! "$CHATSHARDS" build --help 2>/dev/null | grep -q -- '--parts'; then
    die "$CHATSHARDS has no \`build --parts\`: run with SLURM_SELFTEST=1 to test the cluster alone"
fi

# --- Temporary directory, cleanup -----------------------------------------------------------
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chatshards-slurm.XXXXXX")
# munged wants every directory above its socket searchable by all.
chmod 755 "$TMP"
CLUSTER=$TMP/cluster
WORK=$TMP/work
JOBDIR=$TMP/jobs
DAEMON_PIDS=()
JOBS=()
cleanup() {
    local rc=$?
    set +e
    if [ ${#JOBS[@]} -gt 0 ] && [ -n "${SLURM_CONF:-}" ]; then
        scancel "${JOBS[@]}" 2>/dev/null
        for _ in $(seq 1 20); do
            [ -z "$(squeue -h -j "$(IFS=,; echo "${JOBS[*]}")" -t PD,R,CG,CF,S 2>/dev/null)" ] && break
            sleep 0.5
        done
    fi
    # Job steps still exiting: each slurmstepd keeps a socket NODE_JOB.STEP in the spool directory.
    for _ in $(seq 1 40); do
        compgen -G "$CLUSTER/spool/${NODE:-*}_[0-9]*.[0-9]*" >/dev/null || break
        sleep 0.25
    done
    # Newest first: slurmd, slurmctld, then munged (they authenticate through it until the end).
    for ((i = ${#DAEMON_PIDS[@]} - 1; i >= 0; i--)); do
        pid=${DAEMON_PIDS[i]}
        kill "$pid" 2>/dev/null || continue
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    if [ "${SLURM_TEST_KEEP:-0}" = 1 ]; then
        say "kept $TMP"
    else
        rm -rf "$TMP"
    fi
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$CLUSTER/state" "$CLUSTER/spool" "$WORK" "$JOBDIR"

show_logs() {
    set +e
    for f in "$JOBDIR"/*.out; do
        [ -e "$f" ] || continue
        echo "----- job log $(basename "$f")"
        cat "$f"
    done
    for f in "$CLUSTER"/slurmctld.log "$CLUSTER"/slurmd.log "$CLUSTER"/munged.log; do
        [ -e "$f" ] || continue
        echo "----- last lines of $(basename "$f")"
        tail -n 30 "$f"
    done
    [ -n "${SLURM_CONF:-}" ] && { echo "----- sinfo -R"; sinfo -R; }
    set -e
}
fail() { say "FAIL: $*"; show_logs >&2; exit 1; }

# --- munge ----------------------------------------------------------------------------------
if command -v mungekey >/dev/null; then
    mungekey --create --keyfile="$CLUSTER/munge.key" --bits=1024
else
    dd if=/dev/urandom of="$CLUSTER/munge.key" bs=128 count=1 status=none
fi
chmod 600 "$CLUSTER/munge.key"
MUNGE_SOCKET=$CLUSTER/munge.socket
munged --foreground --socket="$MUNGE_SOCKET" --key-file="$CLUSTER/munge.key" \
    --pid-file="$CLUSTER/munged.pid" --seed-file="$CLUSTER/munged.seed" \
    >"$CLUSTER/munged.log" 2>&1 &
DAEMON_PIDS+=($!)
for _ in $(seq 1 50); do [ -S "$MUNGE_SOCKET" ] && break; sleep 0.1; done
munge --socket="$MUNGE_SOCKET" --no-input | unmunge --socket="$MUNGE_SOCKET" >/dev/null ||
    fail "munged does not answer on $MUNGE_SOCKET"

# --- slurm.conf -----------------------------------------------------------------------------
# A port pair nothing listens on yet (6817/6818 unless another Slurm has them).
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
CTLD_PORT=
for base in 6817 16817 26817 36817; do
    if port_free "$base" && port_free "$((base + 1))"; then CTLD_PORT=$base; break; fi
done
[ -n "$CTLD_PORT" ] || fail "no free port pair for slurmctld/slurmd"
NODE=$(hostname -s)
CPUS=$(nproc)
# Slurm drains a node that has less memory than configured: ask for 90% of what it has.
MEM_MB=$(awk '/^MemTotal:/ { print int($2 / 1024 * 0.9) }' /proc/meminfo)
export SLURM_CONF=$CLUSTER/slurm.conf
cat >"$SLURM_CONF" <<EOF
# One-node test cluster of tests/slurm/run.sh. No cgroups, no accounting database.
ClusterName=chatshards-test
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$((CTLD_PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
StateSaveLocation=$CLUSTER/state
SlurmdSpoolDir=$CLUSTER/spool
SlurmctldPidFile=$CLUSTER/slurmctld.pid
SlurmdPidFile=$CLUSTER/slurmd.pid
SlurmctldLogFile=$CLUSTER/slurmctld.log
SlurmdLogFile=$CLUSTER/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# The node as configured here, whatever topology slurmd finds.
SlurmdParameters=config_overrides
ReturnToService=2
# Finished jobs stay in slurmctld for an hour: \`scontrol show job\` gives their state and exit code.
MinJobAge=3600
# A merge whose parts failed is cancelled instead of pending forever.
DependencyParameters=kill_invalid_depend
SchedulerParameters=sched_interval=2
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS Sockets=1 CoresPerSocket=$CPUS ThreadsPerCore=1 RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF

slurmctld -D -i -f "$SLURM_CONF" >"$CLUSTER/slurmctld.out" 2>&1 &
DAEMON_PIDS+=($!)
for _ in $(seq 1 100); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.2; done
scontrol ping 2>/dev/null | grep -q UP || fail "slurmctld did not come up"
slurmd -D -N "$NODE" -f "$SLURM_CONF" >"$CLUSTER/slurmd.out" 2>&1 &
DAEMON_PIDS+=($!)
state=
for _ in $(seq 1 120); do
    state=$(sinfo -h -n "$NODE" -o %t 2>/dev/null || true)
    [ "$state" = idle ] && break
    kill -0 "${DAEMON_PIDS[2]}" 2>/dev/null || fail "slurmd exited"
    sleep 0.5
done
[ "$state" = idle ] || fail "node $NODE is '$state', not idle, after 60 s"
say "cluster up in $(elapsed): node $NODE, $CPUS CPUs, ${MEM_MB} MB, ports $CTLD_PORT-$((CTLD_PORT + 1))"

# --- The test pipeline: pipelines/demo.yaml, its lockfile and every local file the lock names,
# copied with the same relative layout, so its output goes under $WORK. ----------------------
PIPELINE=$WORK/pipelines/demo.yaml
mkdir -p "$WORK/pipelines"
cp "$REPO/pipelines/demo.yaml" "$REPO/pipelines/demo.lock" "$WORK/pipelines/"
inside_work() { case $(realpath -m "$1") in "$WORK"/*) return 0 ;; *) return 1 ;; esac; }
while IFS= read -r rel; do
    inside_work "$WORK/pipelines/$rel" || fail "demo.lock names $rel, outside the repo layout"
    mkdir -p "$(dirname "$(realpath -m "$WORK/pipelines/$rel")")"
    cp "$REPO/pipelines/$rel" "$(realpath -m "$WORK/pipelines/$rel")"
done < <(sed -n 's/^ *- path: "\(.*\)"$/\1/p' "$WORK/pipelines/demo.lock")
out_rel=$(awk '/^output:/ { o = 1; next } o && /^[^ #]/ { o = 0 } o && $1 == "dir:" { print $2; exit }' "$PIPELINE")
[ -n "$out_rel" ] || fail "no output: dir: in demo.yaml"
inside_work "$WORK/pipelines/$out_rel" || fail "demo.yaml's output $out_rel is outside the copy"
OUT=$(realpath -m "$WORK/pipelines/$out_rel")
PARTS=$OUT.parts
REF=$TMP/reference

"$CHATSHARDS" -q build --locked "$PIPELINE" || fail "local build failed"
mv "$OUT" "$REF"
NFILES=$(find "$REF" -type f | wc -l)
say "local build in $(elapsed): $NFILES files"

# --- The jobs -------------------------------------------------------------------------------
JOB_CHATSHARDS=$CHATSHARDS
if [ "$SELFTEST" = 1 ]; then
    JOB_CHATSHARDS=$TMP/chatshards-selftest
    cat >"$JOB_CHATSHARDS" <<'EOF'
#!/usr/bin/env bash
# Stand-in for `chatshards build --parts N` and `chatshards merge --parts N` (SLURM_SELFTEST=1).
set -euo pipefail
echo "selftest stand-in: $*" >&2
cmd= pipeline= parts= parts_dir=$SELFTEST_PARTS_DIR
while [ $# -gt 0 ]; do
    case $1 in
        -q | --quiet | --locked) shift ;;
        --threads) shift 2 ;;
        --parts) parts=$2; shift 2 ;;
        --parts-dir) parts_dir=$2; shift 2 ;;
        build | merge) [ -z "$cmd" ] && cmd=$1 || pipeline=$1; shift ;;
        *) [ -z "$pipeline" ] || { echo "unexpected argument $1" >&2; exit 2; }; pipeline=$1; shift ;;
    esac
done
[ -f "$pipeline" ] || { echo "no pipeline '$pipeline'" >&2; exit 2; }
[ -n "$parts" ] || { echo "no --parts" >&2; exit 2; }
case $cmd in
    build)
        i=${SLURM_ARRAY_TASK_ID:-${JOB_COMPLETION_INDEX:?no part index in the environment}}
        [ "$i" -lt "$parts" ] || { echo "part $i of $parts" >&2; exit 2; }
        [ "$i" != "${SELFTEST_FAIL_PART:-}" ] || { echo "failing part $i as asked" >&2; exit 3; }
        mkdir -p "$parts_dir/part-$i"
        { echo "part $i of $parts"; sha256sum <"$pipeline"; } >"$parts_dir/part-$i/part.txt"
        ;;
    merge)
        for ((i = 0; i < parts; i++)); do
            [ -f "$parts_dir/part-$i/part.txt" ] || { echo "part $i is missing" >&2; exit 1; }
        done
        exec "$SELFTEST_REAL" -q build --locked "$pipeline"
        ;;
    *) echo "unknown command '$cmd'" >&2; exit 2 ;;
esac
EOF
    chmod 755 "$JOB_CHATSHARDS"
    export SELFTEST_REAL=$CHATSHARDS SELFTEST_PARTS_DIR=$PARTS
    export SELFTEST_FAIL_PART=${SLURM_SELFTEST_FAIL_PART:-}
    say "SELF-TEST: the jobs run a stand-in, not build --parts/merge"
fi

# Small resource requests override the sbatch scripts' #SBATCH defaults: this is a small machine.
SB=(sbatch --parsable --chdir="$JOBDIR" --cpus-per-task=1 --mem=1G --time=00:15:00)
submit() { CHATSHARDS=$JOB_CHATSHARDS "${SB[@]}" "$@"; }
# Job ids: `sbatch --parsable` prints "ID" (or "ID;cluster").
jobid() { local id=${1%%;*}; [[ $id =~ ^[0-9]+$ ]] || fail "sbatch said '$1'"; echo "$id"; }

# One line per job (or array task) with its state, exit code, start and end.
job_lines() { scontrol -o show job "$1" 2>/dev/null; }
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }
DEADLINE=$((SECONDS + TIMEOUT))
# Waits until every task of job $1 is in a final state; prints those states, sorted and unique.
wait_job() {
    local id=$1 lines states
    while :; do
        lines=$(job_lines "$id")
        [ -n "$lines" ] || fail "slurmctld does not know job $id"
        states=$(echo "$lines" | field JobState | sort -u)
        if ! echo "$states" | grep -qvE '^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|PREEMPTED|BOOT_FAIL|DEADLINE)$'; then
            [ -z "$(squeue -h -j "$id" 2>/dev/null)" ] || { sleep 1; continue; }
            echo "$states"
            return 0
        fi
        [ $SECONDS -lt $DEADLINE ] || fail "job $id still not done after ${TIMEOUT}s: $(echo "$states" | tr '\n' ' ')"
        sleep 1
    done
}
expect_completed() {
    local id=$1 what=$2 states
    states=$(wait_job "$id")
    [ "$states" = COMPLETED ] || fail "$what (job $id) ended $(echo "$states" | tr '\n' ' ')"
    job_lines "$id" | field ExitCode | grep -qv '^0:0$' && fail "$what (job $id) exit codes: $(job_lines "$id" | field ExitCode | tr '\n' ' ')"
    return 0
}
# A directory's files and their hashes, by relative path.
tree_hash() { (cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0r sha256sum); }

T_SUBMIT=$SECONDS
ARRAY=$(jobid "$(submit --array=0-$((N - 1)) "$REPO/examples/slurm/build.sbatch" "$PIPELINE" "$N" --locked)")
JOBS+=("$ARRAY")
# The parts directory as the array left it, taken by a job between the array and the merge (the
# merge may tidy the parts up; the rerun below is compared with this).
SNAP=$(jobid "$("${SB[@]}" --job-name=parts-snapshot --output=%x-%j.out --dependency=afterok:"$ARRAY" \
    --wrap "cd '$PARTS' && find . -type f -print0 | LC_ALL=C sort -z | xargs -0r sha256sum > '$TMP/parts.before'")")
JOBS+=("$SNAP")
MERGE=$(jobid "$(submit --dependency=afterok:"$ARRAY:$SNAP" "$REPO/examples/slurm/merge.sbatch" "$PIPELINE" "$N" --locked)")
JOBS+=("$MERGE")
say "submitted array $ARRAY (0-$((N - 1))), snapshot $SNAP, merge $MERGE (afterok)"

states=$(wait_job "$ARRAY")
if [ "$states" != COMPLETED ]; then
    merge_state=$(wait_job "$MERGE" | tr '\n' ' ')
    fail "the parts (job $ARRAY) ended $(echo "$states" | tr '\n' ' ')and the merge (job $MERGE) $merge_state"
fi
expect_completed "$ARRAY" "the parts"
ntasks=$(job_lines "$ARRAY" | field ArrayTaskId | sort -u | wc -l)
[ "$ntasks" = "$N" ] || fail "the array ran $ntasks tasks, not $N"
expect_completed "$SNAP" "the parts snapshot"
expect_completed "$MERGE" "the merge"
T_JOBS=$((SECONDS - T_SUBMIT))
last_part_end=$(job_lines "$ARRAY" | field EndTime | sort | tail -n 1)
merge_start=$(job_lines "$MERGE" | field StartTime)
[[ ! $merge_start < $last_part_end ]] || fail "the merge started at $merge_start, before the last part ended at $last_part_end"
say "$N parts + merge done in ${T_JOBS}s (last part ended $last_part_end, merge started $merge_start)"

# --- The merged output against the local build ----------------------------------------------
[ -d "$OUT" ] || fail "the merge wrote no $OUT"
if ! diff -r "$REF" "$OUT" >"$TMP/diff.txt" 2>&1; then
    say "the merged output differs from the local build:"
    sed 's/^/  /' "$TMP/diff.txt" >&2
    fail "merged output != local build"
fi
K=$(find "$OUT" -type f | wc -l)

# --- A rerun part leaves every byte as it was -----------------------------------------------
RERUN=$((N > 1 ? 1 : 0))
tree_hash "$OUT" >"$TMP/out.before"
JOB=$(jobid "$(submit --array=$RERUN "$REPO/examples/slurm/build.sbatch" "$PIPELINE" "$N" --locked)")
JOBS+=("$JOB")
expect_completed "$JOB" "the rerun of part $RERUN"
[ -d "$PARTS" ] || fail "the rerun of part $RERUN wrote no $PARTS"
tree_hash "$PARTS" >"$TMP/parts.after"
if [ -s "$TMP/parts.after" ] && grep -qvxFf "$TMP/parts.before" "$TMP/parts.after"; then
    say "after the rerun of part $RERUN, these files of $PARTS are not as the array left them:"
    grep -vxFf "$TMP/parts.before" "$TMP/parts.after" | sed 's/^/  /' >&2
    fail "rerun part changed bytes"
fi
if cmp -s "$TMP/parts.before" "$TMP/parts.after"; then
    parts_note="parts directory identical ($(wc -l <"$TMP/parts.after") files)"
else
    parts_note="$(wc -l <"$TMP/parts.after") files in the parts directory, all as the array wrote them"
fi
tree_hash "$OUT" | cmp -s - "$TMP/out.before" || fail "the rerun of part $RERUN changed the merged output"
say "rerun of part $RERUN: $parts_note, output unchanged"

label=slurm
[ "$SELFTEST" = 1 ] && label="slurm (SELF-TEST stand-in)"
echo "$label: $N parts + merge == local build ($K files identical) in $(elapsed)"
