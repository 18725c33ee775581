// Files: the Files API's files (uploads and sessions' outputs), with an upload form, downloads and deletes.
// A download goes through fetch (the API key is a header, which a plain link cannot send) into a blob.

import {h, time, toast, mono} from './dom.js';
import {upload, download, del, id as esc} from './api.js';
import {pagedList} from './agents.js';
import {row, text, form, twoClick, FormError} from './forms.js';

export function fmtBytes(n) {
  if (!isFinite(n)) return '';
  if (n < 1024) return `${n} B`;
  if (n < 1 << 20) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1 << 30) return `${(n / (1 << 20)).toFixed(1)} MiB`;
  return `${(n / (1 << 30)).toFixed(2)} GiB`;
}

export async function filesPage(main, q) {
  const scope = q.get('scope_id') || '';
  let reload = async () => {};
  const file = h('input', {type: 'file', id: 'file-input', name: 'file'});
  const expires = text('file-expires', '', {inputmode: 'numeric', placeholder: 'never', class: 'mono'});
  async function send() {
    if (!file.files.length) throw new FormError('Choose a file to upload.');
    const fd = new FormData();
    fd.append('file', file.files[0], file.files[0].name);
    if (expires.value.trim()) fd.append('expires_in_seconds', expires.value.trim());
    const f = await upload('/v1/files', fd);
    toast(`Uploaded ${f.filename}.`);
    file.value = '';
    expires.value = '';
    await reload();
  }
  const uploadForm = scope ? h('p', {class: 'notice'}, 'The outputs of session ', h('a', {href: `#/sessions/${esc(scope)}`, class: 'mono'}, scope), '. ',
    h('a', {href: '#/files'}, 'All files')) :
    form('upload-form', [h('div', {class: 'filters'}, row('File', file), row('Expires in (seconds, optional)', expires))], 'Upload', send, null);
  const res = await pagedList(main, {title: scope ? 'Session outputs' : 'Files', path: '/v1/files', q, caption: 'Files', noArchived: true,
    params: {scope_id: scope || undefined}, before: uploadForm,
    emptyTitle: scope ? 'This session has no outputs.' : 'No files yet.', emptyHint: scope ? null : 'Upload one above, or with POST /v1/files.',
    columns: [
      ['File', f => [h('span', {class: 'filename', 'data-row': '', tabindex: '0'}, f.filename), h('span', {class: 'sub mono'}, f.id)], 'name'],
      ['Size', f => fmtBytes(f.size_bytes)],
      ['Type', f => mono(f.mime_type || ''), 'opt'],
      ['From', f => f.scope && f.scope.type === 'session' ? h('a', {href: `#/sessions/${esc(f.scope.id)}`, class: 'mono'}, f.scope.id) : 'upload', 'opt'],
      ['Created', f => time(f.created_at), 'opt'],
      ['Expires', f => f.expires_at ? time(f.expires_at) : 'never', 'opt'],
      ['', f => h('span', {class: 'row-actions'},
        f.downloadable ? h('button', {type: 'button', class: 'small', dataset: {download: f.id}, onclick: () =>
          download(`/v1/files/${esc(f.id)}/content`, f.filename).catch(e => toast(e.message, 'error'))}, 'Download') : h('span', {class: 'meta'}, 'not downloadable'),
        deleteButton(f))],
    ]});
  function deleteButton(f) {
    return twoClick('Delete', 'Click again to delete', {dataset: {delete: f.id}}, async () => {
      await del(`/v1/files/${esc(f.id)}`);
      await reload();
    });
  }
  reload = res.reload;
  return res;
}
