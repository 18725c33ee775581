// Environments: the list and one environment.

import {h, clear, time, pretty, statusBadge} from './dom.js';
import {get, id as esc} from './api.js';
import {pagedList} from './agents.js';

export function environmentsPage(main, q) {
  return pagedList(main, {title: 'Environments', path: '/v1/environments', q, caption: 'Environments',
    emptyTitle: 'No environments yet.', emptyHint: 'Create one with POST /v1/environments or corral environments create.',
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

// imageCard shows the environment's image build: its status and, when it failed, what failed, why and the
// build's last output (the server's error message), as the sessions that need it report it.
function imageCard(img) {
  if (!img) return null;
  const er = img.status === 'failed' ? img.error || {message: 'the build failed'} : null;
  return h('section', {class: 'card', id: 'env-image'}, h('h2', null, 'Image'),
    h('dl', {class: 'facts'},
      h('div', null, h('dt', null, 'Status'), h('dd', null, statusBadge(img.status))),
      h('div', null, h('dt', null, 'Image'), h('dd', {class: 'mono'}, img.id || '')),
      h('div', null, h('dt', null, 'Since'), h('dd', null, time(img.updated_at)))),
    er ? h('div', {class: 'notice error', role: 'alert'},
      h('p', {class: 'error-msg'}, er.package ? `${er.manager} package ${er.package} failed to build` :
        er.manager ? `The ${er.manager} step failed` : 'The image failed to build'),
      h('pre', {class: 'json build-log'}, er.message || '')) : null,
    img.status === 'building' ? h('p', {class: 'meta'}, 'Building: sessions that need a sandbox wait for it.') : null);
}

export async function environmentPage(main, envID) {
  const e = await get(`/v1/environments/${esc(envID)}`);
  const c = e.config || {};
  clear(main,
    h('nav', {class: 'crumbs', 'aria-label': 'Breadcrumb'}, h('a', {href: '#/environments'}, 'Environments'), ' / ', h('span', {class: 'mono'}, e.id)),
    h('div', {class: 'page-head'}, h('h1', null, e.name || e.id)),
    e.description ? h('p', {class: 'lead'}, e.description) : null,
    h('dl', {class: 'facts'},
      h('div', null, h('dt', null, 'Type'), h('dd', null, c.type || '')),
      h('div', null, h('dt', null, 'Networking'), h('dd', null, (c.networking && c.networking.type) || 'default')),
      h('div', null, h('dt', null, 'Created'), h('dd', null, time(e.created_at))),
      h('div', null, h('dt', null, 'Updated'), h('dd', null, time(e.updated_at))),
      e.archived_at ? h('div', null, h('dt', null, 'Archived'), h('dd', null, time(e.archived_at))) : null),
    h('p', null, h('a', {href: `#/sessions?env=${esc(e.id)}`}, 'Sessions in this environment →')),
    imageCard(e.image),
    h('section', {class: 'card'}, h('h2', null, 'Configuration'), h('pre', {class: 'json'}, pretty(c))),
    Object.keys(e.metadata || {}).length ? h('section', {class: 'card'}, h('h2', null, 'Metadata'), h('pre', {class: 'json'}, pretty(e.metadata))) : null);
  return {keys: {}};
}
