#!/usr/bin/env python3
"""systemd's D-Bus API, the part the e2e_node suite calls, without systemd (scripts/node-e2e
--serial).

Why it exists: the [Serial] spec "MirrorPodWithGracePeriod when create a mirror pod and the
container runtime is temporarily down during pod termination" stops and starts the container
runtime through systemd (test/e2e_node/util.go, performContainerRuntimeUnitOp): with
github.com/coreos/go-systemd/v22/dbus it connects to the system bus (DBUS_SYSTEM_BUS_ADDRESS,
with Hello) or, as root when that fails, to systemd's private socket (no Hello); it asks
Manager.GetUnitByPID for the unit of the runtime's pid (--container-runtime-pid-file), calls
Manager.StopUnit / StartUnit(name, "replace") and waits for the Manager.JobRemoved signal of
the job, on a second connection, to say "done". This machine has systemd installed but not as
PID 1. This stand-in listens on a unix socket (scripts/node-e2e points
DBUS_SYSTEM_BUS_ADDRESS there, for the suite only) and answers those calls for the units of
the run's state directory ($PEAPOD_SYSTEMD_STATE: tests/node-e2e/systemd/units.py), where
tests/node-e2e/node.sh defines the runtime as runtime unit "<runtime>.service" (KillMode=process,
as containerd.service: its shims and containers outlive a stop).

It speaks the D-Bus wire protocol (little-endian, no unix fds) with the SASL EXTERNAL
handshake, and implements: org.freedesktop.DBus Hello, AddMatch, RemoveMatch (signals go to
every connection); org.freedesktop.DBus.Peer Ping; org.freedesktop.systemd1.Manager
GetUnitByPID, GetUnit, LoadUnit, StartUnit, StopUnit, RestartUnit, TryRestartUnit, Subscribe,
Unsubscribe (each job answered with its path, then JobRemoved(id, job, unit, "done"|"failed"));
org.freedesktop.DBus.Properties Get and GetAll of a unit's Id, LoadState, ActiveState, SubState
(Unit) and MainPID (Service). Any other call gets org.freedesktop.DBus.Error.UnknownMethod.

usage: systemd-bus.py --listen PATH
"""
import argparse
import itertools
import os
import signal
import socket
import struct
import sys
import threading
import uuid

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import units  # noqa: E402

MANAGER = "org.freedesktop.systemd1.Manager"
ROOT = "/org/freedesktop/systemd1"
CALL, RETURN, ERROR, SIGNAL = 1, 2, 3, 4
NO_REPLY = 0x1
F_PATH, F_IFACE, F_MEMBER, F_ERROR, F_REPLY, F_DEST, F_SENDER, F_SIG, F_FDS = range(1, 10)
FIELD_TYPES = {F_PATH: "o", F_IFACE: "s", F_MEMBER: "s", F_ERROR: "s", F_REPLY: "u",
               F_DEST: "s", F_SENDER: "s", F_SIG: "g", F_FDS: "u"}


# --- The wire format -------------------------------------------------------------------------------

def split_sig(sig):
    """A signature as its complete types."""
    out, i = [], 0
    while i < len(sig):
        j = end_of(sig, i)
        out.append(sig[i:j])
        i = j
    return out


def end_of(sig, i):
    c = sig[i]
    if c == "a":
        return end_of(sig, i + 1)
    if c in "({":
        close = ")" if c == "(" else "}"
        i += 1
        while sig[i] != close:
            i = end_of(sig, i)
        return i + 1
    return i + 1


ALIGN = {"y": 1, "b": 4, "n": 2, "q": 2, "i": 4, "u": 4, "x": 8, "t": 8, "d": 8, "s": 4, "o": 4,
         "g": 1, "a": 4, "(": 8, "{": 8, "v": 1, "h": 4}
FIXED = {"y": "B", "b": "I", "n": "h", "q": "H", "i": "i", "u": "I", "x": "q", "t": "Q",
         "d": "d", "h": "I"}


class Writer:
    def __init__(self):
        self.b = bytearray()

    def pad(self, n):
        self.b += b"\0" * (-len(self.b) % n)

    def put(self, t, v):
        self.pad(ALIGN[t[0]])
        c = t[0]
        if c in FIXED:
            self.b += struct.pack("<" + FIXED[c], int(v))
        elif c in "so":
            e = v.encode()
            self.b += struct.pack("<I", len(e)) + e + b"\0"
        elif c == "g":
            e = v.encode()
            self.b += bytes([len(e)]) + e + b"\0"
        elif c == "v":
            sig, val = v
            self.put("g", sig)
            self.put(sig, val)
        elif c == "a":
            et = t[1:]
            at = len(self.b)
            self.b += b"\0\0\0\0"
            self.pad(ALIGN[et[0]])
            start = len(self.b)
            items = v.items() if et[0] == "{" else v
            for item in items:
                self.put(et, item)
            struct.pack_into("<I", self.b, at, len(self.b) - start)
        elif c in "({":
            for st, sv in zip(split_sig(t[1:-1]), v):
                self.put(st, sv)
        else:
            raise ValueError(f"type {t}")

    def put_all(self, sig, values):
        for t, v in zip(split_sig(sig), values):
            self.put(t, v)
        return bytes(self.b)


class Reader:
    def __init__(self, b, pos=0):
        self.b, self.p = b, pos

    def align(self, n):
        self.p += -self.p % n

    def get(self, t):
        self.align(ALIGN[t[0]])
        c = t[0]
        if c in FIXED:
            f = "<" + FIXED[c]
            v = struct.unpack_from(f, self.b, self.p)[0]
            self.p += struct.calcsize(f)
            return v
        if c in "so":
            n = struct.unpack_from("<I", self.b, self.p)[0]
            v = self.b[self.p + 4:self.p + 4 + n].decode()
            self.p += 4 + n + 1
            return v
        if c == "g":
            n = self.b[self.p]
            v = self.b[self.p + 1:self.p + 1 + n].decode()
            self.p += 1 + n + 1
            return v
        if c == "v":
            sig = self.get("g")
            return (sig, self.get(sig))
        if c == "a":
            n = self.get("u")
            et = t[1:]
            self.align(ALIGN[et[0]])
            end = self.p + n
            items = []
            while self.p < end:
                items.append(self.get(et))
            return dict(items) if et[0] == "{" else items
        if c in "({":
            return tuple(self.get(st) for st in split_sig(t[1:-1]))
        raise ValueError(f"type {t}")


def encode(mtype, serial, fields, sig="", body=(), flags=0):
    payload = Writer().put_all(sig, body) if sig else b""
    if sig:
        fields = {**fields, F_SIG: sig}
    hf = [(code, (FIELD_TYPES[code], val)) for code, val in sorted(fields.items())]
    w = Writer()
    w.b += struct.pack("<cBBBII", b"l", mtype, flags, 1, len(payload), serial)
    w.put("a(yv)", hf)
    w.pad(8)
    return bytes(w.b) + payload


# --- The bus -----------------------------------------------------------------------------------

class Bus:
    def __init__(self):
        self.conns = []
        self.lock = threading.Lock()
        self.serial = itertools.count(1)
        self.jobs = itertools.count(1)
        self.names = itertools.count(1)
        self.guid = uuid.uuid4().hex

    def next_serial(self):
        with self.lock:
            return next(self.serial)

    def broadcast(self, member, sig, body):
        msg_fields = {F_PATH: ROOT, F_IFACE: MANAGER, F_MEMBER: member,
                      F_SENDER: "org.freedesktop.systemd1"}
        with self.lock:
            conns = list(self.conns)
        for c in conns:
            c.send(encode(SIGNAL, self.next_serial(), msg_fields, sig, body))


class Conn:
    def __init__(self, bus, sock):
        self.bus, self.sock = bus, sock
        self.wlock = threading.Lock()
        self.buf = b""

    def send(self, data):
        with self.wlock:
            try:
                self.sock.sendall(data)
            except OSError:
                pass

    def read_more(self):
        d = self.sock.recv(65536)
        if not d:
            raise EOFError
        self.buf += d

    def line(self):
        while b"\r\n" not in self.buf:
            self.read_more()
        ln, self.buf = self.buf.split(b"\r\n", 1)
        return ln.decode(errors="replace")

    def auth(self):
        while not self.buf:
            self.read_more()
        if self.buf[0:1] != b"\0":
            raise EOFError
        self.buf = self.buf[1:]
        while True:
            words = self.line().split()
            if not words:
                continue
            cmd = words[0]
            if cmd == "AUTH" and len(words) >= 2 and words[1] == "EXTERNAL":
                if len(words) == 2:
                    self.send(b"DATA\r\n")
                    reply = self.line().split()
                    if not reply or reply[0] != "DATA":
                        self.send(b"REJECTED EXTERNAL\r\n")
                        continue
                self.send(f"OK {self.bus.guid}\r\n".encode())
            elif cmd == "AUTH":
                self.send(b"REJECTED EXTERNAL\r\n")
            elif cmd == "NEGOTIATE_UNIX_FD":
                self.send(b"ERROR no unix fds here\r\n")
            elif cmd == "BEGIN":
                return
            elif cmd == "CANCEL":
                self.send(b"REJECTED EXTERNAL\r\n")
            else:
                self.send(b"ERROR\r\n")

    def message(self):
        while len(self.buf) < 16:
            self.read_more()
        if self.buf[0:1] != b"l":
            raise EOFError  # big-endian clients: none here
        body_len, serial, fields_len = struct.unpack_from("<III", self.buf, 4)
        header_len = 16 + fields_len + (-(16 + fields_len) % 8)
        while len(self.buf) < header_len + body_len:
            self.read_more()
        raw, self.buf = self.buf[:header_len + body_len], self.buf[header_len + body_len:]
        mtype, flags = raw[1], raw[2]
        fields = {code: val[1] for code, val in Reader(raw, 12).get("a(yv)")}
        sig = fields.get(F_SIG, "")
        r = Reader(raw[header_len:])
        body = [r.get(t) for t in split_sig(sig)]
        return mtype, flags, serial, fields, body

    def reply(self, serial, sig="", body=()):
        self.send(encode(RETURN, self.bus.next_serial(),
                         {F_REPLY: serial, F_SENDER: "org.freedesktop.systemd1"}, sig, body))

    def error(self, serial, name, text):
        self.send(encode(ERROR, self.bus.next_serial(),
                         {F_REPLY: serial, F_ERROR: name, F_SENDER: "org.freedesktop.systemd1"},
                         "s", [text]))

    def serve(self):
        try:
            self.auth()
            with self.bus.lock:
                self.bus.conns.append(self)
            while True:
                mtype, flags, serial, fields, body = self.message()
                if mtype != CALL:
                    continue
                res = handle(self.bus, fields.get(F_IFACE, ""), fields.get(F_MEMBER, ""),
                             fields.get(F_PATH, ""), body)
                if flags & NO_REPLY:
                    continue
                if res[0] == "error":
                    self.error(serial, res[1], res[2])
                else:
                    self.reply(serial, res[1], res[2])
                    if len(res) > 3:
                        res[3]()  # the job, after its path was answered
        except (EOFError, OSError, struct.error, ValueError, IndexError):
            pass
        finally:
            with self.bus.lock:
                if self in self.bus.conns:
                    self.bus.conns.remove(self)
            self.sock.close()


# --- systemd's objects -------------------------------------------------------------------------

def unit_path(name):
    """systemd's object path of a unit (bus_label_escape)."""
    return ROOT + "/unit/" + "".join(
        c if c.isalnum() else f"_{ord(c):02x}" for c in name)


def name_of_path(path):
    label = path[len(ROOT + "/unit/"):]
    out, i = "", 0
    while i < len(label):
        if label[i] == "_" and i + 2 < len(label):
            out += chr(int(label[i + 1:i + 3], 16))
            i += 3
        else:
            out += label[i]
            i += 1
    return out


def no_unit(name):
    return ("error", "org.freedesktop.systemd1.NoSuchUnit", f"Unit {name} not loaded.")


def unit_properties(name):
    unit, st = units.load(name)
    if unit is None:
        return None
    return {"Id": ("s", name), "LoadState": ("s", "loaded"),
            "ActiveState": ("s", st.get("ActiveState", "inactive")),
            "SubState": ("s", st.get("SubState", "dead")),
            "MainPID": ("u", st.get("MainPID", 0)),
            "Description": ("s", unit.get("description") or " ".join(unit["argv"]))}


def handle(bus, iface, member, path, body):
    """The answer to a call: ("ok", sig, body[, job]) or ("error", name, text)."""
    if iface in ("org.freedesktop.DBus", "") and member == "Hello":
        return ("ok", "s", [f":1.{next(bus.names)}"])
    if iface in ("org.freedesktop.DBus", "") and member in ("AddMatch", "RemoveMatch"):
        return ("ok", "", [])
    if member == "Ping":
        return ("ok", "", [])
    if iface in (MANAGER, "") and path == ROOT:
        if member == "GetUnitByPID":
            name = units.unit_of_pid(body[0])
            if name is None:
                return ("error", "org.freedesktop.systemd1.NoUnitForPID",
                        f"PID {body[0]} does not belong to any loaded unit.")
            return ("ok", "o", [unit_path(name)])
        if member in ("GetUnit", "LoadUnit"):
            name = units.unit_name(body[0])
            if units.load(name)[0] is None:
                return no_unit(name)
            return ("ok", "o", [unit_path(name)])
        if member in ("Subscribe", "Unsubscribe"):
            return ("ok", "", [])
        if member in ("StartUnit", "StopUnit", "RestartUnit", "TryRestartUnit"):
            name = units.unit_name(body[0])
            unit, st = units.load(name)
            if unit is None:
                return no_unit(name)
            job_id = next(bus.jobs)
            job_path = f"{ROOT}/job/{job_id}"

            def run():
                result = "done"
                try:
                    if member == "StartUnit":
                        units.start(name)
                    elif member == "StopUnit":
                        units.stop(name)
                    elif member == "RestartUnit" or st.get("ActiveState") == "active":
                        units.restart(name)
                except units.UnitError as e:
                    print(f"systemd-bus: {member} {name}: {e}", file=sys.stderr)
                    result = "failed"
                print(f"systemd-bus: job {job_id} {member} {name}: {result}", file=sys.stderr)
                bus.broadcast("JobRemoved", "uoss", [job_id, job_path, name, result])
            return ("ok", "o", [job_path],
                    lambda: threading.Thread(target=run, daemon=True).start())
    if iface == "org.freedesktop.DBus.Properties" and path.startswith(ROOT + "/unit/"):
        props = unit_properties(name_of_path(path))
        if props is None:
            return no_unit(name_of_path(path))
        if member == "Get":
            if body[1] not in props:
                return ("error", "org.freedesktop.DBus.Error.UnknownProperty",
                        f"Unknown property {body[1]}")
            return ("ok", "v", [props[body[1]]])
        if member == "GetAll":
            return ("ok", "a{sv}", [props])
    return ("error", "org.freedesktop.DBus.Error.UnknownMethod",
            f"Unknown method {member} or interface {iface} (tests/node-e2e/systemd/"
            "systemd-bus.py serves the e2e_node suite's calls only).")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", required=True)
    a = ap.parse_args()
    units.state_root()
    try:
        os.unlink(a.listen)
    except FileNotFoundError:
        pass
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(a.listen)
    srv.listen(16)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    bus = Bus()
    print(f"systemd-bus: listening on {a.listen}", file=sys.stderr)
    while True:
        s, _ = srv.accept()
        threading.Thread(target=Conn(bus, s).serve, daemon=True).start()


if __name__ == "__main__":
    main()
