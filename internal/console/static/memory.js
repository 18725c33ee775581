// Memory stores: the list, and a store with its facts, a browser of its memories by path (one directory at a
// time: the API's depth=1 rolls what lies deeper into memory_prefix items), a memory's content with its edit,
// and the store's versions. An edit carries the content_sha256 of the content shown as its precondition, so a
// change made meanwhile (by a session, another tab) is refused with the API's 409 instead of overwritten.

import {h, clear, time, empty, toast, fact, crumbs, mono, meta} from './dom.js';
import {get, post, call, del, id as esc, query} from './api.js';
import {pagedList} from './agents.js';
import {row, text, area, form, twoClick} from './forms.js';

// slug is the store's directory under /mnt/memory in a session, by apitype.MemorySlug's rule: the name
// lowercased, each run of characters other than a-z and 0-9 one "-", none at either end; the id without any.
export function slug(name, storeID) {
  const s = String(name || '').toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-+|-+$/g, '');
  return s || String(storeID).toLowerCase();
}

const short = sha => (sha ? sha.slice(0, 12) : '');

function bytes(n) {
  if (n === null || n === undefined) return '';
  return n < 1024 ? `${n} B` : `${(n / 1024).toFixed(1)} KiB`;
}

// actor is who made a version: an API key, a session (linked to its page), a user or a service account.
export function actor(a) {
  if (!a) return '';
  switch (a.type) {
  case 'session_actor': return ['session ', h('a', {href: `#/sessions/${esc(a.session_id)}`, class: 'mono'}, a.session_id)];
  case 'api_actor': return ['key ', mono(a.api_key_id)];
  case 'user_actor': return ['user ', mono(a.user_id)];
  case 'service_account_actor': return ['service account ', mono(a.service_account_id)];
  }
  return a.type || '';
}

export function memoryStoresPage(main, q) {
  const name = text('store-name', '');
  const desc = text('store-description', '');
  async function send() {
    const s = await post('/v1/memory_stores', {name: name.value, description: desc.value || undefined});
    toast(`Created ${s.name}.`);
    location.hash = `#/memory/${esc(s.id)}`;
  }
  return pagedList(main, {title: 'Memory stores', path: '/v1/memory_stores', q, caption: 'Memory stores',
    before: form('store-form', [h('div', {class: 'filters'}, row('Name', name), row('Description (optional)', desc))], 'Create memory store', send, null),
    emptyTitle: 'No memory stores yet.', emptyHint: 'A memory store holds text files a session mounts at /mnt/memory/<name> and keeps across sessions.',
    columns: [
      ['Store', s => [h('a', {href: `#/memory/${esc(s.id)}`, 'data-row': ''}, s.name || s.id), h('span', {class: 'sub mono'}, s.id),
        s.archived_at ? h('span', {class: 'badge'}, 'archived') : null], 'name'],
      ['Description', s => s.description || ''],
      ['Mount', s => mono(`/mnt/memory/${slug(s.name, s.id)}`), 'opt'],
      ['Updated', s => time(s.updated_at), 'opt'],
    ]});
}

// cursorPager is a Previous/Next bar over an API list's cursors; load(token) draws the page and returns it.
export function cursorPager(id, load) {
  const stack = [];
  let token = '', cur = null;
  const prev = h('button', {type: 'button', class: 'small', id: `${id}-prev`, onclick: () => {
    if (stack.length) { token = stack.pop(); run(); } else if (cur && cur.prev_page) { token = cur.prev_page; run(); }
  }}, '← Previous');
  const next = h('button', {type: 'button', class: 'small', id: `${id}-next`, onclick: () => {
    if (cur && cur.next_page) { stack.push(token); token = cur.next_page; run(); }
  }}, 'Next →');
  async function run() {
    cur = await load(token);
    prev.disabled = !stack.length && !cur.prev_page;
    next.disabled = !cur.next_page;
    bar.hidden = prev.disabled && next.disabled;
  }
  const bar = h('div', {class: 'pager', hidden: true}, prev, next);
  return {bar, run};
}

// memoryStorePage: q holds the directory shown (prefix), the memory opened (memory), and the versions' filters
// (vmem, vop), so each view can be linked to.
export async function memoryStorePage(main, storeID, q) {
  const s = await get(`/v1/memory_stores/${esc(storeID)}`);
  const base = `/v1/memory_stores/${esc(s.id)}`;
  const prefix = /^\/(.*\/)?$/.test(q.get('prefix') || '') ? q.get('prefix') : '/';
  const here = (changes) => {
    const p = new URLSearchParams(q);
    for (const [k, v] of Object.entries(changes)) { if (v) p.set(k, v); else p.delete(k); }
    const qs = p.toString();
    return `#/memory/${esc(s.id)}${qs ? `?${qs}` : ''}`;
  };
  const reload = () => memoryStorePage(main, storeID, new URLSearchParams(location.hash.replace(/^[^?]*\??/, '')));

  // The directory: breadcrumbs from the root, then its memories and sub-directories.
  const parts = prefix.split('/').filter(Boolean);
  const dirs = h('nav', {class: 'crumbs', id: 'mem-crumbs', 'aria-label': 'Directory'},
    h('a', {href: here({prefix: '', memory: ''})}, '/'),
    parts.map((p, i) => [h('a', {href: here({prefix: `/${parts.slice(0, i + 1).join('/')}/`, memory: ''})}, p), '/']));
  const tbody = h('tbody');
  const memories = cursorPager('mem', async token => {
    const r = await get(`${base}/memories`, {path_prefix: prefix, depth: 1, limit: 50, page: token || undefined});
    clear(tbody, r.data.length ? r.data.map(m => m.type === 'memory_prefix'
      ? h('tr', {dataset: {prefix: m.path}}, h('td', {class: 'name'}, h('a', {href: here({prefix: m.path, memory: ''}), 'data-row': ''},
        `${m.path.slice(prefix.length)}`)), h('td', {colspan: 3, class: 'meta'}, 'directory'))
      : h('tr', {dataset: {memory: m.id}},
        h('td', {class: 'name'}, h('a', {href: here({memory: m.id}), 'data-row': ''}, m.path.slice(prefix.length)), h('span', {class: 'sub mono'}, m.id)),
        h('td', null, bytes(m.content_size_bytes)),
        h('td', {class: 'mono', title: m.content_sha256}, short(m.content_sha256)),
        h('td', null, time(m.updated_at))))
      : h('tr', null, h('td', {colspan: 4}, empty(prefix === '/' ? 'No memories yet.' : 'Nothing under this path.', 'Create one below.'))));
    return r;
  });

  // A new memory, in the directory shown.
  const newPath = text('new-memory-path', prefix, {class: 'mono'});
  const newContent = area('new-memory-content', '', 6, {class: 'mono'});
  const createForm = form('memory-form', [row('Path', newPath), row('Content', newContent)], 'Create memory', async () => {
    const m = await post(`${base}/memories`, {path: newPath.value, content: newContent.value});
    toast(`Created ${m.path}.`);
    location.hash = here({memory: m.id});
  }, null);

  // The memory opened, if any.
  let opened = null;
  const memID = q.get('memory');
  if (memID) {
    try {
      opened = await get(`${base}/memories/${esc(memID)}`, {view: 'full'});
    } catch (e) {
      if (e.status !== 404) throw e;
      toast(`Memory ${memID} no longer exists.`, 'error');
    }
  }
  let memCard = null;
  if (opened) {
    const m = opened;
    const path = text('memory-path', m.path, {class: 'mono'});
    const content = area('memory-content', m.content || '', 12, {class: 'mono'});
    memCard = h('section', {class: 'card', id: 'memory-view', dataset: {sha: m.content_sha256}},
      h('div', {class: 'section-head'}, h('h2', {class: 'mono'}, m.path), h('span', {class: 'spacer'}),
        h('a', {href: here({vmem: m.id}), id: 'memory-versions-link'}, 'Its versions'),
        twoClick('Delete', 'Click again to delete the memory', {id: 'delete-memory'}, async () => {
          await del(`${base}/memories/${esc(m.id)}${query({expected_content_sha256: m.content_sha256})}`);
          toast(`Deleted ${m.path}.`);
          location.hash = here({memory: ''});
        })),
      meta(mono(m.id), ` · ${bytes(m.content_size_bytes)} · sha256 `,
        h('span', {class: 'mono', title: m.content_sha256}, short(m.content_sha256)), ' · updated ', time(m.updated_at)),
      h('pre', {class: 'text', id: 'memory-text'}, m.content || ''),
      form('memory-edit', [row('Path', path, 'A new path renames the memory (its id stays).'), row('Content', content)], 'Save', async () => {
        const body = {precondition: {type: 'content_sha256', content_sha256: m.content_sha256}};
        if (content.value !== (m.content || '')) body.content = content.value;
        if (path.value !== m.path) body.path = path.value;
        await call('POST', `${base}/memories/${esc(m.id)}`, body);
        toast('Saved.');
        await reload();
      }, here({memory: ''})));
  }

  // The store's versions, newest first. A memory's current version cannot be redacted: the button is on the others.
  const vop = h('select', {id: 'ver-op', 'aria-label': 'Operation'}, ['', 'created', 'modified', 'deleted'].map(o => h('option', {value: o}, o || 'any operation')));
  vop.value = q.get('vop') || '';
  const vmem = text('ver-memory', q.get('vmem') || '', {class: 'mono', placeholder: 'mem_…', 'aria-label': 'Memory id'});
  const vbody = h('tbody');
  const versions = cursorPager('ver', async token => {
    const r = await get(`${base}/memory_versions`, {memory_id: vmem.value.trim(), operation: vop.value, limit: 20, page: token || undefined});
    // The current version of each memory listed (a deleted memory has none).
    const current = new Set();
    await Promise.all([...new Set(r.data.map(v => v.memory_id))].map(async id => {
      try { current.add((await get(`${base}/memories/${esc(id)}`, {view: 'basic'})).memory_version_id); } catch (e) { if (e.status !== 404) throw e; }
    }));
    clear(vbody, r.data.length ? r.data.map(v => h('tr', {dataset: {version: v.id}},
      h('td', null, h('span', {class: `badge op-${v.operation}`}, v.operation), current.has(v.id) ? h('span', {class: 'badge current'}, 'current') : null),
      h('td', {class: 'mono'}, v.redacted_at ? h('span', {class: 'badge redacted'}, 'redacted') : h('a', {href: here({memory: v.memory_id})}, v.path),
        h('span', {class: 'sub'}, v.id)),
      h('td', null, actor(v.created_by)),
      h('td', null, time(v.created_at)),
      h('td', null, v.redacted_at ? ['redacted ', time(v.redacted_at), v.redacted_by ? [' by ', actor(v.redacted_by)] : null]
        : current.has(v.id) ? null : twoClick('Redact', 'Click again to redact', {dataset: {redact: v.id}}, async () => {
          await post(`${base}/memory_versions/${esc(v.id)}/redact`, {});
          await versions.run();
        }))))
      : h('tr', null, h('td', {colspan: 5}, empty('No versions.'))));
    return r;
  });
  // A filter is a new address: the page, its links included, is drawn again with it.
  const filterVersions = () => { location.hash = here({vmem: vmem.value.trim(), vop: vop.value}); };
  vop.addEventListener('change', filterVersions);

  // The store's name and description.
  const name = text('store-edit-name', s.name);
  const desc = text('store-edit-description', s.description || '');
  const editForm = form('store-edit', [h('div', {class: 'filters'}, row('Name', name), row('Description', desc))], 'Save', async () => {
    const body = {};
    if (name.value !== s.name) body.name = name.value;
    if (desc.value !== (s.description || '')) body.description = desc.value;
    await post(base, body);
    toast('Saved.');
    await reload();
  }, null);

  await Promise.all([memories.run(), versions.run()]);
  const mount = `/mnt/memory/${slug(s.name, s.id)}`;
  clear(main,
    crumbs(h('a', {href: '#/memory'}, 'Memory stores'), ' / ', mono(s.id)),
    h('div', {class: 'page-head'}, h('h1', null, s.name || s.id), s.archived_at ? h('span', {class: 'badge', id: 'store-archived'}, 'archived') : null,
      h('span', {class: 'spacer'}),
      s.archived_at ? null : twoClick('Archive', 'Click again to archive: read and delete only', {id: 'archive-store'}, async () => {
        await post(`${base}/archive`, {});
        await reload();
      }),
      twoClick('Delete store', 'Click again to delete the store and its memories', {id: 'delete-store'}, async () => {
        await del(base);
        location.hash = '#/memory';
      })),
    s.description ? h('p', {class: 'lead'}, s.description) : null,
    h('dl', {class: 'facts'},
      fact('ID', {class: 'mono'}, s.id),
      fact('Mounted at', {class: 'mono', id: 'store-mount'}, mount),
      fact('Created', null, time(s.created_at)),
      fact('Updated', null, time(s.updated_at)),
      s.archived_at ? fact('Archived', null, time(s.archived_at)) : null),
    h('p', null, h('a', {href: `#/sessions?memory=${esc(s.id)}`, id: 'store-sessions'}, 'Sessions with this store →')),
    h('section', {class: 'card'}, h('h2', null, 'Memories'), dirs,
      h('div', {class: 'table-wrap'}, h('table', {class: 'list', id: 'memories'},
        h('thead', null, h('tr', null, h('th', null, 'Path'), h('th', null, 'Size'), h('th', null, 'SHA-256'), h('th', null, 'Updated'))), tbody)),
      memories.bar),
    memCard,
    s.archived_at ? null : h('section', {class: 'card'}, h('h2', null, 'New memory'), createForm),
    h('section', {class: 'card'}, h('h2', null, 'Versions'),
      h('form', {class: 'filters', onsubmit: e => { e.preventDefault(); filterVersions(); }},
        h('label', {class: 'field'}, h('span', null, 'Operation'), vop), h('label', {class: 'field'}, h('span', null, 'Memory'), vmem),
        h('button', {type: 'submit', id: 'ver-filter'}, 'Filter')),
      h('div', {class: 'table-wrap'}, h('table', {class: 'list', id: 'versions'},
        h('thead', null, h('tr', null, h('th', null, 'Operation'), h('th', null, 'Path'), h('th', null, 'By'), h('th', null, 'When'), h('th', null, ''))), vbody)),
      versions.bar),
    s.archived_at ? null : h('section', {class: 'card'}, h('h2', null, 'Edit the store'), editForm));
  if (opened) document.getElementById('memory-view').scrollIntoView({block: 'start'});
  return {keys: {r: reload}};
}
