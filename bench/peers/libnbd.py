#!/usr/bin/env python3
"""bench/peers/libnbd.py: libnbd's checks of an NBD server, through its Python binding.

  libnbd.py ROLE SERVER IMAGE
ROLE `nbd` asks the read-only export `demo`, `cow` the copy-on-write `demo-cow`; IMAGE is the
file both serve. Prints one line per check to stdout: test TAB passed|failed|n/a TAB reason.
Strict mode is off where a check asks the server something libnbd would refuse itself.
"""

import os
import random
import sys

import nbd

role, server, image = sys.argv[1:4]
export = "demo" if role == "nbd" else "demo-cow"
uri = f"nbd://{server}/{export}"
with open(image, "rb") as f:
    data = f.read()
size = len(data)


def say(test, status, reason=""):
    print(f"{export}: {test}\t{status}\t{reason}", flush=True)


def check(test, fn):
    """Runs fn; it returns None (passed), or ("n/a", reason); an exception is a failure."""
    try:
        out = fn()
    except Exception as e:  # noqa: BLE001 - every failure is reported, not raised
        say(test, "failed", f"{type(e).__name__}: {e}".replace("\t", " ").replace("\n", " "))
        return
    if out is None:
        say(test, "passed")
    else:
        say(test, *out)


def connect():
    h = nbd.NBD()
    h.connect_uri(uri)
    return h


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def handshake():
    h = connect()
    expect(h.get_protocol() == "newstyle-fixed", h.get_protocol())
    h.shutdown()


def size_and_flags():
    h = connect()
    expect(h.get_size() == size, f"size {h.get_size()}, the file has {size}")
    expect(bool(h.is_read_only()) == (role == "nbd"), f"read-only flag {h.is_read_only()}")
    h.shutdown()


def reads():
    h = connect()
    for off, n in [(0, 512), (4096, 4096), (size // 2, 65536), (size - 512, 512), (1, 3)]:
        expect(h.pread(n, off) == data[off : off + n], f"{n} bytes at {off} differ")
    h.shutdown()


def largest_read():
    h = connect()
    n = min(h.get_block_size(nbd.SIZE_MAXIMUM) or 32 << 20, size)
    expect(h.pread(n, 0) == data[:n], f"a {n}-byte read differs")
    h.shutdown()


def in_flight():
    h = connect()
    rnd = random.Random(42)
    bufs = []
    for _ in range(64):
        n = rnd.choice([512, 4096, 65536, 131072])
        off = rnd.randrange(0, size - n)
        buf = nbd.Buffer(n)
        bufs.append((h.aio_pread(buf, off), buf, off, n))
    while h.aio_in_flight() > 0:
        h.poll(-1)
    for cookie, buf, off, n in bufs:
        expect(h.aio_command_completed(cookie), f"command {cookie} not completed")
        expect(buf.to_bytearray() == data[off : off + n], f"{n} bytes at {off} differ")
    h.shutdown()


def connections():
    hs = [connect() for _ in range(4)]
    for i, h in enumerate(hs):
        off = i * size // 4
        expect(h.pread(4096, off) == data[off : off + 4096], f"connection {i} read differs")
    for h in hs:
        h.shutdown()


def past_end():
    h = nbd.NBD()
    h.set_strict_mode(0)
    h.connect_uri(uri)
    try:
        h.pread(4096, size - 512)
        raise AssertionError("a read past the end succeeded")
    except nbd.Error:
        pass
    expect(h.pread(512, 0) == data[:512], "the connection is unusable after the error")
    h.shutdown()


def listed():
    h = nbd.NBD()
    h.set_opt_mode(True)
    h.connect_uri(f"nbd://{server}")
    names = []
    h.opt_list(lambda name, desc: names.append(name))
    h.opt_abort()
    expect(export in names, f"NBD_OPT_LIST gave {names}")


def info_then_go():
    h = nbd.NBD()
    h.set_opt_mode(True)
    h.connect_uri(uri)
    h.opt_info()
    expect(h.get_size() == size, "NBD_OPT_INFO's size")
    h.opt_go()
    expect(h.pread(512, 0) == data[:512], "read after NBD_OPT_GO")
    h.shutdown()


def unknown_export():
    h = nbd.NBD()
    try:
        h.connect_uri(f"nbd://{server}/no-such-export")
        raise AssertionError("an unknown export was attached")
    except nbd.Error:
        pass


def block_status():
    h = nbd.NBD()
    h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
    h.connect_uri(uri)
    if not h.get_structured_replies_negotiated():
        h.shutdown()
        return ("n/a", "needs structured replies, which bootpool does not negotiate (it sends simple replies)")
    expect(h.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION), "base:allocation")
    h.shutdown()


def cache():
    h = connect()
    if not h.can_cache():
        h.shutdown()
        return ("n/a", "NBD_CMD_CACHE: the export does not offer it")
    h.cache(65536, 0)
    h.shutdown()


def write_refused():
    h = nbd.NBD()
    h.set_strict_mode(0)
    h.connect_uri(uri)
    try:
        h.pwrite(b"\xaa" * 4096, 0)
        raise AssertionError("a write to the read-only export succeeded")
    except nbd.Error:
        pass
    expect(h.pread(4096, 0) == data[:4096], "the export changed, or the connection broke")
    h.shutdown()


def write_read():
    h = connect()
    pat = bytes(range(256)) * 256
    h.pwrite(pat, 1 << 20)
    expect(h.pread(len(pat), 1 << 20) == pat, "read back differs")
    expect(h.pread(4096, 0) == data[:4096], "a block not written differs from the image")
    if h.can_fua():
        h.pwrite(pat[:4096], 2 << 20, nbd.CMD_FLAG_FUA)
        expect(h.pread(4096, 2 << 20) == pat[:4096], "FUA write read back differs")
    h.shutdown()


def flush():
    h = connect()
    if not h.can_flush():
        h.shutdown()
        return ("n/a", "the export does not offer flush")
    h.pwrite(b"\x11" * 4096, 3 << 20)
    h.flush()
    h.shutdown()


def zero():
    h = connect()
    if not h.can_zero():
        h.shutdown()
        return ("n/a", "NBD_CMD_WRITE_ZEROES: the export does not offer it")
    h.pwrite(b"\x22" * 65536, 4 << 20)
    h.zero(65536, 4 << 20)
    expect(h.pread(65536, 4 << 20) == bytes(65536), "zeroed range reads non-zero")
    h.shutdown()


def trim():
    h = connect()
    if not h.can_trim():
        h.shutdown()
        return ("n/a", "NBD_CMD_TRIM: the export does not offer it")
    h.trim(65536, 5 << 20)
    h.shutdown()


def kept_across_connections():
    h = connect()
    h.pwrite(b"\x33" * 4096, 6 << 20)
    h.shutdown()
    h = connect()
    expect(h.pread(4096, 6 << 20) == b"\x33" * 4096, "the write is gone after a reconnect")
    h.shutdown()


def write_past_end():
    h = nbd.NBD()
    h.set_strict_mode(0)
    h.connect_uri(uri)
    try:
        h.pwrite(b"\x44" * 4096, size - 512)
        raise AssertionError("a write past the end succeeded")
    except nbd.Error:
        pass
    expect(h.pread(512, 0) == data[:512], "the connection is unusable after the error")
    h.shutdown()


check("fixed newstyle handshake, NBD_OPT_GO", handshake)
check("size and read-only flag", size_and_flags)
check("pread at five offsets equals the image", reads)
check("the largest read the server allows", largest_read)
check("64 reads in flight (aio_pread)", in_flight)
check("4 connections at once", connections)
check("a read past the end fails, the connection stays", past_end)
check("NBD_OPT_LIST names the export", listed)
check("NBD_OPT_INFO, then NBD_OPT_GO", info_then_go)
check("an unknown export is refused", unknown_export)
check("block status (base:allocation)", block_status)
check("NBD_CMD_CACHE", cache)
if role == "nbd":
    check("a write to the read-only export fails, the connection stays", write_refused)
else:
    check("pwrite then pread (and FUA)", write_read)
    check("flush", flush)
    check("write zeroes", zero)
    check("trim", trim)
    check("writes kept across connections", kept_across_connections)
    check("a write past the end fails, the connection stays", write_past_end)
