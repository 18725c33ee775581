// MCP tunnels: the list with a form that creates one, and a tunnel with its domain, its token (revealed on a
// click and shown until the page is left; rotated in two clicks), its CA certificates (added from a pasted PEM,
// archived in two clicks) and Archive.

import {h, clear, time, fmtTime, fact, crumbs, mono, meta, empty, toast} from './dom.js';
import {get, post, id as esc} from './api.js';
import {pagedList} from './agents.js';
import {cursorPager} from './memory.js';
import {row, text, area, form, twoClick, gone, once} from './forms.js';

const P = '/v1/tunnels';
const archived = x => (x.archived_at ? h('span', {class: 'badge'}, 'archived') : null);
const token = k => once(`Token ${k.id}:`, k.tunnel_token, 'token', 'The connector (corral tunnel) authenticates with it. It is not kept on this page: leaving the page hides it.');

export function tunnelsPage(main, q) {
  const name = text('tunnel-name', '', {placeholder: 'private MCP servers'});
  const details = h('details', {class: 'card', id: 'new-tunnel'}, h('summary', null, 'New tunnel'),
    form('tunnel-form', [row('Display name (optional)', name, 'The server draws its domain.')], 'Create tunnel', async () => {
      const t = await post(P, name.value ? {display_name: name.value} : {});
      location.hash = `#/tunnels/${esc(t.id)}`;
    }, null));
  return pagedList(main, {title: 'Tunnels', path: P, q, caption: 'Tunnels', before: [details],
    emptyTitle: 'No tunnels yet.', emptyHint: 'A tunnel carries the MCP servers under its domain through its connector to a private network.',
    columns: [
      ['Tunnel', t => [h('a', {href: `#/tunnels/${esc(t.id)}`, 'data-row': ''}, t.display_name || t.id), h('span', {class: 'sub mono'}, t.id)], 'name'],
      ['Domain', t => mono(t.domain)],
      ['Created', t => time(t.created_at), 'opt'],
      ['Archived', t => (t.archived_at ? time(t.archived_at) : '—')],
    ]});
}

export async function tunnelPage(main, tunnelID) {
  const t = await get(`${P}/${esc(tunnelID)}`);
  const base = `${P}/${esc(t.id)}`;
  const again = () => tunnelPage(main, tunnelID);
  const live = !t.archived_at;
  const tbody = h('tbody');
  const certs = cursorPager('certificates', async page => {
    const l = await get(`${base}/certificates`, {include_archived: 'true', limit: 20, page: page || undefined});
    clear(tbody, l.data.length ? l.data.map(c => h('tr', {dataset: {certificate: c.id}},
      h('td', null, mono(c.fingerprint), h('span', {class: 'sub mono'}, c.id)),
      h('td', null, h('time', {datetime: c.expires_at || ''}, fmtTime(c.expires_at))),
      h('td', null, time(c.created_at)),
      h('td', null, c.archived_at ? archived(c) : twoClick('Archive', 'Click again to archive', {dataset: {archive: c.id}}, async () => {
        await post(`${base}/certificates/${esc(c.id)}/archive`, {});
        await certs.run();
      }))))
      : h('tr', null, h('td', {colspan: 4}, empty('No certificates.', 'The tunnel carries no MCP traffic until it has one.'))));
    return l;
  });
  const pem = area('certificate-pem', '', 8, {placeholder: '-----BEGIN CERTIFICATE-----', class: 'mono'});
  clear(main,
    crumbs(h('a', {href: '#/tunnels'}, 'Tunnels'), ' / ', mono(t.id)),
    h('div', {class: 'page-head'}, h('h1', null, t.display_name || t.id), archived(t), h('span', {class: 'spacer'}),
      live ? [
        h('button', {type: 'button', id: 'reveal-token', onclick: async () => clear(main.querySelector('#tunnel-token'), token(await post(`${base}/reveal_token`, {})))}, 'Reveal token'),
        twoClick('Rotate token', 'Click again: its connectors must use the new one', {id: 'rotate-token'}, async () => {
          const k = await post(`${base}/rotate_token`, {});
          await again();
          clear(main.querySelector('#tunnel-token'), token(k));
        }),
        gone('Archive', base, '#/tunnels', 'archive-tunnel', 'Click again to archive for good')] : null),
    h('div', {id: 'tunnel-token'}),
    h('dl', {class: 'facts'},
      fact('Domain', {class: 'mono', id: 'tunnel-domain'}, t.domain),
      fact('Created', null, time(t.created_at)),
      fact('Archived', null, t.archived_at ? time(t.archived_at) : '—')),
    meta('MCP servers whose URL\'s host is under this domain are reached through the tunnel\'s connector, their TLS verified against its active CA certificates.'),
    h('section', {class: 'card'}, h('h2', null, 'CA certificates'),
      h('table', {class: 'list', id: 'certificates'}, h('thead', null, h('tr', null, ['Fingerprint (SHA-256)', 'Expires', 'Added', ''].map(c => h('th', null, c)))), tbody),
      certs.bar,
      live ? form('certificate-form', [row('Add a CA certificate', pem, 'One PEM CERTIFICATE block, no key; at most 2 active at once.')], 'Add certificate', async () => {
        const c = await post(`${base}/certificates`, {ca_certificate_pem: pem.value});
        pem.value = '';
        toast(`Added ${c.fingerprint.slice(0, 16)}…`);
        await certs.run();
      }, null) : null));
  await certs.run();
  return {keys: {r: again}};
}
