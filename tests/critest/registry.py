#!/usr/bin/env python3
"""A minimal read-only OCI distribution (v2) registry serving the store images.py builds:
GET and HEAD of manifests (by tag or digest) and blobs, nothing else. Meant as the plain-HTTP
mirror of registry.k8s.io, k8s.gcr.io and gcr.io on loopback; the repository path is all it
looks at (the ?ns= query mirrors get is ignored), so one store answers for every mirrored host.

usage: registry.py --store STORE [--listen 127.0.0.1:0] [--port-file FILE]
  Port 0 takes a free port; the port bound is written to FILE once the server listens.
"""
import argparse, json, os, re, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

ap = argparse.ArgumentParser()
ap.add_argument("--listen", default="127.0.0.1:0")
ap.add_argument("--store", required=True)
ap.add_argument("--port-file")
args = ap.parse_args()
BLOBS = os.path.join(args.store, "blobs/sha256")
REPOS = json.load(open(os.path.join(args.store, "repos.json")))
MANIFEST_RE = re.compile(r"^/v2/(.+)/manifests/([^/]+)$")
BLOB_RE = re.compile(r"^/v2/(.+)/blobs/(sha256:[0-9a-f]{64})$")


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *a):
        sys.stderr.write("%s %s\n" % (self.log_date_time_string(), fmt % a))

    def _err(self, code, ecode, msg):
        b = json.dumps({"errors": [{"code": ecode, "message": msg}]}).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.send_header("Docker-Distribution-API-Version", "registry/2.0")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(b)

    def _blob(self, digest, ctype):
        p = os.path.join(BLOBS, digest[7:])
        if not os.path.isfile(p):
            return False
        data = open(p, "rb").read()
        if ctype is None:
            ctype = json.loads(data).get("mediaType", "application/vnd.oci.image.manifest.v1+json")
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Docker-Content-Digest", digest)
        self.send_header("Docker-Distribution-API-Version", "registry/2.0")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        return True

    def do_GET(self):
        path = urlsplit(self.path).path
        if path in ("/v2", "/v2/"):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "2")
            self.send_header("Docker-Distribution-API-Version", "registry/2.0")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(b"{}")
            return
        m = MANIFEST_RE.match(path)
        if m:
            repo, ref = m.groups()
            tags = REPOS.get(repo)
            if tags is None:
                return self._err(404, "NAME_UNKNOWN", "repository %s not known" % repo)
            digest = ref if ref.startswith("sha256:") else tags.get(ref)
            if digest is None or (ref.startswith("sha256:") and ref not in tags.values()):
                return self._err(404, "MANIFEST_UNKNOWN", "manifest %s:%s unknown" % (repo, ref))
            if not self._blob(digest, None):
                self._err(404, "MANIFEST_UNKNOWN", "manifest blob missing")
            return
        m = BLOB_RE.match(path)
        if m:
            if not self._blob(m.group(2), "application/octet-stream"):
                self._err(404, "BLOB_UNKNOWN", "blob unknown")
            return
        self._err(404, "UNSUPPORTED", "not supported")

    do_HEAD = do_GET


host, port = args.listen.rsplit(":", 1)
srv = ThreadingHTTPServer((host, int(port)), H)
srv.daemon_threads = True
port = srv.server_address[1]
if args.port_file:
    # Written whole, then renamed: whoever waits for the file never reads half of it.
    with open(args.port_file + ".tmp", "w") as f:
        f.write("%d\n" % port)
    os.rename(args.port_file + ".tmp", args.port_file)
print("registry listening on %s:%d, %d repos" % (host, port, len(REPOS)), file=sys.stderr,
      flush=True)
srv.serve_forever()
