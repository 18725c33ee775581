// A multi-agent session's threads: the table on its page, and a thread's page with its own transcript.

import {h, clear, time, statusBadge, empty, fact, crumbs, mono} from './dom.js';
import {get, id as esc} from './api.js';
import {render} from './transcript.js';
import {follow} from './sse.js';

const tokens = u => (u ? `${u.input_tokens || 0} in / ${u.output_tokens || 0} out` : '—');

// threadsCard fills card with the session's threads, and hides it when the session has none (single-agent).
export async function threadsCard(card, sessionID) {
  const r = await get(`/v1/sessions/${esc(sessionID)}/threads`);
  const names = new Map(r.data.map(t => [t.id, t.agent.name || t.agent.type]));
  card.hidden = !r.data.length;
  clear(card, h('h2', null, 'Threads'), h('div', {class: 'table-wrap'}, h('table', {class: 'list threads'},
    h('thead', null, h('tr', null, ...['Agent', 'Status', 'Parent', 'Usage', 'Created'].map(c => h('th', null, c)))),
    h('tbody', null, ...r.data.map(t => h('tr', {dataset: {id: t.id}},
      h('td', null, h('a', {href: `#/sessions/${esc(sessionID)}/threads/${esc(t.id)}`}, names.get(t.id))),
      h('td', null, statusBadge(t.status), t.archived_at ? ' archived' : ''),
      h('td', null, t.parent_thread_id ? names.get(t.parent_thread_id) || t.parent_thread_id : 'primary'),
      h('td', null, tokens(t.usage)),
      h('td', null, time(t.created_at))))))));
}

// threadPage shows a thread and its own events, a page at a time, then live from the thread's stream.
export async function threadPage(main, sessionID, threadID) {
  const base = `/v1/sessions/${esc(sessionID)}/threads/${esc(threadID)}`;
  const t = await get(base);
  const list = h('div', {class: 'transcript', id: 'transcript', role: 'log', 'aria-label': 'Transcript'});
  const more = h('button', {type: 'button', class: 'small', id: 'tr-later', hidden: true, onclick: () => load()}, '↓ Later events');
  const ctx = {pending: new Set(), showSpans: false};
  let next = '', last = '0', stop = null;
  const add = ev => {
    if (document.getElementById(`ev-${ev.id}`)) return;
    list.querySelector('.empty')?.remove();
    const el = render(list, ev, ctx);
    if (el) list.appendChild(el);
    last = ev.id;
  };
  const load = async () => {
    const r = await get(`${base}/events`, {limit: 100, page: next || undefined});
    r.data.forEach(add);
    next = r.next_page || '';
    more.hidden = !next;
    if (!list.childElementCount) list.appendChild(empty('No events yet.'));
    // At the end of the thread: follow it from there.
    if (!next && !stop) stop = follow(`${base}/stream`, last, add, st => { list.dataset.stream = st; });
  };
  clear(main,
    crumbs(h('a', {href: '#/sessions'}, 'Sessions'), ' / ',
      h('a', {href: `#/sessions/${esc(sessionID)}`, class: 'mono'}, sessionID), ' / ', mono(t.id)),
    h('div', {class: 'page-head'}, h('h1', null, t.agent.name || t.agent.type), statusBadge(t.status)),
    h('dl', {class: 'facts'},
      fact('Parent', {class: 'mono'}, t.parent_thread_id || 'none (primary)'),
      fact('Model', {class: 'mono'}, (t.agent.model && t.agent.model.id) || t.agent.model || ''),
      fact('Usage', null, tokens(t.usage)),
      fact('Created', null, time(t.created_at))),
    h('section', {class: 'card'}, h('h2', null, 'Transcript'), list, h('div', {class: 'tr-nav'}, more)));
  await load();
  return {cleanup: () => stop && stop()};
}
