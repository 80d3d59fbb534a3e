// The dashboard: hash routes, one function per view, data from the JSON API (docs/api.md).
import { h, api, q, when } from './dom.js';
import { targetActions, clientActions, unknownPanel, imagesView } from './actions.js';
import { siteView } from './site.js';
import { PHASES, phasesOf, PHASE_COLOUR, PHASE_INK, STATES, STATE_COLOUR, STATE_INK, SERIES, GANTT_SCROLL_ROWS, swatch, gantt, histogram, lines, stacked, strips, pairs, bootBars } from './charts.js';

const main = document.getElementById('main');
const RUN_NFS = 'bootpool lab --clients 2 --root nfs';
const RUN_NBD = 'bootpool lab --clients 2 --root nbd';

// ---- small helpers ----

export const fmtS = v => (v == null ? '–' : `${v.toFixed(1)} s`);
export function fmtBytes(n) {
  if (n == null) return '–';
  if (n >= 1024 ** 3) return `${(n / 1024 ** 3).toFixed(2)} GiB`;
  if (n >= 1024 ** 2) return `${(n / 1024 ** 2).toFixed(1)} MiB`;
  if (n >= 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${Math.round(n)} B`;
}
const mbit = bytesPerS => (bytesPerS * 8) / 1e6;
const now = () => Date.now() / 1000;

function empty(text, command) {
  return h('div', { class: 'empty', 'data-testid': 'empty' }, h('p', {}, text), command ? h('pre', {}, h('code', {}, command)) : null);
}

function legend(counts, waiting = false, phases = PHASES) {
  const item = (p, text, mark) => h('li', { 'data-phase': p }, mark, ` ${text}`,
    counts ? h('b', { 'data-testid': `count-${p}` }, ` ${counts[p] ?? 0}`) : null);
  const state = k => h('span', { class: `swatch-state swatch-${k}`, 'aria-hidden': 'true', style: STATE_COLOUR[k] ? `background:${STATE_COLOUR[k]}` : null });
  return h('ul', { class: 'legend', 'aria-label': 'phases' }, phases.map(p => item(p, p === 'booted' && waiting ? 'booted (up now)' : p, swatch(p))),
    // The room's machines that are not booting or up: each state in words, with its count.
    waiting ? Object.entries(STATES).map(([k, text]) => item(k, text, state(k))) : null);
}

function width(el) {
  return Math.max(280, Math.floor(el.clientWidth || main.clientWidth || 600));
}

let names = new Map();
async function loadNames() {
  const clients = await api('/api/v1/clients');
  names = new Map(clients.map(c => [c.mac, c.name]));
  return clients;
}
const label = mac => names.get(mac) ?? mac;

function waveLabel(w) {
  return `wave ${w.id} · ${w.pool} · ${when(w.start)} · ${w.summary.clients} clients${w.wake ? ` · wake ${w.wake.id}` : ''}`;
}

function wavePicker(waves, current, go) {
  return h('label', { class: 'picker' }, 'Wave ',
    h('select', { onchange: e => go(e.target.value) },
      [...waves].reverse().map(w => h('option', { value: w.id, selected: w.id === current }, waveLabel(w)))));
}

// A wave's boots end when the last booted call (or the newest event) came in.
function waveEnd(w) {
  return Math.max(w.start + 1, ...w.boots.map(b => (b.duration_s != null ? b.start + b.duration_s : b.last_event)));
}

function rootOf(w) {
  return w.boots.find(b => b.root)?.root ?? '?';
}

// Egress is optional: an older server answers 404, and then the views say so.
async function loadEgress(since, step) {
  try {
    return await api(`/api/v1/egress?since=${since}&step=${step}`);
  } catch (e) {
    if (e.status === 404) return null;
    throw e;
  }
}

const NO_EGRESS = 'No egress data: this server does not sample link counters (GET /api/v1/egress answered 404). ' +
  'Egress appears here once the daemon samples its interfaces.';

// ---- live updates ----

// Keeps boots of a pool current: from the SSE stream, else by polling /api/v1/boots every 2 s.
function watchBoots(pool, onBoots, onMode) {
  const mine = b => b.pool === pool;
  let stopped = false, timer = null, source = null;
  const poll = async () => {
    try { onBoots(await api(`/api/v1/boots?pool=${q(pool)}`)); } catch { /* next poll retries */ }
    if (!stopped) timer = setTimeout(poll, 2000);
  };
  const fallBack = () => {
    source?.close();
    source = null;
    onMode('polling every 2 s');
    poll();
  };
  if (!('EventSource' in window)) { fallBack(); return () => { stopped = true; clearTimeout(timer); }; }
  source = new EventSource('/api/v1/stream');
  source.addEventListener('open', async () => {
    onMode('live');
    // Catch up on whatever changed while (re)connecting.
    try { onBoots(await api(`/api/v1/boots?pool=${q(pool)}`)); } catch { /* the stream carries on */ }
  });
  // A boot that changes can move the others' waves and stall thresholds (docs/api.md), and
  // the stream sends only the boot that changed: after it, the pool's boots are read again,
  // at most once per 2 s.
  let again = null;
  const catchUp = () => {
    if (again || stopped) return;
    again = setTimeout(async () => {
      again = null;
      try { onBoots(await api(`/api/v1/boots?pool=${q(pool)}`)); } catch { /* the stream carries on */ }
    }, 2000);
  };
  source.addEventListener('boot', ev => {
    const b = JSON.parse(ev.data);
    if (mine(b)) { onBoots([b]); catchUp(); }
  });
  // A stream that never opened (404, old server) is closed for good: poll instead.
  source.addEventListener('error', () => { if (source?.readyState === EventSource.CLOSED) fallBack(); });
  return () => { stopped = true; source?.close(); clearTimeout(timer); clearTimeout(again); };
}

// A boot is stalled once it has been silent longer than the server's `stall_after_s` for it
// (docs/api.md: 3x the median time the others of its wave spent in its phase); seconds silent.
export function stalledFor(boot, t) {
  const silent = t - boot.last_event;
  return boot.stall_after_s != null && silent > boot.stall_after_s ? silent : null;
}

// ---- views ----

// The current wave of a room, kept as boots arrive: the wave (the server's, each boot's `wave`,
// docs/api.md) of the boot that started last; `older` holds each other machine's newest boot.
export function roomWave() {
  const boots = new Map(), wave = new Map(), older = new Map();
  let start = null;
  const admit = list => {
    for (const b of list) boots.set(b.id, b);
    const all = [...boots.values()].filter(b => b.wave != null).sort((x, y) => x.start - y.start || x.id - y.id);
    const current = all.at(-1)?.wave;
    wave.clear();
    older.clear();
    for (const b of all) {
      if (b.wave === current) wave.set(b.mac, b);
      else if (!(older.get(b.mac)?.id > b.id)) older.set(b.mac, b);
    }
    for (const m of wave.keys()) older.delete(m);
    start = wave.size ? Math.min(...[...wave.values()].map(b => b.start)) : null;
  };
  return { wave, older, admit, start: () => start };
}

const WAITING = 'waiting';
// What a machine's tile shows of its boot `b` (its boot in the room's wave, else its newest
// one): the phase while booting, `booted` while up, else the state (`now` of docs/api.md);
// `waiting` for a machine never seen.
export function tileState(b) {
  if (!b) return WAITING;
  if (b.now === 'up') return 'booted';
  if (b.now === 'booting' || !b.now) return b.current_phase;
  return b.now;
}
// A room of more machines than this gets smaller tiles, so 200 fit on a screen or two.
export const DENSE_TILES = 100;
// On a small tile an unnamed machine shows its MAC's last three bytes (in full on hover).
const tileName = (name, mac, dense) => (dense && name === mac ? `…${mac.slice(-8)}` : name);

// ---- rooms: the DHCP subnets, each with its uplink (dhcp.subnets, docs/subnets.md) ----

const ipNumber = ip => ip.split('.').reduce((n, o) => n * 256 + Number(o), 0);
// The room (one of /api/v1/config's `rooms`) whose subnet holds `ip`; null for none.
export function roomOf(ip, rooms) {
  if (!ip) return null;
  const n = ipNumber(ip);
  return rooms.find(r => {
    const [net, len] = r.subnet.split('/');
    const size = 2 ** (32 - Number(len));
    return Math.floor(n / size) === Math.floor(ipNumber(net) / size);
  }) ?? null;
}
// `macs` grouped by room, in the rooms' order, those whose address is in none (or not known yet)
// last: [[room or null, macs]]. null when there is nothing to group: all in one room, and it
// declares no uplink.
export function roomGroups(macs, ipOf, rooms) {
  const groups = new Map();
  for (const m of macs) {
    const r = roomOf(ipOf(m), rooms);
    if (!groups.has(r)) groups.set(r, []);
    groups.get(r).push(m);
  }
  const only = [...groups.keys()];
  if (only.length === 0 || (only.length === 1 && !only[0]?.uplink_bps)) return null;
  const order = [...rooms, null];
  return [...groups].sort((a, b) => order.indexOf(a[0]) - order.indexOf(b[0]));
}
// The rooms' uplinks' rates now (bytes/s by subnet): /metrics' bootpool_room_carried_bytes.
async function uplinkRates() {
  const r = await fetch('/metrics');
  const text = r.ok ? await r.text() : '';
  return new Map([...text.matchAll(/^bootpool_room_carried_bytes\{room="([^"]+)"\} (\d+)$/gm)]
    .map(m => [m[1], Number(m[2])]));
}
// The Room view's tiles, under a heading per room when they span several (or one behind an
// uplink): its subnet, and its uplink's rate now against its capacity.
function roomTiles(macs, ipOf, rooms, rates, tileOf) {
  const groups = roomGroups(macs, ipOf, rooms);
  if (!groups) return macs.map(tileOf);
  const heading = (r, n) => {
    const uplink = r?.uplink_bps ? [' · uplink ', h('span', { 'data-testid': 'uplink' },
      `${mbit(rates.get(r.subnet) ?? 0).toFixed(0)} of ${(r.uplink_bps / 1e6).toFixed(0)} Mbit/s`)] : [];
    return h('h3', { class: 'room-head', 'data-room': r?.subnet ?? '' },
      h('b', {}, r ? `Subnet ${r.subnet}` : 'Address in no subnet or not known yet'), ` · ${n} machines`, ...uplink);
  };
  return groups.flatMap(([r, ms]) => [heading(r, ms.length), ...ms.map(tileOf)]);
}

async function roomView(el, [poolName], ctx) {
  const [pools] = await Promise.all([api('/api/v1/pools'), loadNames()]);
  if (!pools.length) return el.replaceChildren(empty('No pools configured: add one under `pools:` in pools.yaml.'));
  const pool = pools.find(p => p.name === poolName)
    ?? [...pools].filter(p => p.latest_wave != null).sort((a, b) => b.latest_wave - a.latest_wave)[0] ?? pools[0];
  const room = roomWave();
  const listed = new Map(pool.machines.map(m => [m.mac, m]));
  const rooms = (await api('/api/v1/config').catch(() => ({}))).rooms ?? [];
  let rates = new Map();
  const mode = h('span', { class: 'mode', 'data-testid': 'mode' }, 'connecting…');
  const waveLine = h('p', { class: 'meta' });
  const grid = h('div', { class: 'tiles', 'data-testid': 'tiles' });
  const counts = h('div');
  const note = h('div');
  // An image with revisions: how many of its running clients still run an older one.
  const imageLine = h('p', { class: 'meta', 'data-testid': 'image-revision' });
  api('/api/v1/images').then(images => {
    const i = images.find(x => x.image === pool.image);
    if (i?.summary) imageLine.replaceChildren(`Image ${i.image} is at ${i.active_label}: `,
      h('b', {}, `${i.need_reboot} of ${i.clients}`), ` running clients need a reboot to get ${i.active_label}.`);
  }).catch(() => {});
  el.replaceChildren(
    h('h2', {}, `Room ${pool.name}`),
    h('nav', { class: 'pools', 'aria-label': 'pools' }, pools.map(p =>
      h('a', { href: `#/room/${q(p.name)}`, 'aria-current': p.name === pool.name ? 'page' : null }, `${p.name} (${p.root})`))),
    h('p', { class: 'meta' }, `${pool.machines.length} machines`,
      pool.machines_complete ? '' : ' (a listed range is too long to show: only its machines that booted)',
      `, image ${pool.image}, root over ${pool.root}. Updates: `, mode),
    // Wake the room, or say what it boots next (behind the admin token, each confirmed).
    targetActions({ pool: pool.name }, `${pool.machines.length} PCs of ${pool.name}`, [...new Set(pools.map(p => p.image))]),
    imageLine, waveLine, counts, note, grid);

  // One machine's tile: its boot in the current wave (`b`), else its newest boot of an earlier
  // wave, as it stands now (the API's `now`: up, was up, failed, timed out, booting).
  const tile = (mac, b, t, dense) => {
    const name = names.get(mac) ?? listed.get(mac)?.name ?? mac;
    const nameEl = h('span', { class: 'name', title: name === mac ? mac : `${name} (${mac})` }, tileName(name, mac, dense));
    const earlier = b ? null : room.older.get(mac);
    const shown = b ?? earlier;
    const key = tileState(shown);
    const link = { href: `#/client/${q(mac)}`, 'data-mac': mac, 'data-phase': key, 'data-now': shown?.now ?? null };
    if (key === WAITING) {
      // Never seen in this pool (powered off, or not at its DHCP yet).
      return h('a', { class: 'tile waiting', ...link }, nameEl,
        h('span', { class: 'phase' }, dense ? '○ waiting' : '○ waiting / off'), h('span', { class: 'last' }, 'never booted'));
    }
    const since = earlier ? h('span', { class: 'last' }, `${dense ? 'wave' : 'in wave'} ${earlier.wave ?? '?'}, ${when(earlier.start)}`) : null;
    if (key === 'was_up') {
      // It was up, then went away (shut down, powered off, restarted): off now, unless its
      // next boot already started.
      return h('a', { class: 'tile was-up', ...link }, nameEl,
        h('span', { class: 'phase' }, dense ? '○ off (was up)' : '○ was up · off now'),
        h('span', { class: 'elapsed', 'data-testid': 'elapsed' }, fmtS(shown.duration_s)),
        h('span', { class: 'last' }, `${shown.gone.replaceAll('_', ' ')} at ${fmtS(shown.gone_at - shown.start)}`), since);
    }
    const stalled = b ? stalledFor(b, t) : null;
    const elapsed = shown.duration_s ?? (shown.result === 'running' ? t : shown.last_event) - shown.start;
    const bad = key === 'failed' || key === 'timed_out';
    const fill = STATE_COLOUR[key] ?? PHASE_COLOUR[key] ?? '#ccc', ink = STATE_INK[key] ?? PHASE_INK[key] ?? '#000';
    // What went wrong, in a line (all of it on hover and on the client's page).
    const why = bad ? (shown.cause?.text ?? shown.failure ?? null) : null;
    return h('a', {
      class: `tile${stalled ? ' stalled' : ''}${earlier ? ' earlier' : ''}`, ...link,
      style: `background:${fill};color:${ink}`,
    },
    nameEl,
    h('span', { class: 'phase' }, key === 'booted' ? '✓ booted · up'
      : key === 'failed' ? `✗ failed in ${shown.stopped_in ?? shown.current_phase}`
        : key === 'timed_out' ? `✗ timed out in ${shown.stopped_in ?? shown.current_phase}` : key),
    h('span', { class: 'elapsed', 'data-testid': 'elapsed' }, fmtS(elapsed)),
    why ? h('span', { class: 'why', 'data-testid': 'why', title: why }, why.split('. ')[0]) : null,
    shown.ip && !dense ? h('span', { class: 'ip' }, shown.ip) : null,
    // Which server link it boots from, once the room is spread over several (server.links).
    b?.link && new Set([...room.wave.values()].map(o => o.link).filter(Boolean)).size > 1
      ? h('span', { class: 'link', 'data-testid': 'link' }, `via ${b.link}`) : null,
    since,
    stalled ? h('span', { class: 'stall' }, dense ? `⚠ stalled ${stalled.toFixed(0)} s` : `⚠ stalled: silent ${stalled.toFixed(0)} s`) : null);
  };

  const draw = () => {
    const t = now();
    // The listed machines in pools.yaml's order, then any other that booted in this pool.
    const macs = [...listed.keys()];
    for (const m of [...room.wave.keys(), ...room.older.keys()].sort()) if (!listed.has(m)) { listed.set(m, { mac: m }); macs.push(m); }
    // Every machine counted once, by what its tile shows.
    const c = {};
    for (const m of macs) { const k = tileState(room.wave.get(m) ?? room.older.get(m)); c[k] = (c[k] ?? 0) + 1; }
    counts.replaceChildren(legend(c, true, phasesOf([...room.wave.values(), ...room.older.values()])));
    const first = [...room.wave.values()].sort((a, b) => a.start - b.start)[0];
    const inWave = k => [...room.wave.values()].filter(b => b.now === k).length;
    waveLine.replaceChildren(...(first
      ? ['Current wave: ', h('a', { href: `#/wave/${first.id}` }, `wave ${first.id}`),
        ...(first.wake != null ? [', woken by ', h('b', { 'data-testid': 'wave-wake' }, `wake ${first.wake}`), ','] : []),
        ` powered on ${when(first.start)}, `,
        h('b', { 'data-testid': 'wave-clients' }, String(room.wave.size)), ` of ${macs.length} machines seen: `,
        h('b', { 'data-testid': 'wave-up' }, String(inWave('up'))), ' up, ',
        h('b', { 'data-testid': 'wave-failed' }, String(inWave('failed'))), ' failed, ',
        h('b', { 'data-testid': 'wave-timed-out' }, String(inWave('timed_out'))), ' timed out.']
      : []));
    note.replaceChildren(...(room.wave.size ? [] : [empty(`No boots in ${pool.name} yet: power on a machine it lists, or try the image with`,
      pool.root === 'nbd' ? RUN_NBD : RUN_NFS)]));
    const dense = macs.length > DENSE_TILES;
    grid.classList.toggle('dense', dense);
    const ipOf = m => room.wave.get(m)?.ip ?? room.older.get(m)?.ip ?? listed.get(m)?.ip;
    grid.replaceChildren(...roomTiles(macs, ipOf, rooms, rates, m => tile(m, room.wave.get(m), t, dense)));
  };
  const merge = boots => {
    room.admit(boots);
    draw();
  };
  merge(await api(`/api/v1/boots?pool=${q(pool.name)}`));
  // A listed machine's boot has its pool (and wave) from its first DISCOVER, which lights its tile.
  const stop = watchBoots(pool.name, merge, m => { mode.textContent = m; });
  const clock = setInterval(draw, 1000);
  // The uplinks' rates, every 2 s, when a room declares one.
  const pull = () => uplinkRates().then(r => { rates = r; }).catch(() => {});
  const uplinks = rooms.some(r => r.uplink_bps) ? (pull(), setInterval(pull, 2000)) : null;
  ctx.cleanup.push(stop, () => clearInterval(clock), () => clearInterval(uplinks));
}

// The Gantt rows' orders: slowest first, first powered on first, by name (pc2 before pc10) or MAC.
const byLabel = (a, b) => a.label.localeCompare(b.label, undefined, { numeric: true });
export const ROW_ORDER = {
  total: (a, b) => b.total - a.total || byLabel(a, b),
  start: (a, b) => a.offset - b.offset || byLabel(a, b),
  name: byLabel,
};

async function waveView(el, [id], ctx) {
  const waves = await api('/api/v1/waves');
  if (!waves.length) return el.replaceChildren(empty('No waves yet: power on a room, or run', RUN_NFS));
  const wanted = id != null ? Number(id) : waves[waves.length - 1].id;
  const [w] = await Promise.all([api(`/api/v1/waves/${wanted}`), loadNames()]);
  const sm = w.summary;
  let sortBy = 'total';
  const chart = h('div', { class: 'chart-box' });
  const hist = h('div', { class: 'chart-box' });
  const protos = [...new Set(w.boots.flatMap(b => Object.keys(b.bytes)))].sort();
  const shown = phasesOf(w.boots);
  const stat = (name, key, value) => h('div', {}, h('dt', {}, name), h('dd', { 'data-testid': key }, value));
  const sortButton = (key, text) => h('button', {
    type: 'button', 'aria-pressed': String(sortBy === key), 'data-sort': key,
    onclick: e => { sortBy = key; for (const b of e.target.parentNode.children) b.setAttribute('aria-pressed', String(b.dataset.sort === key)); draw(); },
  }, text);

  el.replaceChildren(
    h('h2', {}, `Wave ${w.id}: ${w.pool}, ${rootOf(w)} root`),
    wavePicker(waves, w.id, v => { location.hash = `#/wave/${v}`; }),
    h('p', { class: 'meta' }, 'Started ', h('time', { datetime: new Date(w.start * 1000).toISOString(), 'data-testid': 'started' }, when(w.start)),
      ...(w.wake ? [', woken by ', h('b', { 'data-testid': 'wake' }, `wake ${w.wake.id}`), ` (its first magic packet ${when(w.wake.at)})`] : []), '. ',
      h('a', { href: `#/egress/${w.id}` }, 'Egress during this wave'), ' · ',
      h('a', { href: `#/compare/${w.id}` }, 'Compare with another wave')),
    h('dl', { class: 'stats' },
      stat('clients', 'clients', String(sm.clients)), stat('booted', 'booted', String(sm.booted)),
      stat('running', 'running', String(sm.running)), stat('failed', 'failed', String(sm.failed ?? 0)),
      stat('timed out', 'timed-out', String(sm.timed_out ?? 0)),
      stat('median', 'median', fmtS(sm.median_s)),
      stat('p95', 'p95', fmtS(sm.p95_s)), stat('max', 'max', fmtS(sm.max_s))),
    h('h3', {}, 'Phases per client'),
    h('div', { class: 'toolbar', role: 'group', 'aria-label': 'sort rows' }, 'Sort: ',
      sortButton('total', 'by boot time'), sortButton('start', 'by start'), sortButton('name', 'by name / MAC')),
    legend(undefined, false, shown), chart,
    h('h3', {}, 'Boot times'), hist,
    h('h3', {}, 'Phase medians'),
    h('table', { class: 'num' }, h('thead', {}, h('tr', {}, shown.slice(0, -1).map(p => h('th', {}, p)))),
      h('tbody', {}, h('tr', {}, shown.slice(0, -1).map(p => h('td', { 'data-testid': `phase-median-${p}` }, fmtS(sm.phase_median_s[p])))))),
    h('h3', {}, 'Per client'),
    h('div', { class: 'scroll' }, h('table', { class: 'num', 'data-testid': 'per-client' },
      h('thead', {}, h('tr', {}, h('th', {}, 'client'), h('th', {}, 'result'), h('th', {}, 'total'),
        shown.slice(0, -1).map(p => h('th', {}, p)), protos.map(p => h('th', {}, `${p} bytes`)))),
      h('tbody', {}, w.boots.map(b => h('tr', { 'data-mac': b.mac },
        h('th', {}, h('a', { href: `#/client/${q(b.mac)}` }, label(b.mac))), h('td', {}, b.result),
        h('td', { 'data-testid': 'total' }, fmtS(b.duration_s)),
        shown.slice(0, -1).map(p => h('td', {}, fmtS(b.phases.find(x => x.name === p)?.seconds))),
        protos.map(p => h('td', { 'data-proto': p }, fmtBytes(b.bytes[p])))))),
      h('tfoot', {}, h('tr', {}, h('th', { colspan: 3 + shown.length - 1 }, 'mean per client'),
        protos.map(p => h('td', { 'data-testid': `bytes-per-client-${p}` }, fmtBytes(sm.bytes_per_client[p]))))))));

  const draw = () => {
    const rows = w.boots.map(b => ({
      label: label(b.mac), href: `#/client/${q(b.mac)}`, offset: b.start - w.start, key: b.mac,
      phases: b.phases.map(p => ({ name: p.name, at: p.start - b.start, seconds: p.seconds })),
      total: b.duration_s ?? (b.last_event - b.start),
    }));
    rows.sort(ROW_ORDER[sortBy]);
    chart.replaceChildren(...(rows.length > GANTT_SCROLL_ROWS ? [h('p', { class: 'meta' }, `${rows.length} rows: the chart scrolls.`)] : []),
      gantt(rows, width(chart)));
    const times = w.boots.filter(b => b.duration_s != null).map(b => b.duration_s);
    hist.replaceChildren(times.length ? histogram(times, width(hist)) : empty('No client of this wave has booted yet.'));
  };
  draw();
  ctx.redraw = draw;
}

// Each top-level link with its members (bond slaves, bridge ports) drawn apart under it, each
// against its capacity where the kernel knows it, with the clients of the wave (`boots`) that
// were told one of its addresses (server.links).
export function linkCharts(eg, t0, t1, step, w, boots = []) {
  const inWave = pts => pts.filter(p => p.t >= t0 - step && p.t <= t1 + step);
  const tops = eg.links.filter(l => !l.master || !eg.links.some(m => m.name === l.master));
  return tops.flatMap(l => [l, ...eg.links.filter(m => m.master === l.name)]).map(l => {
    const box = h('div', { class: 'chart-box', 'data-link': l.name });
    const series = [{ name: `${l.name} tx`, colour: SERIES[0], points: inWave(l.points).map(p => [p.t, mbit(p.tx_bytes_s)]) }];
    if (l.speed_mbps) series.push({ name: 'capacity', colour: '#000', dash: '6 4', points: [[t0, l.speed_mbps], [t1, l.speed_mbps]] });
    const held = l.addresses || [];
    const carried = boots.filter(b => held.includes(b.link)).length;
    box.append(h('h4', {}, `${l.name}${l.master ? ` (member of ${l.master})` : ` (${l.kind})`}`,
      l.speed_mbps ? ` · capacity ${l.speed_mbps} Mbit/s (dashed)` : ' · capacity unknown',
      held.length ? h('span', { 'data-testid': 'carries' }, ` · ${held.join(', ')}: ${carried} client${carried === 1 ? '' : 's'}`) : null));
    const st = linkStats(inWave(l.points));
    if (st) {
      box.append(h('p', { class: 'meta link-stats' }, 'sent ', h('b', { 'data-testid': 'sent' }, fmtBytes(st.sent)),
        ', peak ', h('b', { 'data-testid': 'peak' }, fmtMbit(st.peak)), ', mean ', h('b', { 'data-testid': 'mean' }, fmtMbit(st.mean)),
        l.speed_mbps ? [' (', h('b', { 'data-testid': 'peak-share' }, `${((100 * mbit(st.peak)) / l.speed_mbps).toFixed(0)} %`), ' of capacity at the peak)'] : null));
    }
    box.append(series[0].points.length
      ? lines(series, w, { yLabel: 'Mbit/s sent', yFmt: v => v.toFixed(0), t0, t1 })
      : empty('No samples in this wave: the server keeps egress samples for a limited time.'));
    return box;
  });
}

// Clients per phase at each step, from the boots' phase spans.
function phaseCounts(w, t0, t1, step) {
  const grid = [];
  for (let t = t0; t < t1; t += step) grid.push(t);
  grid.push(t1); // the wave's last moment, when its last client is up
  // Every phase's start too, so a phase shorter than the step (ipxe takes 0.1 s) still shows.
  const times = [...new Set([...grid, ...w.boots.flatMap(b => b.phases.map(p => p.start))])].filter(t => t >= t0 && t <= t1).sort((a, b) => a - b);
  const layers = PHASES.map(name => ({ name, values: times.map(t => w.boots.filter(b => {
    const up = b.duration_s != null && t >= b.start + b.duration_s;
    if (name === 'booted') return up;
    // Not also in its last phase at the instant it is up (the two ends differ by rounding).
    return !up && b.phases.some(p => p.name === name && t >= p.start && t < p.start + p.seconds)
      || (b.result === 'running' && b.current_phase === name && t >= (b.phases.at(-1)?.start ?? b.start) && t <= b.last_event);
  }).length) }));
  return { times, layers: layers.filter(l => l.values.some(v => v > 0)) };
}

async function egressView(el, [id], ctx) {
  const waves = await api('/api/v1/waves');
  if (!waves.length) return el.replaceChildren(empty('No waves yet: egress is shown per wave. Power on a room, or run', RUN_NFS));
  const wanted = id != null ? Number(id) : waves[waves.length - 1].id;
  const w = await api(`/api/v1/waves/${wanted}`);
  const t0 = w.start, t1 = waveEnd(w);
  const step = Math.max(1, Math.round((t1 - t0) / 300));
  const eg = await loadEgress(Math.floor(t0), step);
  const inWave = pts => pts.filter(p => p.t >= t0 - step && p.t <= t1 + step);
  const linksBox = h('div'), protoBox = h('div', { class: 'chart-box' }), phaseBox = h('div', { class: 'chart-box' });
  el.replaceChildren(
    h('h2', {}, `Egress during wave ${w.id} (${w.pool})`),
    wavePicker(waves, w.id, v => { location.hash = `#/egress/${v}`; }),
    h('p', { class: 'meta' }, `${when(t0)} to ${when(t1)}.`),
    h('h3', {}, 'Server links'), linksBox,
    h('h3', {}, 'Bytes per protocol'), protoBox,
    h('h3', {}, 'Clients in each phase'), legend(), phaseBox);

  const draw = () => {
    if (!eg) {
      linksBox.replaceChildren(empty(NO_EGRESS));
      protoBox.replaceChildren(empty(NO_EGRESS));
    } else {
      const charts = linkCharts(eg, t0, t1, step, width(linksBox), w.boots);
      linksBox.replaceChildren(...(charts.length ? charts : [empty('No links sampled: list interfaces under server.interfaces.')]));
      const series = eg.protocols.map((p, i) => ({ name: p.proto, colour: SERIES[i % SERIES.length], points: inWave(p.points).map(x => [x.t, x.bytes_s / 1e6]) }))
        .filter(se => se.points.length);
      protoBox.replaceChildren(...(series.length
        ? [h('ul', { class: 'legend' }, series.map(se => h('li', {}, h('span', { class: 'line', style: `border-color:${se.colour}` }), ` ${se.name}`))),
          lines(series, width(protoBox), { yLabel: 'MB/s', yFmt: v => v.toFixed(1), t0, t1 })]
        : [empty('No protocol samples in this wave.')]));
    }
    const pc = phaseCounts(w, t0, t1, step);
    phaseBox.replaceChildren(stacked(pc.times, pc.layers, width(phaseBox), { t0 }));
  };
  draw();
  ctx.redraw = draw;
}

// A link over a wave: bytes sent (the counter's own count), peak and mean sending rate.
export function linkStats(points) {
  if (!points.length) return null;
  const rates = points.map(p => p.tx_bytes_s);
  return { sent: points.reduce((a, p) => a + p.tx_bytes, 0), peak: Math.max(...rates), mean: rates.reduce((a, b) => a + b, 0) / rates.length };
}

// Peak and mean of the summed top-level links' sending rate over a wave.
function egressStats(eg, w) {
  if (!eg) return null;
  const t0 = w.start, t1 = waveEnd(w);
  const tops = eg.links.filter(l => !l.master);
  const sum = new Map();
  for (const l of tops) for (const p of l.points) if (p.t >= t0 && p.t <= t1) sum.set(p.t, (sum.get(p.t) ?? 0) + p.tx_bytes_s);
  const v = [...sum.values()];
  if (!v.length) return { peak: null, mean: null };
  return { peak: Math.max(...v), mean: v.reduce((a, b) => a + b, 0) / v.length };
}

async function compareView(el, [a, b]) {
  const waves = await api('/api/v1/waves');
  if (waves.length < 2) {
    return el.replaceChildren(empty('Comparing needs two waves: boot the room once over NFS and once over NBD, for example',
      `${RUN_NFS}\n${RUN_NBD}`));
  }
  const last = waves[waves.length - 1];
  let idB = b != null ? Number(b) : last.id;
  let idA = a != null ? Number(a) : null;
  if (idA === idB && b == null) idB = null;
  // By default: the newest wave against the newest one of another pool (say NFS vs NBD).
  if (idA == null) idA = [...waves].reverse().find(x => x.id !== idB && x.pool !== waves.find(y => y.id === idB)?.pool)?.id
    ?? [...waves].reverse().find(x => x.id !== idB).id;
  if (idB == null) idB = [...waves].reverse().find(x => x.id !== idA).id;
  const [c] = await Promise.all([api(`/api/v1/compare?a=${idA}&b=${idB}`), loadNames()]);
  const since = Math.floor(Math.min(c.a.start, c.b.start));
  const eg = await loadEgress(since, 1);
  const ea = egressStats(eg, c.a), eb = egressStats(eg, c.b);
  const protos = [...new Set([...Object.keys(c.a.summary.bytes_per_client), ...Object.keys(c.b.summary.bytes_per_client)])].sort();
  const phases = PHASES.filter(p => p in c.a.summary.phase_median_s || p in c.b.summary.phase_median_s);
  const box = h('div', { class: 'chart-box' });
  const pick = (side, cur) => h('label', { class: 'picker' }, `${side} `,
    h('select', { onchange: e => { location.hash = side === 'A' ? `#/compare/${e.target.value}/${idB}` : `#/compare/${idA}/${e.target.value}`; } },
      [...waves].reverse().map(x => h('option', { value: x.id, selected: x.id === cur }, waveLabel(x)))));
  const row = (name, va, vb, key) => h('tr', key ? { 'data-row': key } : {}, h('th', {}, name), h('td', {}, va), h('td', {}, vb));
  const egressRow = (name, k) => row(name, ea ? fmtMbit(ea[k]) : 'no egress data', eb ? fmtMbit(eb[k]) : 'no egress data', `egress-${k}`);
  const phaseBox = h('div', { class: 'chart-box', 'data-testid': 'phase-medians' });
  const bytesBox = h('div', { class: 'chart-box', 'data-testid': 'bytes-per-client' });
  const egressBox = h('div', { class: 'chart-box', 'data-testid': 'egress-bars' });
  const names2 = [`A: wave ${c.a.id}`, `B: wave ${c.b.id}`];
  const pairLegend = h('ul', { class: 'legend' }, names2.map((n, i) => h('li', {}, h('span', { class: 'line', style: `border-color:${SERIES[i]}` }), ` ${n} (${rootOf(i ? c.b : c.a)})`)));
  const head = w => `wave ${w.id} (${w.pool}, ${rootOf(w)})`;
  el.replaceChildren(
    h('h2', {}, 'Compare waves'),
    h('div', { class: 'toolbar' }, pick('A', idA), pick('B', idB)),
    h('p', { class: 'sentence', 'data-testid': 'sentence' }, c.sentence),
    h('h3', {}, 'Boot times on one axis (bar: median)'), box,
    h('h3', {}, 'Median time in each phase'), pairLegend, phaseBox,
    h('h3', {}, 'Bytes per client'), bytesBox,
    h('h3', {}, 'Server egress during each wave'), egressBox,
    h('h3', {}, 'Side by side'),
    h('div', { class: 'scroll' }, h('table', { class: 'num compare' },
      h('thead', {}, h('tr', {}, h('th', {}, ''), h('th', {}, `A: ${head(c.a)}`), h('th', {}, `B: ${head(c.b)}`))),
      h('tbody', {},
        row('clients', String(c.a.summary.clients), String(c.b.summary.clients), 'clients'),
        row('median', fmtS(c.a.summary.median_s), fmtS(c.b.summary.median_s), 'median'),
        row('p95', fmtS(c.a.summary.p95_s), fmtS(c.b.summary.p95_s), 'p95'),
        row('max', fmtS(c.a.summary.max_s), fmtS(c.b.summary.max_s), 'max'),
        phases.map(p => row(h('span', {}, swatch(p, 10), ` ${p} median`), fmtS(c.a.summary.phase_median_s[p]), fmtS(c.b.summary.phase_median_s[p]), `phase-${p}`)),
        protos.map(p => row(`${p} bytes per client`, fmtBytes(c.a.summary.bytes_per_client[p]), fmtBytes(c.b.summary.bytes_per_client[p]), `bytes-${p}`)),
        egressRow('peak egress', 'peak'), egressRow('mean egress', 'mean')))));
  const draw = () => {
    const group = (side, w) => ({
      label: `${side}: wave ${w.id}`, median: w.summary.median_s,
      values: w.boots.filter(x => x.duration_s != null).map(x => x.duration_s),
    });
    box.replaceChildren(strips([group('A', c.a), group('B', c.b)], width(box)));
    phaseBox.replaceChildren(pairs(phases.map(p => ({ key: p, label: p, phase: p, a: c.a.summary.phase_median_s[p], b: c.b.summary.phase_median_s[p] })),
      names2, width(phaseBox), { fmt: fmtS, unit: 'seconds', aria: 'median seconds per phase, A against B' }));
    bytesBox.replaceChildren(protos.length
      ? pairs(protos.map(p => ({ key: p, label: p, a: mib(c.a.summary.bytes_per_client[p]), b: mib(c.b.summary.bytes_per_client[p]) })),
        names2, width(bytesBox), { fmt: v => fmtBytes(v * 2 ** 20), unit: 'MiB per client', aria: 'bytes per client per protocol, A against B' })
      : empty('No bytes recorded in either wave.'));
    egressBox.replaceChildren(ea && eb && (ea.peak != null || eb.peak != null)
      ? pairs([{ key: 'peak', label: 'peak', a: mbitOf(ea.peak), b: mbitOf(eb.peak) }, { key: 'mean', label: 'mean', a: mbitOf(ea.mean), b: mbitOf(eb.mean) }],
        names2, width(egressBox), { fmt: v => `${v.toFixed(1)} Mbit/s`, unit: 'Mbit/s sent', aria: 'peak and mean egress, A against B' })
      : empty(eg ? 'No egress samples during these waves: the server keeps them for a limited time.' : NO_EGRESS));
  };
  draw();
  return draw;
}

const fmtMbit = v => (v == null ? 'no samples' : `${mbit(v).toFixed(1)} Mbit/s`);
// Bar charts count in round units (MiB, Mbit/s) so their axes read 10, 20, 30.
const mib = v => (v == null ? null : v / 2 ** 20);
const mbitOf = v => (v == null ? null : mbit(v));

// Who said a boot was up: its own booted call, or bootpool from what it saw (and the inferred
// time beside a reported one, so the two can be told apart).
function endOf(b) {
  const why = b.evidence ? b.evidence.replaceAll('_', ' ') : null;
  if (b.end === 'inferred') return `inferred (${why})`;
  if (b.end === 'reported') return why ? `reported; inferred ${fmtS(b.inferred_s)} (${why})` : 'reported';
  return '–';
}

// Where the newest boot's DHCP came from, when a relay carried it: the relay and what its
// option 82 said (circuit id: the switch port; remote id: the switch).
function relayedLine(via) {
  if (!via) return null;
  return h('p', { class: 'meta', 'data-testid': 'relayed' }, `through relay ${via.giaddr}`,
    via.circuit_id ? ` · circuit ${via.circuit_id}` : '', via.remote_id ? ` · remote ${via.remote_id}` : '');
}

// In a site, which member served each phase of a boot (docs/api.md `served`): one name when
// one member served them all and none moved, else each phase's, `a -> b at HH:MM:SS` (local
// time) for a phase a member took over; `–` outside a site.
export function servedBy(b) {
  const served = b.served ?? [];
  if (!served.length) return '–';
  const clock = t => new Date(t * 1000).toTimeString().slice(0, 8);
  const turns = s => s.by.map((t, i) => i ? ` -> ${t.member} at ${clock(t.at)}` : t.member).join('');
  const members = new Set(served.flatMap(s => s.by.map(t => t.member)));
  const more = b.served_unkept ? `, and ${b.served_unkept} turns more` : '';
  if (members.size === 1 && served.every(s => s.by.length === 1)) return [...members][0] + more;
  return served.map(s => `${s.phase} ${turns(s)}`).join(', ') + more;
}

async function clientView(el, [mac], ctx) {
  const [clients, pools] = await Promise.all([loadNames(), api('/api/v1/pools')]);
  // The PCs that asked and are in no pool, to enrol (from discovery, when the server lists them).
  const unknown = mac ? null : await unknownPanel(pools);
  if (!clients.length) return el.replaceChildren(empty('No client has booted yet: power one on, or run', RUN_NFS), unknown);
  if (!mac) {
    return el.replaceChildren(h('h2', {}, 'Clients'), unknown, h('div', { class: 'scroll' }, h('table', { class: 'num' },
      h('thead', {}, h('tr', {}, ['client', 'MAC', 'pool', 'ip', 'boots', 'last boot', 'last time'].map(t => h('th', {}, t)))),
      h('tbody', {}, clients.map(c => h('tr', { 'data-mac': c.mac },
        h('th', {}, h('a', { href: `#/client/${q(c.mac)}` }, c.name ?? c.mac)), h('td', {}, c.mac), h('td', {}, c.pool ?? '–'),
        h('td', {}, c.ip ?? '–'), h('td', {}, String(c.boots)), h('td', {}, c.last ? when(c.last.start) : '–'),
        h('td', {}, fmtS(c.last?.duration_s))))))));
  }
  const [boots, waves] = await Promise.all([api(`/api/v1/boots?mac=${q(mac)}`), api('/api/v1/waves')]);
  // Each boot's wave, as the server groups them.
  const waveOf = b => waves.find(w => w.id === b.wave);
  const box = h('div', { class: 'chart-box', 'data-testid': 'boots-chart' });
  // The newest boot's cause (when it failed or is stuck) and its console lines.
  const newest = boots[boots.length - 1];
  const con = newest ? await api(`/api/v1/boots/${newest.id}/console`) : null;
  const consoleBox = !con ? null : h('section', { 'data-testid': 'console-section' },
    h('h3', {}, `Console of the newest boot (${when(newest.start)})`),
    con.cause ? h('p', { class: 'cause', 'data-testid': 'cause', 'data-kind': con.cause.kind }, h('b', {}, 'Why: '), con.cause.text) : null,
    con.lines.length
      ? h('pre', { class: 'console', 'data-testid': 'console' }, con.lines.map((l, i) =>
        (i === con.head && con.dropped ? `… ${con.dropped} lines dropped …\n` : '') + `${(l.at - newest.start).toFixed(3).padStart(8)}  ${l.text}\n`).join(''))
      : h('p', { class: 'meta' }, 'No console lines: the pool has no netconsole, or nothing came from the client.'));
  el.replaceChildren(
    h('h2', {}, `Client ${label(mac)}`),
    h('p', { class: 'meta' }, h('a', { href: '#/client' }, 'All clients'), ` · ${mac} · ${boots.length} boots`),
    clientActions(mac, label(mac) === mac ? mac : `${label(mac)} (${mac})`, newest?.ip, [...new Set(pools.map(p => p.image))]),
    // (replaceChildren would show a null as the text "null")
    relayedLine(newest?.relayed) ?? '',
    boots.length ? legend() : empty('This machine has no boots recorded.'),
    boots.length ? h('p', { class: 'meta' }, 'Each boot, oldest left, by phase; the dashed tick is the median of the boot\'s wave, so a machine that is always slow stands above its room.') : null,
    box,
    h('div', { class: 'scroll' }, h('table', { class: 'num', 'data-testid': 'boots' },
      h('thead', {}, h('tr', {}, ['started', 'pool', 'root', 'result', 'total', 'end', 'gone', 'phase', 'bytes', 'served by'].map(t => h('th', {}, t)))),
      h('tbody', {}, [...boots].reverse().map(b => h('tr', { 'data-boot': b.id },
        h('th', {}, when(b.start)), h('td', {}, b.pool ?? '–'), h('td', {}, b.root ?? '–'), h('td', {}, b.result),
        h('td', { 'data-testid': 'total' }, fmtS(b.duration_s)), h('td', { 'data-testid': 'end' }, endOf(b)),
        h('td', { 'data-testid': 'gone' }, b.gone ? `${b.gone.replaceAll('_', ' ')} at ${fmtS(b.gone_at - b.start)}` : '–'),
        h('td', {}, b.current_phase),
        h('td', {}, Object.entries(b.bytes).map(([p, n]) => `${p} ${fmtBytes(n)}`).join(', ')),
        h('td', { 'data-testid': 'served' }, servedBy(b))))))),
    consoleBox);
  const draw = () => {
    if (!boots.length) return;
    box.replaceChildren(bootBars(boots.map(b => ({
      label: new Date(b.start * 1000).toLocaleString(undefined, { dateStyle: 'short', timeStyle: 'short' }), key: String(b.id),
      phases: b.phases.map(p => ({ name: p.name, seconds: p.seconds })),
      total: b.duration_s, median: waveOf(b)?.summary.median_s,
    })), width(box)));
  };
  draw();
  ctx.redraw = draw;
}

// ---- routing ----

const VIEWS = { room: roomView, wave: waveView, egress: egressView, compare: compareView, client: clientView, images: imagesView, site: siteView };
let current = { cleanup: [], redraw: null };
let generation = 0;

async function route() {
  for (const f of current.cleanup) f();
  const gen = ++generation;
  const ctx = { cleanup: [], redraw: null };
  current = ctx;
  const [name, ...args] = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  const view = VIEWS[name] ? name : 'room';
  for (const a of document.querySelectorAll('header nav a')) {
    a.toggleAttribute('aria-current', a.dataset.view === view);
  }
  const el = h('section', { 'data-view': view, 'aria-busy': 'true' }, h('p', { class: 'meta' }, 'Loading…'));
  main.replaceChildren(el);
  try {
    const redraw = await VIEWS[view](el, args, ctx);
    if (typeof redraw === 'function') ctx.redraw = redraw;
  } catch (e) {
    el.replaceChildren(h('div', { class: 'error', role: 'alert' }, h('p', {}, `Could not load this view: ${e.message}`),
      h('p', {}, 'Is the daemon running? Reload to try again.')));
  }
  if (gen !== generation) { for (const f of ctx.cleanup) f(); return; }
  el.removeAttribute('aria-busy');
  el.dataset.ready = 'true';
}

let resizeTimer = null;
window.addEventListener('resize', () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => current.redraw?.(), 150);
});
window.addEventListener('hashchange', route);
document.getElementById('tz').textContent = Intl.DateTimeFormat().resolvedOptions().timeZone;
route();
