// What every view of the dashboard uses: building elements and reading the JSON API.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v == null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) if (c != null) el.append(c);
  return el;
}

export class HttpError extends Error {
  constructor(status, path, text) {
    super(`${path}: ${status} ${text}`.trim());
    this.status = status;
  }
}

export async function api(path) {
  const r = await fetch(path, { headers: { accept: 'application/json' } });
  if (!r.ok) throw new HttpError(r.status, path, (await r.text()).trim());
  return r.json();
}

export const q = encodeURIComponent;
// Times in the reader's own time zone.
export const when = t => new Date(t * 1000).toLocaleString();
