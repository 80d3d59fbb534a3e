// The Site view: the servers sharing this one's PostgreSQL database (GET /api/v1/site), live
// or dead, each one's share of the clients, its clients (booting / booted / failed, by the
// records every member writes), links and rooms, a link to its own dashboard, and whether
// the records' database answers.
import { h, api } from './dom.js';

export async function siteView(el, args, ctx) {
  const draw = async () => {
    const site = await api('/api/v1/site');
    const share = m => `${(m.buckets * 100 / 256).toFixed(1)} %`;
    const clients = m => {
      const c = site.clients[m.name] || { booting: 0, booted: 0, failed: 0 };
      return `${c.booting} booting, ${c.booted} booted, ${c.failed} failed`;
    };
    const rows = site.members.map(m => h('tr', { 'data-member': m.name, class: m.live ? 'live' : 'dead' },
      h('th', {}, m.name, m.name === site.me ? ' (this server)' : ''),
      h('td', {}, m.live ? 'live' : 'dead'),
      h('td', {}, `${m.age_s.toFixed(1)} s ago`),
      h('td', {}, share(m)),
      h('td', {}, clients(m)),
      h('td', {}, m.links.join(', ')),
      h('td', {}, m.rooms.join(', ')),
      h('td', {}, m.name === site.me ? '' : h('a', { href: m.http }, m.http))));
    const said = !site.shared
      ? 'This server is alone: its records are in SQLite. Servers sharing a postgres:// server.database form a site (docs/site.md).'
      : site.frozen
        ? 'The database did not answer this server\'s last read: the members as it last saw them, each still answering its own clients.'
        : `Each DHCP client is answered by one live member, by RFC 3074's hash of its MAC; a member silent for ${site.dead_after_s} s is dead and its clients go to the others.`;
    const r = site.records;
    const records = r.reachable ? [] : [h('p', { class: 'meta', 'data-records': 'unreachable' },
      `The records' database has not answered since ${new Date(r.since / 1000).toLocaleTimeString()} (${r.error}): `
      + `${r.parked} records wait in state_dir/records.spool and are written when it answers; `
      + 'this server boots its clients meanwhile.')];
    el.replaceChildren(h('h2', {}, 'Site'), h('p', { class: 'meta' }, said), ...records,
      h('div', { class: 'scroll' }, h('table', {},
        h('thead', {}, h('tr', {}, ['member', 'state', 'heartbeat', 'share of clients', 'clients', 'links', 'rooms', 'dashboard'].map(t => h('th', {}, t)))),
        h('tbody', {}, rows))));
  };
  await draw();
  const timer = setInterval(() => draw().catch(() => {}), 2000);
  ctx.cleanup.push(() => clearInterval(timer));
}
