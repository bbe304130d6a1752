#!/usr/bin/env python3
"""tls_driver.py - CHECKADD load for bench/run_tls.sh: one connection, plain or TLS,
pipelining DEPTH lines of KEYS keys, for SECS seconds; prints "<lines/s> <keys/s>".

bench/loadgen.c speaks plain TCP only, so both sides of the TLS ratio are measured with
this driver: the client's own cost (Python, OpenSSL) is in both numbers. Batches are
prepared before the clock starts; keys are random so the filter grows as in production.
"""
import argparse
import os
import socket
import ssl
import time

p = argparse.ArgumentParser()
p.add_argument("--port", type=int, required=True)
p.add_argument("--tls", action="store_true")
p.add_argument("--secs", type=float, default=5)
p.add_argument("--keys", type=int, default=100)
p.add_argument("--depth", type=int, default=32)
p.add_argument("--filter", default="bench")
a = p.parse_args()

sock = socket.create_connection(("127.0.0.1", a.port))
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
if a.tls:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # a benchmark of throughput, not of trust
    sock = ctx.wrap_socket(sock)
sock.sendall(b"CREATE %s capacity=10000000\r\n" % a.filter.encode())
buf = b""
while b"\r\n" not in buf:
    buf += sock.recv(4096)
buf = b""

batches = []
for _ in range(64):
    lines = []
    for _ in range(a.depth):
        keys = b" ".join(os.urandom(8).hex().encode() for _ in range(a.keys))
        lines.append(b"CHECKADD " + a.filter.encode() + b" " + keys + b"\r\n")
    batches.append(b"".join(lines))

done = 0
start = time.monotonic()
deadline = start + a.secs
i = 0
while time.monotonic() < deadline:
    sock.sendall(batches[i % len(batches)])
    i += 1
    want = a.depth
    while want > 0:
        chunk = sock.recv(1 << 18)
        if not chunk:
            raise SystemExit("server closed the connection")
        want -= chunk.count(b"\n")
    done += a.depth
secs = time.monotonic() - start
print("%.0f %.0f" % (done / secs, done * a.keys / secs))
