// Webhook endpoints: the organization's URLs that receive signed events. The list with a form that creates one
// (its signing secret shown this once), and an endpoint with its state, its fields and events to edit, its
// secret to regenerate, and its deliveries (Corral's own list: what was sent, and how it went).

import {h, clear, time, fmtTime, statusBadge, fact, crumbs, mono, empty, toast, to} from './dom.js';
import {get, post, id as esc} from './api.js';
import {pagedList, idPages} from './agents.js';
import {cursorPager} from './memory.js';
import {row, text, form, twoClick, gone, once} from './forms.js';

const P = '/v1/organizations/webhooks';
// EVENTS are the event types an endpoint may enable (apitype.WebhookEventTypes), by the object they are about.
const EVENTS = {
  session: 'created archived deleted updated requires_action budget_reached status_run_started status_idled status_rescheduled status_terminated thread_created thread_idled thread_terminated outcome_evaluation_ended',
  vault: 'created archived deleted', vault_credential: 'created archived deleted refresh_failed', agent: 'created updated archived',
  deployment: 'created updated paused unpaused archived', deployment_run: 'started succeeded failed',
  environment: 'created updated archived deleted', memory_store: 'created archived deleted'};
// PAGES are the console's pages of the objects an event may name, by their ids' prefixes.
const PAGES = {sesn: 'sessions', depl: 'deployments', drun: 'deployment_runs', agent: 'agents', env: 'environments', vlt: 'vaults', memstore: 'memory'};
const object = id => (PAGES[id.split('_')[0]] ? to(PAGES[id.split('_')[0]], id) : mono(id));

// endpointForm is the form of an endpoint's URL, name, description and events; send(body) posts them.
function endpointForm(id, e, label, send) {
  const url = text(`${id}-url`, e.url, {placeholder: 'https://'}), name = text(`${id}-name`, e.name), desc = text(`${id}-description`, e.description);
  const on = new Set(e.enabled_events);
  const f = form(id, [row('URL', url), row('Name', name), row('Description', desc),
    h('div', {class: 'form-row'}, h('label', null, 'Events'), Object.entries(EVENTS).map(([p, ts]) => h('fieldset', {class: 'events'}, h('legend', null, p),
      ts.split(' ').map(t => h('label', {class: 'check'}, h('input', {type: 'checkbox', value: `${p}.${t}`, checked: on.has(`${p}.${t}`)}), t)))))],
  label, () => send({url: url.value, name: name.value, description: desc.value,
    enabled_events: [...f.querySelectorAll(':checked')].map(c => c.value)}), null);
  return f;
}

export async function webhooksPage(main, q) {
  const shown = h('div', {id: 'new-secret'});
  const details = h('details', {class: 'card', id: 'new-webhook'}, h('summary', null, 'New endpoint'));
  const f = endpointForm('webhook-form', {}, 'Create endpoint', async body => {
    const e = await post(P, body);
    clear(shown, once(`Endpoint ${e.name || e.id} created; its signing secret:`, e.signing_secret, 'secret'));
    f.reset();
    details.open = false;
    await list.reload();
  });
  details.append(f);
  const list = await pagedList(main, {title: 'Webhooks', path: P, q, caption: 'Webhook endpoints', noArchived: true, read: idPages(P),
    before: [shown, details],
    emptyTitle: 'No webhook endpoints yet.', emptyHint: 'An endpoint receives signed events (a session idled, a deployment run failed) at its URL.',
    columns: [
      ['Endpoint', e => [h('a', {href: `#/webhooks/${esc(e.id)}`, 'data-row': ''}, e.name || e.id), h('span', {class: 'sub mono'}, e.id)], 'name'],
      ['URL', e => mono(e.url)],
      ['State', e => [statusBadge(e.state), e.disabled_reason ? h('span', {class: 'sub'}, e.disabled_reason) : null]],
      ['Events', e => String(e.enabled_events.length)],
      ['Updated', e => time(e.updated_at), 'opt'],
    ]});
  return list;
}

export async function webhookPage(main, whID) {
  const e = await get(`${P}/${esc(whID)}`);
  const base = `${P}/${esc(e.id)}`;
  const again = () => webhookPage(main, whID);
  const shown = h('div', {id: 'new-secret'});
  const on = e.state === 'enabled';
  const tbody = h('tbody');
  const deliveries = cursorPager('deliveries', async token => {
    const r = await get(`${base}/deliveries`, {limit: 20, page: token || undefined});
    clear(tbody, r.data.length ? r.data.map(d => h('tr', {dataset: {event: d.event.id}},
      h('td', null, d.event.data.type, h('span', {class: 'sub mono'}, d.event.id)),
      h('td', null, object(d.event.data.id)),
      h('td', null, statusBadge(d.state), d.next_attempt_at ? h('span', {class: 'sub'}, `next attempt ${fmtTime(d.next_attempt_at)}`) : null),
      h('td', {class: 'num'}, String(d.attempts)),
      h('td', null, d.last_status || (d.last_status === 0 ? 'no answer' : ''), d.last_error ? h('span', {class: 'sub'}, d.last_error) : null),
      h('td', null, time(d.created_at))))
      : h('tr', null, h('td', {colspan: 6}, empty('No deliveries yet.', 'The events of the types this endpoint enabled are delivered to it as they happen.'))));
    return r;
  });
  clear(main,
    crumbs(h('a', {href: '#/webhooks'}, 'Webhooks'), ' / ', mono(e.id)),
    h('div', {class: 'page-head'}, h('h1', null, e.name || e.id), h('span', {id: 'webhook-state'}, statusBadge(e.state)), h('span', {class: 'spacer'}),
      h('button', {type: 'button', id: 'toggle-webhook', onclick: async () => { await post(base, {state: on ? 'disabled' : 'enabled'}); await again(); }}, on ? 'Disable' : 'Enable'),
      twoClick('Regenerate secret', 'Click again to replace the secret', {id: 'regenerate-secret'}, async () => {
        const r = await post(`${base}/regenerate_signing_secret`, {});
        await again();
        clear(main.querySelector('#new-secret'), once('A new signing secret: deliveries are signed with it from now on.', r.signing_secret, 'secret'));
      }),
      gone('Delete', base, '#/webhooks', 'delete-webhook')),
    e.disabled_reason ? h('div', {class: 'notice error', role: 'alert', id: 'disabled-reason'}, h('strong', null, 'Disabled by the server: '), e.disabled_reason) : null,
    shown,
    e.description ? h('p', {class: 'lead'}, e.description) : null,
    h('dl', {class: 'facts'},
      fact('URL', {class: 'mono'}, e.url),
      fact('Events', null, `${e.enabled_events.length} enabled`),
      fact('Created', null, time(e.created_at)),
      fact('Updated', null, time(e.updated_at))),
    h('section', {class: 'card'}, h('h2', null, 'Deliveries'),
      h('table', {class: 'list', id: 'deliveries'}, h('thead', null, h('tr', null, ['Event', 'Object', 'State', 'Attempts', 'Last answer', 'Created'].map(c => h('th', null, c)))), tbody),
      deliveries.bar),
    h('section', {class: 'card'}, h('h2', null, 'Edit'), endpointForm('webhook-edit', e, 'Save', async body => {
      await post(base, body);
      toast('Saved.');
      await again();
    })));
  await deliveries.run();
  return {keys: {r: again}};
}
