// Skills: the list, a skill with its versions, and the uploads that create a skill or add a version. An upload
// is the skill's folder (each file under its path, my-skill/SKILL.md, …) or one zip; the API reads SKILL.md
// and refuses what it cannot use, and its message is shown as it is.

import {h, clear, time, empty, toast, fact, crumbs, mono, meta} from './dom.js';
import {get, upload, download, del, id as esc} from './api.js';
import {pagedList} from './agents.js';
import {row, text, form, twoClick, FormError} from './forms.js';

// skillFiles is the multipart body of an upload: the files of the folder chosen (by their paths in it) or the
// files chosen (a zip, or a SKILL.md and its files).
function skillFiles(folder, picked, displayName) {
  const fd = new FormData();
  if (displayName !== undefined && displayName !== '') fd.append('display_name', displayName);
  const list = folder.files.length ? [...folder.files] : [...picked.files];
  if (!list.length) throw new FormError('Choose the skill\'s folder, or a zip of it.');
  for (const f of list) fd.append('files[]', f, f.webkitRelativePath || f.name);
  return fd;
}

function uploadInputs(prefix) {
  return {
    folder: h('input', {type: 'file', id: `${prefix}-folder`, webkitdirectory: true, multiple: true}),
    picked: h('input', {type: 'file', id: `${prefix}-files`, multiple: true, accept: '.zip,.md,application/zip,text/*'}),
  };
}

export function skillsPage(main, q) {
  const name = text('skill-name', '', {placeholder: 'from SKILL.md'});
  const up = uploadInputs('skill');
  async function send() {
    const s = await upload('/v1/skills', skillFiles(up.folder, up.picked, name.value.trim()));
    toast(`Created ${s.display_name}.`);
    location.hash = `#/skills/${esc(s.id)}`;
  }
  return pagedList(main, {title: 'Skills', path: '/v1/skills', q, caption: 'Skills', noArchived: true,
    before: form('skill-form', [h('div', {class: 'filters'}, row('Skill folder', up.folder), row('or a zip (or its files)', up.picked),
      row('Display name (optional)', name))], 'Upload a new skill', send, null),
    emptyTitle: 'No skills yet.', emptyHint: 'Upload a folder with a SKILL.md, or a zip of one.',
    columns: [
      ['Skill', s => [h('a', {href: `#/skills/${esc(s.id)}`, 'data-row': ''}, s.display_name || s.id), h('span', {class: 'sub mono'}, s.id)], 'name'],
      ['Latest version', s => mono(s.latest_version_id || '')],
      ['Source', s => (s.source && s.source.type) || '', 'opt'],
      ['Updated', s => time(s.updated_at), 'opt'],
    ]});
}

export async function skillPage(main, skillID) {
  const s = await get(`/v1/skills/${esc(skillID)}`);
  const versions = h('div', {id: 'skill-versions'});
  const latestFact = h('dd', {class: 'mono', id: 'skill-latest'}, s.latest_version_id || '');
  async function load() {
    const vs = await get(`/v1/skills/${esc(skillID)}/versions`, {limit: 100});
    const latest = vs.data.length ? vs.data[0].id : '';
    latestFact.textContent = latest;
    clear(versions, vs.data.length ? h('table', {class: 'list'},
      h('thead', null, h('tr', null, h('th', null, 'Version'), h('th', null, 'Name'), h('th', null, 'Description'), h('th', null, 'Created'), h('th', null, ''))),
      h('tbody', null, vs.data.map(v => h('tr', {dataset: {version: v.id}},
        h('td', {class: 'mono'}, v.id, v.id === latest ? h('span', {class: 'badge current'}, 'latest') : null),
        h('td', {class: 'mono'}, v.name),
        h('td', null, v.description),
        h('td', null, time(v.created_at)),
        h('td', null, h('span', {class: 'row-actions'},
          h('button', {type: 'button', class: 'small', dataset: {download: v.id}, onclick: () =>
            download(`/v1/skills/${esc(skillID)}/versions/${esc(v.id)}/content`, `${v.name}-${v.id}.zip`).catch(e => toast(e.message, 'error'))}, 'Download'),
          twoClick('Delete', 'Click again to delete', {dataset: {deleteVersion: v.id}}, async () => {
            await del(`/v1/skills/${esc(skillID)}/versions/${esc(v.id)}`);
            await load();
          })))))))
      : empty('No versions.', 'Upload one below, or delete the skill.'));
  }
  const up = uploadInputs('version');
  async function send() {
    const v = await upload(`/v1/skills/${esc(skillID)}/versions`, skillFiles(up.folder, up.picked));
    toast(`Version ${v.id} uploaded.`);
    up.folder.value = '';
    up.picked.value = '';
    await load();
  }
  await load();
  clear(main,
    crumbs(h('a', {href: '#/skills'}, 'Skills'), ' / ', mono(s.id)),
    h('div', {class: 'page-head'}, h('h1', null, s.display_name || s.id), h('span', {class: 'spacer'}),
      twoClick('Delete skill', 'Click again to delete the skill', {id: 'delete-skill'}, async () => {
        await del(`/v1/skills/${esc(skillID)}`);
        location.hash = '#/skills';
      })),
    h('dl', {class: 'facts'},
      fact('Source', null, (s.source && s.source.type) || ''),
      h('div', null, h('dt', null, 'Latest'), latestFact),
      fact('Created', null, time(s.created_at)),
      fact('Updated', null, time(s.updated_at))),
    meta('An agent uses it as {"type": "custom", "skill_id": "', mono(s.id), '", "version": "latest"} in its skills.'),
    h('section', {class: 'card'}, h('h2', null, 'Versions'), versions),
    h('section', {class: 'card'}, h('h2', null, 'Upload a new version'),
      form('version-form', [h('div', {class: 'filters'}, row('Skill folder', up.folder), row('or a zip (or its files)', up.picked))], 'Upload version', send, null)));
  return {keys: {r: load}};
}
