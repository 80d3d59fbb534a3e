// The dashboard in a real browser: `bootpool serve` on a copy of a recorded lab run
// (tests/fixtures/lab-state), Debian's chromium driven by playwright-core. The page's numbers
// must be the API's, a new DHCP client must appear in the room without a reload, every view
// must render without console errors and without a request leaving the server.
//
// Env: BOOTPOOL_BIN (the daemon; tests/dashboard.rs passes it), CHROMIUM (default
// /usr/bin/chromium), SCREENSHOT_DIR (where to save views; default: a temp folder).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import dgram from 'node:dgram';
import fs from 'node:fs';
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
// Endpoints docs/api.md describes that this branch does not serve yet: the page must cope
// with their 404 (it says "no egress data" and polls), so the browser's own 404 log line
// for them is not a page error.
const NOT_YET = [];

const fmtS = v => (v == null ? '–' : `${v.toFixed(1)} s`);

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

// A daemon on a copy of `events` (or an empty state); resolves to its HTTP base and DHCP port.
async function startDaemon(name, events) {
  const dir = path.join(tmp, name);
  fs.mkdirSync(path.join(dir, 'state'), { recursive: true });
  fs.mkdirSync(path.join(dir, 'loaders'));
  // The records are what the page shows; a stub image is enough for the daemon to start.
  fs.mkdirSync(path.join(dir, 'img/rootfs'), { recursive: true });
  for (const f of ['vmlinuz', 'initrd.img']) fs.writeFileSync(path.join(dir, 'img', f), '');
  fs.writeFileSync(path.join(dir, 'img/rootfs.img'), Buffer.alloc(1 << 20));
  if (events) fs.copyFileSync(events, path.join(dir, 'state/events.jsonl'));
  // The pools and MACs of the lab run in the fixture; every port picked by the kernel.
  fs.writeFileSync(path.join(dir, 'pools.yaml'), `
server:
  address: 127.0.0.1
  http: 127.0.0.1:0
  state_dir: ${dir}/state
  retention: forever
  loaders: ${dir}/loaders
  ports: { dhcp: 0, tftp: 0, nfs: 0, nbd: 0, portmap: 0 }
dhcp:
  mode: authoritative
  subnet: 127.0.0.0/8
  range: 127.0.0.100-127.0.0.199
  lease: 1h
images:
  demo: { dir: ${dir}/img, store: disk }
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
  const child = spawn(BIN, ['serve', '--config', path.join(dir, 'pools.yaml')], {
    env: { ...process.env, NO_COLOR: '1', RUST_LOG: 'info' }, stdio: ['ignore', 'pipe', 'pipe'],
  });
  daemons.push(child);
  let log = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`daemon did not start:\n${log}`)), WAIT);
    const seen = chunk => {
      log += chunk;
      const m = log.replace(/\x1b\[[0-9;]*m/g, '').match(/bootpool serving http=(\S+) dhcp=\S+:(\d+)/);
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

async function shot(page, name) {
  fs.mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
}

function watch(page) {
  page.on('pageerror', e => problems.push(`page error: ${e.message}`));
  page.on('console', msg => {
    if (msg.type() !== 'error') return;
    const url = msg.location()?.url ?? '';
    if (msg.text().includes('404') && NOT_YET.some(p => url.includes(p))) return;
    problems.push(`console error: ${msg.text()} (${url})`);
  });
  page.on('request', r => {
    if (!r.url().startsWith(base) && !r.url().startsWith('data:')) problems.push(`request left the server: ${r.url()}`);
  });
}

// A PXE ROM's DHCP message (RFC 2131 with option 60 PXEClient and option 93), as bytes.
function dhcpMessage(type, mac, xid, requested) {
  const b = Buffer.alloc(300);
  b[0] = 1; b[1] = 1; b[2] = 6;
  b.writeUInt32BE(xid, 4);
  b.writeUInt16BE(0x8000, 10);
  Buffer.from(mac.split(':').map(x => parseInt(x, 16))).copy(b, 28);
  Buffer.from([99, 130, 83, 99]).copy(b, 236);
  const vendor = Buffer.from('PXEClient:Arch:00000:UNDI:002001');
  const opts = [53, 1, type, 60, vendor.length, ...vendor, 93, 2, 0, 0];
  if (requested) opts.push(50, 4, ...requested.split('.').map(Number), 54, 4, 127, 0, 0, 1);
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
    executablePath: CHROMIUM, headless: true, viewport: { width: 1280, height: 800 },
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
});

after(async () => {
  clearTimeout(watchdog);
  await context?.close();
  for (const d of daemons) d.kill('SIGTERM');
  if (!process.env.KEEP_TMP) fs.rmSync(tmp, { recursive: true, force: true });
});

test('the fixture holds an NFS wave and an NBD wave', async () => {
  const waves = await api('/api/v1/waves');
  assert.deepEqual(waves.map(w => w.pool).sort(), ['lab-nbd', 'lab-nfs']);
});

test('wave view: summary, per-client totals and the Gantt rows are the API\'s', async () => {
  const page = await context.newPage();
  watch(page);
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
    const rows = await page.$$eval('[data-testid=per-client] tbody tr', trs => trs.map(tr => [tr.dataset.mac, tr.querySelector('[data-testid=total]').textContent]));
    assert.deepEqual(rows, w.boots.map(b => [b.mac, fmtS(b.duration_s)]));
    // One segment per phase of each boot.
    assert.equal(await page.locator('svg.gantt rect[data-phase]').count(), w.boots.reduce((n, b) => n + b.phases.length, 0));
    // Sorting by total puts the slowest first, whatever order it had before.
    await page.click('button[data-sort=name]');
    await page.click('button[data-sort=total]');
    const order = await page.$$eval('svg.gantt g[data-key]', gs => gs.map(g => g.dataset.key));
    assert.deepEqual(order, [...w.boots].sort((a, b) => b.duration_s - a.duration_s).map(b => b.mac));
    assert.equal(await page.locator('svg[aria-label^=histogram] rect').count() > 0, true);
    await shot(page, w.pool === 'lab-nfs' ? 'wave-nfs' : 'wave-nbd');
  }
  await page.close();
});

test('room view: a tile per client with its phase and time', async () => {
  const page = await context.newPage();
  watch(page);
  for (const pool of ['lab-nfs', 'lab-nbd']) {
    const newest = new Map();
    for (const b of await api(`/api/v1/boots?pool=${pool}`)) newest.set(b.mac, b);
    await view(page, `/room/${pool}`);
    const tiles = await page.$$eval('.tile', ts => ts.map(t => [t.dataset.mac, t.dataset.phase, t.querySelector('[data-testid=elapsed]').textContent]));
    assert.deepEqual(tiles.sort(), [...newest.values()].map(b => [b.mac, b.current_phase, fmtS(b.duration_s)]).sort());
    assert.equal((await page.textContent('[data-testid=count-booted]')).trim(), String([...newest.values()].filter(b => b.current_phase === 'booted').length));
    if (pool === 'lab-nfs') await shot(page, 'room');
  }
  await page.close();
});

test('compare view: the API\'s sentence and both waves\' numbers', async () => {
  const waves = await api('/api/v1/waves');
  const [a, b] = waves.map(w => w.id);
  const c = await api(`/api/v1/compare?a=${a}&b=${b}`);
  const page = await context.newPage();
  watch(page);
  await view(page, `/compare/${a}/${b}`);
  assert.equal((await page.textContent('[data-testid=sentence]')).trim(), c.sentence);
  for (const key of ['median', 'p95', 'max']) {
    const cells = await page.$$eval(`tr[data-row=${key}] td`, tds => tds.map(td => td.textContent));
    assert.deepEqual(cells, [fmtS(c.a.summary[`${key}_s`]), fmtS(c.b.summary[`${key}_s`])], key);
  }
  // Both distributions on one axis: a mark per booted client.
  const marks = await page.locator('svg[aria-label="boot time distributions"] :is(circle, rect)').count();
  assert.equal(marks, [c.a, c.b].flatMap(w => w.boots).filter(x => x.duration_s != null).length);
  await shot(page, 'compare');
  await page.close();
});

test('egress view: links (or the no-data state) and clients per phase over time', async () => {
  const page = await context.newPage();
  watch(page);
  const waves = await api('/api/v1/waves');
  await view(page, `/egress/${waves[0].id}`);
  const egress = await fetch(`${base}/api/v1/egress`);
  if (egress.status === 404) {
    assert.match(await page.textContent('section'), /No egress data/);
  } else {
    const e = await egress.json();
    assert.equal(await page.locator('[data-link]').count(), e.links.length);
  }
  // The stacked phase areas: one layer per phase the wave's boots went through, plus booted.
  const w = await api(`/api/v1/waves/${waves[0].id}`);
  const phases = new Set(w.boots.flatMap(b => b.phases.map(p => p.name)));
  if (w.boots.some(b => b.duration_s != null)) phases.add('booted');
  const layers = await page.$$eval('svg[aria-label="clients in each phase over time"] path title', ts => ts.map(t => t.textContent));
  assert.deepEqual(layers.sort(), [...phases].sort());
  await shot(page, 'egress');
  await page.close();
});

test('client view: one machine\'s boots', async () => {
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
  await shot(page, 'client');
  await page.close();
});

test('room view: a running client silent for over 3x the others\' median in its phase is stalled', async () => {
  const page = await context.newPage();
  watch(page);
  await view(page, '/room');
  const verdicts = await page.evaluate(async () => {
    const { stalledFor } = await import('/app.js');
    const done = s => ({ result: 'booted', current_phase: 'booted', phases: [{ name: 'dhcp', seconds: s }] });
    const others = [done(2), done(3), done(4)];
    const running = silent => ({ result: 'running', current_phase: 'dhcp', last_event: 100 - silent, phases: [{ name: 'dhcp', seconds: silent }] });
    return [stalledFor(running(10), others, 100), stalledFor(running(8), others, 100),
      stalledFor(running(10), [], 100), stalledFor(done(50), others, 100)];
  });
  // Median 3 s: silent 10 s is stalled, 8 s is not; alone or booted, never.
  assert.deepEqual(verdicts, [10, null, null, null]);
  await page.close();
});

test('keyboard: the views are reachable with Tab and Enter', async () => {
  const page = await context.newPage();
  watch(page);
  await view(page, '/room');
  // Skip link, the title, then the view links in order.
  for (let i = 0; i < 4; i++) await page.keyboard.press('Tab');
  assert.equal(await page.evaluate(() => document.activeElement.dataset.view), 'wave');
  await page.keyboard.press('Enter');
  await page.waitForSelector('section[data-view=wave][data-ready]', { timeout: WAIT });
  await page.close();
});

test('phone: views fit the width of a phone', async () => {
  const page = await context.newPage();
  watch(page);
  await page.setViewportSize({ width: 390, height: 844 });
  for (const hash of ['/room/lab-nfs', '/wave', '/compare', '/egress', '/client/52:54:00:77:00:01']) {
    await view(page, hash);
    const [scroll, inner] = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
    assert.ok(scroll <= inner, `${hash}: page is ${scroll}px wide on a ${inner}px screen`);
  }
  await view(page, '/wave');
  await shot(page, 'phone-wave');
  await page.close();
});

test('live: a machine that powers on appears in its room without a reload', async () => {
  const page = await context.newPage();
  watch(page);
  await view(page, '/room/lab-nfs');
  const mac = '52:54:00:77:00:30';
  assert.equal(await page.locator(`.tile[data-mac="${mac}"]`).count(), 0);
  // Its PXE ROM: DISCOVER, then REQUEST for the address the daemon offers first.
  await sendDhcp(dhcpMessage(1, mac, 0x1234));
  await sendDhcp(dhcpMessage(3, mac, 0x1234, '127.0.0.100'));
  const tile = page.locator(`.tile[data-mac="${mac}"]`);
  await tile.waitFor({ timeout: WAIT });
  const [boot] = await api(`/api/v1/boots?mac=${mac}`);
  assert.equal(boot.pool, 'lab-nfs');
  assert.equal(await tile.getAttribute('data-phase'), boot.current_phase);
  console.log(`# room updates: ${await page.textContent('[data-testid=mode]')}`);
  await shot(page, 'room-live');
  await page.close();
});

test('empty state: a fresh daemon says how to record a wave', async () => {
  const fresh = await startDaemon('empty', null);
  const page = await context.newPage();
  page.on('pageerror', e => problems.push(`page error: ${e.message}`));
  for (const hash of ['/wave', '/compare', '/client', '/egress']) {
    await page.goto(`${fresh.base}/#${hash}`);
    await page.waitForSelector('section[data-ready]', { timeout: WAIT });
    assert.match(await page.textContent('[data-testid=empty]'), /bootpool lab/, hash);
  }
  await page.goto(`${fresh.base}/#/room/lab-nfs`);
  await page.waitForSelector('section[data-ready] [data-testid=empty]', { timeout: WAIT });
  assert.match(await page.textContent('[data-testid=empty]'), /bootpool lab --clients 2 --root nfs/);
  await shot(page, 'empty');
  await page.close();
});

test('no page error, console error or outside request in any view', () => {
  assert.deepEqual(problems, []);
});
