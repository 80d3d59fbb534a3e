#!/usr/bin/env python3
"""Memory per idle connection, per service: starts a bootpool binary on a scratch image and
config, opens N idle connections to one service at a time (HTTP: connected, nothing sent;
NBD: attached with NBD_OPT_GO, then silent; NFS: one NULL call answered, then silent), each
from one of many loopback addresses (so per-address caps do not apply), and reads the
daemon's VmRSS before and after. Prints one markdown row per service.

usage: bench/idle.py BOOTPOOL_BINARY [N]   (as root, for the loopback source addresses)
"""

import os
import resource
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

BIN = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
PORTS = {"http": 18480, "nfs": 12449, "nbd": 18809, "tftp": 18469, "dhcp": 18467, "portmap": 18411}

CONFIG = f"""\
server:
  address: 127.0.0.1
  http: 127.0.0.1:{PORTS['http']}
  state_dir: var/
  loaders: loaders/
  ports: {{ dhcp: {PORTS['dhcp']}, tftp: {PORTS['tftp']}, nfs: {PORTS['nfs']}, nbd: {PORTS['nbd']}, portmap: {PORTS['portmap']} }}
dhcp:
  mode: authoritative
  subnet: 127.0.0.0/8
  range: 127.0.0.100-127.0.0.199
  lease: 1h
images:
  demo: {{ dir: images/demo, store: disk }}
pools:
  nfs-room:
    image: demo
    root: nfs
    clients:
      - {{ macs: "52:54:00:77:00:00-52:54:00:77:00:0f" }}
  nbd-room:
    image: demo
    root: nbd
    clients:
      - {{ macs: "52:54:00:77:00:10-52:54:00:77:00:1f" }}
"""


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def source(i):
    # 127.1.x.y: 250 addresses, four connections each at N = 1000.
    k = i % 250
    return f"127.1.{k // 250}.{k % 250 + 1}"


def connect(port, i, privileged=False):
    s = socket.socket()
    if privileged:
        for p in range(300 + i % 700, 1024):
            try:
                s.bind((source(i), p))
                break
            except OSError:
                continue
    else:
        s.bind((source(i), 0))
    s.connect(("127.0.0.1", port))
    return s


def read_exact(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise RuntimeError("closed")
        b += c
    return b


def http(i):
    return connect(PORTS["http"], i)


def nbd(i):
    s = connect(PORTS["nbd"], i)
    read_exact(s, 18)
    s.sendall(struct.pack(">I", 3))
    name = b"demo"
    data = struct.pack(">I", len(name)) + name + struct.pack(">H", 0)
    s.sendall(b"IHAVEOPT" + struct.pack(">II", 7, len(data)) + data)
    while True:
        h = read_exact(s, 20)
        _, _, kind, length = struct.unpack(">QIII", h)
        read_exact(s, length)
        if kind == 1:
            return s
        if kind & 0x80000000:
            raise RuntimeError(f"GO refused: {kind:#x}")


def nfs(i):
    s = connect(PORTS["nfs"], i)
    call = struct.pack(">10I", i + 1, 0, 2, 100003, 3, 0, 0, 0, 0, 0)
    s.sendall(struct.pack(">I", 0x80000000 | len(call)) + call)
    mark = struct.unpack(">I", read_exact(s, 4))[0]
    read_exact(s, mark & 0x7FFFFFFF)
    return s


def measure(d, name, opener):
    log = open(os.path.join(d, "log"), "w")
    env = dict(os.environ, RUST_LOG="error")
    p = subprocess.Popen([BIN, "serve", "--config", os.path.join(d, "pools.yaml")],
                         stdout=log, stderr=log, env=env)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", PORTS["http"]), 0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        time.sleep(1)
        if p.poll() is not None:
            sys.exit("bootpool stopped:\n" + open(os.path.join(d, "log")).read())
        # One connection first, so what every connection shares (a thread, a table) is
        # not counted as its cost.
        first = opener(N)
        time.sleep(0.5)
        before = rss_kib(p.pid)
        held = []
        for i in range(N):
            try:
                held.append(opener(i))
            except (OSError, RuntimeError):
                pass
        time.sleep(2)
        # Only connections the server still holds count.
        alive = 0
        for s in held:
            s.setblocking(False)
            try:
                alive += s.recv(1) != b""
            except BlockingIOError:
                alive += 1
            except OSError:
                pass
        after = rss_kib(p.pid)
        fds = len(os.listdir(f"/proc/{p.pid}/fd"))
        sys.stderr.write(f"{name}: daemon holds {fds} descriptors\n")
        first.close()
        for s in held:
            s.close()
        per = (after - before) / max(alive, 1)
        return f"| {name} | {alive} of {N} | {before} | {after} | {per:.1f} |"
    finally:
        p.terminate()
        p.wait(30)
        if os.environ.get("IDLE_LOG"):
            sys.stderr.write(open(os.path.join(d, "log")).read())


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    d = tempfile.mkdtemp()
    try:
        img = os.path.join(d, "images/demo")
        os.makedirs(os.path.join(img, "rootfs/etc"))
        os.makedirs(os.path.join(d, "loaders"))
        for name, size in [("vmlinuz", 1 << 20), ("initrd.img", 1 << 20), ("rootfs.img", 16 << 20)]:
            with open(os.path.join(img, name), "wb") as f:
                f.write(os.urandom(size))
        with open(os.path.join(img, "rootfs/etc/hostname"), "w") as f:
            f.write("demo\n")
        with open(os.path.join(d, "pools.yaml"), "w") as f:
            f.write(CONFIG)
        print("| service | connections held | RSS before KiB | RSS after KiB | KiB per connection |")
        print("|---|---|---|---|---|")
        for name, opener in [("HTTP", http), ("NBD", nbd), ("NFS", nfs)]:
            # A fresh daemon per service: memory freed by one is not reused by the next.
            shutil.rmtree(os.path.join(d, "var"), ignore_errors=True)
            print(measure(d, name, opener))
    finally:
        shutil.rmtree(d, ignore_errors=True)


main()
