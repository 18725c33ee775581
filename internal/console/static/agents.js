// Agents: the list, an agent with its versions, and the diff between two versions.

import {h, clear, time, empty, pretty, fact, crumbs, mono, meta} from './dom.js';
import {get, post, id as esc} from './api.js';
import {setQuery} from './app.js';
import {diffLines, canonical} from './diff.js';
import {row, text, area, form, parseJSON, json, same, metadataPatch, gone, FormError} from './forms.js';

// pagedList renders a list page with Previous/Next over the API's cursors. columns: [[header, cell(row)], ...].
// params are more parameters of the list request; noArchived drops the Archived filter (files have none); before
// is shown above the list (a form that adds to it); read(token), if given, reads a page instead of GET path.
// idPages reads the pages of a Page-shaped list (data, has_more, first_id, last_id: the webhooks', the admin
// API's) as pagedList's cursors: a token is "a" (after) or "b" (before) and an id.
export function idPages(path, params) {
  return async t => {
    const r = await get(path, Object.assign({limit: 50, [t[0] === 'b' ? 'before_id' : 'after_id']: t.slice(1) || undefined}, params || {}));
    return {data: r.data, next_page: (t[0] === 'b' || r.has_more) && r.last_id ? `a${r.last_id}` : null,
      prev_page: t && r.first_id && (t[0] === 'a' || r.has_more) ? `b${r.first_id}` : null};
  };
}

export async function pagedList(main, {title, path, q, columns, emptyTitle, emptyHint, caption, actions, params, noArchived, before, read}) {
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
    h('div', {class: 'page-head'}, h('h1', null, title), actions ? [h('span', {class: 'spacer'}), actions] : null),
    before || null,
    noArchived ? null : h('form', {class: 'filters', onsubmit: e => e.preventDefault()}, h('label', {class: 'check'}, archived, ' Archived too')),
    h('div', {class: 'table-wrap'}, h('table', {class: 'list'}, h('caption', {class: 'visually-hidden'}, caption),
      h('thead', null, h('tr', null, columns.map(([name, , cls]) => h('th', {scope: 'col', class: cls || null}, name)))), tbody)),
    h('div', {class: 'pager'}, prevBtn, status, nextBtn));
  async function load() {
    const q2 = new URLSearchParams();
    if (archived.checked) q2.set('archived', '1');
    for (const [k, v] of Object.entries(params || {})) if (v) q2.set(k, v);
    if (token) q2.set('page', token);
    if (main.isConnected) setQuery(q2); // not from a page the user has left
    status.textContent = 'Loading…';
    try {
      cur = await (read ? read(token) : get(path, Object.assign({limit: 50, page: token || undefined, include_archived: archived.checked ? 'true' : undefined}, params || {})));
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
  return {keys: {n: next, p: prev, r: load}, reload: load};
}

export function agentsPage(main, q) {
  return pagedList(main, {title: 'Agents', path: '/v1/agents', q, caption: 'Agents',
    actions: h('a', {class: 'button primary', href: '#/agents/new', id: 'new-agent'}, 'New agent'),
    emptyTitle: 'No agents yet.', emptyHint: 'Create one with New agent, POST /v1/agents or corral agents create.',
    columns: [
      ['Agent', a => [h('a', {href: `#/agents/${esc(a.id)}`, 'data-row': ''}, a.name || a.id), h('span', {class: 'sub mono'}, a.id)], 'name'],
      ['Model', a => mono((a.model && a.model.id) || '')],
      ['Version', a => `v${a.version}`],
      ['Tools', a => (a.tools || []).map(t => t.type === 'custom' ? t.name : t.type === 'mcp_toolset' ? `mcp:${t.mcp_server_name}` : 'built-in').join(', '), 'opt'],
      ['Updated', a => time(a.updated_at), 'opt'],
    ]});
}

function agentFacts(a) {
  return h('dl', {class: 'facts'},
    fact('Model', {class: 'mono'}, (a.model && a.model.id) || ''),
    fact('Version', null, `v${a.version}`),
    fact('Created', null, time(a.created_at)),
    fact('Updated', null, time(a.updated_at)),
    a.archived_at ? fact('Archived', null, time(a.archived_at)) : null);
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
    crumbs(h('a', {href: '#/agents'}, 'Agents'), ' / ', mono(a.id)),
    h('div', {class: 'page-head'}, h('h1', null, a.name || a.id), h('span', {class: 'spacer'}),
      a.archived_at ? null : [h('a', {class: 'button', href: `#/agents/${esc(a.id)}/edit`, id: 'edit-agent'}, 'Edit'),
        gone('Archive', `/v1/agents/${esc(a.id)}`, '#/agents', 'archive-agent')]),
    q.get('unchanged') ? h('p', {class: 'notice', role: 'status', id: 'unchanged'}, `Nothing changed: the agent is still at v${a.version}.`) : null,
    a.description ? h('p', {class: 'lead'}, a.description) : null,
    agentFacts(a),
    h('p', null, h('a', {href: `#/sessions?agent=${esc(a.id)}`}, 'Sessions of this agent →')),
    h('section', {class: 'card'}, h('h2', null, `Version v${doc.version}`),
      doc.system ? [h('h3', null, 'System prompt'), h('div', {class: 'text prompt'}, doc.system)] : null,
      h('h3', null, 'Tools'),
      (doc.tools || []).length ? h('ul', {class: 'plain'}, doc.tools.map(t => h('li', null,
        mono(t.type === 'custom' ? t.name : t.type === 'mcp_toolset' ? `mcp_toolset ${t.mcp_server_name}` : t.type),
        t.description ? ` — ${t.description}` : '',
        t.default_config && t.default_config.permission_policy ? h('span', {class: 'badge'}, t.default_config.permission_policy.type) : null))) : meta('None'),
      (doc.mcp_servers || []).length ? [h('h3', null, 'MCP servers'), h('ul', {class: 'plain'}, doc.mcp_servers.map(s => h('li', {class: 'mono'}, `${s.name}: ${s.url}`)))] : null,
      h('details', {class: 'raw'}, h('summary', null, 'JSON'), h('pre', {class: 'json'}, pretty(doc)))),
    h('section', {class: 'card'}, h('h2', null, 'Versions'),
      h('form', {class: 'filters', onsubmit: e => { e.preventDefault(); location.hash = `#/agents/${esc(a.id)}/diff?a=${va.value}&b=${vb.value}`; }},
        h('label', {class: 'field'}, h('span', null, 'From'), va), h('label', {class: 'field'}, h('span', null, 'To'), vb),
        h('button', {type: 'submit', class: 'primary', id: 'diff-go'}, 'Compare')),
      versions.data.length ? h('table', {class: 'list'}, h('thead', null, h('tr', null, h('th', null, 'Version'), h('th', null, 'Updated'), h('th', null, 'Model'))),
        h('tbody', null, versions.data.map(v => h('tr', null,
          h('td', null, h('a', {href: `#/agents/${esc(a.id)}?version=${v.version}`, 'data-row': ''}, `v${v.version}`),
            v.version === a.version ? h('span', {class: 'badge current'}, 'current') : null, v.version === doc.version ? ' (shown)' : ''),
          h('td', null, time(v.updated_at)), h('td', {class: 'mono'}, (v.model && v.model.id) || ''))))) : empty('No versions.'),
      versions.next_page ? meta('Only the latest 100 versions are listed.') : null));
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
    crumbs(h('a', {href: '#/agents'}, 'Agents'), ' / ',
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

// agentEditPage creates an agent (agentID empty) or posts an update of its current version. An update sends the
// version it was made from (the API refuses it with a conflict if the agent moved on since) and only the fields
// that changed; the API answers the new version, or the same one when nothing changed.
//
// multiagent is a JSON field (the API checks it, docs/multiagent.md); the roster picker (the other agents) and the
// advisor model above it write their part of it, a multiagent_20261001's subagents and advisor, into the field.
export async function agentEditPage(main, agentID) {
  const [a, all] = await Promise.all([agentID ? get(`/v1/agents/${esc(agentID)}`) : null, get('/v1/agents', {limit: 100})]);
  const model = (a && a.model && a.model.id) || '';
  const ma = (a && a.multiagent) || {};
  const ident = (a && a.execution_identity) || {type: 'service_account'};
  const refID = r => typeof r === 'string' ? r : r.id;
  const listed = (ma.type === 'coordinator' ? ma.agents : ma.subagents && ma.subagents.predefined_agents) || [];
  const picked = new Set(listed.map(refID));
  const advisor = ma.type === 'coordinator' ? listed.find(r => r.type === 'advisor') : ma.advisor;
  const f = {
    name: text('agent-name', a ? a.name : ''),
    model: text('agent-model', model, {placeholder: 'claude-sonnet-4-5', class: 'mono'}),
    description: text('agent-description', a ? a.description : ''),
    system: area('agent-system', a ? a.system : '', 8),
    tools: area('agent-tools', json(a && a.tools), 6, {class: 'mono', placeholder: '[{"type": "agent_toolset_20260401"}]'}),
    mcp: area('agent-mcp-servers', json(a && a.mcp_servers), 3, {class: 'mono', placeholder: '[{"type": "url", "name": "docs", "url": "https://…"}]'}),
    skills: area('agent-skills', json(a && a.skills), 3, {class: 'mono', placeholder: '[{"type": "custom", "skill_id": "skill_…", "version": "latest"}]'}),
    metadata: area('agent-metadata', json(a && a.metadata), 3, {class: 'mono', placeholder: '{"team": "support"}'}),
    roster: h('select', {id: 'agent-roster', multiple: true, size: 4, onchange: compose},
      all.data.filter(o => !a || o.id !== a.id).map(o => h('option', {value: o.id, selected: picked.has(o.id)}, `${o.name || o.id} (${o.id})`))),
    advisor: text('agent-advisor', (advisor && advisor.model) || '', {class: 'mono', placeholder: 'claude-opus-4-6', onchange: compose}),
    multi: area('agent-multiagent', json(a && a.multiagent), 5, {class: 'mono', placeholder: '{"type": "multiagent_20261001", …}'}),
    identity: h('select', {id: 'agent-identity'}, ['service_account', 'aws_role'].map(t => h('option', {value: t, selected: ident.type === t}, t))),
    role: text('agent-role-arn', ident.role_arn, {class: 'mono', placeholder: 'arn:aws:iam::…:role/…'}),
  };
  // compose writes the picked roster and the advisor into the multiagent field, keeping the entries that are not
  // among the choices (the agent itself) and the versions the entries already pinned; a coordinator becomes a
  // multiagent_20261001 (its agents preselected, its advisor in the field).
  function compose() {
    let m;
    try { m = JSON.parse(f.multi.value || '{}'); } catch { return; } // the field's own error shows on saving
    if (m.type !== 'multiagent_20261001') m = {type: 'multiagent_20261001'};
    const was = (m.subagents && m.subagents.predefined_agents) || [];
    const ids = [...f.roster.options].map(o => o.value);
    const list = was.filter(r => !ids.includes(refID(r)));
    for (const o of f.roster.selectedOptions) list.push(was.find(r => refID(r) === o.value) || o.value);
    if (list.length || m.subagents) m.subagents = Object.assign(m.subagents && m.subagents.type === 'enabled' ? m.subagents : {type: 'enabled'}, {predefined_agents: list});
    const adv = f.advisor.value.trim();
    if (adv || m.advisor) m.advisor = adv ? {type: 'enabled', model: adv} : {type: 'disabled'};
    f.multi.value = json(m);
  }
  async function send() {
    const tools = parseJSON('Tools', f.tools.value);
    const mcp = parseJSON('MCP servers', f.mcp.value);
    const skills = parseJSON('Skills', f.skills.value);
    const metadata = parseJSON('Metadata', f.metadata.value);
    if (metadata !== undefined && (metadata === null || typeof metadata !== 'object' || Array.isArray(metadata))) {
      throw new FormError('Metadata: a JSON object of strings.');
    }
    const multi = parseJSON('Multi-agent', f.multi.value);
    const identity = {type: f.identity.value};
    if (f.role.value.trim()) identity.role_arn = f.role.value.trim();
    if (!a) {
      const body = {name: f.name.value, model: f.model.value.trim()};
      if (f.description.value) body.description = f.description.value;
      if (f.system.value) body.system = f.system.value;
      if (tools !== undefined) body.tools = tools;
      if (mcp !== undefined) body.mcp_servers = mcp;
      if (skills !== undefined) body.skills = skills;
      if (metadata !== undefined) body.metadata = metadata;
      if (multi !== undefined) body.multiagent = multi;
      if (!same(identity, ident)) body.execution_identity = identity;
      const created = await post('/v1/agents', body);
      location.hash = `#/agents/${esc(created.id)}`;
      return;
    }
    const body = {version: a.version};
    if (f.name.value !== a.name) body.name = f.name.value;
    if (f.model.value.trim() !== model) body.model = f.model.value.trim();
    if (f.description.value !== (a.description || '')) body.description = f.description.value;
    if (f.system.value !== (a.system || '')) body.system = f.system.value;
    if (!same(tools || [], a.tools || [])) body.tools = tools || [];
    if (!same(mcp || [], a.mcp_servers || [])) body.mcp_servers = mcp || [];
    if (!same(skills || [], a.skills || [])) body.skills = skills || [];
    if (!same(multi || null, a.multiagent || null)) body.multiagent = multi || null;
    if (!same(identity, ident)) body.execution_identity = identity;
    const md = metadataPatch(a.metadata || {}, metadata || {});
    if (md) body.metadata = md;
    const next = await post(`/v1/agents/${esc(a.id)}`, body);
    location.hash = `#/agents/${esc(a.id)}${next.version !== a.version ? '' : '?unchanged=1'}`;
  }
  const back = a ? `#/agents/${esc(a.id)}` : '#/agents';
  clear(main,
    crumbs(h('a', {href: '#/agents'}, 'Agents'), ' / ',
      a ? [h('a', {href: back, class: 'mono'}, a.id), ' / edit'] : 'new'),
    h('div', {class: 'page-head'}, h('h1', null, a ? `Edit ${a.name || a.id}` : 'New agent')),
    a ? h('p', {class: 'lead', id: 'edit-base'}, `Editing version v${a.version}. Saving makes version v${a.version + 1}; if the agent changed meanwhile, the server refuses and you reload.`) : null,
    form('agent-form', [
      row('Name', f.name),
      row('Model', f.model, 'A model id, such as claude-sonnet-4-5.'),
      row('Description', f.description),
      row('System prompt', f.system),
      row('Tools (JSON array)', f.tools, 'The agent toolset, custom tools and MCP toolsets, as in the API. Blank for none.'),
      row('MCP servers (JSON array)', f.mcp),
      row('Skills (JSON array)', f.skills),
      h('fieldset', {class: 'sub-fields'}, h('legend', null, 'Multi-agent (a coordinator)'),
        row('Subagents it may start', f.roster, 'Pick with Ctrl or ⌘; each is pinned to its latest version.'),
        row('Advisor model', f.advisor, 'Blank for no advisor.'),
        row('Multi-agent (JSON object)', f.multi, 'As in the API; the two fields above write into it. Blank for none.')),
      row('Execution identity', f.identity),
      row('Role ARN (aws_role)', f.role),
      row('Metadata (JSON object)', f.metadata),
    ], a ? 'Save as a new version' : 'Create agent', send, back));
  f.name.focus();
  return {keys: {}};
}
