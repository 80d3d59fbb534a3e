#!/usr/bin/env python3
"""bench/storm-model.py: what any schedule of a link's bytes can do for a storm.

A fluid model of `bootpool storm`'s room, to ask what no storm run can: how fast could the
room boot if the server handed out its links' bytes by some other rule? It replays a shipped
trace (bench/traces/demo-nbd.trace, or demo-nfs.trace with --trace: NFS READs carry their
bytes, other calls none) for N identical clients the way the storm's clients do
(instruments/src/storm: every request waits for the answers it waited for in the recording, then its think
time times --think-scale), in steps of --step seconds. Each client's port and each server link
is a token bucket of the storm's rates and bursts (instruments/src/storm/room.rs: 10 ms of the rate, at
least 64 KiB); each step, a policy splits every link's bytes among its clients that have bytes
waiting. Clients sit on the links round-robin, as bootpool spreads them.

Policies:
  fair                      max-min fair shares (every client alike)
  weights:B,A,R,C           bootpool's pacer (src/steer/fair_share.rs): a client fetching
                            boot files weighs B x A^(R - rank) among a link's first R+1 by
                            arrival (B after); a root reader 1 + C x (how far its root bytes
                            trail the link's leader's)/leader.
                            bootpool's own: weights:2,1.5,9,2. A negative C weighs root
                            readers by arrival as boot files are: (-C)^(R - rank).
  strict:boot-first         boot files strictly first, in order of arrival; roots alike
  strict:boot-first,trail   ... roots strictly by fewest root bytes received
  strict:boot-first,late    ... roots strictly by latest arrival first
  strict:arrival            every client strictly in order of arrival
  strict:roots-first        root readers strictly first, alike; boot files take the rest,
                            strictly by arrival
  strict:roots-first,trail  ... root readers strictly by fewest root bytes received
  random:SIGMA              weights drawn per client from a log-normal (an unfair TCP)

What it leaves out: TCP (slow start, losses, a pacer's 50 ms rounds and its headroom), the
server's own time per request, the clients' jitter. A policy here knows what every client
wants each step; bootpool's pacer knows what each connection did in its last round, so only
smooth weightings carry over: sharp priorities that win here (roots strictly first) starve
the real room (docs/bench-history.md, "Storm", session 22). Identical clients under `fair` stay in
lock-step, which a real room does not; so the model says little about the reference stack,
and is meant to compare schedules with each other. Against the storm on this machine
(docs/bench-history.md, "Storm", session 21): one client 14.7 s (the storm: 14.7 s); 40 clients under
bootpool's weights 22.1 s (the storm: 22.6-22.9 s), with roots weighed 1 to 21 21.8 s (22.4 s):
the storm's real TCP and pacer lose 0.6-0.8 s that the model does not. NFS, 40 clients:
bootpool's weights 37.8 s (the storm: 37.0-37.1 s), roots weighed 1 to 21 39.0 s (37.7-37.9 s),
the dip at 25 s included; the model's steps cost the NFS trace's 8000 calls ~1 s.

Examples:
  bench/storm-model.py                                 # bootpool's weights, 40 clients
  bench/storm-model.py --policy fair --policy strict:boot-first,trail
  bench/storm-model.py --sweep                         # ~200 weightings, best first
  bench/storm-model.py --bound                         # what no schedule can beat
  bench/storm-model.py --trace bench/traces/demo-nfs.trace   # NFS (~20 s a policy)
"""

import argparse
import bisect
import itertools
import json
import math
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def load(path):
    """The trace's ops, sorted by time, as (t, d, op, kind, bytes): kind is "boot" for boot
    files, "root" for root reads, "other" for the rest (which carry no bytes)."""
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    if "bootpool_trace" not in lines[0]:
        sys.exit(f"{path}: not a bootpool trace")
    ops = []
    for e in sorted(lines[1:], key=lambda e: e["t"]):
        if e["op"] == "file":
            kind, size = "boot", e["bytes"]
        elif e["op"] == "nbd" and e.get("cmd") == "read":
            kind, size = "root", e["len"]
        elif e["op"] == "nfs" and e.get("proc") == "read":
            kind, size = "root", e.get("bytes", e.get("count", 0))
        else:
            kind, size = "other", 0
        ops.append((e["t"], e.get("d", 0.0), e["op"], kind, size))
    return ops


class Trace:
    """The closed loop of src/trace/format.rs's `Gates`: op j may start once the first
    need[j] answers (in the recording's order) are in, after think[j]."""

    def __init__(self, ops, think_scale):
        self.ops = ops
        end = [t + d for t, d, *_ in ops]
        self.by_end = sorted(range(len(ops)), key=lambda i: (end[i], i))
        keys = [(end[i], i) for i in self.by_end]
        self.need, self.think = [], []
        for j, (t, *_rest) in enumerate(ops):
            n = bisect.bisect_left(keys, (t, j))
            self.need.append(n)
            latest = end[self.by_end[n - 1]] if n else 0.0
            self.think.append(max(0.0, t - latest) * think_scale)
        self.size = [o[4] for o in ops]
        self.kind = [o[3] for o in ops]
        self.booted = next(j for j, o in enumerate(ops) if o[2] == "booted")
        self.initrd = max(j for j, o in enumerate(ops) if o[3] == "boot")


class Client:
    def __init__(self, i, links, trace, burst):
        self.i, self.link = i, i % links
        self.done = [False] * len(trace.ops)
        self.prefix = self.ready = 0
        self.waiting = []  # (due, op)
        self.moving = {}  # op -> bytes left
        self.until = {}  # op -> when its answer can be in (latency)
        self.tokens = burst
        self.root_received = 0
        self.kernel = self.booted = None
        self.first_boot_byte = self.last_byte = None
        # Set each step for a client with bytes to move: how much it can take now, and the
        # ops (in order) whose bytes it takes.
        self.want = 0.0
        self.ready_ops = []

    def fetching_boot_files(self, tr):
        return any(tr.kind[j] == "boot" for j in self.moving)


def run(policy, a, trace):
    """Boots a room; returns (all booted s, when each client had its boot files, egress per
    second in Mbit/s)."""
    client_burst = max(a.client_rate / 100, 65536)
    link_burst = max(a.link_rate / 100, 65536)
    cs = [Client(i, a.links, trace, client_burst) for i in range(a.clients)]
    link_tokens = [link_burst] * a.links
    egress = {}
    t = 0.0
    while t < a.give_up:
        for c in cs:
            if c.booted is not None:
                continue
            while c.prefix < len(trace.ops) and c.done[trace.by_end[c.prefix]]:
                c.prefix += 1
            while c.ready < len(trace.ops) and trace.need[c.ready] <= c.prefix:
                c.waiting.append((t + trace.think[c.ready], c.ready))
                c.ready += 1
            later = []
            for due, j in c.waiting:
                if due > t:
                    later.append((due, j))
                elif j == trace.booted:
                    c.booted = t
                elif trace.size[j] > 0:
                    c.moving[j], c.until[j] = trace.size[j], t + a.rtt
                else:
                    c.until[j] = t + (0.02 if trace.ops[j][2] == "dhcp" else a.rtt)
            c.waiting = later
            for j, when in list(c.until.items()):
                if j not in c.moving and when <= t:
                    c.done[j] = True
                    del c.until[j]
        if all(c.booted is not None for c in cs):
            break
        for c in cs:
            c.tokens = min(client_burst, c.tokens + a.client_rate * a.step)
        for link in range(a.links):
            link_tokens[link] = min(link_burst, link_tokens[link] + a.link_rate * a.step)
            on = []
            for c in cs:
                if c.link != link:
                    continue
                ready = [j for j in c.moving if c.until.get(j, 0) <= t]
                if ready:
                    c.want = min(c.tokens, sum(c.moving[j] for j in ready))
                    c.ready_ops = sorted(ready)
                    on.append(c)
            grant = policy(on, link_tokens[link], trace)
            for c in on:
                give = min(grant.get(c.i, 0.0), c.want)
                c.tokens -= give
                link_tokens[link] -= give
                egress[int(t)] = egress.get(int(t), 0) + give
                for j in c.ready_ops:
                    if give <= 0:
                        break
                    x = min(give, c.moving[j])
                    c.moving[j] -= x
                    give -= x
                    if trace.kind[j] == "root":
                        c.root_received += x
                    elif trace.kind[j] == "boot" and c.first_boot_byte is None:
                        c.first_boot_byte = t
                    c.last_byte = t
                    if c.moving[j] <= 0:
                        del c.moving[j]
                        c.until.pop(j, None)
                        c.done[j] = True
                        if j == trace.initrd:
                            c.kernel = t
        t += a.step
    booted = [c.booted if c.booted is not None else math.inf for c in cs]
    mbit = [round(egress.get(s, 0) * 8 / 1e6) for s in range(int(min(max(booted), t)) + 1)]
    return max(booted), sorted(c.kernel or math.inf for c in cs), mbit, cs


def bound(a, trace):
    """Two floors no schedule of the links' bytes can beat, from one client booting alone
    (the fastest any client can go) and the bytes every client needs. (1) The busiest link
    carries its clients' boot files no sooner than from the moment one lone client's first
    boot-file byte flows; the last of those clients then still needs what a lone client needs
    after its boot files. (2) The same with all of each client's bytes, and what a lone client
    needs after its last byte. Returns (floor, lines that explain it)."""
    alone = argparse.Namespace(**{**vars(a), "clients": 1})
    booted, kernels, _, (c,) = run(policy_named("fair"), alone, trace)
    per_link = math.ceil(a.clients / a.links)
    boot_bytes = sum(s for s, k in zip(trace.size, trace.kind) if k == "boot")
    all_bytes = sum(trace.size)
    by_boot = c.first_boot_byte + per_link * boot_bytes / a.link_rate + booted - kernels[0]
    by_bytes = c.first_boot_byte + per_link * all_bytes / a.link_rate + booted - c.last_byte
    lines = [
        f"one client alone: first boot-file byte {c.first_boot_byte:.2f} s, boot files done"
        f" {kernels[0]:.2f} s, last byte {c.last_byte:.2f} s, booted {booted:.2f} s",
        f"boot files: {boot_bytes / 1e6:.1f} MB a client, {per_link} clients on the busiest link:"
        f" the last of them booted no sooner than {by_boot:.2f} s",
        f"all bytes: {all_bytes / 1e6:.1f} MB a client: the room booted no sooner than"
        f" {by_bytes:.2f} s",
    ]
    return max(by_boot, by_bytes), lines


def water(claims, budget):
    """Weighted max-min shares: claims (id, weight, demand) -> id -> bytes."""
    out, left, rest = {}, budget, list(claims)
    while rest:
        level = left / sum(w for _, w, _ in rest)
        met = [x for x in rest if x[2] <= x[1] * level]
        if not met:
            out.update({i: w * level for i, w, _ in rest})
            break
        for i, _, d in met:
            out[i] = d
            left -= d
        rest = [x for x in rest if x not in met]
    return out


def in_order(clients, budget, out):
    """Gives each of `clients` in turn all it wants of `budget` (into `out`); returns what is
    left."""
    for c in clients:
        out[c.i] = min(c.want, budget)
        budget -= out[c.i]
    return budget


def fair_shares(clients, budget, out):
    """Max-min fair shares of `budget` among `clients` (into `out`); returns what is left."""
    if clients:
        out.update(water([(c.i, 1, c.want) for c in clients], budget))
    return budget - sum(out.get(c.i, 0.0) for c in clients)


def strict(root_order=None, boot_files_first=True):
    """Boot files strictly first, by arrival; then roots strictly by `root_order`, or in fair
    shares if None. Without `boot_files_first`: every client strictly by arrival."""

    def policy(on, budget, tr):
        out = {}
        if boot_files_first:
            first = sorted((c for c in on if c.fetching_boot_files(tr)), key=lambda c: c.i)
            rest = [c for c in on if not c.fetching_boot_files(tr)]
        else:
            first, rest = sorted(on, key=lambda c: c.i), []
        if root_order is not None:
            first, rest = first + sorted(rest, key=root_order), []
        fair_shares(rest, in_order(first, budget, out), out)
        return out

    return policy


def weights(boot, ahead, ranks, behind):
    def policy(on, budget, tr):
        readers = [c.root_received for c in on if not c.fetching_boot_files(tr)]
        leader = max(readers or [0])
        claims = []
        for rank, c in enumerate(sorted(on, key=lambda c: c.i)):
            if c.fetching_boot_files(tr):
                w = boot * ahead ** max(0, ranks - rank)
            elif behind < 0:
                w = (-behind) ** max(0, ranks - rank)
            else:
                w = 1 + behind * ((leader - c.root_received) / leader if leader else 0)
            claims.append((c.i, w, c.want))
        return water(claims, budget)

    return policy


def roots_first(root_order=None):
    """Root readers strictly first (in fair shares, or strictly by `root_order`); boot files
    take what is left, strictly in order of arrival."""

    def policy(on, budget, tr):
        out = {}
        roots = [c for c in on if not c.fetching_boot_files(tr)]
        boots = sorted((c for c in on if c.fetching_boot_files(tr)), key=lambda c: c.i)
        if root_order is None:
            left = fair_shares(roots, budget, out)
        else:
            left = in_order(sorted(roots, key=root_order), budget, out)
        in_order(boots, max(left, 0.0), out)
        return out

    return policy


def lognormal(sigma, seed=1):
    draw = random.Random(seed)
    w = {}

    def policy(on, budget, tr):
        for c in on:
            w.setdefault(c.i, math.exp(draw.gauss(0, sigma)))
        return water([(c.i, w[c.i], c.want) for c in on], budget)

    return policy


def policy_named(name):
    if name == "fair":
        return lambda on, budget, tr: water([(c.i, 1, c.want) for c in on], budget)
    kind, _, arg = name.partition(":")
    if kind == "weights":
        b, a, r, c = arg.split(",")
        return weights(float(b), float(a), int(r), float(c))
    if kind == "random":
        return lognormal(float(arg))
    orders = {
        "boot-first": strict(),
        "boot-first,trail": strict(root_order=lambda c: c.root_received),
        "boot-first,late": strict(root_order=lambda c: -c.i),
        "arrival": strict(boot_files_first=False),
        "roots-first": roots_first(),
        "roots-first,trail": roots_first(root_order=lambda c: (c.root_received, c.i)),
    }
    if kind == "strict" and arg in orders:
        return orders[arg]
    sys.exit(f"unknown policy {name!r} (see --help)")


def rate(text):
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
    for u, m in units.items():
        if text.lower().endswith(u):
            return float(text[: -len(u)]) * m / 8
    return float(text) / 8


def main():
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--trace", default=os.path.join(HERE, "traces/demo-nbd.trace"))
    p.add_argument("--clients", type=int, default=40)
    p.add_argument("--links", type=int, default=4, help="server links (default 4)")
    p.add_argument("--link-rate", default="236mbit",
                   help="payload per link (default 236mbit: 250mbit at the ~94%% of it TCP "
                        "payload reaches through the storm's shaper)")
    p.add_argument("--client-link", default="100mbit")
    p.add_argument("--think-scale", type=float, default=0.2)
    p.add_argument("--step", type=float, default=0.0002,
                   help="seconds per step (default 0.0002; 0.0005 runs 2.5x faster and "
                        "adds ~0.5 s to a client's 1000 requests)")
    p.add_argument("--rtt", type=float, default=0.0002, help="seconds per request")
    p.add_argument("--give-up", type=float, default=120.0)
    p.add_argument("--policy", action="append", help="see above; repeatable")
    p.add_argument("--sweep", action="store_true",
                   help="every weighting B in 1,2,6; A in 1.2,1.5,2,3; R in 5,9,15,40; "
                        "C in 0,2,6,20 (NBD: about 30 min on one core)")
    p.add_argument("--egress", action="store_true", help="print egress per second")
    p.add_argument("--bound", action="store_true",
                   help="print the floors no schedule can beat (runs no policy unless "
                        "--policy or --sweep is given too)")
    a = p.parse_args()
    a.link_rate, a.client_rate = rate(a.link_rate), rate(a.client_link)
    trace = Trace(load(a.trace), a.think_scale)
    if a.bound:
        floor, lines = bound(a, trace)
        print("\n".join(lines))
        print(f"no schedule boots the room before {floor:.2f} s")
        if not (a.policy or a.sweep):
            return
    names = a.policy or ["weights:2,1.5,9,2"]
    if a.sweep:
        names = [f"weights:{b:g},{x:g},{r},{c:g}" for b, x, r, c in itertools.product(
            (1, 2, 6), (1.2, 1.5, 2, 3), (5, 9, 15, 40), (0, 2, 6, 20))]
    rows = []
    for name in names:
        booted, kernels, mbit, _ = run(policy_named(name), a, trace)
        rows.append((booted, name, kernels[0], kernels[-1], mbit))
        print(f"{name:28} all booted {booted:6.2f} s   boot files done {kernels[0]:5.2f}"
              f"-{kernels[-1]:5.2f} s", flush=True)
        if a.egress:
            print("   egress Mbit/s:", " ".join(map(str, mbit)))
    if len(rows) > 1:
        rows.sort()
        print("\nbest first:")
        for booted, name, *_ in rows[:10]:
            print(f"  {booted:6.2f} s  {name}")


if __name__ == "__main__":
    main()
