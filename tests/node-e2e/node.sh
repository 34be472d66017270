#!/bin/bash
# The "node" of a scripts/node-e2e run: the container runtime and the suite (which starts the
# kubelet) in a mount and cgroup namespace of their own. scripts/node-e2e starts it with
# `unshare --mount --cgroup` from inside the run's node cgroup (a child of its own cgroup in
# every hierarchy), so that here:
#   - "/" of every cgroup hierarchy is that node cgroup: the kubelet's cgroupRoot "/", its
#     kubepods, and the system containers the harness asks for without systemd (/system, into
#     which the kubelet moves every process of "/" -- here only this run's own; /kubelet; the
#     runtime's cgroup) are the run's alone, whatever else runs on the machine;
#   - every mount the kubelet, the runtime and the pods make (volumes, root filesystems, netns
#     pins, the kubelet's rshared bind of /var/lib/kubelet) stays in this namespace and is gone
#     with it: nothing of the run can remain mounted on the machine.
# The network namespace is the machine's (the kubelet and the API server dial the node's
# address; the pods' bridge is a real one).
#
# It is told what to run through the environment (scripts/node-e2e exports it):
#   RUNTIME            "peapod" or "containerd": the runtime started here, in cgroup /runtime
#   RUNTIME_CMD        its command line (a bash array as a string, evaluated)
#   RUNTIME_SOCKET     its CRI socket (waited for)
#   RUNTIME_LOG        where its output goes
#   RUNTIME_PIDFILE    where its pid is written (the suite's --container-runtime-pid-file)
#   CRICTL             crictl, to remove every pod at the end (CNI DEL for each)
#   SUITE_CWD, SUITE_LOG  the suite's working directory and log
# and runs "$@" (ginkgo and its arguments) as the suite. Exits with the suite's status.
set -eu

say() { echo "node-e2e node: $*" >&2; }

# --- Cgroups: this namespace's view, with the node cgroup as the root of each hierarchy -------
# The mounts of the machine's hierarchies, read before they are replaced: mount point, file
# system type, and the options that select the hierarchy (its controllers, or name=).
mapfile -t hierarchies < <(awk '$5 ~ "^/sys/fs/cgroup/" {
        n = split($0, f, " - "); split(f[2], t, " ");
        print $5, t[1], t[3] }' /proc/self/mountinfo)
[ "${#hierarchies[@]}" -gt 0 ] || { say "no cgroup hierarchies under /sys/fs/cgroup"; exit 1; }
# The copies of the machine's mounts (their root is above this namespace's) go: a runtime
# reading mountinfo must find only the new ones.
umount -R /sys/fs/cgroup
mount -t tmpfs -o mode=755 cgroup_root /sys/fs/cgroup
for h in "${hierarchies[@]}"; do
    read -r point fstype opts <<<"$h"
    mkdir -p "$point"
    if [ "$fstype" = cgroup2 ]; then
        mount -t cgroup2 cgroup2 "$point"
    else
        # The super options name the hierarchy: its controllers, or name=systemd ("none" then).
        sel=$(echo "$opts" | tr ',' '\n' | grep -vxE 'rw|ro|relatime|noexec|nosuid|nodev' | paste -sd, -)
        case "$sel" in name=*) sel="none,$sel" ;; esac
        mount -t cgroup -o "$sel" cgroup "$point"
    fi
done

# mkcg NAME: a cgroup in every hierarchy (a cpuset one needs its cpus and mems before it takes
# a process: cgroup v1 does not copy them).
mkcg() {
    local point
    for point in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
        [ -e "$point/cgroup.procs" ] || continue
        mkdir -p "$point$1"
        if [ -e "$point$1/cpuset.cpus" ] && [ -z "$(cat "$point$1/cpuset.cpus")" ]; then
            cat "${point}cpuset.cpus" >"$point$1/cpuset.cpus"
            cat "${point}cpuset.mems" >"$point$1/cpuset.mems"
        fi
    done
}
# into_cg NAME PID: moves PID into cgroup NAME in every hierarchy.
into_cg() {
    local point
    for point in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
        [ -e "$point$1/cgroup.procs" ] && echo "$2" >"$point$1/cgroup.procs"
    done
    return 0
}

# --- The runtime, in /runtime (the kubelet's --runtime-cgroups: its "runtime" system container)
mkcg runtime
runtime_pid="" suite=""
# On the way out (the suite's end, or a TERM from scripts/node-e2e): the suite stopped first,
# so that nothing makes pods any more, then every pod removed through the runtime (CNI DEL: no
# address or port mapping left), then the runtime stopped.
teardown() {
    set +e
    if [ -n "$suite" ] && kill -0 "$suite" 2>/dev/null; then
        kill -TERM -- "-$suite"
        timeout 30 tail -s 0.2 --pid="$suite" -f /dev/null
        kill -KILL -- "-$suite" 2>/dev/null
    fi
    if [ -n "$runtime_pid" ] && kill -0 "$runtime_pid" 2>/dev/null; then
        timeout 120 "$CRICTL" --timeout 60s -r "unix://$RUNTIME_SOCKET" rmp --all --force >&2
        kill -TERM "$runtime_pid"
        timeout 20 tail -s 0.1 --pid="$runtime_pid" -f /dev/null
        kill -KILL "$runtime_pid" 2>/dev/null
    fi
}
trap teardown EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
eval "runtime_cmd=($RUNTIME_CMD)"
(
    into_cg runtime "$BASHPID"
    exec "${runtime_cmd[@]}"
) >"$RUNTIME_LOG" 2>&1 </dev/null &
runtime_pid=$!
for _ in $(seq 300); do
    [ -S "$RUNTIME_SOCKET" ] && break
    kill -0 "$runtime_pid" 2>/dev/null || { say "$RUNTIME exited: $(tail -5 "$RUNTIME_LOG")"; exit 1; }
    sleep 0.1
done
[ -S "$RUNTIME_SOCKET" ] || { say "$RUNTIME did not serve within 30 s"; exit 1; }
echo "$runtime_pid" >"$RUNTIME_PIDFILE"

# --- The suite ---------------------------------------------------------------------------------
# In the background, so that a TERM is handled at once (bash runs traps only between
# foreground commands), and in a process group of its own, which the teardown stops whole
# (ginkgo, its e2e_node.test processes, their services and the kubelet).
cd "$SUITE_CWD"
setsid "$@" >"$SUITE_LOG" 2>&1 </dev/null &
suite=$!
rc=0
wait "$suite" || rc=$?
exit "$rc"
