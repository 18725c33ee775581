// Deployments: the list, a form that creates one, and a deployment with its next runs, why it is paused, Run now
// (the API carries the run out before it answers: its session or its error), Pause, Unpause, Archive, and its
// runs, newest first, filtered by whether they failed; a run's page.

import {h, clear, time, fmtTime, statusBadge, fact, crumbs, mono, meta, empty, to} from './dom.js';
import {get, post, id as esc} from './api.js';
import {pagedList} from './agents.js';
import {cursorPager} from './memory.js';
import {row, text, area, form, words, gone} from './forms.js';

const P = '/v1/deployments';
const sched = s => (s ? `${s.expression} (${s.timezone})` : 'none: by hand only');
const next = d => ((d.schedule || {}).upcoming_runs_at || [])[0];
// why is a paused deployment's reason: by hand, or the type of the run error that would repeat.
const why = r => (!r ? '' : r.type === 'error' ? `error: ${(r.error || {}).type}` : r.type);
const status = d => [statusBadge(d.status), d.status === 'paused' ? ` (${why(d.paused_reason)})` : '',
  d.archived_at ? h('span', {class: 'badge'}, 'archived') : null];
const trigger = r => (r.trigger_context.type === 'schedule' ? `schedule at ${fmtTime(r.trigger_context.scheduled_at)}` : r.trigger_context.type);
// outcome is what a run made: its session, or its error.
const outcome = r => (r.session_id ? to('sessions', r.session_id)
  : r.error ? [h('strong', null, `${r.error.type}: `), r.error.message] : 'pending');

export function deploymentsPage(main, q) {
  return pagedList(main, {title: 'Deployments', path: P, q, caption: 'Deployments',
    actions: h('a', {class: 'button primary', href: '#/deployments/new', id: 'new-deployment'}, 'New deployment'),
    emptyTitle: 'No deployments yet.', emptyHint: 'A deployment starts sessions of an agent on a cron schedule, or when run by hand.',
    columns: [
      ['Deployment', d => [h('a', {href: `#/deployments/${esc(d.id)}`, 'data-row': ''}, d.name || d.id), h('span', {class: 'sub mono'}, d.id)], 'name'],
      ['Agent', d => to('agents', d.agent.id)],
      ['Schedule', d => sched(d.schedule)],
      ['Status', status],
      ['Next run', d => fmtTime(next(d)) || '—'],
      ['Last run', d => time(d.schedule?.last_run_at), 'opt'],
    ]});
}

export async function deploymentNewPage(main) {
  const [agents, envs] = await Promise.all(['agents', 'environments'].map(k => get(`/v1/${k}`, {limit: 100})));
  const pick = (id, l) => h('select', {id, name: id}, l.data.map(o => h('option', {value: o.id}, `${o.name || o.id} (${o.id})`)));
  const f = {name: text('d-name', ''), agent: pick('d-agent', agents), env: pick('d-env', envs), msg: area('d-message', '', 4),
    cron: text('d-cron', '', {placeholder: '0 9 * * 1-5'}), tz: text('d-tz', Intl.DateTimeFormat().resolvedOptions().timeZone), vaults: text('d-vaults', '')};
  async function send() {
    const body = {name: f.name.value, agent: f.agent.value, environment_id: f.env.value,
      initial_events: [{type: 'user.message', content: [{type: 'text', text: f.msg.value}]}]};
    if (f.cron.value.trim()) body.schedule = {type: 'cron', expression: f.cron.value.trim(), timezone: f.tz.value.trim()};
    if (words(f.vaults.value).length) body.vault_ids = words(f.vaults.value);
    const d = await post(P, body);
    location.hash = `#/deployments/${esc(d.id)}`;
  }
  clear(main, crumbs(h('a', {href: '#/deployments'}, 'Deployments'), ' / new'), h('div', {class: 'page-head'}, h('h1', null, 'New deployment')),
    form('deployment-form', [row('Name', f.name), row('Agent', f.agent, 'Each run starts a session of its latest version.'),
      row('Environment', f.env), row('Message', f.msg, 'The user.message each run\'s session starts with.'),
      row('Schedule (optional)', f.cron, 'Cron, five fields: minute hour day month weekday. Blank: it runs only by hand.'),
      row('Timezone', f.tz), row('Vault ids (optional)', f.vaults, 'Separated by spaces or commas.')], 'Create deployment', send, '#/deployments'));
  return {keys: {}};
}

// deploymentPage: q's error (true, false) filters the runs, so that the filtered list can be linked to.
export async function deploymentPage(main, deplID, q) {
  const d = await get(`${P}/${esc(deplID)}`);
  const base = `${P}/${esc(d.id)}`;
  const again = () => deploymentPage(main, deplID, q);
  const r = d.paused_reason;
  const result = h('div', {id: 'run-result'});
  // Run now: the API answers once the run has its session or its error; the page is drawn again (a run that
  // failed may have paused the deployment) with the run's outcome.
  const run = h('button', {type: 'button', class: 'primary', id: 'run-now', onclick: async () => {
    run.disabled = true;
    run.textContent = 'Running…';
    let note;
    try {
      const x = await post(`${base}/run`, {});
      note = h('div', {class: x.error ? 'notice error' : 'notice', role: 'status'}, 'Run ', to('deployment_runs', x.id), ': ', outcome(x));
    } catch (e) {
      note = h('div', {class: 'notice error', role: 'alert'}, e.message);
    }
    await again();
    clear(main.querySelector('#run-result'), note);
  }}, 'Run now');
  const act = (label, path) => h('button', {type: 'button', id: path, onclick: async () => { await post(`${base}/${path}`, {}); await again(); }}, label);
  const hasError = h('select', {id: 'runs-error', 'aria-label': 'Runs', onchange: () => { location.hash = `#/deployments/${esc(d.id)}${hasError.value ? `?error=${hasError.value}` : ''}`; }},
    [['', 'All runs'], ['true', 'Failed'], ['false', 'Succeeded']].map(([v, t]) => h('option', {value: v, selected: v === (q.get('error') || '')}, t)));
  const tbody = h('tbody');
  const runs = cursorPager('runs', async token => {
    const l = await get('/v1/deployment_runs', {deployment_id: d.id, has_error: hasError.value, limit: 20, page: token || undefined});
    clear(tbody, l.data.length ? l.data.map(x => h('tr', {dataset: {run: x.id}}, h('td', null, h('a', {href: `#/deployment_runs/${esc(x.id)}`, 'data-row': ''}, x.id)),
      h('td', null, trigger(x)), h('td', null, time(x.created_at)), h('td', null, outcome(x))))
      : h('tr', null, h('td', {colspan: 4}, empty('No runs.'))));
    return l;
  });
  const up = (d.schedule || {}).upcoming_runs_at || [];
  clear(main,
    crumbs(h('a', {href: '#/deployments'}, 'Deployments'), ' / ', mono(d.id)),
    h('div', {class: 'page-head'}, h('h1', null, d.name || d.id), h('span', {id: 'deployment-status'}, status(d)), h('span', {class: 'spacer'}),
      d.archived_at ? null : [run, d.status === 'paused' ? act('Unpause', 'unpause') : act('Pause', 'pause'), gone('Archive', base, '#/deployments', 'archive-deployment')]),
    r ? h('div', {class: r.type === 'error' ? 'notice error' : 'notice', id: 'paused-reason', role: 'status'},
      h('strong', null, r.type === 'error' ? `Paused after a run failed with ${(r.error || {}).type}. ` : 'Paused by hand. '),
      'No scheduled run starts until it is unpaused; Run now still runs it.') : null,
    result,
    d.description ? h('p', {class: 'lead'}, d.description) : null,
    h('dl', {class: 'facts'},
      fact('Agent', null, to('agents', d.agent.id), ` v${d.agent.version}`),
      fact('Environment', null, to('environments', d.environment_id)),
      fact('Schedule', {id: 'deployment-schedule'}, sched(d.schedule)),
      fact('Vaults', null, d.vault_ids.map(v => [to('vaults', v), ' ']), d.vault_ids.length ? null : 'none'),
      fact('Last run', null, d.schedule?.last_run_at ? time(d.schedule.last_run_at) : '—'),
      fact('Created', null, time(d.created_at))),
    d.schedule ? h('section', {class: 'card'}, h('h2', null, 'Next runs'),
      up.length ? h('ol', {class: 'plain', id: 'upcoming'}, up.map(t => h('li', null, h('time', {datetime: t}, fmtTime(t)))))
        : meta('None while it is paused or archived.')) : null,
    h('section', {class: 'card'}, h('h2', null, 'Initial events'),
      d.initial_events.map(ev => h('div', {class: 'text prompt'}, ev.type === 'user.message' ? (ev.content || []).map(c => c.text || '').join('\n') : JSON.stringify(ev)))),
    h('section', {class: 'card'}, h('h2', null, 'Runs'), h('form', {class: 'filters', onsubmit: e => e.preventDefault()}, hasError),
      h('table', {class: 'list', id: 'runs'}, h('thead', null, h('tr', null, ['Run', 'Trigger', 'Created', 'Session'].map(c => h('th', null, c)))), tbody),
      runs.bar));
  await runs.run();
  return {keys: {r: again}};
}

export async function deploymentRunPage(main, runID) {
  const x = await get(`/v1/deployment_runs/${esc(runID)}`);
  clear(main,
    crumbs(h('a', {href: '#/deployments'}, 'Deployments'), ' / ', to('deployments', x.deployment_id), ' / ', mono(x.id)),
    h('div', {class: 'page-head'}, h('h1', null, `Run ${x.id}`)),
    h('dl', {class: 'facts'},
      fact('Trigger', null, trigger(x)),
      fact('Agent', null, to('agents', x.agent.id), ` v${x.agent.version}`),
      fact(x.error ? 'Error' : 'Session', {id: 'run-outcome'}, outcome(x)),
      fact('Created', null, time(x.created_at))));
  return {keys: {}};
}
