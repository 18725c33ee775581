// Environments: the list, one environment with its image build, and the form that creates or edits one.

import {h, clear, time, pretty, statusBadge, fmtTime, fact, crumbs, mono, meta} from './dom.js';
import {get, post, del, id as esc} from './api.js';
import {pagedList} from './agents.js';
import {row, text, area, form, parseJSON, json, words, lines, metadataPatch, twoClick, gone, once, FormError} from './forms.js';

export function environmentsPage(main, q) {
  return pagedList(main, {title: 'Environments', path: '/v1/environments', q, caption: 'Environments',
    actions: h('a', {class: 'button primary', href: '#/environments/new', id: 'new-environment'}, 'New environment'),
    emptyTitle: 'No environments yet.', emptyHint: 'Create one with New environment, POST /v1/environments or corral envs create.',
    columns: [
      ['Environment', e => [h('a', {href: `#/environments/${esc(e.id)}`, 'data-row': ''}, e.name || e.id), h('span', {class: 'sub mono'}, e.id)], 'name'],
      ['Type', e => (e.config && e.config.type) || ''],
      ['Networking', e => (e.config && e.config.networking && e.config.networking.type) || '', 'opt'],
      ['Image', e => e.image ? [statusBadge(e.image.status), imageCulprit(e.image)] : ''],
      ['Updated', e => time(e.updated_at), 'opt'],
    ]});
}

// imageCulprit names the package whose build failed, if one did.
function imageCulprit(img) {
  const er = img.status === 'failed' && img.error;
  if (!er) return null;
  return h('span', {class: 'sub stop bad'}, er.package ? `${er.manager} ${er.package}` : er.manager || 'the build failed');
}

const managers = ['apt', 'pip', 'npm', 'cargo', 'gem', 'go'];

// imageCard shows the environment's image build: its status, and when it failed, the package at fault and the
// build's last output (the API's error message carries the log's tail).
function imageCard(img) {
  if (!img) {
    return h('section', {class: 'card', id: 'env-image'}, h('h2', null, 'Image'),
      meta('No image: a self-hosted environment, or a server that builds none (sandboxes run on its base).'));
  }
  const err = img.error;
  return h('section', {class: 'card', id: 'env-image'},
    h('div', {class: 'section-head'}, h('h2', null, 'Image'), h('span', {id: 'image-status'}, statusBadge(img.status))),
    h('dl', {class: 'facts'},
      fact('Image', {class: 'mono'}, img.id || ''),
      fact('Since', null, h('time', {datetime: img.updated_at || '', title: fmtTime(img.updated_at)}, fmtTime(img.updated_at)))),
    img.status === 'building' ? meta('Building: this page follows the build.') : null,
    err ? [
      h('p', {class: 'error-msg'}, err.package ? `${err.manager} package ${err.package} failed to build` :
        err.manager ? `The ${err.manager} step failed` : 'The image failed to build'),
      h('h3', null, 'Build log'),
      h('pre', {class: 'json build-log', id: 'image-log'}, err.message || ''),
    ] : null);
}

export async function environmentPage(main, envID) {
  const e = await get(`/v1/environments/${esc(envID)}`);
  const c = e.config || {};
  const pk = c.packages || {};
  const listed = managers.filter(m => (pk[m] || []).length);
  const image = imageCard(e.image);
  clear(main,
    crumbs(h('a', {href: '#/environments'}, 'Environments'), ' / ', mono(e.id)),
    h('div', {class: 'page-head'}, h('h1', null, e.name || e.id), h('span', {class: 'spacer'}),
      e.archived_at ? null : [h('a', {class: 'button', href: `#/environments/${esc(e.id)}/edit`, id: 'edit-environment'}, 'Edit'),
        gone('Archive', `/v1/environments/${esc(e.id)}`, '#/environments', 'archive-environment')],
      gone('Delete', `/v1/environments/${esc(e.id)}`, '#/environments', 'delete-environment')),
    e.description ? h('p', {class: 'lead'}, e.description) : null,
    h('dl', {class: 'facts'},
      fact('Type', null, c.type || ''),
      c.type === 'self_hosted' ? null : fact('Networking', null, (c.networking && c.networking.type) || 'default'),
      fact('Created', null, time(e.created_at)),
      fact('Updated', null, time(e.updated_at)),
      e.archived_at ? fact('Archived', null, time(e.archived_at)) : null),
    h('p', null, h('a', {href: `#/sessions?env=${esc(e.id)}`}, 'Sessions in this environment →')),
    listed.length ? h('section', {class: 'card'}, h('h2', null, 'Packages'),
      h('ul', {class: 'plain', id: 'packages'}, listed.map(m => h('li', null, h('strong', null, m), ' ', mono(pk[m].join(' ')))))) : null,
    c.type === 'cloud' || e.image ? image : null,
    c.type === 'self_hosted' ? await keysCard(e) : null,
    h('section', {class: 'card'}, h('h2', null, 'Configuration'), h('pre', {class: 'json'}, pretty(c))),
    Object.keys(e.metadata || {}).length ? h('section', {class: 'card'}, h('h2', null, 'Metadata'), h('pre', {class: 'json'}, pretty(e.metadata))) : null);
  // A build in progress: read the environment again until its image is ready or failed.
  let timer = null;
  let shown = image;
  const poll = async () => {
    let cur;
    try { cur = await get(`/v1/environments/${esc(envID)}`); } catch { cur = null; }
    if (!main.isConnected) return;
    if (cur && cur.image) {
      const next = imageCard(cur.image);
      shown.replaceWith(next);
      shown = next;
      if (cur.image.status !== 'building') return;
    }
    timer = setTimeout(poll, 2000);
  };
  if (e.image && e.image.status === 'building') timer = setTimeout(poll, 2000);
  return {keys: {}, cleanup: () => clearTimeout(timer)};
}

// environmentEditPage creates an environment (envID empty) or updates one. The config's fields are the API's:
// the type (fixed once created), networking (unrestricted, or limited to hosts) and the packages each manager
// installs into the image; the config is sent whole when any of it changed, and the API validates it.
export async function environmentEditPage(main, envID) {
  const e = envID ? await get(`/v1/environments/${esc(envID)}`) : null;
  const c = (e && e.config) || {type: 'cloud'};
  const n = c.networking || {type: 'unrestricted'};
  const pk = c.packages || {};
  const f = {
    name: text('env-name', e ? e.name : ''),
    description: text('env-description', e ? (e.description || '') : ''),
    type: h('select', {id: 'env-type', name: 'env-type', disabled: !!e},
      h('option', {value: 'cloud'}, 'cloud: Corral runs the sandboxes'), h('option', {value: 'self_hosted'}, 'self_hosted: your workers run them')),
    networking: h('select', {id: 'env-networking', name: 'env-networking'},
      h('option', {value: 'unrestricted'}, 'unrestricted'), h('option', {value: 'limited'}, 'limited: only the hosts listed')),
    hosts: area('env-hosts', (n.allowed_hosts || []).join('\n'), 3, {class: 'mono', placeholder: 'api.example.com\n*.githubusercontent.com'}),
    mcp: h('input', {type: 'checkbox', id: 'env-allow-mcp', checked: !!n.allow_mcp_servers}),
    pm: h('input', {type: 'checkbox', id: 'env-allow-pm', checked: !!n.allow_package_managers}),
    metadata: area('env-metadata', json(e && e.metadata), 3, {class: 'mono', placeholder: '{"team": "support"}'}),
  };
  f.type.value = c.type;
  f.networking.value = n.type;
  const pkg = {};
  for (const m of managers) pkg[m] = text(`env-pkg-${m}`, (pk[m] || []).join(' '), {class: 'mono'});
  const limited = h('fieldset', {class: 'sub-fields', id: 'env-limited'}, h('legend', null, 'Limited networking'),
    row('Allowed hosts (one a line)', f.hosts),
    h('label', {class: 'check'}, f.mcp, ' Allow the agent\'s MCP servers'),
    h('label', {class: 'check'}, f.pm, ' Allow the package managers\' registries'));
  const cloud = h('div', {id: 'env-cloud'},
    row('Networking', f.networking),
    limited,
    h('fieldset', {class: 'sub-fields'}, h('legend', null, 'Packages (built into the image; names separated by spaces)'),
      managers.map(m => row(m, pkg[m]))));
  const sync = () => {
    cloud.hidden = f.type.value !== 'cloud';
    limited.hidden = f.networking.value !== 'limited';
  };
  f.type.addEventListener('change', sync);
  f.networking.addEventListener('change', sync);
  sync();
  const config = () => {
    if (f.type.value !== 'cloud') return {type: f.type.value};
    const net = {type: f.networking.value};
    if (net.type === 'limited') {
      net.allowed_hosts = lines(f.hosts.value);
      net.allow_mcp_servers = f.mcp.checked;
      net.allow_package_managers = f.pm.checked;
    }
    const packages = {type: 'packages'};
    for (const m of managers) packages[m] = words(pkg[m].value);
    return {type: 'cloud', networking: net, packages};
  };
  const config0 = config(); // the config as the form shows it before any change
  async function send() {
    const metadata = parseJSON('Metadata', f.metadata.value);
    if (metadata !== undefined && (metadata === null || typeof metadata !== 'object' || Array.isArray(metadata))) {
      throw new FormError('Metadata: a JSON object of strings.');
    }
    if (!e) {
      const body = {name: f.name.value, config: config()};
      if (f.description.value) body.description = f.description.value;
      if (metadata !== undefined) body.metadata = metadata;
      const created = await post('/v1/environments', body);
      location.hash = `#/environments/${esc(created.id)}`;
      return;
    }
    const body = {};
    if (f.name.value !== e.name) body.name = f.name.value;
    if (f.description.value !== (e.description || '')) body.description = f.description.value;
    const cfg = config();
    if (JSON.stringify(cfg) !== JSON.stringify(config0)) body.config = cfg;
    const md = metadataPatch(e.metadata || {}, metadata || {});
    if (md) body.metadata = md;
    await post(`/v1/environments/${esc(e.id)}`, body);
    location.hash = `#/environments/${esc(e.id)}`;
  }
  const back = e ? `#/environments/${esc(e.id)}` : '#/environments';
  clear(main,
    crumbs(h('a', {href: '#/environments'}, 'Environments'), ' / ',
      e ? [h('a', {href: back, class: 'mono'}, e.id), ' / edit'] : 'new'),
    h('div', {class: 'page-head'}, h('h1', null, e ? `Edit ${e.name || e.id}` : 'New environment')),
    form('env-form', [
      row('Name', f.name),
      row('Description', f.description),
      row('Type', f.type, e ? 'An environment keeps its type.' : null),
      cloud,
      row('Metadata (JSON object)', f.metadata),
    ], e ? 'Save' : 'Create environment', send, back));
  f.name.focus();
  return {keys: {}};
}

// keysCard is a self-hosted environment's worker keys: the list (a key's last four characters only), a form
// that creates one and shows its secret once (the API never returns it again, and the console keeps it
// nowhere: leaving the page forgets it), and a revoke button that asks for a second click.
async function keysCard(e) {
  const list = h('div', {id: 'env-keys'});
  const shown = h('div', {id: 'new-key', hidden: true});
  const name = text('key-name', '', {placeholder: 'worker-1'});
  async function load() {
    const keys = await get(`/v1/environments/${esc(e.id)}/keys`);
    clear(list, keys.data.length ? h('table', {class: 'list'},
      h('thead', null, h('tr', null, h('th', null, 'Key'), h('th', null, 'Ends with'), h('th', null, 'Created'), h('th', null, 'State'), h('th', null, ''))),
      h('tbody', null, keys.data.map(k => h('tr', {dataset: {key: k.id}},
        h('td', null, k.name || h('span', {class: 'meta'}, 'unnamed'), h('span', {class: 'sub mono'}, k.id)),
        h('td', {class: 'mono'}, `…${k.hint}`),
        h('td', null, time(k.created_at)),
        h('td', null, k.revoked_at ? h('span', {class: 'badge status-terminated'}, 'revoked') : h('span', {class: 'badge status-idle'}, 'active')),
        h('td', null, k.revoked_at ? null : revokeButton(k))))))
      : meta('No keys: a worker needs one to take this environment\'s work.'));
  }
  function revokeButton(k) {
    return twoClick('Revoke', 'Click again to revoke', {dataset: {revoke: k.id}}, async () => {
      await del(`/v1/environments/${esc(e.id)}/keys/${esc(k.id)}`);
      await load();
    });
  }
  async function create() {
    const k = await post(`/v1/environments/${esc(e.id)}/keys`, name.value ? {name: name.value} : {});
    clear(shown, once(`Key ${k.name || k.id} created.`, k.key, 'key'));
    shown.hidden = false;
    name.value = '';
    await load();
  }
  await load();
  return h('section', {class: 'card', id: 'keys'}, h('h2', null, 'Worker keys'),
    meta('A worker (corral worker) authenticates with an environment key to take this environment\'s sessions.'),
    shown,
    form('key-form', [row('New key\'s name', name)], 'Create key', create, null),
    list);
}
