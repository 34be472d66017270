#!/usr/bin/env python3
"""Builds the small, deterministic OCI images critest pulls, offline.

critest (kubernetes-sigs/cri-tools) pulls busybox, nginx, httpd, nonewprivs, pause and a set
of gcr.io/k8s-staging-cri-tools/test-image-* images. This builds equivalents from what the
machine has: Debian's dynamic busybox (BUSYBOX, from the `busybox` .deb) with the host's glibc,
and three tiny static C programs (src/*.c, built with gcc -static into BIN).

Output, under OUT:
  store/blobs/sha256/<hex>   content-addressed blobs (layers, configs, manifests)
  store/repos.json           {repository: {tag: manifest digest}}, served by registry.py
  images.txt                 full name, manifest digest, config digest (the CRI image id)

usage: images.py --out OUT --busybox BUSYBOX --bin BIN
"""
import argparse, gzip, hashlib, io, json, os, subprocess, tarfile

MTIME = 1700000000  # fixed, so that a rebuild yields the same digests
CREATED = "2023-11-14T22:13:20Z"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

PASSWD = """root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
bin:x:2:2:bin:/bin:/bin/false
sys:x:3:3:sys:/dev:/bin/false
sync:x:4:100:sync:/bin:/bin/sync
mail:x:8:8:mail:/var/spool/mail:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
operator:x:37:37:Operator:/var:/bin/false
nobody:x:65534:65534:nobody:/home:/bin/false
"""
GROUP = """root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
disk:x:6:
lp:x:7:
mail:x:8:
kmem:x:9:
wheel:x:10:root
cdrom:x:11:
dialout:x:18:
floppy:x:19:
video:x:28:
audio:x:29:
tape:x:32:
www-data:x:33:
operator:x:37:
utmp:x:43:
plugdev:x:46:
staff:x:50:
lock:x:54:
netdev:x:82:
users:x:100:
nogroup:x:65534:
"""
# Debian's busybox has no pgrep and no ipcs; critest runs both in containers.
PGREP = r"""#!/bin/sh
# minimal pgrep: pgrep PATTERN prints the pids whose comm matches the extended RE
pat="$1"
[ -n "$pat" ] || { echo "usage: pgrep PATTERN" >&2; exit 2; }
rc=1
for d in /proc/[0-9]*; do
  pid=${d#/proc/}
  [ "$pid" = "$$" ] && continue
  c=$(cat "$d/comm" 2>/dev/null) || continue
  if echo "$c" | grep -Eq -- "$pat"; then echo "$pid"; rc=0; fi
done
exit $rc
"""
IPCS = r"""#!/bin/sh
# minimal "ipcs -m": the shared memory segments of /proc/sysvipc/shm
echo
echo "------ Shared Memory Segments --------"
echo "key        shmid      owner      perms      bytes      nattch     status"
[ -r /proc/sysvipc/shm ] && awk 'NR>1 {printf "%-10s %-10s %-10s %-10s %-10s %-10s\n", $1, $2, $8, $3, $4, $7}' /proc/sysvipc/shm
echo
"""


def sha(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


def read(path):
    with open(path, "rb") as f:
        return f.read()


class Layer:
    def __init__(self):
        self.buf = io.BytesIO()
        self.tar = tarfile.open(fileobj=self.buf, mode="w", format=tarfile.PAX_FORMAT)

    def _ti(self, name, type_, mode):
        ti = tarfile.TarInfo(name)
        ti.type = type_
        ti.mode = mode
        ti.mtime = MTIME
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = ""
        return ti

    def dir(self, name, mode=0o755):
        self.tar.addfile(self._ti(name, tarfile.DIRTYPE, mode))

    def dirs(self, *names):
        for n in names:
            self.dir(n)

    def file(self, name, data, mode=0o644):
        if isinstance(data, str):
            data = data.encode()
        ti = self._ti(name, tarfile.REGTYPE, mode)
        ti.size = len(data)
        self.tar.addfile(ti, io.BytesIO(data))

    def hardlink(self, name, target):
        ti = self._ti(name, tarfile.LNKTYPE, 0o755)
        ti.linkname = target
        self.tar.addfile(ti)

    def finish(self):
        self.tar.close()
        raw = self.buf.getvalue()
        return {"diff_id": sha(raw), "blob": gzip.compress(raw, compresslevel=6, mtime=0)}


def busybox_layer(busybox):
    l = Layer()
    l.dirs("bin", "dev", "etc", "home", "proc", "run", "sbin", "sys", "usr", "usr/bin",
           "usr/sbin", "var", "var/run", "var/www", "var/spool", "var/spool/mail")
    l.dir("root", 0o700)
    l.dir("tmp", 0o1777)
    # The *dynamic* busybox: busybox-static is built with FEATURE_SH_STANDALONE (its sh runs
    # applets in-process, never exec'ing /bin/ls), which defeats critest's MaskedPaths spec
    # (it masks /bin/ls and expects "/bin/sh: ls: Permission denied"). So the host's glibc
    # goes in too.
    l.file("bin/busybox", read(busybox), 0o755)
    l.dirs("lib", "lib/x86_64-linux-gnu", "lib64")
    for lib in ["libc.so.6", "libresolv.so.2"]:
        l.file("lib/x86_64-linux-gnu/" + lib,
               read(os.path.realpath("/lib/x86_64-linux-gnu/" + lib)), 0o755)
    l.file("lib64/ld-linux-x86-64.so.2", read(os.path.realpath("/lib64/ld-linux-x86-64.so.2")),
           0o755)
    applets = subprocess.run([busybox, "--list"], capture_output=True, text=True,
                             check=True).stdout.split()
    for a in sorted(set(applets)):
        if a == "busybox" or "/" in a:
            continue
        # Hard links, as in the upstream busybox image, not symlinks: MaskedPaths masks
        # /bin/ls and expects only that name to be masked.
        l.hardlink("bin/" + a, "bin/busybox")
    l.file("bin/pgrep", PGREP, 0o755)
    l.file("bin/ipcs", IPCS, 0o755)
    l.file("etc/passwd", PASSWD)
    l.file("etc/group", GROUP)
    l.file("etc/shadow", "".join(u.split(":")[0] + ":*:10933:0:99999:7:::\n"
                                 for u in PASSWD.splitlines()), 0o600)
    return l.finish()


def marker_layer(name):
    # One empty file, so that images meant to differ have different layers and ids.
    l = Layer()
    l.file(name, "")
    return l.finish()


def pause_layer(bin_dir):
    l = Layer()
    l.file("pause", read(os.path.join(bin_dir, "pause")), 0o755)
    return l.finish()


def nginx_layer(bin_dir):
    l = Layer()
    l.dirs("usr", "usr/sbin", "usr/share", "usr/share/nginx", "usr/share/nginx/html")
    l.file("usr/sbin/nginx", read(os.path.join(bin_dir, "fake-nginx")), 0o755)
    l.file("usr/share/nginx/html/index.html", "<h1>Welcome to nginx!</h1>\n")
    return l.finish()


def httpd_layer(bin_dir):
    l = Layer()
    l.dirs("usr", "usr/local", "usr/local/apache2", "usr/local/apache2/bin",
           "usr/local/apache2/htdocs")
    # The same tiny server as nginx, under httpd's name.
    l.file("usr/local/apache2/bin/httpd", read(os.path.join(bin_dir, "fake-nginx")), 0o755)
    l.file("usr/local/apache2/htdocs/index.html", "<html><body><h1>It works!</h1></body></html>\n")
    return l.finish()


def nnp_layer(bin_dir):
    l = Layer()
    l.dirs("usr", "usr/local", "usr/local/bin")
    l.file("usr/local/bin/nnp", read(os.path.join(bin_dir, "nnp")), 0o4755)  # setuid root
    return l.finish()


def predefined_group_layer():
    l = Layer()
    l.dir("etc")
    l.file("etc/passwd",
           PASSWD + "default-user:x:1000:1000:Linux User,,,:/home/default-user:/bin/sh\n")
    l.file("etc/group",
           GROUP + "default-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\n")
    l.dirs("home", "home/default-user")
    return l.finish()


class Store:
    def __init__(self, out):
        self.out = out
        self.blobdir = os.path.join(out, "store/blobs/sha256")
        os.makedirs(self.blobdir, exist_ok=True)
        self.repos = {}
        self.images = []  # (full name, manifest digest, config digest)

    def put(self, data):
        d = sha(data)
        p = os.path.join(self.blobdir, d.split(":")[1])
        if not os.path.exists(p):
            with open(p + ".tmp", "wb") as f:
                f.write(data)
            os.rename(p + ".tmp", p)
        return d

    def image(self, names, layers, cfg, label):
        cfg = dict(cfg)
        cfg.setdefault("Env", [PATH_ENV])
        cfg.setdefault("Labels", {})
        cfg["Labels"]["io.peapod.critest.image"] = label
        config = {
            "architecture": "amd64", "os": "linux", "created": CREATED,
            "config": cfg,
            "rootfs": {"type": "layers", "diff_ids": [l["diff_id"] for l in layers]},
            "history": [{"created": CREATED, "created_by": "peapod tests/critest/images.py"}
                        for _ in layers],
        }
        cb = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
        cd = self.put(cb)
        manifest = {"schemaVersion": 2,
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                               "digest": cd, "size": len(cb)},
                    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                                "digest": self.put(l["blob"]), "size": len(l["blob"])}
                               for l in layers]}
        md = self.put(json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode())
        for n in names:
            _host, rest = n.split("/", 1)
            repo, tag = rest.rsplit(":", 1)
            self.repos.setdefault(repo, {})[tag] = md
            self.images.append((n, md, cd))

    def write(self):
        # repos.json last: its presence marks a complete store (the caller checks for it).
        with open(os.path.join(self.out, "images.txt"), "w") as f:
            for n, m, c in self.images:
                f.write(f"{n}\tmanifest={m}\tid={c}\n")
        tmp = os.path.join(self.out, "store/repos.json.tmp")
        with open(tmp, "w") as f:
            json.dump(self.repos, f, indent=1, sort_keys=True)
        os.rename(tmp, os.path.join(self.out, "store/repos.json"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--busybox", required=True, help="Debian's dynamic busybox binary")
    ap.add_argument("--bin", required=True, help="directory of pause, fake-nginx, nnp")
    a = ap.parse_args()
    s = Store(a.out)
    G = "gcr.io/k8s-staging-cri-tools/"
    E = "registry.k8s.io/e2e-test-images/"
    bb = busybox_layer(a.busybox)
    sh = {"Cmd": ["sh"]}
    # The default container image (framework.DefaultLinuxContainerImage).
    s.image([E + "busybox:1.29-2"], [bb], sh, "busybox")
    # Web servers (networking, streaming, security context, multi-container specs).
    ng = nginx_layer(a.bin)
    s.image([E + "nginx:1.14-2"], [bb, ng],
            {"Cmd": ["nginx", "-g", "daemon off;"], "ExposedPorts": {"80/tcp": {}}}, "nginx")
    s.image([G + "hostnet-nginx-amd64:latest"], [bb, ng],
            {"Cmd": ["nginx", "-g", "daemon off;"], "ExposedPorts": {"12003/tcp": {}},
             "Env": [PATH_ENV, "NGINX_PORT=12003"]}, "hostnet-nginx")
    s.image([E + "httpd:2.4.39-4"], [bb, httpd_layer(a.bin)],
            {"Cmd": ["httpd"], "WorkingDir": "/usr/local/apache2", "ExposedPorts": {"80/tcp": {}},
             "Env": ["PATH=/usr/local/apache2/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:"
                     "/usr/bin:/sbin:/bin"]},
            "httpd")
    s.image([E + "nonewprivs:1.3"], [bb, nnp_layer(a.bin)],
            {"Entrypoint": ["/usr/local/bin/nnp"]}, "nonewprivs")
    # Pause images: 3.6 (containerd 1.6's sandbox image, for runs against it) and the 3.9
    # pair of "same image from different registries".
    pl = pause_layer(a.bin)
    pcfg = {"Entrypoint": ["/pause"], "User": "65535:65535"}
    s.image(["registry.k8s.io/pause:3.6"], [pl], pcfg, "pause-3.6")
    s.image(["registry.k8s.io/pause:3.9", "k8s.gcr.io/pause:3.9"], [pl], pcfg, "pause-3.9")
    # The image service's test images. test-image-digest is pulled by a digest of upstream
    # content no offline build can reproduce; it is here for its tag only.
    for n in ["test-image-1", "test-image-2", "test-image-3", "test-image-latest",
              "test-image-digest"]:
        s.image([G + n + ":latest"], [bb, marker_layer(n)], sh, n)
    s.image([G + "test-image-tags:1", G + "test-image-tags:2", G + "test-image-tags:3"],
            [bb, marker_layer("same-image")], sh, "test-image-tags")
    for t in ["test", "all"]:
        s.image([G + "test-image-tag:" + t], [bb, marker_layer(t)], sh, "test-image-tag-" + t)
    for n, u in [("test-image-user-uid", "1002"), ("test-image-user-username", "www-data"),
                 ("test-image-user-uid-group", "1003:1004"),
                 ("test-image-user-username-group", "www-data:1004")]:
        s.image([G + n + ":latest"], [bb], {"Cmd": ["sh"], "User": u}, n)
    s.image([G + "test-image-predefined-group:latest"], [bb, predefined_group_layer()],
            {"Cmd": ["sh"], "User": "1000"}, "test-image-predefined-group")
    s.write()


if __name__ == "__main__":
    main()
