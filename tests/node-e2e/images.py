#!/usr/bin/env python3
"""Builds, offline, the images the kubelet's node conformance suite (e2e_node [NodeConformance])
pulls, as small equivalents of the upstream ones (test/utils/image/manifest.go and
test/images/* in k8s.io/kubernetes).

It shares the image writer of tests/critest/images.py (deterministic layers, a content-addressed
store that tests/critest/registry.py serves read-only) and its busybox layer: Debian's dynamic
busybox with the host's glibc, applets as hard links, so that `sh -c 'ls'` execs /bin/ls.

What each image holds, and why that is enough for the specs:
  agnhost:2.66.1, agnhost:2.55   the agnhost binary built from the Kubernetes module at /agnhost
      (ENTRYPOINT, CMD pause, as upstream), the porter's localhost.crt/key, /uploads, the user
      and group upstream adds (user-defined-in-image 1000, group-defined-in-image 50000), on the
      busybox layer plus Debian's bash and curl and netcat-openbsd's nc (as upstream's:
      busybox's has no -u) with the libraries they load (the networking specs run curl and nc -u in a
      host-network agnhost pod). 2.55 differs by a marker file only: the
      specs that swap images need two image ids. 2.66.1 also has what its fake-registry-server
      serves (/var/registry: upstream's image fills it at build time with registry.k8s.io's
      pause:3.10.2 as pause:testing, test/images/agnhost/fakeregistryserver): here the
      pause:3.10.2 built below, in the same layout (the tag file holds the digest of its
      manifest; manifests and blobs under sha256/<2 hex>/<hex>/data). The [Serial] private
      registry specs pull localhost:5000/pause:testing from it.
  busybox:1.37.0-2, 1.36.1-1     the busybox layer, CMD sh, and what upstream's busybox does
      and Debian's does not that the specs need (extras_layer: nmeter, a shell that passes on
      environment variables with names like data-1).
  nginx:1.27.0-2, 1.28.0-2       tests/critest/src/fake-nginx.c as /usr/sbin/nginx on the busybox
      layer: answers HTTP on port 80, writes /var/run/nginx.pid, `pidof nginx` finds it.
  pause:3.10.2                   tests/critest/src/pause.c as /pause, user 65535.
  nonewprivs:1.4                 tests/critest/src/nnp.c setuid root as /usr/local/bin/nnp.
  nonroot:1.5                    the busybox layer with USER 1234.
  ipc-utils:1.4                  the busybox layer and util-linux's ipcs.
  glibc-dns-testing:2.1.1        the busybox layer and Debian's glibc `hostname` (hostname -f
      resolves the pod's FQDN through /etc/hosts, as the upstream Debian image does).
  kitten:1.8, nautilus:1.8       agnhost with the picture and data.json of test/images/*, CMD
      test-webserver.
  sample-device-plugin:1.8.0     test/images/sample-device-plugin built from the Kubernetes module
      (scripts/node-e2e builds it, as k8s/build.sh builds agnhost) at /sampledeviceplugin,
      ENTRYPOINT ["/sampledeviceplugin", "-alsologtostderr"] as upstream, on the busybox layer
      (upstream's base is alpine). The [Serial] Device Plugin specs run it (its daemonset's
      manifest names registry.k8s.io/e2e-test-images/sample-device-plugin:1.8.0).
  gcr.io/cadvisor/cadvisor:v0.47.2   tests/node-e2e/src/fake-cadvisor.c as /usr/bin/cadvisor
      (ENTRYPOINT ["/usr/bin/cadvisor", "-logtostderr"], as upstream). The Density specs
      (scripts/kubelet-startup-bench) run it as a host-network pod and read the kubelet's and
      the runtime's cgroup usage from it: the two endpoints of cAdvisor's v2.1 API they read,
      computed as cAdvisor computes them (the file says how). The name is a constant of the
      suite (test/e2e_node/resource_collector.go), not one of KUBE_TEST_REPO_LIST's
      registries: scripts/node-e2e mirrors gcr.io to the loopback registry too.
Images named by a digest of upstream content (busybox@sha256:a9155b..., and whatever is pulled
by digest) cannot be rebuilt; the suite's specs that need them are skipped by scripts/node-e2e.

usage: images.py --out OUT --busybox BUSYBOX --nc NC --bin BIN --agnhost AGNHOST --k8s-src DIR
                 --sample-device-plugin PLUGIN
  BIN holds pause, fake-nginx and nnp (tests/critest/src/*.c built static), nmeter,
  fake-cadvisor and libkeepenv.so (tests/node-e2e/src/*.c); DIR is the
  k8s.io/kubernetes module source (for the agnhost certificates and the kitten/nautilus files).
Output, under OUT, as tests/critest/images.py: store/ (served by tests/critest/registry.py) and
images.txt.
"""
import argparse
import json
import os
import subprocess
import sys
import tarfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "critest"))
import images as critest  # noqa: E402  (tests/critest/images.py)

E = "registry.k8s.io/e2e-test-images/"
G = "registry.k8s.io/"

# The busybox layer ships these; tool layers on top of it need not carry them again.
IN_BUSYBOX_LAYER = {"/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libresolv.so.2",
                    "/lib64/ld-linux-x86-64.so.2"}


def symlink(layer, name, target):
    ti = tarfile.TarInfo(name)
    ti.type = tarfile.SYMTYPE
    ti.linkname = target
    ti.mode = 0o777
    ti.mtime = critest.MTIME
    layer.tar.addfile(ti)


def elf_closure(binary):
    """The shared libraries `binary` loads, as (path it is loaded from, real file)."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    libs = []
    for line in out.splitlines():
        line = line.strip()
        if "=>" in line:
            path = line.split("=>", 1)[1].split("(")[0].strip()
        elif line.startswith("/"):
            path = line.split("(")[0].strip()
        else:
            continue  # linux-vdso.so.1
        if path and path not in IN_BUSYBOX_LAYER:
            libs.append((path, os.path.realpath(path)))
    return libs


def tools_layer(binaries):
    """Host binaries {path in image: host path} with the libraries they load."""
    l = critest.Layer()
    made = set()

    def parents(path):
        parts = path.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d not in made:
                made.add(d)
                l.dir(d)

    files = {}
    for dest, src in sorted(binaries.items()):
        files[dest] = src
        for path, real in elf_closure(src):
            files.setdefault(path.lstrip("/"), real)
    for dest, src in sorted(files.items()):
        parents("/" + dest)
        l.file(dest, critest.read(src), 0o755)
    return l.finish()


def extras_layer(bin_dir):
    """What upstream's busybox (1.37) does and Debian's (1.35) does not, as the specs need it:
    the nmeter applet (src/nmeter.c), and a shell that passes environment variables whose names
    are no shell names (ConfigMap's and Secret's envFrom make "data-1") on to the commands it
    runs (src/libkeepenv.c, preloaded: Debian's ash drops them, upstream's keeps them). The
    shell stays busybox's ash: specs compare its error messages."""
    l = critest.Layer()
    l.dir("bin")
    l.file("bin/nmeter", critest.read(os.path.join(bin_dir, "nmeter")), 0o755)
    l.dirs("lib", "lib/x86_64-linux-gnu", "etc")
    l.file("lib/x86_64-linux-gnu/libkeepenv.so",
           critest.read(os.path.join(bin_dir, "libkeepenv.so")), 0o755)
    l.file("etc/ld.so.preload", "/lib/x86_64-linux-gnu/libkeepenv.so\n")
    # libkeepenv.so finds the real execve with dlsym: libdl is part of glibc 2.34+, which the
    # busybox layer carries.
    for path, real in elf_closure(os.path.join(bin_dir, "libkeepenv.so")):
        l.file(path.lstrip("/"), critest.read(real), 0o755)
    return l.finish()


def agnhost_layer(agnhost, k8s_src):
    l = critest.Layer()
    l.file("agnhost", critest.read(agnhost), 0o755)
    symlink(l, "agnhost-2", "agnhost")
    porter = os.path.join(k8s_src, "test/images/agnhost/porter")
    l.file("localhost.crt", critest.read(os.path.join(porter, "localhost.crt")))
    l.file("localhost.key", critest.read(os.path.join(porter, "localhost.key")))
    l.dir("uploads")
    l.dir("etc")
    # As upstream: adduser -u 1000 -D user-defined-in-image; addgroup -g 50000
    # group-defined-in-image; addgroup user-defined-in-image group-defined-in-image.
    l.file("etc/passwd", critest.PASSWD +
           "user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n")
    l.file("etc/group", critest.GROUP + "user-defined-in-image:x:1000:\n"
           "group-defined-in-image:x:50000:user-defined-in-image\n")
    l.dirs("home", "home/user-defined-in-image")
    return l.finish()


def fake_registry_layer(store, repo, tag, as_name, as_tag):
    """/var/registry/AS_NAME for agnhost's fake-registry-server: the image REPO:TAG of `store`
    (its manifest, config and layers, read back from the store's blobs) as AS_NAME:AS_TAG."""
    def blob(digest):
        return critest.read(os.path.join(store.blobdir, digest.split(":", 1)[1]))

    def path(kind, digest):
        algo, hexd = digest.split(":", 1)
        return f"var/registry/{as_name}/{kind}/{algo}/{hexd[:2]}/{hexd}/data"

    md = store.repos[repo][tag]
    manifest = json.loads(blob(md))
    l = critest.Layer()
    made = set()

    def put(name, data):
        parts = name.split("/")
        for i in range(1, len(parts)):
            d = "/".join(parts[:i])
            if d not in made:
                made.add(d)
                l.dir(d)
        l.file(name, data)
    put(f"var/registry/{as_name}/manifests/{as_tag}", md + "\n")
    put(path("manifests", md), blob(md))
    for d in [manifest["config"]["digest"]] + [x["digest"] for x in manifest["layers"]]:
        put(path("blobs", d), blob(d))
    return l.finish()


def webserver_files_layer(k8s_src, name):
    l = critest.Layer()
    html = os.path.join(k8s_src, "test/images", name, "html")
    l.file(name + ".jpg", critest.read(os.path.join(html, name + ".jpg")))
    l.file("data.json", critest.read(os.path.join(html, "data.json")))
    return l.finish()


def glibc_hostname_layer():
    l = critest.Layer()
    l.dir("bin")
    # Replaces busybox's applet: glibc's gethostbyname, through /etc/hosts, for `hostname -f`.
    l.file("bin/hostname", critest.read(os.path.realpath("/usr/bin/hostname")), 0o755)
    l.dir("etc")
    l.file("etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n")
    return l.finish()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--busybox", required=True, help="Debian's dynamic busybox binary")
    ap.add_argument("--nc", required=True, help="netcat-openbsd's nc binary")
    ap.add_argument("--bin", required=True, help="directory of pause, fake-nginx, nnp")
    ap.add_argument("--agnhost", required=True, help="the agnhost binary k8s/build.sh built")
    ap.add_argument("--k8s-src", required=True,
                    help="the Kubernetes source files k8s/build.sh copies (its src/)")
    ap.add_argument("--sample-device-plugin", required=True,
                    help="test/images/sample-device-plugin, built from the Kubernetes module")
    a = ap.parse_args()
    s = critest.Store(a.out)
    # The busybox layer and the applets it lacks, under every image that has a shell.
    bb = critest.busybox_layer(a.busybox)
    bbx = extras_layer(a.bin)
    sh = {"Cmd": ["sh"]}

    s.image([E + "busybox:1.37.0-2", E + "busybox:1.36.1-1"], [bb, bbx], sh, "busybox")

    # First: agnhost's fake registry serves it.
    s.image([G + "pause:3.10.2"], [critest.pause_layer(a.bin)],
            {"Entrypoint": ["/pause"], "User": "65535:65535"}, "pause")

    tools = tools_layer({"bin/bash": "/usr/bin/bash", "usr/bin/curl": "/usr/bin/curl",
                         "usr/bin/nc": a.nc, "bin/nc": a.nc})
    ag = agnhost_layer(a.agnhost, a.k8s_src)
    agcfg = {"Entrypoint": ["/agnhost"], "Cmd": ["pause"],
             "ExposedPorts": {p + "/tcp": {} for p in ["80", "8080", "8081", "9376", "5000"]}}
    registry = fake_registry_layer(s, "pause", "3.10.2", "pause", "testing")
    s.image([E + "agnhost:2.66.1"], [bb, bbx, tools, ag, registry], agcfg, "agnhost")
    s.image([E + "agnhost:2.55"], [bb, bbx, tools, ag, critest.marker_layer("agnhost-2.55")],
            agcfg, "agnhost-prev")
    for name in ["kitten", "nautilus"]:
        s.image([E + name + ":1.8"], [bb, bbx, tools, ag, webserver_files_layer(a.k8s_src, name)],
                dict(agcfg, Cmd=["test-webserver"]), name)

    ng = critest.nginx_layer(a.bin)
    ngcfg = {"Cmd": ["nginx", "-g", "daemon off;"], "ExposedPorts": {"80/tcp": {}},
             "StopSignal": "SIGQUIT"}
    s.image([E + "nginx:1.27.0-2"], [bb, bbx, ng], ngcfg, "nginx")
    s.image([E + "nginx:1.28.0-2"], [bb, bbx, ng, critest.marker_layer("nginx-1.28")], ngcfg,
            "nginx-new")

    s.image([E + "nonewprivs:1.4"], [bb, bbx, critest.nnp_layer(a.bin)], {"Cmd": ["nnp"]},
            "nonewprivs")
    s.image([E + "nonroot:1.5"], [bb, bbx], {"Cmd": ["sh"], "User": "1234"}, "nonroot")
    s.image([E + "ipc-utils:1.4"], [bb, bbx, tools_layer({"usr/bin/ipcs": "/usr/bin/ipcs"})],
            sh, "ipc-utils")
    s.image([E + "glibc-dns-testing:2.1.1"], [bb, bbx, glibc_hostname_layer()], sh,
            "glibc-dns-testing")
    dp = critest.Layer()
    dp.file("sampledeviceplugin", critest.read(a.sample_device_plugin), 0o755)
    s.image([E + "sample-device-plugin:1.8.0"], [bb, bbx, dp.finish()],
            {"Entrypoint": ["/sampledeviceplugin", "-alsologtostderr"]}, "sample-device-plugin")
    ca = critest.Layer()
    ca.dirs("usr", "usr/bin")
    ca.file("usr/bin/cadvisor", critest.read(os.path.join(a.bin, "fake-cadvisor")), 0o755)
    s.image(["gcr.io/cadvisor/cadvisor:v0.47.2"], [ca.finish()],
            {"Entrypoint": ["/usr/bin/cadvisor", "-logtostderr"], "ExposedPorts": {"8080/tcp": {}}},
            "cadvisor")
    s.write()


if __name__ == "__main__":
    main()
