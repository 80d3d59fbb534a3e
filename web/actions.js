// The admin's actions (docs/dashboard.md, "Actions"): wake, next boot, enrol, activate a
// revision, release a lease. Each asks for a confirmation that says what it will do, then for
// the admin token once per browser session (kept in sessionStorage, sent as a bearer header,
// never in a URL), and shows the server's answer beside its button.
import { h, api, q, when } from './dom.js';

const TOKEN_KEY = 'bootpool-admin-token';

// A modal dialog: resolves to its fields' values (an object) on yes, null on cancel or Escape.
function modal(title, text, fields = [], yes = 'Yes') {
  return new Promise(resolve => {
    const inputs = fields.map(f => h('input', { name: f.name, type: f.type ?? 'text', autocomplete: 'off', required: true }));
    const form = h('form', { method: 'dialog' },
      h('h2', {}, title), text ? h('p', { 'data-testid': 'question' }, text) : null,
      fields.map((f, i) => h('p', {}, h('label', {}, `${f.label} `, inputs[i]))),
      h('div', { class: 'toolbar' },
        h('button', { value: 'yes', 'data-testid': 'dialog-yes' }, yes),
        h('button', { value: 'no', formnovalidate: true, 'data-testid': 'dialog-no' }, 'Cancel')));
    const d = h('dialog', { class: 'modal', 'aria-label': title }, form);
    d.addEventListener('close', () => {
      const ok = d.returnValue === 'yes';
      d.remove();
      resolve(ok ? Object.fromEntries(inputs.map(i => [i.name, i.value])) : null);
    });
    document.body.append(d);
    d.showModal();
    (inputs[0] ?? form.querySelector('button')).focus();
  });
}

// The admin token: this tab's, else asked for (again, after the server refused it).
async function adminToken(refused) {
  const kept = sessionStorage.getItem(TOKEN_KEY);
  if (kept && !refused) return kept;
  const said = await modal('Admin token',
    refused ? 'The server refused that token. Give the admin token (server.admin_token in pools.yaml).'
      : 'Actions need the admin token (server.admin_token in pools.yaml). This tab keeps it until it is closed.',
    [{ name: 'token', label: 'Admin token', type: 'password' }], 'Use it');
  if (!said) return null;
  sessionStorage.setItem(TOKEN_KEY, said.token);
  return said.token;
}

// Where an action's answer is shown.
function answer() {
  return h('p', { class: 'answer', role: 'status', 'data-testid': 'answer' });
}

function say(out, text, kind) {
  out.textContent = text;
  out.dataset.kind = kind;
}

// The server's answer in a line: its `message` when it has one, else the JSON as sent.
function gist(text) {
  try {
    const v = JSON.parse(text);
    return v?.message ?? JSON.stringify(v);
  } catch {
    return text;
  }
}

// Asks `question`; on yes POSTs `body` (JSON) to `path` with the admin token and shows the
// answer in `out`. Resolves to the answer's text, or null when cancelled or refused.
export async function act(out, question, path, body = {}) {
  if (!(await modal('Confirm', question, [], 'Yes, do it'))) {
    say(out, 'Cancelled: nothing was sent.', 'info');
    return null;
  }
  for (let refused = false; ; refused = true) {
    const token = await adminToken(refused);
    if (!token) {
      say(out, 'Cancelled: no admin token given.', 'info');
      return null;
    }
    say(out, 'Sending…', 'info');
    let r;
    try {
      r = await fetch(path, {
        method: 'POST', body: JSON.stringify(body),
        headers: { 'content-type': 'application/json', accept: 'application/json', authorization: `Bearer ${token}` },
      });
    } catch (e) {
      say(out, `Not sent: ${e.message}`, 'error');
      return null;
    }
    const text = (await r.text()).trim();
    if (r.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      continue;
    }
    if (!r.ok) {
      say(out, `Refused (${r.status}): ${text}`, 'error');
      return null;
    }
    say(out, `Done: ${gist(text)}`, 'ok');
    return text;
  }
}

// What a PC can boot next (POST /api/v1/next-boot's `boot`), the pools' images after these.
const NEXT_BOOTS = [['default', 'its pool\'s image (default)'], ['local', 'its local disk'], ['memtest', 'memtest86+'], ['menu', 'a boot menu']];

// Wake and next boot for `target` ({client}, {room} or {pool}), `what` in words ("12 PCs of
// room-101", "pc07").
export function targetActions(target, what, images = []) {
  const out = answer();
  const choice = h('select', { 'data-testid': 'next-boot' },
    [...NEXT_BOOTS, ...images.map(i => [`image:${i}`, `image ${i}`])].map(([v, t]) => h('option', { value: v }, t)));
  const once = h('input', { type: 'checkbox', checked: true, 'data-testid': 'once' });
  return h('div', { class: 'actions', role: 'group', 'aria-label': `actions for ${what}` },
    h('button', { type: 'button', 'data-action': 'wake', onclick: () => act(out, `Wake ${what}?`, '/api/v1/wake', target) }, 'Wake'),
    h('label', {}, 'Next boot: ', choice), h('label', {}, once, ' once'),
    h('button', {
      type: 'button', 'data-action': 'next-boot',
      onclick: () => act(out, `Next boot of ${what}: ${choice.selectedOptions[0].textContent}, ${once.checked ? 'once' : 'until changed'}?`,
        '/api/v1/next-boot', { ...target, boot: choice.value, once: once.checked }),
    }, 'Set next boot'),
    out);
}

// One machine's actions: wake, next boot, and releasing the lease its newest boot holds.
export function clientActions(mac, who, ip, images) {
  const bar = targetActions({ client: mac }, who, images);
  const out = bar.querySelector('.answer');
  bar.insertBefore(h('button', {
    type: 'button', 'data-action': 'release',
    onclick: () => act(out, `Release the lease of ${who}${ip ? ` (${ip})` : ''}? Its address goes back to the range, and its root stops being served to that address.`,
      `/api/v1/leases/${q(mac)}/release`),
  }, 'Release lease'), out);
  return bar;
}

// The PCs that asked and are in no pool (GET /api/v1/unknown), each with a form to enrol it;
// a note instead when this server does not list them (404).
export async function unknownPanel(pools) {
  const box = h('section', { 'data-testid': 'unknown' }, h('h3', {}, 'Unknown PCs'));
  let list;
  try {
    list = await api('/api/v1/unknown');
  } catch (e) {
    if (e.status !== 404) throw e;
    box.append(h('p', { class: 'meta', 'data-testid': 'unknown-note' },
      'This server does not list unknown PCs (GET /api/v1/unknown answered 404); they appear here once it does.'));
    return box;
  }
  if (!list.length) {
    box.append(h('p', { class: 'meta' }, 'No PC outside the pools has asked.'));
    return box;
  }
  const out = answer();
  const row = u => {
    const pool = h('select', { 'aria-label': `pool for ${u.mac}` }, pools.map(p => h('option', { value: p.name }, p.name)));
    const name = h('input', { type: 'text', size: 10, placeholder: 'by the pool', 'aria-label': `name for ${u.mac}` });
    const enrol = () => act(out, `Enrol ${u.mac} into ${pool.value}${name.value ? ` as ${name.value}` : ''}? It boots the pool's image at its next try.`,
      '/api/v1/clients', { mac: u.mac, pool: pool.value, ...(name.value ? { name: name.value } : {}) });
    const port = [u.relay, u.circuit_id, u.remote_id].filter(Boolean).join(' · ');
    return h('tr', { 'data-mac': u.mac },
      h('th', {}, u.mac), h('td', {}, u.vendor_class ?? '–'), h('td', {}, u.arch ?? '–'), h('td', {}, port || '–'),
      h('td', {}, when(u.first_seen)), h('td', {}, when(u.last_seen)), h('td', {}, (u.asked ?? []).join(', ')),
      h('td', {}, pool, ' ', name, ' ', h('button', { type: 'button', 'data-action': 'enrol', onclick: enrol }, 'Enrol')));
  };
  box.append(h('div', { class: 'scroll' }, h('table', {},
    h('thead', {}, h('tr', {}, ['MAC', 'vendor class', 'arch', 'relay · port', 'first seen', 'last seen', 'asked', 'enrol'].map(t => h('th', {}, t)))),
    h('tbody', {}, list.map(row)))), out);
  return box;
}

// Each image's revisions (GET /api/v1/images), with a button to activate any but the active one.
export async function imagesView(el) {
  const images = await api('/api/v1/images');
  const out = answer();
  const table = i => {
    if (!i.revisions_managed) return h('p', { class: 'meta' }, 'A folder assembled by hand: no revisions (`bootpool image import` makes them).');
    return h('div', { class: 'scroll' }, h('table', { class: 'num' },
      h('thead', {}, h('tr', {}, ['revision', 'id', 'imported', 'format', 'running clients', ''].map(t => h('th', {}, t)))),
      h('tbody', {}, [...i.revisions].reverse().map(r => h('tr', { 'data-rev': r.id },
        h('th', {}, r.label), h('td', {}, r.id.slice(0, 12)), h('td', {}, when(r.imported_at)), h('td', {}, r.format),
        h('td', {}, String(r.clients)),
        h('td', {}, r.id === i.active ? h('b', {}, 'active')
          : h('button', {
            type: 'button', 'data-action': 'activate',
            onclick: async () => {
              const done = await act(out, `Activate ${r.label} of image ${i.image}? Boots starting from now get it; running clients keep theirs until they reboot.`,
                `/api/v1/images/${q(i.image)}/activate`, { rev: r.id });
              // Drawn again with the new active revision, the answer kept.
              if (done) await imagesView(el);
              say(el.querySelector('.answer'), out.textContent, out.dataset.kind);
            },
          }, `Activate ${r.label}`)))))));
  };
  el.replaceChildren(h('h2', {}, 'Images'),
    ...(images.length ? images.map(i => h('section', { 'data-image': i.image }, h('h3', {}, i.image),
      i.summary ? h('p', { class: 'meta' }, i.summary) : null, table(i))) : [h('p', { class: 'meta' }, 'No images configured.')]),
    out);
}
