// Screenshots of a storm's wave in the dashboard (docs/screenshots/storm-*.png), taken by
// scripts/storm-screenshots against `bootpool serve` on a copy of the storm's state folder.
// Env: BASE (the daemon's http://HOST:PORT), SHOTS (where to write), WAVE (a wave id; default
// the newest of the waves with the most clients), WAVE_CLIENTS and WAVE_POOL (else the newest
// wave of that many clients, of that pool), CHROMIUM (default /usr/bin/chromium).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

const BASE = process.env.BASE, SHOTS = process.env.SHOTS;
if (!BASE || !SHOTS) throw new Error('set BASE and SHOTS');
const api = async p => (await fetch(BASE + p)).json();
const waves = await api('/api/v1/waves');
if (!waves.length) throw new Error('no waves in this state folder');
const most = Math.max(...waves.map(w => w.summary.clients));
const sized = Number(process.env.WAVE_CLIENTS || most), pool = process.env.WAVE_POOL;
const wave = waves.find(w => String(w.id) === process.env.WAVE)
  ?? [...waves].reverse().find(w => w.summary.clients === sized && (!pool || w.pool === pool));
if (!wave) throw new Error(`no wave of ${sized} clients${pool ? ` in ${pool}` : ''}`);
console.log(`storm-shots: wave ${wave.id} (${wave.pool}, ${wave.summary.clients} clients)`);

const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'storm-shots-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium', headless: true,
  viewport: { width: 1280, height: 800 },
  args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
try {
  const page = await context.newPage();
  page.on('pageerror', e => { throw e; });
  const view = async hash => {
    await page.goto(`${BASE}/#${hash}`);
    await page.waitForSelector('section[data-ready]', { timeout: 20_000 });
  };
  const shot = async (name, opts) => {
    fs.mkdirSync(SHOTS, { recursive: true });
    await page.screenshot({ path: path.join(SHOTS, `${name}.png`), ...opts });
    console.log(`storm-shots: ${path.join(SHOTS, `${name}.png`)}`);
  };
  // The room: every machine the pool lists, the storm's clients in its current wave.
  await view(`/room/${encodeURIComponent(wave.pool)}`);
  await shot('storm-room', { fullPage: true });
  // The wave, from its title down to the histogram (the 200-row table below is left out).
  await view(`/wave/${wave.id}`);
  const bottom = await page.evaluate(() => {
    const hist = document.querySelector('svg[aria-label^=histogram]');
    return Math.ceil(hist.getBoundingClientRect().bottom + window.scrollY + 12);
  });
  await shot('storm-wave', { fullPage: true, clip: { x: 0, y: 0, width: 1280, height: bottom } });
  // Egress: each server link against its capacity, protocols, clients per phase.
  await view(`/egress/${wave.id}`);
  await shot('storm-egress', { fullPage: true });
} finally {
  await context.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
