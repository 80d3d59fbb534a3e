#!/usr/bin/env python3
"""bench/siege.py: what a hostile room costs the server, before and after a change.

Runs the siege of issue 49 against one or two bootpool binaries, one after the other, each in
a private pair of network namespaces (server and room, one veth): the daemon serves a small
image on 10.79.0.1 with every service on its standard port, an honest client takes a lease with
busybox udhcpc, and a hostile host on the same segment floods each service from addresses that
hold no lease:

  nfs-one    1,030 idle TCP connects to NFS (2049) from one address
  nbd-many   16 connects to NBD (10809) from each of 64 addresses
  tftp-8     256 read requests (half netascii) of a 15 MiB kernel from 8 addresses, never
             acknowledged
  http-17    64 downloads of that kernel from each of 17 addresses, never read

While each flood holds (FLOOD_S seconds), the daemon's threads and resident memory are sampled
every 100 ms (peaks reported, beside the figures before the flood), and the honest client does
what a booting client does with that service, with a program nobody here wrote: nfs-ls,
nbdinfo, tftp (tftp-hpa), curl. Its success is reported, and its seconds for information only
(the machine is busy with the flood). Memory and thread figures do not depend on the machine's
speed: they are what the server holds. Everything started is stopped on exit; traffic stays in
the namespaces this script made.

usage: bench/siege.py [--bin PATH] [--before PATH] [--out FILE.json]
  --bin      the bootpool binary to measure (default: target/release/bootpool)
  --before   also measure this older binary, first, as "before"
  --out      also write the figures as JSON
Needs root, iproute2, busybox, libnfs-utils (nfs-ls), libnbd-bin (nbdinfo), tftp-hpa, curl.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

NET = "10.79.0"
SERVER = f"{NET}.1"
NFS_MAC = "52:54:00:77:00:01"
NBD_MAC = "52:54:00:77:00:11"
FLOOD_S = 8
KERNEL_BYTES = 15 << 20

CONFIG = """\
server:
  address: {server}
  interfaces: [{iface}]
  http: {server}:8080
  state_dir: var/
  loaders: loaders/
  ports: {{ dhcp: 67, tftp: 69, nfs: 2049, nbd: 10809, portmap: 111 }}
dhcp:
  mode: authoritative
  subnet: {net}.0/24
  range: {net}.100-{net}.150
  router: {server}
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


def sh(*args, check=True, timeout=60):
    return subprocess.run(args, check=check, timeout=timeout, capture_output=True, text=True)


def in_ns(ns, *args, **kw):
    return sh("ip", "netns", "exec", ns, *args, **kw)


class Room:
    """Two namespaces and a veth; the daemon in one, the clients in the other."""

    def __init__(self, binary, work, tag):
        self.server_ns, self.room_ns = f"siege-s{tag}", f"siege-c{tag}"
        self.server_if, self.room_if = f"sgs{tag}", f"sgc{tag}"
        self.work = work
        for ns in (self.server_ns, self.room_ns):
            sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", self.server_if, "netns", self.server_ns, "type", "veth",
           "peer", "name", self.room_if, "netns", self.room_ns)
        in_ns(self.server_ns, "ip", "addr", "add", f"{SERVER}/24", "dev", self.server_if)
        for ns, dev in ((self.server_ns, self.server_if), (self.room_ns, self.room_if)):
            in_ns(ns, "ip", "link", "set", "lo", "up")
            in_ns(ns, "ip", "link", "set", dev, "up")
        config = os.path.join(work, "pools.yaml")
        with open(config, "w") as f:
            f.write(CONFIG.format(server=SERVER, iface=self.server_if, net=NET))
        shutil.rmtree(os.path.join(work, "var"), ignore_errors=True)
        self.log = open(os.path.join(work, f"daemon-{tag}.log"), "w")
        self.daemon = subprocess.Popen(
            ["ip", "netns", "exec", self.server_ns, binary, "serve", "--config", config],
            stdout=subprocess.DEVNULL, stderr=self.log, env={**os.environ, "RUST_LOG": "warn"})
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.answers():
                break
            time.sleep(0.2)
        else:
            raise SystemExit("the daemon did not start; see " + self.log.name)

    def answers(self):
        r = in_ns(self.server_ns, "curl", "-s", "-o", "/dev/null", "-m", "2",
                  f"http://{SERVER}:8080/metrics", check=False)
        return r.returncode == 0

    def status(self, field):
        with open(f"/proc/{self.daemon.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise KeyError(field)

    def lease(self, mac):
        """A lease for `mac`, put on the room's end (any addresses it had are flushed)."""
        in_ns(self.room_ns, "ip", "link", "set", self.room_if, "down")
        in_ns(self.room_ns, "ip", "link", "set", self.room_if, "address", mac)
        in_ns(self.room_ns, "ip", "link", "set", self.room_if, "up")
        script = os.path.join(self.work, "udhcpc.sh")
        with open(script, "w") as f:
            f.write('#!/bin/sh\n[ "$1" = bound ] && ip addr flush dev $interface && '
                    'ip addr add $ip/24 dev $interface && echo $ip > %s/leased\n' % self.work)
        os.chmod(script, 0o755)
        in_ns(self.room_ns, "busybox", "udhcpc", "-i", self.room_if, "-f", "-q", "-n",
              "-t", "3", "-T", "1", "-s", script, timeout=30)
        with open(os.path.join(self.work, "leased")) as f:
            return f.read().strip()

    def strangers(self, first, count):
        ips = [f"{NET}.{k}" for k in range(first, first + count)]
        for ip in ips:
            in_ns(self.room_ns, "ip", "addr", "add", f"{ip}/24", "dev", self.room_if)
        return ips

    def close(self):
        self.daemon.kill()
        self.daemon.wait()
        for ns in (self.server_ns, self.room_ns):
            sh("ip", "netns", "delete", ns, check=False)


def flood_in_room(kind, ips, hold_s):
    """Runs inside the room's namespace (this script, re-entered): sends one flood from `ips`
    and holds it for `hold_s` seconds."""
    held = []
    if kind in ("nfs", "nbd", "http"):
        port, each = {"nfs": (2049, 1030), "nbd": (10809, 16), "http": (8080, 64)}[kind]
        if kind == "nfs":
            each = 1030 if len(ips) == 1 else 64
        for ip in ips:
            for _ in range(each):
                s = socket.socket()
                s.settimeout(5)
                s.bind((ip, 0))
                try:
                    s.connect((SERVER, port))
                    if kind == "http":
                        s.sendall(b"GET /boot/demo/vmlinuz HTTP/1.1\r\nHost: x\r\n\r\n")
                    held.append(s)
                except OSError:
                    s.close()
    elif kind == "tftp":
        for k in range(256):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind((ips[k % len(ips)], 0))
            mode = b"netascii" if k % 2 == 0 else b"octet"
            s.sendto(b"\x00\x01demo/vmlinuz\x00" + mode + b"\x00", (SERVER, 69))
            held.append(s)
    print(len(held), flush=True)
    time.sleep(hold_s)


FLOODS = [
    # name, service, lease of, addresses, what the honest client does
    ("nfs-one", "nfs", NFS_MAC, 1,
     lambda work: ["nfs-ls", f"nfs://{SERVER}/demo/etc/?version=3"]),
    ("http-17", "http", NFS_MAC, 17,
     lambda work: ["curl", "-sS", "--fail", "-m", "60", "-o", "/dev/null",
                   f"http://{SERVER}:8080/boot/script/{NFS_MAC}.ipxe", "-o", "/dev/null",
                   f"http://{SERVER}:8080/boot/demo/vmlinuz"]),
    ("tftp-8", "tftp", NFS_MAC, 8,
     lambda work: ["tftp", SERVER, "-m", "binary", "-c", "get", "demo/vmlinuz",
                   os.path.join(work, "got")]),
    ("nbd-many", "nbd", NBD_MAC, 64,
     lambda work: ["nbdinfo", f"nbd://{SERVER}/demo"]),
]


def measure(binary, work, tag):
    room = Room(binary, work, tag)
    rows = []
    try:
        for name, kind, mac, n_addr, honest in FLOODS:
            # A fresh lease flushes the last flood's addresses from the room's end.
            room.lease(mac)
            ips = room.strangers(20, n_addr)
            time.sleep(1)
            before = (room.status("Threads"), room.status("VmRSS"))
            flood = subprocess.Popen(
                ["ip", "netns", "exec", room.room_ns, sys.executable, __file__, "--flood", kind,
                 "--hold", str(FLOOD_S), *ips],
                stdout=subprocess.PIPE, text=True)
            sent = int(flood.stdout.readline() or 0)
            peak_threads, peak_rss = before
            t0 = time.time()
            client = subprocess.Popen(["ip", "netns", "exec", room.room_ns, *honest(work)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            client_s = None
            while flood.poll() is None:
                peak_threads = max(peak_threads, room.status("Threads"))
                peak_rss = max(peak_rss, room.status("VmRSS"))
                if client_s is None and client.poll() is not None:
                    client_s = time.time() - t0
                time.sleep(0.1)
            if client.poll() is None:
                client.wait(timeout=120)
                client_s = time.time() - t0
            ok = client.returncode == 0
            time.sleep(1)
            after_rss = room.status("VmRSS")
            rows.append({
                "flood": name, "sent": sent,
                "threads_before": before[0], "threads_peak": peak_threads,
                "rss_mib_before": round(before[1] / 1024, 1),
                "rss_mib_peak": round(peak_rss / 1024, 1),
                "rss_mib_after": round(after_rss / 1024, 1),
                "honest_client_ok": ok, "honest_client_s": round(client_s or 0, 1),
                "honest_client_said": "" if ok else client.stderr.read()[-300:],
            })
            print(f"  {tag} {name}: sent {sent}, threads {before[0]} -> {peak_threads}, "
                  f"RSS {before[1] // 1024} -> {peak_rss // 1024} MiB (after {after_rss // 1024}),"
                  f" honest client {'ok' if ok else 'FAILED'} in {client_s or 0:.1f} s",
                  file=sys.stderr)
    finally:
        room.close()
    return rows


def image(work):
    demo = os.path.join(work, "images/demo")
    os.makedirs(os.path.join(demo, "rootfs/etc"), exist_ok=True)
    with open(os.path.join(demo, "rootfs/etc/hostname"), "w") as f:
        f.write("demo\n")
    # A kernel with line ends in it, so netascii has something to convert.
    block = (b"x" * 79 + b"\n") * 1024
    with open(os.path.join(demo, "vmlinuz"), "wb") as f:
        for _ in range(KERNEL_BYTES // len(block)):
            f.write(block)
    for name, size in (("initrd.img", 2 << 20), ("rootfs.img", 16 << 20)):
        with open(os.path.join(demo, name), "wb") as f:
            f.write(os.urandom(size))
    loaders = os.path.join(work, "loaders")
    os.makedirs(loaders, exist_ok=True)
    with open(os.path.join(loaders, "undionly.kpxe"), "wb") as f:
        f.write(os.urandom(70_000))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    p.add_argument("--bin", default=os.path.join(os.path.dirname(__file__),
                                                 "../target/release/bootpool"))
    p.add_argument("--before")
    p.add_argument("--out")
    p.add_argument("--flood", help=argparse.SUPPRESS)
    p.add_argument("--hold", type=float, default=FLOOD_S, help=argparse.SUPPRESS)
    p.add_argument("ips", nargs="*", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.flood:
        flood_in_room(a.flood, a.ips, a.hold)
        return
    if os.geteuid() != 0:
        raise SystemExit("bench/siege.py needs root (network namespaces)")
    work = tempfile.mkdtemp(prefix="siege-")
    image(work)
    runs = []
    if a.before:
        runs.append(("before", os.path.realpath(a.before)))
    runs.append(("after", os.path.realpath(a.bin)))
    results = {}
    try:
        for k, (name, binary) in enumerate(runs):
            results[name] = measure(binary, work, f"{os.getpid() % 10000}{k}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    names = [n for n, _ in runs]
    print("| flood | " + " | ".join(
        f"{n}: threads | {n}: RSS MiB peak (after) | {n}: honest client" for n in names) + " |")
    print("|---|" + "---|---|---|" * len(names))
    for i, (flood, *_rest) in enumerate(FLOODS):
        cells = []
        for n in names:
            r = results[n][i]
            cells += [f"{r['threads_before']} -> {r['threads_peak']}",
                      f"{r['rss_mib_before']} -> {r['rss_mib_peak']} ({r['rss_mib_after']})",
                      f"{'ok' if r['honest_client_ok'] else 'FAILED'} ({r['honest_client_s']} s)"]
        print(f"| {flood} | " + " | ".join(cells) + " |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"command": " ".join(sys.argv), "flood_s": FLOOD_S,
                       "binaries": dict(runs), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
