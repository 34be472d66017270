#!/usr/bin/env python3
"""Writes the hand-made seeds of each fuzz target into fuzz/corpus/<target>/ (run once; the
corpora libFuzzer grows from them are committed beside them)."""
import io, json, os, struct, sys, tarfile, zlib

here = os.path.dirname(os.path.abspath(__file__))
corpus = os.path.join(here, "..", "corpus")

def put(target, name, data):
    d = os.path.join(corpus, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)

# --- layer_unpack: tars aimed at the canary beside the scratch directory
CANARY = "/tmp/peapod-fuzz-unpack/canary"
def tar(entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for kind, name, arg in entries:
            ti = tarfile.TarInfo(name)
            if kind == "file":
                ti.size = len(arg)
                t.addfile(ti, io.BytesIO(arg))
            elif kind == "dir":
                ti.type = tarfile.DIRTYPE
                t.addfile(ti)
            elif kind == "sym":
                ti.type = tarfile.SYMTYPE
                ti.linkname = arg
                t.addfile(ti)
            elif kind == "hard":
                ti.type = tarfile.LNKTYPE
                ti.linkname = arg
                t.addfile(ti)
            elif kind == "chr":
                ti.type = tarfile.CHRTYPE
                ti.devmajor, ti.devminor = arg
                t.addfile(ti)
    return buf.getvalue()

put("layer_unpack", "plain", tar([("dir", "etc", None), ("file", "etc/passwd", b"root:x:0:0::/root:/bin/sh\n")]))
put("layer_unpack", "abs-symlink", tar([("sym", "evil", CANARY), ("file", "evil/owned", b"x")]))
put("layer_unpack", "rel-symlink", tar([("sym", "evil", "../canary"), ("file", "evil/owned", b"x")]))
put("layer_unpack", "dotdot", tar([("file", "../canary/owned", b"x"), ("file", "a/../../canary/o2", b"y")]))
put("layer_unpack", "hardlink-out", tar([("hard", "h", CANARY + "/x"), ("sym", "s", "/"), ("hard", "h2", "s/tmp/peapod-fuzz-unpack/canary")]))
put("layer_unpack", "whiteouts", tar([("dir", "d", None), ("file", "d/.wh..wh..opq", b""), ("file", ".wh.gone", b""), ("chr", "dev", (1, 3))]))
put("layer_unpack", "symlink-chain", tar([("sym", "a", "b"), ("sym", "b", "a"), ("file", "a/x", b"loop")]))

# --- oci_manifest
put("oci_manifest", "manifest", json.dumps({
    "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:" + "a" * 64, "size": 10},
    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": "sha256:" + "b" * 64, "size": 20}]}))
put("oci_manifest", "index", json.dumps({
    "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
    "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + "c" * 64, "size": 30,
                   "platform": {"architecture": "amd64", "os": "linux"}},
                  {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + "d" * 64, "size": 30,
                   "platform": {"architecture": "arm64", "os": "linux", "variant": "v8"}}]}))
put("oci_manifest", "config", json.dumps({
    "architecture": "amd64", "os": "linux",
    "config": {"User": "1000:1000", "Env": ["PATH=/bin"], "Entrypoint": ["/bin/sh"], "Cmd": ["-c", "true"], "WorkingDir": "/"},
    "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "e" * 64]}}))

# --- www_authenticate
for i, h in enumerate([
    'Bearer realm="https://auth.example/token",service="registry.example",scope="repository:library/busybox:pull"',
    'Basic realm="Registry Realm"',
    'Bearer realm="a\\"b",error="insufficient_scope"',
    'Bearer realm=unquoted, service=x',
]):
    put("www_authenticate", str(i), h)

# --- pod_manifest
examples = os.path.join(here, "..", "..", "examples")
for f in sorted(os.listdir(examples)):
    if f.endswith(".yaml"):
        put("pod_manifest", f, open(os.path.join(examples, f), "rb").read())
put("pod_manifest", "json", json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
    "spec": {"containers": [{"name": "c", "image": "busybox", "ports": [{"containerPort": 80}],
    "livenessProbe": {"httpGet": {"path": "/", "port": 80}}}]}}))

# --- cri_log
put("cri_log", "lines", "2016-10-06T00:17:09.669794202Z stdout F hello\n2016-10-06T00:17:09.669794202Z stderr P par\n2016-10-06T00:17:10.0Z stderr F tial\n")

# --- cni_result
put("cni_result", "result", json.dumps({"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": "/x"}],
    "ips": [{"address": "10.88.0.5/16", "gateway": "10.88.0.1", "interface": 0}, {"address": "fd00::5/64"}],
    "routes": [{"dst": "0.0.0.0/0"}], "dns": {}}))
put("cni_result", "conflist", json.dumps({"cniVersion": "1.0.0", "name": "n", "plugins": [
    {"type": "bridge", "bridge": "b0", "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/24"}]]}},
    {"type": "portmap", "capabilities": {"portMappings": True}}]}))

# --- spdy: a SYN_STREAM with a compressed header block, then DATA and a PING
SPDY_DICT = None
def spdy_block(headers):
    out = struct.pack(">I", len(headers))
    for k, v in headers:
        out += struct.pack(">I", len(k)) + k + struct.pack(">I", len(v)) + v
    return out
block = spdy_block([(b"streamtype", b"stdout"), (b"port", b"80")])
put("spdy_header_block", "raw", block)
import re
src = open(os.path.join(here, "..", "..", "streaming", "src", "spdy", "dictionary.rs")).read()
body = src[src.index("= &["):]
SPDY_DICT = bytes(int(h, 16) for h in re.findall(r"0x([0-9a-f]{2})", body))
assert len(SPDY_DICT) == 1423
if SPDY_DICT is not None:
    c = zlib.compressobj(zdict=SPDY_DICT)
    comp = c.compress(block) + c.flush(zlib.Z_SYNC_FLUSH)
    put("spdy_header_block", "compressed", comp)
    syn = struct.pack(">HHI", 0x8003, 1, 10 + len(comp)) + struct.pack(">IIH", 1, 0, 0) + comp
    data = struct.pack(">II", 1, 5) + b"hello"
    ping = struct.pack(">HHI", 0x8003, 6, 4) + struct.pack(">I", 1)
    put("spdy_frame", "syn-data-ping", b"\x05" + syn + data + ping)
put("spdy_frame", "ping", b"\x01" + struct.pack(">HHI", 0x8003, 6, 4) + struct.pack(">I", 7))

# --- websocket: masked binary and text frames, a close
def ws_frame(opcode, payload, mask=b"\x01\x02\x03\x04"):
    n = len(payload)
    hdr = bytes([0x80 | opcode])
    if n < 126:
        hdr += bytes([0x80 | n])
    else:
        hdr += bytes([0x80 | 126]) + struct.pack(">H", n)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return hdr + mask + masked
put("websocket", "frames", ws_frame(2, b"\x00ls\n") + ws_frame(1, b"0bHMK") + ws_frame(2, b"\xff\x00") + ws_frame(8, b"\x03\xe8"))

# --- h2_authority: preface, SETTINGS, HEADERS with a literal :authority of a socket path
def h2_frame(kind, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload
def literal(name, value):
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value
hdrs = b"\x83\x86" + literal(b":authority", b"/run/peapod/peapod.sock") + b"\x44" + bytes([len(b"/runtime.v1.RuntimeService/Version")]) + b"/runtime.v1.RuntimeService/Version"
put("h2_authority", "grpcio", b"\x00" + h2_frame(4, 0, 0, b"") + h2_frame(1, 4, 1, hdrs) + h2_frame(0, 1, 1, b"\x00\x00\x00\x00\x00"))
