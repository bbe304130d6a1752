"""Helpers for the HTTP tests: a free port, a daemon with --http-port, GET/any-method
requests, and the "http on HOST:PORT" log line that names the real HTTP port."""

import http.client
import re
import socket
import time

from ports import free_port  # noqa: F401  (the HTTP tests take it from here)

HTTP_RE = re.compile(r"http on (\S+):(\d+): page at")



def wait_port(port, deadline=20.0):
    """Waits until something accepts on 127.0.0.1:port (a listener opened after start-up)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("nothing listens on 127.0.0.1:%d after %ss" % (port, deadline))


def http_port_of(daemon, timeout=30.0):
    """Waits for the daemon's HTTP log line; returns the port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = HTTP_RE.search(daemon.log())
        if m:
            return int(m.group(2))
        if daemon.proc is not None and daemon.proc.poll() is not None:
            raise RuntimeError("bloomd exited:\n" + daemon.log())
        time.sleep(0.02)
    raise RuntimeError("no http line in the log:\n" + daemon.log())


def request(port, path, method="GET", timeout=10.0):
    """Returns (status, headers dict, body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def raw(port, data, timeout=5.0):
    """Sends raw bytes; returns the first response line (b"" if closed without one)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        buf = b""
        try:
            while b"\r\n" not in buf:
                chunk = s.recv(4096)
                if not chunk:
                    break
                buf += chunk
        except (ConnectionResetError, socket.timeout):
            pass
        return buf.split(b"\r\n", 1)[0]


def http_daemon(daemon_factory, args=(), **kw):
    """A daemon with the HTTP pages on a free port; returns (daemon, http_port)."""
    d = daemon_factory(args=["--http-port", str(free_port())] + list(args), **kw)
    return d, http_port_of(d)
