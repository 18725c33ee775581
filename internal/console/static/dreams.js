// Dreams: the list, and a dream with its status, error, usage, the session that ran it and the memory store it
// wrote. A pending or running dream can be canceled; a finished one archived.

import {h, clear, time, statusBadge, fact, crumbs, mono, to} from './dom.js';
import {get, post, id as esc} from './api.js';
import {pagedList} from './agents.js';
import {twoClick} from './forms.js';

const input = (d, type) => (d.inputs || []).find(i => i.type === type) || {};
const output = d => ((d.outputs || [])[0] || {}).memory_store_id || '';
const storeLink = id => (id ? to('memory', id) : '');

export function dreamsPage(main, q) {
  return pagedList(main, {title: 'Dreams', path: '/v1/dreams', q, caption: 'Dreams',
    emptyTitle: 'No dreams yet.', emptyHint: 'A dream (POST /v1/dreams) reads a memory store and sessions, and writes what it learnt into a memory store.',
    columns: [
      ['Dream', d => [h('a', {href: `#/dreams/${esc(d.id)}`, 'data-row': ''}, d.id), d.archived_at ? h('span', {class: 'badge'}, 'archived') : null], 'name'],
      ['Status', d => statusBadge(d.status)],
      ['Input store', d => storeLink(input(d, 'memory_store').memory_store_id)],
      ['Sessions', d => String((input(d, 'sessions').session_ids || []).length)],
      ['Output store', d => storeLink(output(d))],
      ['Created', d => time(d.created_at), 'opt'],
      ['Ended', d => time(d.ended_at), 'opt'],
    ]});
}

export async function dreamPage(main, dreamID) {
  const d = await get(`/v1/dreams/${esc(dreamID)}`);
  const base = `/v1/dreams/${esc(d.id)}`;
  const again = () => dreamPage(main, dreamID);
  const done = !['pending', 'running'].includes(d.status);
  const u = d.usage || {};
  const sessions = input(d, 'sessions').session_ids || [];
  clear(main,
    crumbs(h('a', {href: '#/dreams'}, 'Dreams'), ' / ', mono(d.id)),
    h('div', {class: 'page-head'}, h('h1', null, `Dream ${d.id}`), h('span', {id: 'dream-status'}, statusBadge(d.status)),
      d.archived_at ? h('span', {class: 'badge'}, 'archived') : null, h('span', {class: 'spacer'}),
      !done ? twoClick('Cancel', 'Click again to cancel the dream', {id: 'cancel-dream'}, async () => { await post(`${base}/cancel`, {}); await again(); })
        : d.archived_at ? null : twoClick('Archive', 'Click again to archive', {id: 'archive-dream'}, async () => { await post(`${base}/archive`, {}); await again(); })),
    d.error ? h('div', {class: 'notice error', role: 'alert', id: 'dream-error'}, h('strong', null, `${d.error.type}: `), d.error.message) : null,
    h('dl', {class: 'facts'},
      fact('Model', {class: 'mono'}, (d.model && d.model.id) || ''),
      fact('Input store', null, storeLink(input(d, 'memory_store').memory_store_id)),
      fact('Output store', {id: 'dream-output'}, storeLink(output(d)) || 'none yet'),
      fact('Session', {id: 'dream-session'}, d.session_id ? to('sessions', d.session_id) : 'none yet'),
      fact('Usage', {id: 'dream-usage'}, `${u.input_tokens || 0} in · ${u.output_tokens || 0} out · ${u.cache_read_input_tokens || 0} cache read · ${u.cache_creation_input_tokens || 0} cache write`),
      fact('Created', null, time(d.created_at)),
      fact('Ended', null, d.ended_at ? time(d.ended_at) : '—')),
    h('section', {class: 'card'}, h('h2', null, `Sessions read (${sessions.length})`),
      h('ul', {class: 'plain', id: 'dream-sessions'}, sessions.map(id => h('li', null, to('sessions', id))))),
    d.instructions ? h('section', {class: 'card'}, h('h2', null, 'Instructions'), h('div', {class: 'text prompt'}, d.instructions)) : null);
  return {keys: {r: again}};
}
