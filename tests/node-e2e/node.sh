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
#   RUNTIME_PIDFILE    where its pid is written (the suite's --container-runtime-pid-file),
#                      digits alone: the suite parses the whole file (strconv.Atoi), and on a
#                      newline falls back to "pidof peapod" (or containerd), which finds any
#                      daemon of that name on the machine (the resource collector of the
#                      Density specs then measures another's cgroup)
#   CRICTL             crictl, to remove every pod at the end (CNI DEL for each)
#   SUITE_CWD, SUITE_LOG  the suite's working directory and log
#   PEAPOD_SYSTEMD_STATE  (--serial) the state directory of the systemd stand-ins
#                      (tests/node-e2e/systemd, on the suite's PATH): the runtime then runs as
#                      their unit "$RUNTIME.service" (KillMode=process, as containerd.service),
#                      and their D-Bus API (systemd-bus.py, on SYSTEMD_BUS) serves the suite's
#                      DBUS_SYSTEM_BUS_ADDRESS, so that the spec that stops and starts the
#                      runtime through systemd can; the kubelet is their unit too (the harness
#                      starts it with systemd-run)
#   SYSTEMD_STANDINS, SYSTEMD_BUS  (with PEAPOD_SYSTEMD_STATE) their directory and the bus's socket
#   NODE_RUNTIME_UNIT  on a mainstream node (systemd as PID 1, cgroup v2: scripts/node-e2e's
#                      header), where this runs in the machine's namespaces: the runtime runs
#                      as this transient unit of the real systemd (KillMode=process, as
#                      containerd.service), and none of the cgroup set-up below is done
#   NODE_PREPULL       (with NODE_RUNTIME_UNIT) images pulled through the runtime before the
#                      suite starts
# and runs "$@" (ginkgo and its arguments) as the suite. Exits with the suite's status.
set -eu

say() { echo "node-e2e node: $*" >&2; }

suite=""
# The suite's process group (ginkgo, its e2e_node.test processes, their services and the
# kubelet) stopped, if it runs.
stop_suite() {
    if [ -n "$suite" ] && kill -0 "$suite" 2>/dev/null; then
        kill -TERM -- "-$suite"
        timeout 30 tail -s 0.2 --pid="$suite" -f /dev/null
        kill -KILL -- "-$suite" 2>/dev/null
    fi
}
# Runs "$@" as the suite in its working directory and exits with its status: in the
# background, so that a TERM is handled at once (bash runs traps only between foreground
# commands), and in a process group of its own, which stop_suite stops whole.
run_suite() {
    cd "$SUITE_CWD"
    setsid "$@" >"$SUITE_LOG" 2>&1 </dev/null &
    suite=$!
    local rc=0
    wait "$suite" || rc=$?
    exit "$rc"
}

if [ -n "${NODE_RUNTIME_UNIT:-}" ]; then
    teardown() {
        set +e
        stop_suite
        # The harness's kubelet units (kubelet-<timestamp>.service), before the pods go.
        systemctl kill -s SIGKILL 'kubelet-[0-9]*.service' 2>/dev/null
        systemctl stop 'kubelet-[0-9]*.service' >&2
        if [ "$(systemctl show -p SubState --value "$NODE_RUNTIME_UNIT")" = running ]; then
            timeout 120 "$CRICTL" --timeout 60s -r "unix://$RUNTIME_SOCKET" rmp --all --force >&2
        fi
        systemctl stop "$NODE_RUNTIME_UNIT" >&2
        systemctl reset-failed "$NODE_RUNTIME_UNIT" 2>/dev/null
    }
    trap teardown EXIT
    trap 'exit 143' TERM
    trap 'exit 130' INT
    # The command writes its pid file (the runtime's pid after the exec) at each start.
    starter=${RUNTIME_PIDFILE%/*}/$RUNTIME-start
    cat >"$starter" <<'EOF'
#!/bin/bash
# The command of the runtime's unit (tests/node-e2e/node.sh).
printf %s $$ >"$RUNTIME_PIDFILE"
eval "runtime_cmd=($RUNTIME_CMD)"
exec "${runtime_cmd[@]}"
EOF
    chmod +x "$starter"
    systemd-run --quiet --unit="$NODE_RUNTIME_UNIT" -p KillMode=process -p Delegate=yes \
        -p TimeoutStopSec=30 -p "StandardOutput=append:$RUNTIME_LOG" -p "StandardError=append:$RUNTIME_LOG" \
        --setenv=RUNTIME_PIDFILE="$RUNTIME_PIDFILE" --setenv=RUNTIME_CMD="$RUNTIME_CMD" \
        --setenv=PATH="$PATH" "$starter"
    for _ in $(seq 600); do
        [ -S "$RUNTIME_SOCKET" ] && break
        [ "$(systemctl show -p SubState --value "$NODE_RUNTIME_UNIT")" = running ] ||
            { say "$RUNTIME exited: $(tail -5 "$RUNTIME_LOG")"; exit 1; }
        sleep 0.1
    done
    [ -S "$RUNTIME_SOCKET" ] || { say "$RUNTIME did not serve within 60 s"; exit 1; }
    started=$SECONDS
    for image in ${NODE_PREPULL:-}; do
        "$CRICTL" -r "unix://$RUNTIME_SOCKET" --timeout 30m pull "$image" >/dev/null ||
            { say "pulling $image failed"; exit 1; }
    done
    [ -n "${NODE_PREPULL:-}" ] && say "pulled $(echo $NODE_PREPULL | wc -w) images in $((SECONDS - started)) s"
    run_suite "$@"
fi

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
runtime_pid="" bus_pid=""
units=${PEAPOD_SYSTEMD_STATE:+1}
unit=$RUNTIME.service
systemctl() { python3 "$SYSTEMD_STANDINS/systemctl" "$@"; }
runtime_alive() {
    if [ -n "$units" ]; then
        [ "$(systemctl show -p SubState --value "$unit")" = running ]
    else
        kill -0 "$runtime_pid" 2>/dev/null
    fi
}
# On the way out (the suite's end, or a TERM from scripts/node-e2e): the suite stopped first,
# so that nothing makes pods any more, then every pod removed through the runtime (CNI DEL: no
# address or port mapping left), then the runtime stopped.
teardown() {
    set +e
    stop_suite
    if [ -n "$units" ]; then
        # The units the suite started (the kubelet's) run in sessions of their own: stopped
        # here, before the pods go. Then the runtime as below, through its MainPID (which
        # changes when the suite restarts it).
        systemctl kill -s SIGKILL 'kubelet-*' 2>/dev/null
        systemctl stop 'kubelet-*' 'run-u*' >&2
        runtime_pid=$(systemctl show -p MainPID --value "$unit")
        [ "$runtime_pid" = 0 ] && runtime_pid=""
    fi
    if [ -n "$runtime_pid" ] && kill -0 "$runtime_pid" 2>/dev/null; then
        timeout 120 "$CRICTL" --timeout 60s -r "unix://$RUNTIME_SOCKET" rmp --all --force >&2
        kill -TERM "$runtime_pid"
        timeout 20 tail -s 0.1 --pid="$runtime_pid" -f /dev/null
        kill -KILL "$runtime_pid" 2>/dev/null
    fi
    if [ -n "$units" ]; then
        systemctl stop "$unit" >&2
        [ -n "$bus_pid" ] && kill "$bus_pid" 2>/dev/null
    fi
}
trap teardown EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
eval "runtime_cmd=($RUNTIME_CMD)"
if [ -n "$units" ]; then
    # A unit defined as from a unit file (it stays loaded when stopped, as containerd.service),
    # whose command moves itself into /runtime and writes the pid file (the runtime's pid
    # after the exec) at each start.
    starter=${PEAPOD_SYSTEMD_STATE%/}-$RUNTIME-start
    cat >"$starter" <<'EOF'
#!/bin/bash
# The command of the runtime's unit (tests/node-e2e/node.sh).
for point in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
    [ -e "${point}runtime/cgroup.procs" ] && echo $$ >"${point}runtime/cgroup.procs"
done
printf %s $$ >"$RUNTIME_PIDFILE"
eval "runtime_cmd=($RUNTIME_CMD)"
exec "${runtime_cmd[@]}"
EOF
    chmod +x "$starter"
    python3 "$SYSTEMD_STANDINS/units.py" define "$unit" -p KillMode=process -p TimeoutStopSec=30 \
        -p "StandardOutput=append:$RUNTIME_LOG" -p "StandardError=append:$RUNTIME_LOG" -- "$starter"
    systemctl start "$unit"
    setsid python3 "$SYSTEMD_STANDINS/systemd-bus.py" --listen "$SYSTEMD_BUS" \
        >"${RUNTIME_LOG%/*}/systemd-bus.log" 2>&1 </dev/null &
    bus_pid=$!
else
    (
        into_cg runtime "$BASHPID"
        exec "${runtime_cmd[@]}"
    ) >"$RUNTIME_LOG" 2>&1 </dev/null &
    runtime_pid=$!
fi
for _ in $(seq 300); do
    [ -S "$RUNTIME_SOCKET" ] && break
    runtime_alive || { say "$RUNTIME exited: $(tail -5 "$RUNTIME_LOG")"; exit 1; }
    sleep 0.1
done
[ -S "$RUNTIME_SOCKET" ] || { say "$RUNTIME did not serve within 30 s"; exit 1; }
[ -n "$units" ] || printf %s "$runtime_pid" >"$RUNTIME_PIDFILE"

# --- The suite (run_suite above) ------------------------------------------------------------------
if [ -n "$units" ]; then
    for _ in $(seq 100); do [ -S "$SYSTEMD_BUS" ] && break; sleep 0.1; done
    [ -S "$SYSTEMD_BUS" ] || { say "the D-Bus stand-in did not listen on $SYSTEMD_BUS"; exit 1; }
    export DBUS_SYSTEM_BUS_ADDRESS=unix:path=$SYSTEMD_BUS
fi
run_suite "$@"
