// Workspaces (the admin API): the list with a form that creates one, and a workspace with its facts, its keys
// (a new one's secret shown once; turned off and on, archived in two clicks), Use (the console acts in it:
// anthropic-workspace-id) and Archive.

import {h, clear, time, fact, crumbs, mono, empty, toast, statusBadge} from './dom.js';
import {get, post, id as esc, workspace, setWorkspace} from './api.js';
import {pagedList, idPages} from './agents.js';
import {row, text, form, twoClick, gone, once} from './forms.js';

const P = '/v1/organizations/workspaces';
const K = '/v1/organizations/api_keys';
const DEFAULT = 'wrkspc_default';
const current = w => ((workspace() || DEFAULT) === w.id ? h('span', {class: 'badge', 'data-current': ''}, 'in use') : null);
const archived = w => (w.archived_at ? h('span', {class: 'badge'}, 'archived') : null);

export function workspacesPage(main, q) {
  const name = text('workspace-name', '', {placeholder: 'research', maxlength: 40});
  const details = h('details', {class: 'card', id: 'new-workspace'}, h('summary', null, 'New workspace'),
    form('workspace-form', [row('Name', name, 'At most 40 characters.')], 'Create workspace', async () => {
      const w = await post(P, {name: name.value});
      location.hash = `#/workspaces/${esc(w.id)}`;
    }, null));
  return pagedList(main, {title: 'Workspaces', path: P, q, caption: 'Workspaces', noArchived: true, before: [details],
    read: idPages(P, {include_default: 'true', include_archived: 'true'}),
    emptyTitle: 'No workspaces.', emptyHint: 'A workspace keeps a team\'s agents, sessions, vaults and keys apart from the others\'.',
    columns: [
      ['Workspace', w => [h('a', {href: `#/workspaces/${esc(w.id)}`, 'data-row': ''}, w.name), current(w), h('span', {class: 'sub mono'}, w.id)], 'name'],
      ['Created', w => time(w.created_at), 'opt'],
      ['Archived', w => (w.archived_at ? time(w.archived_at) : '—')],
    ]});
}

export async function workspacePage(main, wsID) {
  const w = await get(`${P}/${esc(wsID)}`);
  const again = () => workspacePage(main, wsID);
  const live = !w.archived_at;
  const shown = h('div', {id: 'new-key'});
  const keyName = text('key-name', '', {placeholder: 'ci'});
  const tbody = h('tbody');
  const keys = async () => {
    const l = await get(K, {workspace_id: w.id, limit: 100});
    clear(tbody, l.data.length ? l.data.map(k => h('tr', {dataset: {key: k.id}},
      h('td', null, k.name || '—', h('span', {class: 'sub mono'}, k.id)),
      h('td', null, mono(k.partial_key_hint)),
      h('td', null, statusBadge(k.status)),
      h('td', null, time(k.created_at)),
      h('td', null, k.status === 'archived' ? null : [
        h('button', {type: 'button', class: 'small', dataset: {toggle: k.id}, onclick: async () => {
          await post(`${K}/${esc(k.id)}`, {status: k.status === 'active' ? 'inactive' : 'active'});
          await keys();
        }}, k.status === 'active' ? 'Turn off' : 'Turn on'),
        twoClick('Archive', 'Click again: it never works again', {dataset: {archiveKey: k.id}}, async () => {
          await post(`${K}/${esc(k.id)}`, {status: 'archived'});
          await keys();
        })])))
      : h('tr', null, h('td', {colspan: 5}, empty('No keys of this workspace.', 'Organization admin keys reach it by naming it.'))));
  };
  clear(main,
    crumbs(h('a', {href: '#/workspaces'}, 'Workspaces'), ' / ', mono(w.id)),
    h('div', {class: 'page-head'}, h('h1', null, w.name), archived(w), current(w), h('span', {class: 'spacer'}),
      live ? h('button', {type: 'button', id: 'use-workspace', onclick: () => {
        setWorkspace(w.id === DEFAULT ? '' : w.id);
        toast(`The console now acts in ${w.name}.`);
        again();
      }}, 'Use this workspace') : null,
      live && w.id !== DEFAULT ? gone('Archive', `${P}/${esc(w.id)}`, '#/workspaces', 'archive-workspace',
        'Click again: its keys stop and its sessions are interrupted, for good') : null),
    h('dl', {class: 'facts'},
      fact('ID', {class: 'mono', id: 'workspace-id'}, w.id),
      fact('Color', null, w.display_color || '—'),
      fact('Tags', null, Object.entries(w.tags || {}).map(([k, v]) => `${k}=${v}`).join(', ') || '—'),
      fact('Created', null, time(w.created_at)),
      fact('Archived', null, w.archived_at ? time(w.archived_at) : '—')),
    h('section', {class: 'card'}, h('h2', null, 'API keys'), shown,
      h('table', {class: 'list', id: 'keys'}, h('thead', null, h('tr', null, ['Key', 'Ends with', 'Status', 'Created', ''].map(c => h('th', null, c)))), tbody),
      live ? form('key-form', [row('New key\'s name (optional)', keyName, 'The key acts in this workspace alone.')], 'Create key', async () => {
        const k = await post(K, {name: keyName.value, workspace_id: w.id});
        clear(shown, once(`Key ${k.name || k.id}:`, k.secret, 'key'));
        keyName.value = '';
        await keys();
      }, null) : null));
  await keys();
  return {keys: {r: again}};
}
