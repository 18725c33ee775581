// Environments: the list and one environment.

import {h, clear, time, pretty} from './dom.js';
import {get, id as esc} from './api.js';
import {pagedList} from './agents.js';

export function environmentsPage(main, q) {
  return pagedList(main, {title: 'Environments', path: '/v1/environments', q, caption: 'Environments',
    emptyTitle: 'No environments yet.', emptyHint: 'Create one with POST /v1/environments or corral envs create.',
    columns: [
      ['Environment', e => [h('a', {href: `#/environments/${esc(e.id)}`, 'data-row': ''}, e.name || e.id), h('span', {class: 'sub mono'}, e.id)], 'name'],
      ['Type', e => (e.config && e.config.type) || ''],
      ['Networking', e => (e.config && e.config.networking && e.config.networking.type) || '', 'opt'],
      ['Updated', e => time(e.updated_at), 'opt'],
    ]});
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
    h('section', {class: 'card'}, h('h2', null, 'Configuration'), h('pre', {class: 'json'}, pretty(c))),
    Object.keys(e.metadata || {}).length ? h('section', {class: 'card'}, h('h2', null, 'Metadata'), h('pre', {class: 'json'}, pretty(e.metadata))) : null);
  return {keys: {}};
}
