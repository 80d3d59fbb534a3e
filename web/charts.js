// Small SVG charts drawn from plain data: Gantt rows, histogram, lines, stacked areas, strips.
// Each function returns an <svg> element sized to the width it is given.

export const PHASES = ['dhcp', 'loader', 'ipxe', 'shim', 'grub', 'kernel', 'initrd', 'root', 'booted'];
// The Secure Boot chain's phases, shown only where some boot went through them.
const SECURE_BOOT = ['shim', 'grub'];

// The phases to show for these boots: every one, but the Secure Boot chain's only when one of
// the boots had them (a room without Secure Boot keeps its legend and tables as narrow as before).
export function phasesOf(boots) {
  const had = new Set(boots.flatMap(b => (b.phases ?? []).map(p => p.name)).concat(boots.map(b => b.current_phase)));
  return PHASES.filter(p => !SECURE_BOOT.includes(p) || had.has(p));
}

// Okabe-Ito: distinguishable with the common colour-vision deficiencies.
export const PHASE_COLOUR = {
  dhcp: '#E69F00', loader: '#56B4E9', ipxe: '#009E73', kernel: '#F0E442',
  initrd: '#0072B2', root: '#D55E00', booted: '#CC79A7',
  // The Secure Boot chain stands where loader and ipxe stand: their colours, other hatching.
  shim: '#56B4E9', grub: '#009E73',
};
// Text that stays readable on each phase colour.
export const PHASE_INK = { initrd: '#fff' };
// Where a room's machine stands when it is neither booting nor up (the API's `now`), in words:
// the legend's entries after the phases, in this order.
export const STATES = { was_up: 'was up · off now', failed: 'failed', timed_out: 'timed out', waiting: 'waiting / off' };
// A failed or timed-out machine stands out in black and dark grey, apart from every phase
// colour; one that was up and one never seen stay white (their border differs).
export const STATE_COLOUR = { failed: '#000000', timed_out: '#4d4d4d' };
export const STATE_INK = { failed: '#ffffff', timed_out: '#ffffff' };
// A second cue besides colour: every phase but the first gets its own hatching.
const PATTERN = {
  dhcp: null,
  loader: 'M0,8 L8,0',
  ipxe: 'M4,0 L4,8',
  shim: 'M0,0 L8,8',
  grub: 'M0,2 L8,2 M0,6 L8,6',
  kernel: 'M0,4 L8,4',
  initrd: 'M0,0 L8,8 M0,8 L8,0',
  root: 'M0,0 L8,8',
  booted: null,
};
export const SERIES = ['#0072B2', '#D55E00', '#009E73', '#CC79A7', '#E69F00', '#56B4E9', '#000000'];

const NS = 'http://www.w3.org/2000/svg';

export function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v != null) el.setAttribute(k, v);
  for (const c of children.flat()) if (c != null) el.append(c);
  return el;
}

function title(text) {
  return s('title', {}, text);
}

/// The fill for a phase: its colour, hatched.
export function phaseFill(name) {
  return PATTERN[name] ? `url(#pat-${name})` : PHASE_COLOUR[name] ?? '#999';
}

// The hatching patterns, defined once in the document and shared by every chart.
function phaseDefs() {
  if (document.getElementById('phase-defs')) return null;
  document.body.append(s('svg', { id: 'phase-defs', width: 0, height: 0, 'aria-hidden': 'true', style: 'position:absolute' },
    s('defs', {}, PHASES.filter(p => PATTERN[p]).map(p =>
      s('pattern', { id: `pat-${p}`, width: 8, height: 8, patternUnits: 'userSpaceOnUse' },
        s('rect', { width: 8, height: 8, fill: PHASE_COLOUR[p] }),
        s('path', { d: PATTERN[p], stroke: 'rgba(0,0,0,.45)', 'stroke-width': 1.2 }))))));
  return null;
}

/// A swatch of a phase (colour and hatching), for legends and tiles.
export function swatch(name, size = 14) {
  return s('svg', { width: size, height: size, viewBox: `0 0 ${size} ${size}`, 'aria-hidden': 'true', class: 'swatch' },
    phaseDefs(), s('rect', { width: size, height: size, fill: phaseFill(name), stroke: '#333', 'stroke-width': 0.5 }));
}

/// Round step for about `n` ticks over [0, max].
export function ticks(max, n = 5) {
  if (!(max > 0)) return [0];
  const raw = max / n;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map(m => m * mag).find(st => st >= raw);
  const out = [];
  for (let v = 0; v <= max + step * 1e-9; v += step) out.push(+v.toFixed(10));
  return out;
}

function xAxis(x, max, y, fmt, label, width) {
  return s('g', { class: 'axis' },
    ticks(max, Math.max(2, Math.floor(width / 90))).map(v => s('g', {},
      s('line', { x1: x(v), x2: x(v), y1: y, y2: y + 4, stroke: '#666' }),
      s('text', { x: x(v), y: y + 16, 'text-anchor': 'middle' }, fmt(v)))),
    label ? s('text', { x: x(max), y: y + 30, 'text-anchor': 'end' }, label) : null);
}

function yAxis(y, max, x0, x1, fmt) {
  return s('g', { class: 'axis' },
    ticks(max, 4).map(v => s('g', {},
      s('line', { x1: x0, x2: x1, y1: y(v), y2: y(v), stroke: '#ddd' }),
      s('text', { x: x0 - 4, y: y(v) + 4, 'text-anchor': 'end' }, fmt(v)))));
}

/// Past this many rows a Gantt chart keeps a fixed, smaller row height and scrolls in a box of
/// its own, under an axis that stays in view (a room of 200 clients is 200 rows).
export const GANTT_SCROLL_ROWS = 40;
// Room left for the scroll box's vertical scroll bar.
const SCROLLBAR = 16;

/// One row per boot, one segment per phase. rows: [{label, href, offset, phases, total}]
export function gantt(rows, width) {
  const many = rows.length > GANTT_SCROLL_ROWS;
  if (many) width -= SCROLLBAR;
  const labelW = Math.min(150, width * 0.3), rowH = many ? 16 : 22, top = many ? 2 : 6, right = 56;
  const base = many ? 12 : 15; // text baseline within a row
  const max = Math.max(1, ...rows.map(r => r.offset + (r.total ?? 0)));
  const plotW = Math.max(50, width - labelW - right);
  const x = v => labelW + (v / max) * plotW;
  const height = top + rows.length * rowH + 40;
  const g = s('svg', { width, height, class: `chart gantt${many ? ' many' : ''}`, role: 'img',
    'aria-label': `Gantt chart of ${rows.length} boots by phase` }, phaseDefs());
  // Over many rows, faint lines at the ticks carry the axis down to every row.
  if (many) {
    g.append(s('g', { class: 'grid' }, ticks(max, Math.max(2, Math.floor(plotW / 90))).map(v =>
      s('line', { x1: x(v), x2: x(v), y1: top, y2: top + rows.length * rowH, stroke: '#e4e4e8' }))));
  }
  rows.forEach((r, i) => {
    const y = top + i * rowH;
    const row = s('g', { 'data-key': r.key ?? r.label });
    g.append(row);
    // Long names keep their distinctive tail when the label column is narrow (phones).
    const room = Math.max(4, Math.floor((labelW - 8) / 7));
    const shown = r.label.length > room ? `…${r.label.slice(1 - room)}` : r.label;
    const label = s('text', { x: labelW - 6, y: y + base, 'text-anchor': 'end' }, title(r.label), shown);
    row.append(r.href ? s('a', { href: r.href }, label) : label);
    for (const p of r.phases) {
      const w = Math.max(1, x(r.offset + p.at + p.seconds) - x(r.offset + p.at));
      row.append(s('rect', { x: x(r.offset + p.at), y: y + (many ? 2 : 3), width: w, height: rowH - (many ? 4 : 6),
        fill: phaseFill(p.name), stroke: '#fff', 'stroke-width': 0.5, 'data-phase': p.name },
        title(`${r.label} ${p.name}: ${p.seconds.toFixed(1)} s`)));
      if (w > 40 && !many) row.append(s('text', { x: x(r.offset + p.at) + 3, y: y + base, class: 'seg',
        style: `fill:${PHASE_INK[p.name] ?? '#000'}` }, p.name));
    }
    if (r.total != null) row.append(s('text', { x: x(r.offset + r.total) + 4, y: y + base }, `${r.total.toFixed(1)} s`));
  });
  g.append(xAxis(x, max, top + rows.length * rowH + 2, v => `${v}`, 'seconds', plotW));
  if (!many) return g;
  // The same axis on top, pinned while the rows scroll under it.
  const head = s('svg', { width, height: 34, class: 'chart gantt-axis', 'aria-hidden': 'true' },
    xAxis(x, max, 0, v => `${v}`, 'seconds', plotW));
  const box = document.createElement('div');
  box.className = 'gantt-scroll';
  // Focusable, so the keyboard can scroll it too.
  box.tabIndex = 0;
  box.setAttribute('role', 'region');
  box.setAttribute('aria-label', `${rows.length} rows, scroll for more`);
  box.append(head, g);
  return box;
}

/// Counts of values in round bins.
export function histogram(values, width, unit = 's') {
  const height = 160, left = 36, bottom = 36, top = 8;
  const max = Math.max(1, ...values);
  const t = ticks(max, 10);
  const step = t[1] ?? max;
  const nb = Math.ceil(max / step + 1e-9) || 1;
  const counts = new Array(nb).fill(0);
  for (const v of values) counts[Math.min(nb - 1, Math.floor(v / step))]++;
  const cmax = Math.max(1, ...counts);
  const x = v => left + (v / (nb * step)) * (width - left - 10);
  const y = c => top + (1 - c / cmax) * (height - top - bottom);
  const g = s('svg', { width, height, class: 'chart', role: 'img', 'aria-label': `histogram of ${values.length} boot times` });
  g.append(yAxis(y, cmax, left, width - 10, v => Number.isInteger(v) ? v : ''));
  counts.forEach((c, i) => {
    if (c) g.append(s('rect', { x: x(i * step) + 1, y: y(c), width: Math.max(1, x(step) - x(0) - 2), height: y(0) - y(c), fill: '#0072B2' },
      title(`${i * step}-${(i + 1) * step} ${unit}: ${c}`)));
  });
  g.append(xAxis(x, nb * step, height - bottom, v => `${v}`, unit === 's' ? 'boot time, seconds' : unit, width - left));
  return g;
}

/// Lines over time. series: [{name, colour, dash, points: [[t, v]]}]; t in Unix seconds.
export function lines(series, width, { height = 180, yFmt = v => `${v}`, yLabel = '', t0, t1 } = {}) {
  const left = 56, bottom = 36, top = 18, right = 10;
  const all = series.flatMap(x => x.points);
  t0 ??= Math.min(...all.map(p => p[0]));
  t1 ??= Math.max(t0 + 1, ...all.map(p => p[0]));
  const vmax = Math.max(1e-9, ...all.map(p => p[1]));
  const x = t => left + ((t - t0) / (t1 - t0)) * (width - left - right);
  const y = v => top + (1 - v / vmax) * (height - top - bottom);
  const g = s('svg', { width, height, class: 'chart', role: 'img', 'aria-label': yLabel });
  g.append(yAxis(y, vmax, left, width - right, yFmt));
  for (const se of series) {
    if (!se.points.length) continue;
    const d = se.points.map((p, i) => `${i ? 'L' : 'M'}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join('');
    g.append(s('path', { d, fill: 'none', stroke: se.colour, 'stroke-width': 2, 'stroke-dasharray': se.dash }, title(se.name)));
  }
  g.append(xAxis(v => x(t0 + v), t1 - t0, height - bottom, v => `${v}`, 'seconds into the wave', width - left));
  g.append(s('text', { x: left, y: 12, class: 'ylabel' }, yLabel));
  return g;
}

/// Stacked areas of counts over time. layers: [{name, values}] against times.
export function stacked(times, layers, width, { height = 180, t0 } = {}) {
  const left = 36, bottom = 36, top = 10, right = 10;
  t0 ??= times[0];
  const t1 = Math.max(t0 + 1, times[times.length - 1]);
  const sums = times.map((_, i) => layers.reduce((a, l) => a + l.values[i], 0));
  const vmax = Math.max(1, ...sums);
  const x = t => left + ((t - t0) / (t1 - t0)) * (width - left - right);
  const y = v => top + (1 - v / vmax) * (height - top - bottom);
  const g = s('svg', { width, height, class: 'chart', role: 'img', 'aria-label': 'clients in each phase over time' }, phaseDefs());
  g.append(yAxis(y, vmax, left, width - right, v => Number.isInteger(v) ? v : ''));
  const base = times.map(() => 0);
  for (const l of layers) {
    const topLine = times.map((t, i) => [x(t), y(base[i] + l.values[i])]);
    const bottomLine = times.map((t, i) => [x(t), y(base[i])]).reverse();
    const d = [...topLine, ...bottomLine].map((p, i) => `${i ? 'L' : 'M'}${p[0].toFixed(1)},${p[1].toFixed(1)}`).join('') + 'Z';
    g.append(s('path', { d, fill: phaseFill(l.name), stroke: '#fff', 'stroke-width': 0.5 }, title(l.name)));
    l.values.forEach((v, i) => { base[i] += v; });
  }
  g.append(xAxis(v => x(t0 + v), t1 - t0, height - bottom, v => `${v}`, 'seconds into the wave', width - left));
  return g;
}

/// Distributions on one shared axis: a row of dots per group, with its median marked.
export function strips(groups, width) {
  const left = 120, rowH = 40, top = 8, right = 16;
  // Headroom so the slowest client is not drawn on the edge.
  const max = Math.max(1, ...groups.flatMap(gr => gr.values)) * 1.05;
  const x = v => left + (v / max) * (width - left - right);
  const height = top + groups.length * rowH + 40;
  const g = s('svg', { width, height, class: 'chart', role: 'img', 'aria-label': 'boot time distributions' });
  groups.forEach((gr, i) => {
    const y = top + i * rowH + rowH / 2;
    const colour = SERIES[i % SERIES.length];
    g.append(s('text', { x: left - 8, y: y + 4, 'text-anchor': 'end' }, gr.label));
    g.append(s('line', { x1: left, x2: width - right, y1: y, y2: y, stroke: '#eee' }));
    gr.values.forEach((v, j) => g.append(s(i % 2 ? 'rect' : 'circle', i % 2
      ? { x: x(v) - 5, y: y - 5 + ((j % 3) - 1) * 4, width: 10, height: 10, fill: colour, 'fill-opacity': 0.7 }
      : { cx: x(v), cy: y + ((j % 3) - 1) * 4, r: 5, fill: colour, 'fill-opacity': 0.7 }, title(`${v.toFixed(1)} s`))));
    if (gr.median != null) g.append(s('line', { x1: x(gr.median), x2: x(gr.median), y1: y - 14, y2: y + 14, stroke: '#000', 'stroke-width': 2 },
      title(`median ${gr.median.toFixed(1)} s`)));
  });
  g.append(xAxis(x, max, top + groups.length * rowH + 2, v => `${v}`, 'boot time, seconds', width - left));
  return g;
}

/// Paired horizontal bars, A above B, one pair per row on one shared axis.
/// rows: [{key, label, phase?, a, b}]; names: [A's name, B's name].
export function pairs(rows, names, width, { fmt = v => `${v}`, unit = '', aria = 'paired bars' } = {}) {
  const left = Math.min(130, width * 0.3), barH = 12, gap = 10, top = 6, right = 96;
  const max = Math.max(1e-9, ...rows.flatMap(r => [r.a ?? 0, r.b ?? 0]));
  const x = v => left + (v / max) * (width - left - right);
  const rowH = 2 * barH + gap;
  const height = top + rows.length * rowH + 36;
  const g = s('svg', { width, height, class: 'chart pairs', role: 'img', 'aria-label': aria }, phaseDefs());
  rows.forEach((r, i) => {
    const y = top + i * rowH;
    g.append(r.phase ? s('g', {}, s('rect', { x: 2, y: y + barH - 6, width: 10, height: 10, fill: phaseFill(r.phase), stroke: '#333', 'stroke-width': 0.5 }),
      s('text', { x: left - 6, y: y + barH + 4, 'text-anchor': 'end' }, r.label))
      : s('text', { x: left - 6, y: y + barH + 4, 'text-anchor': 'end' }, r.label));
    [['a', r.a], ['b', r.b]].forEach(([side, v], j) => {
      const yy = y + j * barH;
      if (v == null) {
        g.append(s('text', { x: left + 4, y: yy + barH - 2, class: 'none', 'data-side': side, 'data-row': r.key }, `${names[j]}: none`));
        return;
      }
      g.append(s('rect', { x: left, y: yy + 1, width: Math.max(1, x(v) - left), height: barH - 2, fill: SERIES[j],
        'data-side': side, 'data-row': r.key }, title(`${names[j]} ${r.label}: ${fmt(v)}`)));
      g.append(s('text', { x: x(v) + 4, y: yy + barH - 2, class: 'value', 'data-side': side, 'data-row': r.key }, fmt(v)));
    });
  });
  g.append(xAxis(x, max, top + rows.length * rowH, v => fmt(v).replace(/ .*/, ''), unit, width - left - right));
  return g;
}

/// One machine's boots over time: a stacked bar per boot (its phases), oldest left, with a
/// tick for each boot's wave median so a slow machine stands out against its room.
/// bars: [{key, label, phases: [{name, seconds}], total, median}]
export function bootBars(bars, width) {
  const left = 44, bottom = 54, top = 12, right = 10, height = 240;
  const max = Math.max(1, ...bars.flatMap(b => [b.total ?? 0, b.median ?? 0])) * 1.08;
  const slot = (width - left - right) / Math.max(1, bars.length);
  const bw = Math.min(48, slot * 0.7);
  const y = v => top + (1 - v / max) * (height - top - bottom);
  const g = s('svg', { width, height, class: 'chart boot-bars', role: 'img',
    'aria-label': `${bars.length} boots over time, seconds per phase` }, phaseDefs());
  g.append(yAxis(y, max, left, width - right, v => `${v}`));
  g.append(s('text', { x: 4, y: 10, class: 'ylabel' }, 'seconds'));
  bars.forEach((b, i) => {
    const cx = left + slot * (i + 0.5);
    const bar = s('g', { 'data-boot': b.key, 'data-total': b.total == null ? '' : b.total.toFixed(1) });
    let acc = 0;
    for (const p of b.phases) {
      bar.append(s('rect', { x: cx - bw / 2, y: y(acc + p.seconds), width: bw, height: Math.max(0.5, y(acc) - y(acc + p.seconds)),
        fill: phaseFill(p.name), stroke: '#fff', 'stroke-width': 0.5, 'data-phase': p.name }, title(`${b.label} ${p.name}: ${p.seconds.toFixed(1)} s`)));
      acc += p.seconds;
    }
    if (b.total != null) bar.append(s('text', { x: cx, y: y(acc) - 3, 'text-anchor': 'middle', class: 'value' }, b.total.toFixed(1)));
    if (b.median != null) bar.append(s('line', { x1: cx - bw / 2 - 4, x2: cx + bw / 2 + 4, y1: y(b.median), y2: y(b.median),
      stroke: '#000', 'stroke-width': 2, 'stroke-dasharray': '4 2', 'data-median': b.median.toFixed(1) }, title(`wave median ${b.median.toFixed(1)} s`)));
    // Dates under the bars, thinned so they never overlap.
    const every = Math.max(1, Math.ceil(110 / slot));
    if (i % every === 0) bar.append(s('text', { x: cx, y: height - bottom + 16, 'text-anchor': 'middle', class: 'axis-label' }, b.label));
    g.append(bar);
  });
  return g;
}
