// The dashboard in a real browser: `bootpool serve` on a copy of recorded lab runs
// (tests/fixtures/lab-state: boot events and server egress), Debian's chromium driven by
// playwright-core. The page's numbers must be the API's, a machine powering on must change its
// room tile without a reload (and stand out when it stalls), every view must render without
// console errors and without a request leaving the server, and fit a desktop and a phone.
//
// Env: BOOTPOOL_BIN (the daemon; tests/it/dashboard.rs passes it), CHROMIUM (default
// /usr/bin/chromium), SCREENSHOT_DIR (where to save views; default: a temp folder).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import dgram from 'node:dgram';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const BIN = process.env.BOOTPOOL_BIN
  ?? path.join(process.env.CARGO_TARGET_DIR ?? path.join(repo, 'target'), 'debug/bootpool');
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'bootpool-dashboard-'));
const SHOTS = process.env.SCREENSHOT_DIR ?? path.join(tmp, 'screenshots');
const WAIT = 20_000;
// Endpoints docs/api.md describes that this branch does not serve yet (none now): the page
// must cope with their 404, so the browser's own 404 log line for them is not a page error.
const NOT_YET = [];
// Requests a test makes to be refused (404), which the browser logs as errors.
const REFUSED = [];
// The test daemon's admin token (server.admin_token), which the page asks for once.
const ADMIN = 'dashboard-test-admin-0123';

// The browser runs in a time zone with a half-hour offset, so a time shown in UTC or in the
// machine's zone instead of the browser's cannot pass by chance.
const TZ = 'Australia/Adelaide', LOCALE = 'en-GB';

// The page's number formats (docs/dashboard.md); the numbers themselves come from the API.
const fmtS = v => (v == null ? '–' : `${v.toFixed(1)} s`);
function fmtBytes(n) {
  if (n == null) return '–';
  if (n >= 1024 ** 3) return `${(n / 1024 ** 3).toFixed(2)} GiB`;
  if (n >= 1024 ** 2) return `${(n / 1024 ** 2).toFixed(1)} MiB`;
  if (n >= 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${Math.round(n)} B`;
}
// What a room tile shows of a machine's boot (docs/dashboard.md): its phase while booting,
// `booted` while up, else the API's `now` (was_up, failed, timed_out).
const tileState = b => (b.now === 'up' ? 'booted' : b.now === 'booting' ? b.current_phase : b.now);
const fmtMbit = v => (v == null ? 'no samples' : `${((v * 8) / 1e6).toFixed(1)} Mbit/s`);
// When a wave's boots end: its last booted call (or newest event).
const waveEnd = w => Math.max(w.start + 1, ...w.boots.map(b => (b.duration_s != null ? b.start + b.duration_s : b.last_event)));

let daemons = [], context, base, dhcpPort;
const problems = [];

// A bound on the whole run that also ends what the run started, should a step hang.
const watchdog = setTimeout(async () => {
  console.error('browser test: no end after 300 s; stopping');
  for (const d of daemons) d.kill('SIGKILL');
  await context?.close().catch(() => {});
  process.exit(1);
}, 300_000);
watchdog.unref();

// Copies the recorded run (events.jsonl, egress.jsonl) into `state`, moved by whole hours so
// that it ended between 5 and 65 minutes ago: the daemon loads only the last 6 h of egress
// samples, and whole hours keep every sample in its egress bucket. Durations, bytes and rates
// are unchanged.
function copyShifted(events, state) {
  const dir = path.dirname(events);
  const read = f => fs.readFileSync(path.join(dir, f), 'utf8').split('\n').filter(Boolean).map(l => JSON.parse(l));
  const ev = read('events.jsonl'), eg = read('egress.jsonl');
  const last = Math.max(...ev.map(e => e.at / 1e6), ...eg.map(e => e.t));
  const shift = Math.floor((Date.now() / 1000 - last - 300) / 3600) * 3600;
  const write = (f, lines) => fs.writeFileSync(path.join(state, f), lines.map(l => JSON.stringify(l)).join('\n') + '\n');
  write('events.jsonl', ev.map(e => ({ ...e, at: e.at + shift * 1e6 })));
  write('egress.jsonl', eg.map(e => ({ ...e, t: e.t + shift })));
}

// A daemon on a copy of `events` (or an empty state); resolves to its HTTP base and DHCP port.
async function startDaemon(name, events) {
  const dir = path.join(tmp, name);
  fs.mkdirSync(path.join(dir, 'state'), { recursive: true });
  fs.mkdirSync(path.join(dir, 'loaders'));
  // The records are what the page shows; a stub image is enough for the daemon to start.
  fs.mkdirSync(path.join(dir, 'img/rootfs'), { recursive: true });
  for (const f of ['vmlinuz', 'initrd.img']) fs.writeFileSync(path.join(dir, 'img', f), '');
  fs.writeFileSync(path.join(dir, 'img/rootfs.img'), Buffer.alloc(1 << 20));
  if (events) copyShifted(events, path.join(dir, 'state'));
  // The pools and MACs of the lab run in the fixture; every port picked by the kernel.
  fs.writeFileSync(path.join(dir, 'pools.yaml'), `
server:
  address: 127.0.0.1
  http: 127.0.0.1:0
  state_dir: ${dir}/state
  loaders: ${dir}/loaders
  ports: { dhcp: 0, tftp: 0, nfs: 0, nbd: 0, portmap: 0 }
  admin_token: ${ADMIN}
dhcp:
  mode: authoritative
  subnet: 127.0.0.0/8
  range: 127.0.0.100-127.0.0.199
  lease: 1h
images:
  demo: { dir: ${dir}/img, store: disk }
  revs: { dir: ${dir}/revs, store: disk }
pools:
  lab-nfs:
    image: demo
    root: nfs
    clients:
      - { mac: "52:54:00:77:00:01", name: pc01 }
      - { macs: "52:54:00:77:00:02-52:54:00:77:00:3f" }
  lab-nbd:
    image: demo
    root: nbd
    clients:
      - { macs: "52:54:00:77:01:01-52:54:00:77:01:3f" }
`);
  // An image with two revisions (bootpool image import): r1 active, r2 not yet.
  for (const n of [1, 2]) {
    const tree = path.join(dir, `tree${n}`);
    fs.mkdirSync(path.join(tree, 'boot'), { recursive: true });
    fs.mkdirSync(path.join(tree, 'etc'));
    fs.writeFileSync(path.join(tree, 'etc/hostname'), `r${n}\n`);
    // An init, as an import asks of a tree (bootpool refuses a tree that cannot boot).
    fs.mkdirSync(path.join(tree, 'sbin'));
    fs.writeFileSync(path.join(tree, 'sbin/init'), '#!/bin/sh\n', { mode: 0o755 });
    fs.writeFileSync(path.join(tree, 'boot/vmlinuz-6.1.0-1'), `kernel ${n}`);
    fs.writeFileSync(path.join(tree, 'boot/initrd.img-6.1.0-1'), `initrd ${n}`);
    const out = spawnSync(BIN, ['image', 'import', 'revs', '--from', tree, '--config', path.join(dir, 'pools.yaml')], { encoding: 'utf8' });
    assert.equal(out.status, 0, `bootpool image import: ${out.stdout}${out.stderr}`);
  }
  const child = spawn(BIN, ['serve', '--config', path.join(dir, 'pools.yaml')], {
    env: { ...process.env, NO_COLOR: '1', RUST_LOG: 'info' }, stdio: ['ignore', 'pipe', 'pipe'],
  });
  daemons.push(child);
  let log = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`daemon did not start:\n${log}`)), WAIT);
    const seen = chunk => {
      log += chunk;
      const m = log.replace(/\x1b\[[0-9;]*m/g, '').match(/bootpool serving http=(\S+) (?:https=\S+ )?dhcp=\S+:(\d+)/);
      if (m) { clearTimeout(timer); resolve({ base: `http://${m[1]}`, dhcp: Number(m[2]) }); }
    };
    child.stdout.on('data', seen);
    child.stderr.on('data', seen);
    child.on('error', e => { clearTimeout(timer); reject(new Error(`cannot run ${BIN}: ${e.message}`)); });
    child.on('exit', code => { clearTimeout(timer); reject(new Error(`daemon exited (${code}):\n${log}`)); });
  });
}

async function api(p, at = base) {
  const r = await fetch(at + p);
  assert.equal(r.status, 200, `${p}: ${r.status}`);
  return r.json();
}

async function view(page, hash) {
  await page.goto(`${base}/#${hash}`);
  await page.waitForSelector('section[data-ready]', { timeout: WAIT });
}

async function shot(page, name, fullPage = true) {
  fs.mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage });
}

function watch(page, at = base) {
  page.on('pageerror', e => problems.push(`page error: ${e.message}`));
  page.on('console', msg => {
    if (msg.type() !== 'error') return;
    const url = msg.location()?.url ?? '';
    if (msg.text().includes('404') && [...NOT_YET, ...REFUSED].some(p => url.includes(p))) return;
    problems.push(`console error: ${msg.text()} (${url})`);
  });
  page.on('request', r => {
    if (!r.url().startsWith(at) && !r.url().startsWith('data:')) problems.push(`request left the server: ${r.url()}`);
  });
}

// A PXE ROM's DHCP message (RFC 2131 with option 60 PXEClient and option 93), as bytes.
// With `relay`, relayed: giaddr `relay.giaddr` and option 82's circuit id `relay.circuit`. A
// REQUEST names the server (SELECTING) unless `rebooting` (INIT-REBOOT).
function dhcpMessage(type, mac, xid, requested, { relay, rebooting } = {}) {
  const b = Buffer.alloc(300);
  b[0] = 1; b[1] = 1; b[2] = 6;
  b.writeUInt32BE(xid, 4);
  b.writeUInt16BE(0x8000, 10);
  if (relay) Buffer.from(relay.giaddr.split('.').map(Number)).copy(b, 24);
  Buffer.from(mac.split(':').map(x => parseInt(x, 16))).copy(b, 28);
  Buffer.from([99, 130, 83, 99]).copy(b, 236);
  const vendor = Buffer.from('PXEClient:Arch:00000:UNDI:002001');
  const opts = [53, 1, type, 60, vendor.length, ...vendor, 93, 2, 0, 0];
  if (requested) opts.push(50, 4, ...requested.split('.').map(Number));
  if (requested && !rebooting) opts.push(54, 4, 127, 0, 0, 1);
  if (relay) {
    const circuit = Buffer.from(relay.circuit);
    opts.push(82, circuit.length + 2, 1, circuit.length, ...circuit);
  }
  opts.push(255);
  Buffer.from(opts).copy(b, 240);
  return b;
}

async function sendDhcp(msg) {
  const sock = dgram.createSocket('udp4');
  await new Promise((res, rej) => sock.send(msg, dhcpPort, '127.0.0.1', e => (e ? rej(e) : res())));
  sock.close();
}

before(async () => {
  for (const [what, p] of [['the daemon (BOOTPOOL_BIN)', BIN], ['chromium (apt-get install chromium)', CHROMIUM]]) {
    assert.ok(fs.existsSync(p), `${what} not found at ${p}`);
  }
  ({ base, dhcp: dhcpPort } = await startDaemon('lab', path.join(repo, 'tests/fixtures/lab-state/events.jsonl')));
  // A shared target folder can hold another branch's build: say so rather than time out.
  assert.equal((await fetch(`${base}/app.js`)).status, 200, `${BIN} serves no dashboard (an older build?)`);
  context = await chromium.launchPersistentContext(path.join(tmp, 'profile'), {
    executablePath: CHROMIUM, headless: true, viewport: { width: 1280, height: 800 }, timezoneId: TZ, locale: LOCALE,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
});

after(async () => {
  clearTimeout(watchdog);
  await context?.close();
  // Wait for each daemon to stop: on the way out it still writes its state folder.
  await Promise.all(daemons.map(d => new Promise(done => {
    if (d.exitCode !== null || d.signalCode !== null) return done();
    const late = setTimeout(() => d.kill('SIGKILL'), 5000);
    d.once('exit', () => { clearTimeout(late); done(); });
    d.kill('SIGTERM');
  })));
  if (!process.env.KEEP_TMP) fs.rmSync(tmp, { recursive: true, force: true });
});

test('the fixture holds NFS, NBD and NFS waves, and egress over them', async () => {
  const waves = await api('/api/v1/waves');
  assert.deepEqual(waves.map(w => w.pool), ['lab-nfs', 'lab-nbd', 'lab-nfs']);
  const e = await api(`/api/v1/egress?since=${Math.floor(waves[0].start)}`);
  assert.ok(e.links.length > 0 && e.links.some(l => l.points.some(p => p.tx_bytes > 0)), 'the fixture has egress samples');
});

test('wave view: summary, per-client totals and bytes, histogram and Gantt rows are the API\'s', async () => {
  const page = await context.newPage();
  watch(page);
  const names = new Map((await api('/api/v1/clients')).map(c => [c.mac, c.name ?? c.mac]));
  for (const { id } of await api('/api/v1/waves')) {
    const w = await api(`/api/v1/waves/${id}`);
    await view(page, `/wave/${id}`);
    const text = async sel => (await page.textContent(sel)).trim();
    assert.equal(await text('[data-testid=clients]'), String(w.summary.clients));
    assert.equal(await text('[data-testid=booted]'), String(w.summary.booted));
    assert.equal(await text('[data-testid=median]'), fmtS(w.summary.median_s));
    assert.equal(await text('[data-testid=p95]'), fmtS(w.summary.p95_s));
    assert.equal(await text('[data-testid=max]'), fmtS(w.summary.max_s));
    for (const [phase, s] of Object.entries(w.summary.phase_median_s)) {
      assert.equal(await text(`[data-testid=phase-median-${phase}]`), fmtS(s), phase);
    }
    // Bytes per client per protocol: each client's, and the wave's mean.
    for (const [proto, n] of Object.entries(w.summary.bytes_per_client)) {
      assert.equal(await text(`[data-testid=bytes-per-client-${proto}]`), fmtBytes(n), proto);
    }
    const rows = await page.$$eval('[data-testid=per-client] tbody tr', trs => trs.map(tr => [tr.dataset.mac, tr.querySelector('[data-testid=total]').textContent,
      Object.fromEntries([...tr.querySelectorAll('[data-proto]')].map(td => [td.dataset.proto, td.textContent]))]));
    assert.deepEqual(rows, w.boots.map(b => [b.mac, fmtS(b.duration_s),
      Object.fromEntries(Object.keys(w.summary.bytes_per_client).map(p => [p, fmtBytes(b.bytes[p])]))]));
    // The started time in the browser's time zone.
    assert.equal(await text('[data-testid=started]'), new Date(w.start * 1000).toLocaleString(LOCALE, { timeZone: TZ }).replace(/\s/g, ' '));
    // One segment per phase of each boot.
    assert.equal(await page.locator('svg.gantt rect[data-phase]').count(), w.boots.reduce((n, b) => n + b.phases.length, 0));
    // Sorting by total puts the slowest first, whatever order it had before.
    await page.click('button[data-sort=name]');
    await page.click('button[data-sort=total]');
    const order = await page.$$eval('svg.gantt g[data-key]', gs => gs.map(g => g.dataset.key));
    assert.deepEqual(order, [...w.boots].sort((a, b) => b.duration_s - a.duration_s).map(b => b.mac));
    // By start: the first powered on first; by name or MAC: pc01, then the MACs.
    const keys = async () => page.$$eval('svg.gantt g[data-key]', gs => gs.map(g => g.dataset.key));
    const labelOf = b => names.get(b.mac) ?? b.mac;
    await page.click('button[data-sort=start]');
    assert.equal(await page.getAttribute('button[data-sort=start]', 'aria-pressed'), 'true');
    assert.equal(await page.getAttribute('button[data-sort=total]', 'aria-pressed'), 'false');
    assert.deepEqual(await keys(), [...w.boots].sort((a, b) => a.start - b.start || labelOf(a).localeCompare(labelOf(b))).map(b => b.mac));
    await page.click('button[data-sort=name]');
    assert.deepEqual(await keys(), [...w.boots].sort((a, b) => labelOf(a).localeCompare(labelOf(b), undefined, { numeric: true })).map(b => b.mac));
    // The histogram counts every booted client once.
    const bins = await page.$$eval('svg[aria-label^=histogram] rect title', ts => ts.map(t => Number(t.textContent.split(': ').at(-1))));
    assert.equal(bins.reduce((a, b) => a + b, 0), w.summary.booted);
    await shot(page, w.pool === 'lab-nfs' ? 'wave-nfs' : 'wave-nbd'); // the newest NFS wave wins
  }
  assert.equal((await page.textContent('#tz')).trim(), TZ);
  await page.close();
});

test('wave view: a storm of 200 clients is 200 sortable rows of fixed height that scroll under a pinned axis', async () => {
  const page = await context.newPage();
  watch(page);
  await view(page, '/wave');
  const got = await page.evaluate(async () => {
    const { gantt, GANTT_SCROLL_ROWS } = await import('/charts.js');
    const { ROW_ORDER } = await import('/app.js');
    // 200 made-up boots: pc1..pc200 powered on over 2 s, the later ones slower.
    const rows = Array.from({ length: 200 }, (_, i) => ({
      label: `pc${i + 1}`, key: `pc${i + 1}`, offset: (i % 20) / 10,
      phases: [{ name: 'dhcp', at: 0, seconds: 1 }, { name: 'root', at: 1, seconds: 30 + (i * 7) % 50 }],
      total: 31 + (i * 7) % 50,
    }));
    const order = k => [...rows].sort(ROW_ORDER[k]).map(r => r.key);
    const box = gantt([...rows].sort(ROW_ORDER.total), 1000);
    const main = document.querySelector('main');
    main.prepend(box);
    const svg = box.querySelector('svg.gantt');
    const ys = [...svg.querySelectorAll('g[data-key] rect[data-phase=dhcp]')].map(r => Number(r.getAttribute('y')));
    box.scrollTop = 400;
    const pinned = Math.abs(box.querySelector('.gantt-axis').getBoundingClientRect().top - box.getBoundingClientRect().top) < 2;
    const out = {
      limit: GANTT_SCROLL_ROWS, cls: box.className, rows: svg.querySelectorAll('g[data-key]').length,
      pitch: [...new Set(ys.slice(1).map((y, i) => y - ys[i]))], scrolls: box.scrollHeight > box.clientHeight + 1000,
      shown: box.clientHeight, pinned, focusable: box.tabIndex === 0,
      fits: box.getBoundingClientRect().width <= main.clientWidth,
      name: order('name').slice(0, 3), start: order('start').slice(0, 3), total: order('total')[0],
      first: svg.querySelector('g[data-key]').dataset.key,
    };
    box.remove();
    return out;
  });
  assert.equal(got.limit, 40);
  assert.equal(got.cls, 'gantt-scroll');
  assert.equal(got.rows, 200);
  assert.deepEqual(got.pitch, [16], 'one fixed row height');
  assert.ok(got.scrolls && got.shown > 200 && got.shown <= 0.65 * 800 + 1, `a box of ${got.shown} px that scrolls`);
  assert.ok(got.pinned, 'the axis stays on top while the rows scroll');
  assert.ok(got.focusable && got.fits);
  assert.deepEqual(got.name, ['pc1', 'pc2', 'pc3'], 'names sort as numbers (pc2 before pc10)');
  assert.deepEqual(got.start, ['pc1', 'pc21', 'pc41'], 'by start, ties by name');
  assert.equal(got.total, got.first, 'drawn in the order given');
  await page.close();
});

test('room view: a tile per machine of the pool, with its phase and time in the current wave', async () => {
  const page = await context.newPage();
  watch(page);
  for (const pool of ['lab-nfs', 'lab-nbd']) {
    const p = (await api('/api/v1/pools')).find(x => x.name === pool);
    // pools.yaml lists pc01 and a range of 62 (lab-nfs), a range of 63 (lab-nbd).
    assert.equal(p.machines.length, 63);
    assert.equal(p.machines_complete, true);
    const w = await api(`/api/v1/waves/${p.latest_wave}`);
    // Each machine's boot in the latest wave, else its newest boot in the pool.
    const newest = new Map((await api(`/api/v1/boots?pool=${pool}`)).map(b => [b.mac, b]));
    const inWave = new Map(w.boots.map(b => [b.mac, b]));
    await view(page, `/room/${pool}`);
    const tiles = await page.$$eval('.tile', ts => ts.map(t => [t.dataset.mac, t.dataset.phase, t.querySelector('[data-testid=elapsed]')?.textContent ?? null]));
    const shown = m => inWave.get(m.mac) ?? newest.get(m.mac);
    const expected = p.machines.map(m => {
      const b = shown(m);
      return b ? [m.mac, tileState(b), fmtS(b.duration_s ?? (b.last_event - b.start))] : [m.mac, 'waiting', null];
    });
    assert.deepEqual(tiles, expected);
    // The lab's clients power off after their boot: up once, off now, and not waiting.
    assert.ok(w.boots.every(b => b.now), 'the API says where each machine stands now');
    const count = async k => (await page.textContent(`[data-testid=count-${k}]`)).trim();
    for (const k of ['booted', 'was_up', 'failed', 'timed_out', 'waiting']) {
      assert.equal(await count(k), String(expected.filter(t => t[1] === k).length), k);
    }
    assert.equal((await page.textContent('[data-testid=wave-clients]')).trim(), String(w.summary.clients));
    // Live from the event stream, not polling.
    await page.waitForFunction(() => document.querySelector('[data-testid=mode]')?.textContent === 'live', null, { timeout: WAIT });
    if (pool === 'lab-nfs') await shot(page, 'room');
  }
  await page.close();
});

test('room view: a tile is stalled by the server\'s threshold, and the room is the server\'s newest wave', async () => {
  const page = await context.newPage();
  watch(page);
  await view(page, '/room');
  // The rule (3x the others' median in the phase) is the server's, tested in record/stall.rs;
  // the page compares the boot's silence with the `stall_after_s` the API gave it.
  const verdicts = await page.evaluate(async () => {
    const { stalledFor } = await import('/app.js');
    const running = (silent, after) => ({ result: 'running', last_event: 100 - silent, stall_after_s: after });
    return [stalledFor(running(10, 9), 100), stalledFor(running(8, 9), 100), stalledFor(running(10, null), 100)];
  });
  assert.deepEqual(verdicts, [10, null, null]);
  // The room's wave is the server's wave of the boot that started last (the rule is
  // record/wave.rs's); the machines outside it wait, with their newest boot.
  const waves = await page.evaluate(async () => {
    const { roomWave } = await import('/app.js');
    const r = roomWave();
    const b = (id, mac, start, wave) => ({ id, mac, start, wave });
    r.admit([b(1, 'a', 0, 1), b(2, 'b', 100, 1), b(3, 'c', 210, 1)]);
    const first = [...r.wave.keys()];
    // a boots again: the server cuts the run between b and c.
    r.admit([b(3, 'c', 210, 3), b(4, 'a', 260, 3)]);
    const again = [...r.wave.keys()].sort();
    r.admit([b(5, 'b', 500, 5)]);
    return [first, again, [...r.wave.keys()], [...r.older.keys()].sort(), r.older.get('a').id];
  });
  assert.deepEqual(waves, [['a', 'b', 'c'], ['a', 'c'], ['b'], ['a', 'c'], 4]);
  // Tiles are grouped by room (the subnet holding the machine's address), in the config's
  // order, those with no known address last; one room without an uplink is not grouped.
  const grouped = await page.evaluate(async () => {
    const { roomGroups, roomOf } = await import('/app.js');
    const rooms = [{ subnet: '10.77.1.0/24', uplink_bps: null }, { subnet: '10.30.0.0/23', uplink_bps: 1e9 }];
    const ips = { a: '10.30.1.7', b: '10.77.1.100', c: null, d: '10.77.1.101' };
    const groups = roomGroups(['a', 'b', 'c', 'd'], m => ips[m], rooms);
    return [groups.map(([r, ms]) => [r?.subnet ?? null, ms]), roomOf('10.30.2.1', rooms),
      roomGroups(['b', 'd'], m => ips[m], rooms), roomGroups(['a'], m => ips[m], rooms).length];
  });
  assert.deepEqual(grouped, [[['10.77.1.0/24', ['b', 'd']], ['10.30.0.0/23', ['a']], [null, ['c']]], null, null, 1]);
  await page.close();
});

test('room view: colours are readable and not the only cue', async () => {
  const page = await context.newPage();
  watch(page);
  await view(page, '/room/lab-nfs');
  const { colour, ink } = await page.evaluate(async () => {
    const c = await import('/charts.js');
    return { colour: c.PHASE_COLOUR, ink: c.PHASE_INK };
  });
  const lum = hex => {
    if (hex.length === 4) hex = `#${[...hex.slice(1)].map(c => c + c).join('')}`;
    const [r, g, b] = [1, 3, 5].map(i => parseInt(hex.slice(i, i + 2), 16) / 255).map(v => (v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4));
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  for (const [phase, bg] of Object.entries(colour)) {
    const [a, b] = [lum(bg), lum(ink[phase] ?? '#000000')].sort((x, y) => y - x);
    // WCAG AA for normal text on every tile colour.
    assert.ok((a + 0.05) / (b + 0.05) >= 4.5, `${phase}: text on ${bg} has contrast ${((a + 0.05) / (b + 0.05)).toFixed(2)}`);
  }
  // Okabe-Ito, all different; the legend names each phase in words.
  assert.equal(new Set(Object.values(colour)).size, 7);
  const legend = await page.$$eval('.legend li', lis => lis.map(li => li.textContent.trim().split(' ')[0]));
  assert.deepEqual(legend, ['dhcp', 'loader', 'ipxe', 'kernel', 'initrd', 'root', 'booted', 'was', 'failed', 'timed', 'waiting']);
  // A failed and a timed-out machine: readable too, and apart from every phase colour.
  const states = await page.evaluate(async () => {
    const c = await import('/charts.js');
    return { colour: c.STATE_COLOUR, ink: c.STATE_INK };
  });
  for (const [k, bg] of Object.entries(states.colour)) {
    const [a, b] = [lum(bg), lum(states.ink[k])].sort((x, y) => y - x);
    assert.ok((a + 0.05) / (b + 0.05) >= 4.5, `${k}: text on ${bg}`);
    assert.ok(!Object.values(colour).includes(bg), `${k} has a phase's colour`);
  }
  // Every tile says its phase or state in words too.
  const words = await page.$$eval('.tile', ts => ts.map(t => [t.dataset.phase, t.querySelector('.phase').textContent]));
  const inWords = { was_up: 'was up', timed_out: 'timed out' };
  for (const [phase, text] of words) assert.ok(text.includes(inWords[phase] ?? phase), `${phase}: ${text}`);
  await page.close();
});

test('compare view: the API\'s sentence and both waves\' numbers, charted and tabled', async () => {
  const waves = await api('/api/v1/waves');
  const [a, b] = waves.map(w => w.id);
  const c = await api(`/api/v1/compare?a=${a}&b=${b}`);
  const page = await context.newPage();
  watch(page);
  await view(page, `/compare/${a}/${b}`);
  assert.equal((await page.textContent('[data-testid=sentence]')).trim(), c.sentence);
  const cells = async key => page.$$eval(`tr[data-row="${key}"] td`, tds => tds.map(td => td.textContent));
  for (const key of ['median', 'p95', 'max']) {
    assert.deepEqual(await cells(key), [fmtS(c.a.summary[`${key}_s`]), fmtS(c.b.summary[`${key}_s`])], key);
  }
  // Both distributions on one axis: a mark per booted client, a single axis.
  const dist = 'svg[aria-label="boot time distributions"]';
  const marks = await page.locator(`${dist} :is(circle, rect)`).count();
  assert.equal(marks, [c.a, c.b].flatMap(w => w.boots).filter(x => x.duration_s != null).length);
  assert.equal(await page.locator(`${dist} g.axis`).count(), 1);
  // Per-phase medians as paired bars (and in the table), each the API's.
  const bar = async (chart, side, row) => (await page.textContent(`svg[aria-label^="${chart}"] text[data-side=${side}][data-row="${row}"]`)).trim();
  for (const p of new Set([...Object.keys(c.a.summary.phase_median_s), ...Object.keys(c.b.summary.phase_median_s)])) {
    const [va, vb] = [c.a, c.b].map(w => w.summary.phase_median_s[p]);
    assert.deepEqual(await cells(`phase-${p}`), [fmtS(va), fmtS(vb)], p);
    assert.equal(await bar('median seconds per phase', 'a', p), va == null ? `A: wave ${a}: none` : fmtS(va), p);
    assert.equal(await bar('median seconds per phase', 'b', p), vb == null ? `B: wave ${b}: none` : fmtS(vb), p);
  }
  // Bytes per client, both waves.
  for (const p of Object.keys(c.a.summary.bytes_per_client)) {
    const [va, vb] = [c.a, c.b].map(w => w.summary.bytes_per_client[p]);
    assert.deepEqual(await cells(`bytes-${p}`), [fmtBytes(va), fmtBytes(vb)], p);
    if (va != null) assert.equal(await bar('bytes per client', 'a', p), fmtBytes(va), p);
    if (vb != null) assert.equal(await bar('bytes per client', 'b', p), fmtBytes(vb), p);
  }
  // Peak and mean egress of each wave: the top-level links' summed sending rate over the wave.
  const e = await api(`/api/v1/egress?since=${Math.floor(Math.min(c.a.start, c.b.start))}&step=1`);
  const stats = w => {
    const sum = new Map();
    for (const l of e.links.filter(x => !x.master)) for (const p of l.points) if (p.t >= w.start && p.t <= waveEnd(w)) sum.set(p.t, (sum.get(p.t) ?? 0) + p.tx_bytes_s);
    const v = [...sum.values()];
    return { peak: Math.max(...v), mean: v.reduce((x, y) => x + y, 0) / v.length };
  };
  const [sa, sb] = [stats(c.a), stats(c.b)];
  assert.ok(sa.peak > 0 && sb.peak > 0, 'both waves sent bytes');
  for (const k of ['peak', 'mean']) {
    assert.deepEqual(await cells(`egress-${k}`), [fmtMbit(sa[k]), fmtMbit(sb[k])], k);
    assert.equal(await bar('peak and mean egress', 'a', k), fmtMbit(sa[k]), k);
    assert.equal(await bar('peak and mean egress', 'b', k), fmtMbit(sb[k]), k);
  }
  await shot(page, 'compare');
  await page.close();
});

test('egress view: each link\'s bytes, peak and mean are the API\'s; protocols; clients per phase', async () => {
  const page = await context.newPage();
  watch(page);
  for (const { id } of await api('/api/v1/waves')) {
    const w = await api(`/api/v1/waves/${id}`);
    await view(page, `/egress/${id}`);
    const t0 = w.start, t1 = waveEnd(w), step = Math.max(1, Math.round((t1 - t0) / 300));
    const e = await api(`/api/v1/egress?since=${Math.floor(t0)}&step=${step}`);
    // Every link, each member right after its bridge or bond.
    const drawn = await page.$$eval('[data-link]', ds => ds.map(d => d.dataset.link));
    const tops = e.links.filter(l => !l.master);
    assert.deepEqual(drawn, tops.flatMap(l => [l.name, ...e.links.filter(m => m.master === l.name).map(m => m.name)]));
    let sent = 0;
    for (const l of e.links) {
      const pts = l.points.filter(p => p.t >= t0 - step && p.t <= t1 + step);
      assert.ok(pts.length > 0, `${l.name}: samples in wave ${id}`);
      const rates = pts.map(p => p.tx_bytes_s);
      const box = `[data-link="${l.name}"]`;
      const got = async k => (await page.textContent(`${box} [data-testid=${k}]`)).trim();
      assert.equal(await got('sent'), fmtBytes(pts.reduce((a, p) => a + p.tx_bytes, 0)), l.name);
      assert.equal(await got('peak'), fmtMbit(Math.max(...rates)), l.name);
      assert.equal(await got('mean'), fmtMbit(rates.reduce((a, b) => a + b, 0) / rates.length), l.name);
      assert.equal(await page.locator(`${box} svg path`).count(), l.speed_mbps ? 2 : 1, `${l.name}: tx line (and capacity)`);
      sent += pts.reduce((a, p) => a + p.tx_bytes, 0);
    }
    assert.ok(sent > 1e6, `wave ${id} sent ${sent} bytes`);
    // A line per protocol that moved bytes during the wave.
    const protos = e.protocols.filter(p => p.points.some(x => x.t >= t0 - step && x.t <= t1 + step)).map(p => p.proto);
    const lines = await page.$$eval('svg[aria-label="MB/s"] path title', ts => ts.map(t => t.textContent));
    assert.deepEqual(lines.sort(), protos.sort());
    // The stacked phase areas: one layer per phase the wave's boots went through, plus booted.
    const phases = new Set(w.boots.flatMap(b => b.phases.map(p => p.name)));
    if (w.boots.some(b => b.duration_s != null)) phases.add('booted');
    const layers = await page.$$eval('svg[aria-label="clients in each phase over time"] path title', ts => ts.map(t => t.textContent));
    assert.deepEqual(layers.sort(), [...phases].sort());
    if (w.pool === 'lab-nbd') await shot(page, 'egress');
  }
  // Capacity: the fixture's bridge and taps have no link speed (the kernel knows none for
  // them), so a bond of two 1 Gbit/s members is drawn from made-up samples here.
  const drawn = await page.evaluate(async () => {
    const { linkCharts } = await import('/app.js');
    const pts = r => [0, 1, 2].map(t => ({ t: 100 + t, tx_bytes_s: r, rx_bytes_s: 0, tx_bytes: r, rx_bytes: 0 }));
    const eg = { step_s: 1, links: [
      { name: 'eth1', kind: 'member', master: 'bond0', speed_mbps: 1000, points: pts(50e6) },
      { name: 'bond0', kind: 'bond', master: null, speed_mbps: 2000, points: pts(120e6) },
      { name: 'eth0', kind: 'member', master: 'bond0', speed_mbps: 1000, points: pts(70e6) }], protocols: [] };
    return linkCharts(eg, 100, 102, 1, 600).map(d => [d.dataset.link, d.querySelector('h4').textContent,
      d.querySelectorAll('path[stroke-dasharray]').length, d.querySelector('[data-testid=peak-share]')?.textContent]);
  });
  assert.deepEqual(drawn, [
    ['bond0', 'bond0 (bond) · capacity 2000 Mbit/s (dashed)', 1, '48 %'],
    ['eth1', 'eth1 (member of bond0) · capacity 1000 Mbit/s (dashed)', 1, '40 %'],
    ['eth0', 'eth0 (member of bond0) · capacity 1000 Mbit/s (dashed)', 1, '56 %']]);
  // Several links without a bond (server.links): each says which clients of the wave it carries.
  const carried = await page.evaluate(async () => {
    const { linkCharts } = await import('/app.js');
    const pts = [{ t: 100, tx_bytes_s: 1e6, rx_bytes_s: 0, tx_bytes: 1e6, rx_bytes: 0 }];
    const eg = { step_s: 1, links: [
      { name: 's0', kind: 'plain', master: null, speed_mbps: 250, addresses: ['10.78.0.1'], points: pts },
      { name: 's1', kind: 'plain', master: null, speed_mbps: 250, addresses: ['10.78.0.2'], points: pts },
      { name: 'lo', kind: 'plain', master: null, speed_mbps: null, addresses: [], points: pts }], protocols: [] };
    const boots = ['10.78.0.1', '10.78.0.2', '10.78.0.2'].map(link => ({ link }));
    return linkCharts(eg, 100, 102, 1, 600, boots).map(d => d.querySelector('[data-testid=carries]')?.textContent ?? null);
  });
  assert.deepEqual(carried, [' · 10.78.0.1: 1 client', ' · 10.78.0.2: 2 clients', null]);
  await page.close();
});

test('client view: one machine\'s boots over time against its waves\' medians', async () => {
  const page = await context.newPage();
  watch(page);
  await view(page, '/client');
  const clients = await api('/api/v1/clients');
  assert.equal(await page.locator('tbody tr[data-mac]').count(), clients.length);
  await shot(page, 'clients');
  const mac = clients[0].mac;
  const boots = await api(`/api/v1/boots?mac=${mac}`);
  await page.click(`tr[data-mac="${mac}"] a`);
  await page.waitForSelector('section[data-view=client][data-ready] [data-testid=boots]', { timeout: WAIT });
  const totals = await page.$$eval('[data-testid=boots] tbody tr [data-testid=total]', tds => tds.map(td => td.textContent));
  assert.deepEqual(totals, [...boots].reverse().map(b => fmtS(b.duration_s)));
  // A stacked bar per boot, oldest first, a segment per phase, and its wave's median.
  const waves = await Promise.all((await api('/api/v1/waves')).map(w => api(`/api/v1/waves/${w.id}`)));
  const bars = await page.$$eval('[data-testid=boots-chart] g[data-boot]', gs => gs.map(g => [Number(g.dataset.boot), g.dataset.total,
    g.querySelectorAll('rect[data-phase]').length, g.querySelector('line[data-median]')?.dataset.median ?? null]));
  assert.deepEqual(bars, boots.map(b => {
    const w = waves.find(x => x.boots.some(y => y.id === b.id));
    return [b.id, b.duration_s == null ? '' : b.duration_s.toFixed(1), b.phases.length, w?.summary.median_s?.toFixed(1) ?? null];
  }));
  // Who served each boot: outside a site (this SQLite store) nobody is named.
  const served = await page.$$eval('[data-testid=boots] tbody tr [data-testid=served]', tds => tds.map(td => td.textContent));
  assert.deepEqual(served, boots.map(() => '–'));
  // In a site (made-up boots, as docs/api.md's `served` gives them): one member named once;
  // a phase a member took over says from when, in the browser's zone (Adelaide: 08:00 UTC
  // on 2027-01-15 is 18:30 there).
  const said = await page.evaluate(async () => {
    const { servedBy } = await import('/app.js');
    const t = 1800000000;
    const turn = (member, at) => ({ member, at });
    return [
      servedBy({ served: [{ phase: 'dhcp', by: [turn('a', t)] }, { phase: 'root', by: [turn('a', t + 5)] }] }),
      servedBy({ served: [{ phase: 'dhcp', by: [turn('a', t - 9)] }, { phase: 'root', by: [turn('b', t - 5), turn('a', t)] }] }),
      servedBy({ served: [{ phase: 'root', by: [turn('a', t - 5)] }], served_unkept: 3 }),
    ];
  });
  assert.deepEqual(said, ['a', 'dhcp a, root b -> a at 18:30:00', 'a, and 3 turns more']);
  // The newest boot's console and cause, as GET /api/v1/boots/{id}/console says.
  const con = await api(`/api/v1/boots/${boots[boots.length - 1].id}/console`);
  assert.equal(await page.locator('[data-testid=console-section]').count(), 1);
  assert.equal(await page.locator('[data-testid=console]').count(), con.lines.length ? 1 : 0);
  assert.equal(await page.locator('[data-testid=cause]').count(), con.cause ? 1 : 0);
  await shot(page, 'client');
  await page.close();
});

test('site view: the members /api/v1/site lists, this server alone on SQLite', async () => {
  const page = await context.newPage();
  watch(page);
  await view(page, '/site');
  const site = await api('/api/v1/site');
  assert.equal(site.shared, false);
  const rows = await page.$$eval('tbody tr[data-member]', trs => trs.map(tr => [tr.dataset.member,
    [...tr.querySelectorAll('td')].slice(0, 3).map(td => td.textContent)]));
  assert.deepEqual(rows.map(([name, [state, , share]]) => [name, state, share]),
    site.members.map(m => [m.name, m.live ? 'live' : 'dead', `${(m.buckets * 100 / 256).toFixed(1)} %`]));
  assert.deepEqual(rows.map(r => r[1][2]), ['100.0 %']);
  assert.match(await page.locator('section[data-view=site] p.meta').textContent(), /alone/);
  await page.close();
});

test('keyboard: the views, sort buttons and tiles are reachable with Tab and Enter', async () => {
  const page = await context.newPage();
  watch(page);
  await view(page, '/room/lab-nfs');
  // Skip link, the title, then the view links in order.
  for (let i = 0; i < 4; i++) await page.keyboard.press('Tab');
  assert.equal(await page.evaluate(() => document.activeElement.dataset.view), 'wave');
  await page.keyboard.press('Enter');
  await page.waitForSelector('section[data-view=wave][data-ready]', { timeout: WAIT });
  // Tab on to the sort buttons and sort by name with the keyboard alone.
  let reached = false;
  for (let i = 0; i < 40 && !reached; i++) {
    await page.keyboard.press('Tab');
    reached = await page.evaluate(() => document.activeElement.dataset.sort === 'name');
  }
  assert.ok(reached, 'Tab reaches the sort buttons');
  await page.keyboard.press('Enter');
  assert.equal(await page.getAttribute('button[data-sort=name]', 'aria-pressed'), 'true');
  const focusRing = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
  assert.notEqual(focusRing, 'none', 'the focused button shows a focus ring');
  // A room tile is a link: focus it and Enter opens the machine.
  await view(page, '/room/lab-nfs');
  await page.focus('.tile[data-mac="52:54:00:77:00:01"]');
  await page.keyboard.press('Enter');
  await page.waitForSelector('section[data-view=client][data-ready] [data-testid=boots]', { timeout: WAIT });
  await page.close();
});

test('layout: every view fits 1280x800 and a 390 px phone', async () => {
  const page = await context.newPage();
  watch(page);
  for (const [w, h] of [[1280, 800], [390, 844]]) {
    await page.setViewportSize({ width: w, height: h });
    for (const hash of ['/room/lab-nfs', '/wave', '/compare', '/egress', '/client', '/client/52:54:00:77:00:01', '/images']) {
      await view(page, hash);
      const [scroll, inner] = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
      assert.ok(scroll <= inner, `${hash}: page is ${scroll}px wide on a ${inner}px screen`);
    }
  }
  await view(page, '/wave');
  await shot(page, 'phone-wave');
  await view(page, '/room/lab-nbd');
  await shot(page, 'phone-room', false); // the first screen: 63 tiles make a long page
  await page.close();
});

test('live: a machine that powers on changes its tile as its events arrive, without a reload', async () => {
  const page = await context.newPage();
  watch(page);
  await view(page, '/room/lab-nfs');
  await page.waitForFunction(() => document.querySelector('[data-testid=mode]')?.textContent === 'live', null, { timeout: WAIT });
  const mac = '52:54:00:77:00:30';
  const tile = `.tile[data-mac="${mac}"]`;
  assert.equal(await page.getAttribute(tile, 'data-phase'), 'waiting');
  await page.evaluate(() => { window.sameDocument = true; });
  // Its PXE ROM: DISCOVER (the tile turns to dhcp), then REQUEST (dhcp ends).
  await sendDhcp(dhcpMessage(1, mac, 0x1234));
  await page.waitForSelector(`${tile}[data-phase=dhcp]`, { timeout: WAIT });
  await sendDhcp(dhcpMessage(3, mac, 0x1234, '127.0.0.100'));
  let boot;
  for (let i = 0; i < 100 && (!boot || boot.current_phase === 'dhcp'); i++) {
    [boot] = await api(`/api/v1/boots?mac=${mac}`);
    await new Promise(r => setTimeout(r, 100));
  }
  assert.equal(boot.pool, 'lab-nfs');
  assert.notEqual(boot.current_phase, 'dhcp', 'the ACK ended the dhcp phase');
  await page.waitForSelector(`${tile}[data-phase=${boot.current_phase}]`, { timeout: WAIT });
  assert.equal(await page.evaluate(() => window.sameDocument), true, 'no reload');
  // A new power-on of the room: the fixture's machines now wait, this one is the wave.
  assert.equal((await page.textContent('[data-testid=wave-clients]')).trim(), '1');
  assert.equal((await page.textContent('[data-testid=mode]')).trim(), 'live');
  // A second machine sends DISCOVER and then nothing: the first one's DHCP took well under 1 s,
  // so after 3 s of silence its tile is framed and says stalled.
  const stuck = '52:54:00:77:00:31';
  await sendDhcp(dhcpMessage(1, stuck, 0x5678));
  await page.waitForSelector(`.tile[data-mac="${stuck}"][data-phase=dhcp]`, { timeout: WAIT });
  assert.equal(await page.locator(`.tile[data-mac="${stuck}"].stalled`).count(), 0, 'not stalled at once');
  await page.waitForSelector(`.tile[data-mac="${stuck}"].stalled .stall`, { timeout: WAIT });
  assert.equal(await page.locator('.tile.stalled').count(), 1, 'only the silent machine is stalled');
  assert.match(await page.textContent(`.tile[data-mac="${stuck}"] .stall`), /stalled: silent \d+ s/);
  await shot(page, 'room-live');
  await page.close();
});

test('client view: a machine relayed from its own subnet shows the relay and its switch port', async () => {
  const mac = '52:54:00:77:01:30';
  const relay = { giaddr: '127.0.0.2', circuit: 'Gi1/0/7' };
  // Its firmware's DISCOVER, then a REQUEST for a free address of the range.
  await sendDhcp(dhcpMessage(1, mac, 0x9abc, null, { relay }));
  await sendDhcp(dhcpMessage(3, mac, 0x9abc, '127.0.0.150', { relay, rebooting: true }));
  let boot;
  for (let i = 0; i < 100 && !boot?.relayed; i++) {
    [boot] = (await api(`/api/v1/boots?mac=${mac}`)).slice(-1);
    await new Promise(r => setTimeout(r, 100));
  }
  assert.deepEqual(boot.relayed, { giaddr: '127.0.0.2', circuit_id: 'Gi1/0/7' });
  const page = await context.newPage();
  watch(page);
  await view(page, `/client/${mac}`);
  assert.equal((await page.textContent('[data-testid=relayed]')).trim(), 'through relay 127.0.0.2 · circuit Gi1/0/7');
  await page.close();
});

// POST `body` to `p` from the local address `from` (a client's leased address on this
// loopback server): its status and text.
function postFrom(from, p, body) {
  return new Promise((resolve, reject) => {
    const req = http.request(`${base}${p}`, { method: 'POST', localAddress: from, headers: { 'content-type': 'application/json' } }, res => {
      let text = '';
      res.on('data', d => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, text }));
    });
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

test('room view: a failed machine is shown failed, with its cause, and counted', async () => {
  const mac = '52:54:00:77:00:32', ip = '127.0.0.160';
  // Its firmware takes a lease; then its initrd reports the failure from that address.
  await sendDhcp(dhcpMessage(1, mac, 0x4242));
  await sendDhcp(dhcpMessage(3, mac, 0x4242, ip, { rebooting: true }));
  let boot;
  for (let i = 0; i < 100 && boot?.ip !== ip; i++) {
    [boot] = (await api(`/api/v1/boots?mac=${mac}`)).slice(-1);
    await new Promise(r => setTimeout(r, 100));
  }
  assert.equal(boot?.ip, ip, 'the machine holds its lease');
  const said = await postFrom(ip, '/api/v1/failed', { reason: 'no root device found' });
  assert.equal(said.status, 204, said.text);
  for (let i = 0; i < 100 && boot.now !== 'failed'; i++) {
    [boot] = (await api(`/api/v1/boots?mac=${mac}`)).slice(-1);
    await new Promise(r => setTimeout(r, 100));
  }
  assert.equal(boot.now, 'failed');
  const page = await context.newPage();
  watch(page);
  await view(page, '/room/lab-nfs');
  const tile = `.tile[data-mac="${mac}"]`;
  await page.waitForSelector(`${tile}[data-phase=failed]`, { timeout: WAIT });
  assert.match(await page.textContent(`${tile} .phase`), new RegExp(`failed in ${boot.stopped_in}`));
  const why = boot.cause?.text ?? boot.failure;
  assert.ok(why, 'the API gives a cause');
  assert.equal((await page.textContent(`${tile} [data-testid=why]`)).trim(), why.split('. ')[0]);
  // Counted in the legend and in the room's wave line, as the API's boots say.
  const failedTiles = await page.locator('.tile[data-phase=failed]').count();
  assert.ok(failedTiles >= 1);
  assert.equal((await page.textContent('[data-testid=count-failed]')).trim(), String(failedTiles));
  const wave = await api(`/api/v1/waves/${boot.wave}`);
  assert.equal((await page.textContent('[data-testid=wave-failed]')).trim(), String(wave.boots.filter(b => b.now === 'failed').length));
  await shot(page, 'room-failed');
  // And in the wave's card.
  await view(page, `/wave/${boot.wave}`);
  assert.equal((await page.textContent('[data-testid=failed]')).trim(), String(wave.summary.failed));
  assert.ok(wave.summary.failed >= 1);
  await page.close();
});

test('actions: a lease release is confirmed first, asks the admin token once, and shows the answer', async () => {
  // The machine that failed above holds 127.0.0.160.
  const mac = '52:54:00:77:00:32';
  const page = await context.newPage();
  watch(page);
  const posts = [];
  page.on('request', r => { if (r.method() === 'POST') posts.push(r); });
  await view(page, `/client/${mac}`);
  const answer = async () => (await page.textContent('[data-testid=answer]')).trim();
  // Asked first, in words; cancelled, nothing is sent.
  await page.click('button[data-action=release]');
  assert.equal((await page.textContent('dialog [data-testid=question]')).trim(),
    `Release the lease of ${mac} (127.0.0.160)? Its address goes back to the range, and its root stops being served to that address.`);
  await page.click('dialog [data-testid=dialog-no]');
  await page.waitForFunction(() => document.querySelector('[data-testid=answer]')?.textContent, null, { timeout: WAIT });
  assert.equal(await answer(), 'Cancelled: nothing was sent.');
  assert.equal(posts.length, 0);
  // Confirmed: the admin token is asked for, then the lease is released.
  await page.click('button[data-action=release]');
  await page.click('dialog [data-testid=dialog-yes]');
  await page.fill('dialog input[name=token]', ADMIN);
  await page.click('dialog [data-testid=dialog-yes]');
  await page.waitForFunction(() => document.querySelector('[data-testid=answer]')?.dataset.kind !== 'info', null, { timeout: WAIT });
  assert.match(await answer(), /^Done: .*"ip":"127\.0\.0\.160".*"released":true/);
  assert.equal(posts.length, 1);
  assert.equal(posts[0].headers().authorization, `Bearer ${ADMIN}`, 'the token goes as a bearer header');
  assert.ok(!posts[0].url().includes(ADMIN), 'never in a URL');
  // The server agrees: the MAC holds no lease now.
  const again = await fetch(`${base}/api/v1/leases/${mac}/release`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN}` } });
  assert.equal(again.status, 404);
  // The tab kept the token: the next action asks only its confirmation, and shows the refusal.
  REFUSED.push(`/api/v1/leases/${encodeURIComponent(mac)}/release`);
  await page.click('button[data-action=release]');
  await page.click('dialog [data-testid=dialog-yes]');
  await page.waitForFunction(() => document.querySelector('[data-testid=answer]')?.dataset.kind === 'error', null, { timeout: WAIT });
  assert.match(await answer(), /^Refused \(404\): .*holds no lease/);
  assert.equal(await page.locator('dialog').count(), 0, 'no second token dialog');
  assert.equal(await page.evaluate(() => sessionStorage.getItem('bootpool-admin-token')), ADMIN);
  await shot(page, 'client-action');
  assert.ok(!(await page.textContent('section[data-view=client]')).includes('null'), 'no "null" on the page');
  // A room's wake says how many PCs of which room, and sends nothing when cancelled.
  await view(page, '/room/lab-nfs');
  const machines = (await api('/api/v1/pools')).find(p => p.name === 'lab-nfs').machines.length;
  await page.click('button[data-action=wake]');
  assert.equal((await page.textContent('dialog [data-testid=question]')).trim(), `Wake ${machines} PCs of lab-nfs?`);
  await page.keyboard.press('Escape');
  await page.waitForFunction(() => document.querySelector('[data-testid=answer]')?.textContent, null, { timeout: WAIT });
  assert.equal(await answer(), 'Cancelled: nothing was sent.');
  assert.equal(posts.length, 2, 'the wake cancelled sent nothing');
  // The unknown PCs' panel: hidden with a note while this server does not list them.
  await view(page, '/client');
  const listed = (await fetch(`${base}/api/v1/unknown`)).status;
  assert.equal(await page.locator('[data-testid=unknown-note]').count(), listed === 404 ? 1 : 0);
  await page.close();
});

test('actions: the Images view activates a revision after a confirmation and the admin token', async () => {
  const before = (await api('/api/v1/images')).find(i => i.image === 'revs');
  const r1 = before.revisions.find(r => r.label === 'r1'), r2 = before.revisions.find(r => r.label === 'r2');
  assert.equal(before.active, r1.id, 'the first import is active');
  const page = await context.newPage();
  watch(page);
  await view(page, '/images');
  const section = 'section[data-image=revs]';
  assert.equal(await page.locator(`${section} tr[data-rev="${r1.id}"] button`).count(), 0, 'the active one has no button');
  await page.click(`${section} tr[data-rev="${r2.id}"] button[data-action=activate]`);
  assert.equal((await page.textContent('dialog [data-testid=question]')).trim(),
    'Activate r2 of image revs? Boots starting from now get it; running clients keep theirs until they reboot.');
  await page.click('dialog [data-testid=dialog-yes]');
  // A new tab: the token is asked again.
  await page.fill('dialog input[name=token]', ADMIN);
  await page.click('dialog [data-testid=dialog-yes]');
  await page.waitForSelector(`${section} tr[data-rev="${r1.id}"] button[data-action=activate]`, { timeout: WAIT });
  assert.equal((await page.textContent('[data-testid=answer]')).trim(),
    `Done: image revs: r2 (${r2.id}) is active; boots starting from now get it, running clients keep theirs until they reboot`);
  assert.equal((await api('/api/v1/images')).find(i => i.image === 'revs').active, r2.id);
  await shot(page, 'images');
  await page.close();
});

test('actions: a wake, a next boot and an enrolment succeed after a confirmation and the token, and the server says so', async () => {
  const page = await context.newPage();
  watch(page);
  const answer = async () => {
    await page.waitForFunction(() => ['ok', 'error'].includes(document.querySelector('[data-testid=answer]')?.dataset.kind), null, { timeout: WAIT });
    return (await page.textContent('[data-testid=answer]')).trim();
  };
  // A next boot for one machine, from its page: local disk, once.
  const mac = '52:54:00:77:00:05';
  await view(page, `/client/${mac}`);
  await page.selectOption('select[data-testid=next-boot]', 'local');
  await page.click('button[data-action=next-boot]');
  assert.match((await page.textContent('dialog [data-testid=question]')).trim(), /^Next boot of .*: its local disk, once\?$/);
  await page.click('dialog [data-testid=dialog-yes]');
  await page.fill('dialog input[name=token]', ADMIN);
  await page.click('dialog [data-testid=dialog-yes]');
  assert.match(await answer(), /^Done: /);
  const standing = (await api('/api/v1/next-boot')).entries;
  assert.ok(standing.some(e => JSON.stringify(e).includes(mac) && JSON.stringify(e).includes('local')),
    `the server keeps the next boot: ${JSON.stringify(standing)}`);
  // A wake of the room, confirmed (the tab keeps the token): the server lists the wake.
  const wakesBefore = (await api('/api/v1/wakes')).length;
  await view(page, '/room/lab-nbd');
  await page.click('button[data-action=wake]');
  await page.click('dialog [data-testid=dialog-yes]');
  assert.match(await answer(), /^Done: /);
  const wakes = await api('/api/v1/wakes');
  assert.equal(wakes.length, wakesBefore + 1, 'one wake more');
  // An unknown PC (its DISCOVER in no pool's list) is listed, and enrolled from the panel.
  const stranger = '52:54:00:99:00:7e';
  await sendDhcp(dhcpMessage(1, stranger, 0x7e7e));
  for (let i = 0; i < 50 && !(await api('/api/v1/unknown')).some(u => u.mac === stranger); i++) {
    await new Promise(res => setTimeout(res, 100));
  }
  await view(page, '/client');
  const row = `[data-testid=unknown] tr[data-mac="${stranger}"]`;
  await page.waitForSelector(row, { timeout: WAIT });
  await page.selectOption(`${row} select`, 'lab-nfs');
  await page.fill(`${row} input`, 'pc77');
  await page.click(`${row} button[data-action=enrol]`);
  assert.equal((await page.textContent('dialog [data-testid=question]')).trim(),
    `Enrol ${stranger} into lab-nfs as pc77? It boots the pool's image at its next try.`);
  await page.click('dialog [data-testid=dialog-yes]');
  assert.match(await answer(), /^Done: /);
  const pool = (await api('/api/v1/pools')).find(p => p.name === 'lab-nfs');
  assert.ok(JSON.stringify(pool.machines).includes(stranger), 'the pool lists the enrolled PC');
  assert.ok(!(await api('/api/v1/unknown')).some(u => u.mac === stranger), 'no longer unknown');
  await shot(page, 'enrolled');
  await page.close();
});

test('wave view: a wave a wake started names the wake, and the picker and the room\'s wave line do too', async () => {
  // A wake for one machine, then its firmware's DISCOVER: its boot is the wake's (a fresh
  // machine per try, in case the DISCOVER came before the packet was recorded).
  let boot, wake;
  for (const mac of ['52:54:00:77:00:3a', '52:54:00:77:00:3b', '52:54:00:77:00:3c']) {
    const r = await fetch(`${base}/api/v1/wake`, {
      method: 'POST', body: JSON.stringify({ client: mac }),
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
    });
    const answer = await r.json();
    assert.equal(r.status, 200, JSON.stringify(answer));
    wake = answer.wake;
    await new Promise(res => setTimeout(res, 500));
    await sendDhcp(dhcpMessage(1, mac, 0x4444));
    for (let i = 0; i < 50 && boot?.mac !== mac; i++) {
      [boot] = (await api(`/api/v1/boots?mac=${mac}`)).slice(-1);
      await new Promise(res => setTimeout(res, 100));
    }
    if (boot?.wake === wake) break;
  }
  assert.equal(boot?.wake, wake, 'a boot the wake started');
  const w = await api(`/api/v1/waves/${boot.wave}`);
  assert.equal(w.wake?.id, wake, 'the API gives its wave the wake');
  assert.deepEqual(w.boots.map(b => b.mac), [boot.mac], 'the wake\'s boot alone');
  const page = await context.newPage();
  watch(page);
  await view(page, `/wave/${boot.wave}`);
  assert.equal((await page.textContent('[data-testid=wake]')).trim(), `wake ${wake}`);
  const picked = await page.textContent(`select option[value="${boot.wave}"]`);
  assert.match(picked, new RegExp(`· wake ${wake}$`));
  // The newest boot of lab-nfs: the room's current wave is the wake's.
  await view(page, '/room/lab-nfs');
  await page.waitForSelector('[data-testid=wave-wake]', { timeout: WAIT });
  assert.equal((await page.textContent('[data-testid=wave-wake]')).trim(), `wake ${wake}`);
  await page.close();
});

test('empty state: a fresh daemon says how to record a wave', async () => {
  const fresh = await startDaemon('empty', null);
  const page = await context.newPage();
  watch(page, fresh.base);
  for (const hash of ['/wave', '/compare', '/client', '/egress']) {
    await page.goto(`${fresh.base}/#${hash}`);
    await page.waitForSelector('section[data-ready]', { timeout: WAIT });
    assert.match(await page.textContent('[data-testid=empty]'), /bootpool lab/, hash);
  }
  await page.goto(`${fresh.base}/#/room/lab-nfs`);
  await page.waitForSelector('section[data-ready] [data-testid=empty]', { timeout: WAIT });
  assert.match(await page.textContent('[data-testid=empty]'), /bootpool lab --clients 2 --root nfs/);
  // Every machine still has its tile, waiting.
  assert.equal(await page.locator('.tile[data-phase=waiting]').count(), 63);
  await shot(page, 'empty');
  await page.close();
});

test('no page error, console error or outside request in any view', () => {
  assert.deepEqual(problems, []);
});
