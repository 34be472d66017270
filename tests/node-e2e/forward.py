#!/usr/bin/env python3
"""Forwards TCP connections from loopback ports to the kubelet's address, for scripts/node-e2e.

The harness's kubelet cannot listen on every address here (scripts/cluster's kubelets hold
ports 10250 and 10255 on their node addresses, and a wildcard listener of ours would keep
them from starting), so it listens on the node's address only; some specs still reach it at
127.0.0.1:10250 and localhost:10255. This carries those connections over, bytes as they are
(TLS included).

usage: forward.py --to HOST PORT... [--port-file FILE]
  Listens on 127.0.0.1:PORT for each PORT and connects each client to HOST:PORT. FILE is
  written once every port listens.
"""
import argparse
import asyncio
import os
import sys


async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError):
            writer.close()


async def serve(host, port):
    async def handle(client_r, client_w):
        try:
            up_r, up_w = await asyncio.wait_for(asyncio.open_connection(host, port), 10)
        except (OSError, asyncio.TimeoutError) as e:
            print(f"forward: {host}:{port}: {e}", file=sys.stderr, flush=True)
            client_w.close()
            return
        await asyncio.gather(pipe(client_r, up_w), pipe(up_r, client_w))
        client_w.close()
        up_w.close()

    return await asyncio.start_server(handle, "127.0.0.1", port, reuse_address=True)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--to", required=True)
    ap.add_argument("--port-file")
    ap.add_argument("ports", nargs="+", type=int)
    a = ap.parse_args()
    servers = [await serve(a.to, p) for p in a.ports]
    if a.port_file:
        with open(a.port_file + ".tmp", "w") as f:
            f.write(" ".join(map(str, a.ports)) + "\n")
        os.rename(a.port_file + ".tmp", a.port_file)
    print(f"forward: 127.0.0.1:{a.ports} -> {a.to}", file=sys.stderr, flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    asyncio.run(main())
