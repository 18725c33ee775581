// Agents: the list, an agent with its versions, and the diff between two versions.

import {h, clear, time, empty, pretty} from './dom.js';
import {get, id as esc} from './api.js';
import {setQuery} from './app.js';
import {diffLines, canonical} from './diff.js';

// pagedList renders a list page with Previous/Next over the API's cursors. columns: [[header, cell(row)], ...].
export async function pagedList(main, {title, path, q, columns, emptyTitle, emptyHint, caption}) {
  const stack = [];
  let token = q.get('page') || '';
  let cur = null;
  const tbody = h('tbody');
  const status = h('p', {class: 'list-status', role: 'status'});
  const archived = h('input', {type: 'checkbox', id: 'f-archived', checked: q.get('archived') === '1',
    'data-focus-key': '', onchange: () => { token = ''; stack.length = 0; load(); }});
  const prevBtn = h('button', {type: 'button', onclick: () => prev()}, '← Previous');
  const nextBtn = h('button', {type: 'button', onclick: () => next()}, 'Next →');
  clear(main,
    h('div', {class: 'page-head'}, h('h1', null, title)),
    h('form', {class: 'filters', onsubmit: e => e.preventDefault()}, h('label', {class: 'check'}, archived, ' Archived too')),
    h('div', {class: 'table-wrap'}, h('table', {class: 'list'}, h('caption', {class: 'visually-hidden'}, caption),
      h('thead', null, h('tr', null, columns.map(([name, , cls]) => h('th', {scope: 'col', class: cls || null}, name)))), tbody)),
    h('div', {class: 'pager'}, prevBtn, status, nextBtn));
  async function load() {
    const q2 = new URLSearchParams();
    if (archived.checked) q2.set('archived', '1');
    if (token) q2.set('page', token);
    if (main.isConnected) setQuery(q2); // not from a page the user has left
    status.textContent = 'Loading…';
    try {
      cur = await get(path, {limit: 50, page: token || undefined, include_archived: archived.checked ? 'true' : undefined});
    } catch (e) {
      status.textContent = '';
      clear(tbody, h('tr', null, h('td', {colspan: columns.length}, h('div', {class: 'notice error', role: 'alert'}, e.message))));
      return;
    }
    clear(tbody, cur.data.length ? cur.data.map(r => h('tr', null, columns.map(([, cell, cls]) => h('td', {class: cls || null}, cell(r)))))
      : h('tr', null, h('td', {colspan: columns.length}, empty(emptyTitle, emptyHint))));
    status.textContent = cur.data.length ? `${cur.data.length} on this page` : '';
    prevBtn.disabled = !stack.length && !cur.prev_page;
    nextBtn.disabled = !cur.next_page;
  }
  function next() { if (cur && cur.next_page) { stack.push(token); token = cur.next_page; load(); } }
  function prev() {
    if (stack.length) token = stack.pop();
    else if (cur && cur.prev_page) token = cur.prev_page;
    else return;
    load();
  }
  await load();
  return {keys: {n: next, p: prev, r: load}};
}

export function agentsPage(main, q) {
  return pagedList(main, {title: 'Agents', path: '/v1/agents', q, caption: 'Agents',
    emptyTitle: 'No agents yet.', emptyHint: 'Create one with POST /v1/agents or corral agents create.',
    columns: [
      ['Agent', a => [h('a', {href: `#/agents/${esc(a.id)}`, 'data-row': ''}, a.name || a.id), h('span', {class: 'sub mono'}, a.id)], 'name'],
      ['Model', a => h('span', {class: 'mono'}, (a.model && a.model.id) || '')],
      ['Version', a => `v${a.version}`],
      ['Tools', a => (a.tools || []).map(t => t.type === 'custom' ? t.name : t.type === 'mcp_toolset' ? `mcp:${t.mcp_server_name}` : 'built-in').join(', '), 'opt'],
      ['Updated', a => time(a.updated_at), 'opt'],
    ]});
}

function agentFacts(a) {
  return h('dl', {class: 'facts'},
    h('div', null, h('dt', null, 'Model'), h('dd', {class: 'mono'}, (a.model && a.model.id) || '')),
    h('div', null, h('dt', null, 'Version'), h('dd', null, `v${a.version}`)),
    h('div', null, h('dt', null, 'Created'), h('dd', null, time(a.created_at))),
    h('div', null, h('dt', null, 'Updated'), h('dd', null, time(a.updated_at))),
    a.archived_at ? h('div', null, h('dt', null, 'Archived'), h('dd', null, time(a.archived_at))) : null);
}

export async function agentPage(main, agentID, q) {
  const a = await get(`/v1/agents/${esc(agentID)}`);
  const versions = await get(`/v1/agents/${esc(agentID)}/versions`, {limit: 100});
  const shown = Number(q.get('version')) || a.version;
  const doc = versions.data.find(v => v.version === shown) || a;
  const va = h('select', {id: 'diff-a', 'aria-label': 'From version'}, versions.data.map(v => h('option', {value: String(v.version)}, `v${v.version}`)));
  const vb = h('select', {id: 'diff-b', 'aria-label': 'To version'}, versions.data.map(v => h('option', {value: String(v.version)}, `v${v.version}`)));
  vb.value = String(a.version);
  va.value = String(versions.data.length > 1 ? versions.data[1].version : a.version);
  clear(main,
    h('nav', {class: 'crumbs', 'aria-label': 'Breadcrumb'}, h('a', {href: '#/agents'}, 'Agents'), ' / ', h('span', {class: 'mono'}, a.id)),
    h('div', {class: 'page-head'}, h('h1', null, a.name || a.id)),
    a.description ? h('p', {class: 'lead'}, a.description) : null,
    agentFacts(a),
    h('p', null, h('a', {href: `#/sessions?agent=${esc(a.id)}`}, 'Sessions of this agent →')),
    h('section', {class: 'card'}, h('h2', null, `Version v${doc.version}`),
      doc.system ? [h('h3', null, 'System prompt'), h('div', {class: 'text prompt'}, doc.system)] : null,
      h('h3', null, 'Tools'),
      (doc.tools || []).length ? h('ul', {class: 'plain'}, doc.tools.map(t => h('li', null,
        h('span', {class: 'mono'}, t.type === 'custom' ? t.name : t.type === 'mcp_toolset' ? `mcp_toolset ${t.mcp_server_name}` : t.type),
        t.description ? ` — ${t.description}` : '',
        t.default_config && t.default_config.permission_policy ? h('span', {class: 'badge'}, t.default_config.permission_policy.type) : null))) : h('p', {class: 'meta'}, 'None'),
      (doc.mcp_servers || []).length ? [h('h3', null, 'MCP servers'), h('ul', {class: 'plain'}, doc.mcp_servers.map(s => h('li', {class: 'mono'}, `${s.name}: ${s.url}`)))] : null,
      h('details', {class: 'raw'}, h('summary', null, 'JSON'), h('pre', {class: 'json'}, pretty(doc)))),
    h('section', {class: 'card'}, h('h2', null, 'Versions'),
      h('form', {class: 'filters', onsubmit: e => { e.preventDefault(); location.hash = `#/agents/${esc(a.id)}/diff?a=${va.value}&b=${vb.value}`; }},
        h('label', {class: 'field'}, h('span', null, 'From'), va), h('label', {class: 'field'}, h('span', null, 'To'), vb),
        h('button', {type: 'submit', class: 'primary', id: 'diff-go'}, 'Compare')),
      versions.data.length ? h('table', {class: 'list'}, h('thead', null, h('tr', null, h('th', null, 'Version'), h('th', null, 'Updated'), h('th', null, 'Model'))),
        h('tbody', null, versions.data.map(v => h('tr', null,
          h('td', null, h('a', {href: `#/agents/${esc(a.id)}?version=${v.version}`, 'data-row': ''}, `v${v.version}`), v.version === doc.version ? ' (shown)' : ''),
          h('td', null, time(v.updated_at)), h('td', {class: 'mono'}, (v.model && v.model.id) || ''))))) : empty('No versions.'),
      versions.next_page ? h('p', {class: 'meta'}, 'Only the latest 100 versions are listed.') : null));
  return {keys: {}};
}

export async function agentDiffPage(main, agentID, q) {
  const [a, b] = await Promise.all(['a', 'b'].map(k => get(`/v1/agents/${esc(agentID)}`, {version: q.get(k) || undefined})));
  const strip = v => { const c = Object.assign({}, v); delete c.updated_at; return c; };
  const lines = diffLines(canonical(strip(a)), canonical(strip(b)));
  const changed = lines.filter(l => l.op !== ' ').length;
  // Unchanged runs longer than 6 lines fold to their ends.
  const out = [];
  for (let i = 0; i < lines.length;) {
    if (lines[i].op !== ' ') { out.push(lines[i++]); continue; }
    let j = i;
    while (j < lines.length && lines[j].op === ' ') j++;
    if (j - i > 6) {
      out.push(...lines.slice(i, i + 3), {op: '…', text: `${j - i - 6} unchanged lines`}, ...lines.slice(j - 3, j));
    } else out.push(...lines.slice(i, j));
    i = j;
  }
  clear(main,
    h('nav', {class: 'crumbs', 'aria-label': 'Breadcrumb'}, h('a', {href: '#/agents'}, 'Agents'), ' / ',
      h('a', {href: `#/agents/${esc(agentID)}`, class: 'mono'}, agentID), ' / diff'),
    h('div', {class: 'page-head'}, h('h1', null, `${a.name || agentID}: v${a.version} → v${b.version}`)),
    h('p', {class: 'meta', id: 'diff-summary'}, changed ? `${changed} changed line${changed === 1 ? '' : 's'}` : 'The two versions are the same.'),
    h('pre', {class: 'diff', id: 'diff', 'aria-label': `Diff of v${a.version} and v${b.version}`},
      out.map(l => h('span', {class: `dl op-${l.op === ' ' ? 'same' : l.op === '-' ? 'del' : l.op === '+' ? 'add' : 'fold'}`},
        h('span', {class: 'op', 'aria-hidden': 'true'}, l.op === '…' ? ' ' : l.op),
        l.op === '-' ? h('span', {class: 'visually-hidden'}, 'removed: ') : l.op === '+' ? h('span', {class: 'visually-hidden'}, 'added: ') : null,
        l.text, '\n'))));
  return {keys: {}};
}
