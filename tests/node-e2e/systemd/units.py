#!/usr/bin/env python3
"""Transient service units without systemd, for scripts/node-e2e --serial: the state that the
stand-ins systemd-run, systemctl and systemd-bus.py (in this directory) share.

Why: the e2e_node harness starts the kubelet with `systemd-run --unit=kubelet-<ts>.service`
when systemd-run is on PATH, and its [Serial] specs then stop and restart that kubelet with
`sudo systemctl kill|restart|reset-failed <unit>` (found with `systemctl list-units *kubelet*`),
and one of them stops and starts the container runtime over systemd's D-Bus API (the unit that
holds the runtime's pid). This machine has systemd installed but not as PID 1, so none of that
works; these stand-ins do what systemd would do for those calls, for the run's own processes
only, with their state in a directory of the run ($PEAPOD_SYSTEMD_STATE).

A unit is a directory $PEAPOD_SYSTEMD_STATE/<name>/ with
  unit.json   what systemd-run was given: argv, environment, working directory, properties
              (StandardOutput/StandardError=file:|append:PATH, KillMode, TimeoutStopSec, ...),
              slice, RemainAfterExit
  state.json  ActiveState, SubState, MainPID, Result, ExecMainStatus, and the job under way
  lock        flock'd around every change of state.json
Each start of a unit runs a supervisor (`units.py supervise DIR`, in a session of its own):
it forks the command (in a session of its own too, its output to the unit's files), records
MainPID, waits for it and records how it ended, as systemd's service manager would for a
Type=simple service:
  - stopped by `systemctl stop`: inactive, and the transient unit is gone (garbage collected);
  - by `systemctl restart`: inactive, then started again by the restart;
  - exited by itself: with RemainAfterExit and a clean end (status 0 or SIGHUP, SIGINT,
    SIGTERM, SIGPIPE) "active (exited)"; without it and clean, inactive and gone; otherwise
    "failed (Result: exit-code|signal)", kept until `systemctl reset-failed`.
KillMode=control-group (the default) signals every process of the main process's session (the
stand-in for the unit's cgroup: the command starts a session of its own and its children stay
in it unless they start their own, as the runtime's shims and containers do); KillMode=process
signals the main process only (the runtime's unit uses it, as containerd.service does: its
shims and containers outlive a stop). No unit cgroups are made (--slice and Delegate= are
recorded only): the kubelet's wrapper moves it into its own cgroups (scripts/node-e2e).

usage: units.py define NAME [-p NAME=VALUE]... -- COMMAND...
         A unit that stays loaded when inactive, as if from a unit file (not transient):
         scripts/node-e2e's container runtime, which the suite stops and starts over D-Bus
         (as containerd.service); `systemctl start NAME` starts it.
       units.py supervise DIR     (run by start(): not for people)
"""
import fcntl
import fnmatch
import json
import os
import re
import signal
import subprocess
import sys
import time

CLEAN_SIGNALS = {signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE}
SUFFIXES = (".service", ".scope", ".slice", ".socket", ".target", ".timer", ".mount", ".path")


class UnitError(Exception):
    """A failure as systemctl reports it: a message and an exit status."""

    def __init__(self, msg, status=1):
        super().__init__(msg)
        self.status = status


def state_root():
    d = os.environ.get("PEAPOD_SYSTEMD_STATE")
    if not d:
        raise UnitError("PEAPOD_SYSTEMD_STATE is not set: this stand-in serves scripts/node-e2e "
                        "runs only (tests/node-e2e/systemd/units.py)")
    os.makedirs(d, exist_ok=True)
    return d


def unit_name(name):
    """systemctl's mangling: a name without a unit suffix is a service."""
    if not name.endswith(SUFFIXES) and not any(c in name for c in "*?["):
        name += ".service"
    return name


def unit_dir(name):
    return os.path.join(state_root(), name)


def read_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def write_json(path, data):
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
    os.rename(tmp, path)


class Lock:
    def __init__(self, udir):
        self.path = os.path.join(udir, "lock")

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)


def loaded():
    """The names of the loaded units."""
    try:
        names = sorted(os.listdir(state_root()))
    except OSError:
        return []
    return [n for n in names if os.path.exists(os.path.join(state_root(), n, "unit.json"))]


def load(name):
    udir = unit_dir(name)
    unit = read_json(os.path.join(udir, "unit.json"))
    if unit is None:
        return None, None
    st = read_json(os.path.join(udir, "state.json"), {})
    return unit, st


def match(patterns):
    """The loaded units that the names or glob patterns name, in order."""
    names = loaded()
    out = []
    for p in patterns:
        p = unit_name(p)
        if any(c in p for c in "*?["):
            out += [n for n in names if fnmatch.fnmatchcase(n, p) and n not in out]
        elif p not in out:
            out.append(p)
    return out


def proc_stat(pid):
    """(state, session) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(")") + 2:].split()
    return fields[0], int(fields[3])


def alive(pid):
    s = proc_stat(pid) if pid else None
    return s is not None and s[0] not in ("Z", "X")


def session_pids(sid):
    pids = []
    for e in os.listdir("/proc"):
        if e.isdigit():
            s = proc_stat(int(e))
            if s and s[1] == sid and s[0] not in ("Z", "X"):
                pids.append(int(e))
    return pids


def send(pid, sig, whole_session):
    targets = session_pids(pid) if whole_session else [pid]
    if pid not in targets and alive(pid):
        targets.append(pid)
    for p in targets:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass
    return targets


def parse_seconds(v, default):
    """TimeoutStopSec= values: N, Ns, Nmin, Nms, infinity."""
    if v is None:
        return default
    v = v.strip()
    if v == "infinity":
        return None
    for suffix, mult in (("ms", 0.001), ("min", 60), ("s", 1), ("m", 60), ("h", 3600)):
        if v.endswith(suffix):
            return float(v[:-len(suffix)]) * mult
    return float(v)


def kill_mode(unit):
    return unit.get("properties", {}).get("KillMode", "control-group")


# --- Defining ------------------------------------------------------------------------------------

OUTPUT_SPEC = re.compile(r"^((file|append|truncate):/.+|null|journal|inherit|kmsg|"
                         r"journal\+console|kmsg\+console|tty)$")


def new_unit(transient=True):
    """A unit as systemd-run or `units.py define` makes it: the caller's environment (see
    systemd-run's header for why not systemd's), "/" as working directory."""
    return {"properties": {}, "env": dict(os.environ), "cwd": "/", "remain_after_exit": False,
            "slice": None, "description": None, "transient": transient}


def set_property(unit, assignment):
    """A NAME=VALUE of systemd-run -p / a unit file, among those the stand-ins implement."""
    name, eq, value = assignment.partition("=")
    if not eq:
        raise UnitError(f"Not an assignment: {assignment}")
    props = unit["properties"]
    if name in ("StandardOutput", "StandardError"):
        if not OUTPUT_SPEC.match(value):
            raise UnitError(f"unsupported {name}={value}")
        props[name] = value
    elif name == "KillMode":
        if value not in ("control-group", "process", "mixed"):
            raise UnitError(f"unsupported KillMode={value}")
        props[name] = value
    elif name == "TimeoutStopSec":
        try:
            parse_seconds(value, None)
        except ValueError:
            raise UnitError(f"bad TimeoutStopSec={value}")
        props[name] = value
    elif name == "Delegate":
        props[name] = value  # recorded only: no unit cgroups here
    elif name == "RemainAfterExit":
        unit["remain_after_exit"] = value.lower() in ("1", "yes", "true", "on")
    elif name == "Type":
        if value not in ("simple", "exec"):
            raise UnitError(f"unsupported Type={value} (simple and exec only)")
    elif name == "Environment":
        for kv in value.split():
            set_env(unit, kv)
    elif name == "WorkingDirectory":
        unit["cwd"] = value
    elif name == "Description":
        unit["description"] = value
    else:
        raise UnitError(f"unsupported property {name}= (the stand-ins in tests/node-e2e/systemd "
                        "serve the e2e_node harness's calls only)")


def set_env(unit, kv):
    name, eq, value = kv.partition("=")
    if not eq:
        value = os.environ.get(name)
        if value is None:
            return
    unit["env"][name] = value


def expand(argv, env):
    """ExecStart='s variable expansion (systemd's replace_env_argv): "$$" is "$", "${NAME}" the
    variable's value, a whole-word "$NAME" its value split on whitespace."""
    out = []
    for arg in argv:
        m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", arg)
        if m:
            out += env.get(m.group(1), "").split()
            continue
        out.append(re.sub(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}",
                          lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), ""), arg))
    return out


def define_main(args):
    """units.py define NAME [-p NAME=VALUE]... -- COMMAND...: a unit that stays loaded when
    inactive, as one from a unit file (scripts/node-e2e's runtime.service), not started."""
    if len(args) < 3 or "--" not in args:
        sys.exit("usage: units.py define NAME [-p NAME=VALUE]... -- COMMAND...")
    name = unit_name(args[0])
    sep = args.index("--")
    unit = new_unit(transient=False)
    opts = args[1:sep]
    while opts:
        if opts[0] in ("-p", "--property") and len(opts) > 1:
            set_property(unit, opts[1])
            opts = opts[2:]
        else:
            sys.exit(f"units.py define: unexpected {opts[0]}")
    unit["argv"] = expand(args[sep + 1:], unit["env"])
    create(name, unit)


# --- Starting ------------------------------------------------------------------------------------

def create(name, unit):
    """Loads a transient unit (systemd-run). Fails as systemd does when the name is taken."""
    udir = unit_dir(name)
    try:
        os.mkdir(udir)
    except FileExistsError:
        if os.path.exists(os.path.join(udir, "unit.json")):
            raise UnitError(f"Failed to start transient service unit: Unit {name} was already "
                            "loaded or has a fragment file.")
    unit["name"] = name
    with Lock(udir):
        write_json(os.path.join(udir, "unit.json"), unit)
        write_json(os.path.join(udir, "state.json"),
                   {"ActiveState": "inactive", "SubState": "dead", "MainPID": 0, "Result": "success"})


def start(name, timeout=30):
    """Starts a loaded unit that is not running (a no-op when it runs), returns its MainPID.
    As for Type=simple: done once the command runs (forked and exec'd)."""
    udir = unit_dir(name)
    unit, st = load(name)
    if unit is None:
        raise UnitError(f"Unit {name} not found.", 5)
    with Lock(udir):
        st = read_json(os.path.join(udir, "state.json"), {})
        if st.get("SubState") == "running":
            return st.get("MainPID", 0)
        st.update({"ActiveState": "activating", "SubState": "start", "MainPID": 0, "Job": None,
                   "Started": None})
        write_json(os.path.join(udir, "state.json"), st)
    # The supervisor, in a session of its own and with no descriptor of ours: systemd-run and
    # systemctl exit at once, and the caller's pipes (the harness waits for their end) close.
    subprocess.Popen([sys.executable, os.path.abspath(__file__), "supervise", udir],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, close_fds=True, start_new_session=True,
                     cwd="/")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = read_json(os.path.join(udir, "state.json"), {})
        if st.get("Started") is not None:
            # As for Type=simple, a command that cannot be executed fails the unit, not the
            # start job.
            return st.get("MainPID", 0)
        time.sleep(0.02)
    raise UnitError(f"Job for {name} timed out: the supervisor did not start the command.")


def open_output(spec, default):
    """A StandardOutput=/StandardError= value as a file descriptor (file:, append:,
    truncate:, null, inherit); journal and the rest go to `default`."""
    if spec:
        for prefix, flags in (("file:", os.O_WRONLY | os.O_CREAT),
                              ("append:", os.O_WRONLY | os.O_CREAT | os.O_APPEND),
                              ("truncate:", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
            if spec.startswith(prefix):
                return os.open(spec[len(prefix):], flags, 0o644)
        if spec == "null":
            return os.open("/dev/null", os.O_WRONLY)
    return default


def supervise(udir):
    unit = read_json(os.path.join(udir, "unit.json"))
    props = unit.get("properties", {})
    journal = os.path.join(udir, "journal")  # output with no file named: `systemctl status`'s
    jfd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    errfd = open_output(props.get("StandardError"), jfd)
    outfd = open_output(props.get("StandardOutput"), errfd if props.get("StandardError") else jfd)
    r, w = os.pipe2(os.O_CLOEXEC)  # closed by a successful exec; the errno otherwise
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setsid()
            null = os.open("/dev/null", os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(outfd, 1)
            os.dup2(errfd, 2)
            os.chdir(unit.get("cwd") or "/")
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            os.execve(unit["argv"][0], unit["argv"], unit["env"])
        except OSError as e:
            msg = f"{e.strerror} ({unit['argv'][0]})"
            os.write(w, msg.encode())
            os.write(2, f"{unit['name']}: failed to execute: {msg}\n".encode())
        os._exit(203)  # systemd's EXIT_EXEC
    os.close(w)
    exec_error = os.read(r, 4096).decode()
    os.close(r)
    state_path = os.path.join(udir, "state.json")
    with Lock(udir):
        st = read_json(state_path, {})
        st.update({"ActiveState": "active", "SubState": "running", "MainPID": pid,
                   "Started": time.time(), "Result": "success", "SupervisorPID": os.getpid()})
        if exec_error:
            st["ExecError"] = exec_error
        write_json(state_path, st)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    # ExecMainCode/ExecMainStatus as systemd's: "killed" and the signal, or "exited" and the
    # exit status.
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        clean, result, code = number in CLEAN_SIGNALS, "signal", "killed"
    else:
        number = os.WEXITSTATUS(status)
        clean, result, code = number == 0, "exit-code", "exited"
    with Lock(udir):
        st = read_json(state_path, {})
        job = st.get("Job")
        st.update({"MainPID": 0, "ExecMainCode": code, "ExecMainStatus": number,
                   "ExecMainPID": pid, "Exited": time.time()})
        if not clean:
            st.update({"ActiveState": "failed", "SubState": "failed", "Result": result})
        elif job in ("stop", "restart") or not unit.get("remain_after_exit"):
            st.update({"ActiveState": "inactive", "SubState": "dead", "Result": "success"})
        else:
            st.update({"ActiveState": "active", "SubState": "exited", "Result": "success"})
        write_json(state_path, st)
        if st["ActiveState"] == "inactive" and job != "restart":
            gc(udir, unit)


def gc(udir, unit):
    """An inactive unit: a transient one is unloaded (gone), one defined with `units.py define`
    (a unit file, as containerd.service) stays loaded."""
    if unit.get("transient", True):
        remove(udir)


def remove(udir):
    for f in os.listdir(udir):
        if f != "lock":
            try:
                os.unlink(os.path.join(udir, f))
            except OSError:
                pass
    try:
        os.unlink(os.path.join(udir, "lock"))
        os.rmdir(udir)
    except OSError:
        pass


# --- Stopping, killing ---------------------------------------------------------------------------

def wait_exit(udir, pid, timeout):
    """Waits for the supervisor to record the end of `pid`. True when it ended in time."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while deadline is None or time.monotonic() < deadline:
        st = read_json(os.path.join(udir, "state.json"))
        if st is None or st.get("MainPID") != pid:
            return True
        if not alive(pid) and not alive(st.get("SupervisorPID", 0)):
            return True  # the supervisor was killed (a sweep): nothing will record it
        time.sleep(0.05)
    return False


def stop(name, then=None):
    """systemctl stop (then=None) or the stop half of a restart (then="restart"): SIGTERM as
    KillMode says, SIGKILL after TimeoutStopSec (default 90 s), the unit inactive."""
    udir = unit_dir(name)
    unit, st = load(name)
    if unit is None:
        if then == "restart":
            raise UnitError(f"Unit {name} not found.", 5)
        return  # systemctl stop of a unit that is not loaded succeeds
    job = then or "stop"
    with Lock(udir):
        st = read_json(os.path.join(udir, "state.json"), {})
        pid = st.get("MainPID", 0)
        running = st.get("SubState") == "running" and pid
        st["Job"] = job
        if not running:
            st.update({"ActiveState": "inactive", "SubState": "dead"})
        else:
            st.update({"ActiveState": "deactivating", "SubState": "stop-sigterm"})
        write_json(os.path.join(udir, "state.json"), st)
    if running:
        whole = kill_mode(unit) == "control-group"
        send(pid, signal.SIGTERM, whole)  # mixed: the main process only, SIGKILL to the rest below
        timeout = parse_seconds(unit.get("properties", {}).get("TimeoutStopSec"), 90.0)
        if not wait_exit(udir, pid, timeout):
            send(pid, signal.SIGKILL, kill_mode(unit) != "process")
            wait_exit(udir, pid, 30)
        if kill_mode(unit) in ("control-group", "mixed"):
            for _ in range(50):  # what is left of the session
                if not send(pid, signal.SIGKILL, True):
                    break
                time.sleep(0.05)
    if then is None and os.path.isdir(udir):
        with Lock(udir):
            st = read_json(os.path.join(udir, "state.json"), {})
            if st.get("ActiveState") != "failed":
                st.update({"ActiveState": "inactive", "SubState": "dead", "Job": None})
                write_json(os.path.join(udir, "state.json"), st)
                gc(udir, unit)
                return
            st["Job"] = None
            write_json(os.path.join(udir, "state.json"), st)


def restart(name):
    unit, st = load(name)
    if unit is None:
        raise UnitError(f"Unit {name} not found.", 5)
    stop(name, then="restart")
    return start(name)


def kill(name, sig=signal.SIGTERM, whom="all"):
    """systemctl kill: the signal to the unit's processes (whom=all, by KillMode) or its main
    process (whom=main); the unit's state follows from how they end."""
    unit, st = load(name)
    if unit is None:
        raise UnitError(f"Failed to kill unit {name}: Unit {name} not loaded.")
    pid = st.get("MainPID", 0)
    if not pid or st.get("SubState") != "running":
        if whom == "main":
            raise UnitError(f"Failed to kill unit {name}: No main process to kill")
        return []
    return send(pid, sig, whom == "all" and kill_mode(unit) != "process")


def reset_failed(name):
    udir = unit_dir(name)
    unit, st = load(name)
    if unit is None:
        return
    with Lock(udir):
        st = read_json(os.path.join(udir, "state.json"), {})
        if st.get("ActiveState") == "failed":
            st.update({"ActiveState": "inactive", "SubState": "dead", "Result": "success"})
            write_json(os.path.join(udir, "state.json"), st)
            gc(udir, unit)  # failed transient units stay only until reset
        elif st.get("Result") != "success":
            st["Result"] = "success"
            write_json(os.path.join(udir, "state.json"), st)


def unit_of_pid(pid):
    """The unit whose main process is `pid`, or one of whose processes it is (its session)."""
    sess = proc_stat(pid)
    for name in loaded():
        unit, st = load(name)
        if unit is None or not st:
            continue
        main = st.get("MainPID", 0)
        if main and (main == pid or (sess and sess[1] == main)):
            return name
    return None


def describe(name):
    """list-units' columns: LOAD ACTIVE SUB DESCRIPTION."""
    unit, st = load(name)
    if unit is None:
        return None
    return ("loaded", st.get("ActiveState", "inactive"), st.get("SubState", "dead"),
            unit.get("description") or " ".join(unit["argv"]))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "supervise":
        supervise(sys.argv[2])
    elif len(sys.argv) > 2 and sys.argv[1] == "define":
        try:
            define_main(sys.argv[2:])
        except UnitError as e:
            sys.exit(f"units.py define: {e}")
    else:
        sys.exit(__doc__)
