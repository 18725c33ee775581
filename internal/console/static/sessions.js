// The sessions list: filtered by status and agent on the server, by environment in the page (the API has no
// environment filter), paged with the API's cursors, its statuses refreshed while it is open.

import {h, clear, time, statusBadge, empty} from './dom.js';
import {get} from './api.js';
import {setQuery} from './app.js';

const STATUSES = ['running', 'idle', 'rescheduling', 'terminated'];
const PAGE = 50;
const SCAN_PAGES = 10; // an environment filter reads at most this many pages of PAGE per click

// tokens is a session's token count (input, cache reads and writes, output), short.
function tokens(s) {
  const u = s.usage || {};
  const n = (u.input_tokens || 0) + (u.output_tokens || 0) + (u.cache_read_input_tokens || 0) + (u.cache_creation_input_tokens || 0);
  return n >= 1e6 ? `${(n / 1e6).toFixed(1)} M` : n >= 1e3 ? `${(n / 1e3).toFixed(1)} k` : String(n);
}

// The last stop of an idle or terminated session is in its log, not in the session object: a row reads the few
// latest status and error events once, and again only when the session has run since (its status, active time
// or tokens moved).
const STOP_TYPES = ['session.status_idle', 'session.status_terminated', 'session.error'];
const STOP_READS = 6; // stop reads in flight at once

function stopKey(s) {
  const u = s.usage || {};
  return [s.status, (s.stats && s.stats.active_seconds) || 0, u.input_tokens || 0, u.output_tokens || 0].join('|');
}

const errName = e => String((e.error && e.error.type) || 'error').replace(/_error$/, '').replace(/_/g, ' ');

// stopOf says how a session's last turn ended, from its latest status and error events (newest first): the stop
// reason, and the errors of that turn (those after the stop before it). {text, bad, title}, or null if none.
export function stopOf(evs) {
  const end = evs.findIndex(e => e.type === 'session.status_idle' || e.type === 'session.status_terminated');
  if (end < 0) return null;
  const last = evs[end];
  let prev = evs.findIndex((e, i) => i > end && (e.type === 'session.status_idle' || e.type === 'session.status_terminated'));
  if (prev < 0) prev = evs.length;
  const errors = evs.slice(end + 1, prev).filter(e => e.type === 'session.error');
  const reason = last.type === 'session.status_terminated' ? 'terminated' : (last.stop_reason && last.stop_reason.type) || 'idle';
  const title = errors.map(e => (e.error && e.error.message) || '').filter(Boolean).join('\n') || undefined;
  if (reason === 'retries_exhausted' || (reason === 'terminated' && errors.length)) {
    return {text: errors.length ? `error: ${errName(errors[0])}` : 'error: gave up after retries', bad: true, title};
  }
  const text = {requires_action: 'requires_action: waiting for you', budget_reached: 'budget_reached: the budget is spent'}[reason] || reason;
  if (!errors.length) return {text, bad: reason === 'refusal', title};
  return {text: `${text} · ${errors.length} error${errors.length === 1 ? '' : 's'}: ${errName(errors[0])}`, bad: false, warn: true, title};
}

export async function sessionsPage(main, q) {
  const [agents, envs] = await Promise.all([
    get('/v1/agents', {limit: 100}).catch(() => ({data: []})),
    get('/v1/environments', {limit: 100}).catch(() => ({data: []})),
  ]);
  const envName = new Map(envs.data.map(e => [e.id, e.name]));
  const state = {
    status: q.get('status') || '', agent: q.get('agent') || '', env: q.get('env') || '',
    archived: q.get('archived') === '1', page: q.get('page') || '',
    memory: q.get('memory') || '', // from a memory store's page: the sessions that have it
  };
  const stack = []; // the tokens of the pages before this one, for Previous
  let current = null; // {rows, next, prev, scanned}
  let timer = null;
  let loading = false;
  const stops = new Map(); // session id -> {key, stop}: the last stop read, for the key it was read at

  const select = (label, name, options, value) => {
    const s = h('select', {id: `f-${name}`, name, 'data-focus-key': name === 'status' ? '' : null,
      onchange: () => { state[name] = s.value; state.page = ''; stack.length = 0; load(); }},
    h('option', {value: ''}, `Any ${label.toLowerCase()}`),
    options.map(([v, t]) => h('option', {value: v, selected: v === value ? true : null}, t)));
    if (value && !options.some(([v]) => v === value)) s.appendChild(h('option', {value, selected: true}, value));
    s.value = value;
    return h('label', {class: 'field'}, h('span', null, label), s);
  };
  const archived = h('input', {type: 'checkbox', id: 'f-archived', checked: state.archived,
    onchange: () => { state.archived = archived.checked; state.page = ''; stack.length = 0; load(); }});
  const tbody = h('tbody');
  const status = h('p', {class: 'list-status', role: 'status', 'aria-live': 'polite'});
  const prevBtn = h('button', {type: 'button', onclick: () => prev(), 'aria-keyshortcuts': 'p'}, '← Previous');
  const nextBtn = h('button', {type: 'button', onclick: () => next(), 'aria-keyshortcuts': 'n'}, 'Next →');
  const table = h('table', {class: 'list sessions'},
    h('caption', {class: 'visually-hidden'}, 'Sessions, newest first'),
    h('thead', null, h('tr', null, h('th', {scope: 'col'}, 'Status'), h('th', {scope: 'col'}, 'Session'),
      h('th', {scope: 'col', class: 'opt'}, 'Agent'), h('th', {scope: 'col', class: 'opt'}, 'Environment'),
      h('th', {scope: 'col', class: 'opt num'}, 'Tokens'),
      h('th', {scope: 'col'}, 'Created'), h('th', {scope: 'col', class: 'opt'}, 'Updated'))),
    tbody);
  clear(main,
    h('div', {class: 'page-head'}, h('h1', null, 'Sessions')),
    h('form', {class: 'filters', role: 'search', 'aria-label': 'Filter sessions', onsubmit: e => e.preventDefault()},
      select('Status', 'status', STATUSES.map(s => [s, s]), state.status),
      select('Agent', 'agent', agents.data.map(a => [a.id, a.name || a.id]), state.agent),
      select('Environment', 'env', envs.data.map(e => [e.id, e.name || e.id]), state.env),
      h('label', {class: 'check'}, archived, ' Archived too')),
    state.memory ? h('p', {class: 'meta', id: 'f-memory'}, 'With the memory store ',
      h('a', {href: `#/memory/${encodeURIComponent(state.memory)}`, class: 'mono'}, state.memory), ' · ', h('a', {href: '#/sessions'}, 'all sessions')) : null,
    h('div', {class: 'table-wrap'}, table),
    h('div', {class: 'pager'}, prevBtn, status, nextBtn));

  function params(page, limit) {
    return {limit, page: page || undefined, agent_id: state.agent || undefined, memory_store_id: state.memory || undefined,
      'statuses[]': state.status ? [state.status] : undefined, include_archived: state.archived ? 'true' : undefined};
  }

  // fetchPage reads one page of the list (several pages of the API's with an environment filter).
  async function fetchPage(token) {
    if (!state.env) {
      const r = await get('/v1/sessions', params(token, PAGE));
      return {rows: r.data, next: r.next_page || '', prev: r.prev_page || '', scanned: r.data.length};
    }
    const rows = [];
    let t = token, scanned = 0;
    for (let i = 0; i < SCAN_PAGES && rows.length < PAGE; i++) {
      const r = await get('/v1/sessions', params(t, 100));
      scanned += r.data.length;
      rows.push(...r.data.filter(s => s.environment_id === state.env));
      t = r.next_page || '';
      if (!t) break;
    }
    return {rows, next: t, prev: '', scanned};
  }

  // A load the user asks for supersedes one in flight; a quiet (live) one gives way to any.
  let seq = 0;
  async function load(quiet) {
    if (quiet && loading) return;
    const my = ++seq;
    loading = true;
    if (!quiet) { prevBtn.disabled = true; nextBtn.disabled = true; }
    const q2 = new URLSearchParams();
    if (state.status) q2.set('status', state.status);
    if (state.agent) q2.set('agent', state.agent);
    if (state.env) q2.set('env', state.env);
    if (state.memory) q2.set('memory', state.memory);
    if (state.archived) q2.set('archived', '1');
    if (state.page) q2.set('page', state.page);
    if (main.isConnected) setQuery(q2); // not from a page the user has left
    if (!quiet) status.textContent = 'Loading…';
    try {
      const page = await fetchPage(state.page);
      if (my !== seq) return;
      current = page;
      render(quiet);
    } catch (e) {
      if (my !== seq) return;
      status.textContent = '';
      clear(tbody, h('tr', null, h('td', {colspan: 7}, h('div', {class: 'notice error', role: 'alert'}, e.message))));
    } finally {
      if (my === seq) loading = false;
    }
  }

  function render(quiet) {
    const focused = document.activeElement && document.activeElement.dataset && document.activeElement.dataset.id;
    const rows = current.rows;
    if (!rows.length) {
      const filtered = state.status || state.agent || state.env;
      clear(tbody, h('tr', null, h('td', {colspan: 7}, empty(filtered ? 'No session matches these filters.' : 'No sessions yet.',
        filtered ? (state.env && current.next ? `Scanned ${current.scanned} sessions; Next reads on.` : 'Change or clear the filters.')
          : 'Create one with the API or the CLI: corral sessions create …'))));
    } else {
      clear(tbody, rows.map(s => h('tr', null,
        h('td', {class: 'status-cell'}, statusBadge(s.archived_at ? 'archived' : s.status), stopLine(s)),
        h('td', {class: 'name'}, h('a', {href: `#/sessions/${encodeURIComponent(s.id)}`, 'data-row': '', dataset: {id: s.id}},
          s.title || s.id), s.title ? h('span', {class: 'sub mono'}, s.id) : null),
        h('td', {class: 'opt'}, h('a', {href: `#/agents/${encodeURIComponent(s.agent.id)}`}, s.agent.name || s.agent.id),
          h('span', {class: 'sub'}, `v${s.agent.version}`)),
        h('td', {class: 'opt'}, h('a', {href: `#/environments/${encodeURIComponent(s.environment_id)}`},
          envName.get(s.environment_id) || s.environment_id)),
        h('td', {class: 'opt num'}, tokens(s)),
        h('td', null, time(s.created_at)),
        h('td', {class: 'opt'}, time(s.updated_at)))));
    }
    if (focused) {
      const el = tbody.querySelector(`[data-id="${CSS.escape(focused)}"]`);
      if (el) el.focus();
    }
    const n = rows.length;
    status.textContent = n ? `${n} session${n === 1 ? '' : 's'} on this page${state.env ? ` (of ${current.scanned} read)` : ''}` : '';
    if (quiet) status.textContent += ' · live';
    prevBtn.disabled = !stack.length && !current.prev;
    nextBtn.disabled = !current.next;
    readStops(rows);
  }

  // stopLine is the last stop of a session at rest, as far as it has been read.
  function stopLine(s) {
    if (s.status !== 'idle' && s.status !== 'terminated') return null;
    const c = stops.get(s.id);
    const st = c && c.stop;
    if (!st) return null;
    return h('span', {class: `sub stop${st.bad ? ' bad' : ''}${st.warn ? ' warn' : ''}`, title: st.title, dataset: {stop: s.id}}, st.text);
  }

  // readStops reads the last stop of the sessions at rest whose stop is unknown or stale, a few at a time, and
  // shows the page again once they are in.
  let reading = false;
  async function readStops(rows) {
    if (reading) return;
    const todo = rows.filter(s => (s.status === 'idle' || s.status === 'terminated') && stops.get(s.id)?.key !== stopKey(s));
    if (!todo.length) return;
    reading = true;
    try {
      let i = 0;
      const worker = async () => {
        while (i < todo.length) {
          const s = todo[i++];
          try {
            const r = await get(`/v1/sessions/${encodeURIComponent(s.id)}/events`, {'types[]': STOP_TYPES, order: 'desc', limit: 8});
            stops.set(s.id, {key: stopKey(s), stop: stopOf(r.data || [])});
          } catch {
            stops.set(s.id, {key: stopKey(s), stop: null});
          }
        }
      };
      await Promise.all(Array.from({length: Math.min(STOP_READS, todo.length)}, worker));
    } finally {
      reading = false;
    }
    if (main.isConnected && current) render(true);
  }

  function next() {
    if (!current || !current.next || nextBtn.disabled) return;
    stack.push(state.page);
    state.page = current.next;
    load().then(() => main.querySelector('[data-row]')?.focus());
  }
  function prev() {
    if (prevBtn.disabled) return;
    if (stack.length) state.page = stack.pop();
    else if (current && current.prev) state.page = current.prev;
    else return;
    load().then(() => main.querySelector('[data-row]')?.focus());
  }

  await load();
  // Live status: the page in view is read again every 5 s while the tab is visible.
  timer = setInterval(() => { if (!document.hidden) load(true); }, 5000);
  return {
    cleanup: () => clearInterval(timer),
    keys: {n: next, p: prev, r: () => load()},
  };
}
