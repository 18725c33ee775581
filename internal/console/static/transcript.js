// The transcript: a session's events rendered for people. Tool calls are cards that their results (and
// confirmations) fill in when both are on screen; errors say which part failed.

import {h, fmtTime, pretty, mono, meta} from './dom.js';

export const SPAN_TYPES = ['span.model_request_start', 'span.model_request_end', 'span.sandbox_provision_start',
  'span.sandbox_provision_end'];

// OUTCOME_RESULTS say an outcome evaluation's result for people.
const OUTCOME_RESULTS = {
  satisfied: 'Satisfied', needs_revision: 'Needs revision: the agent revises', max_iterations_reached: 'Max iterations reached',
  failed: 'Grading failed', interrupted: 'Interrupted',
};

const COMPONENTS = {
  model: 'the model', hands: 'the hands (sandbox)', proxy: 'the proxy (egress)', store: 'the store',
  brain: 'the brain', client: 'the client (bad input)', api: 'the API server',
};

// blocksText is the text of content blocks (others named by their type).
export function blocks(content) {
  if (!Array.isArray(content)) return content == null ? [] : [h('pre', {class: 'json'}, pretty(content))];
  return content.map(b => {
    if (!b || typeof b !== 'object') return h('p', null, String(b));
    if (b.type === 'text') return h('div', {class: 'text'}, b.text || '');
    if (b.type === 'image') return meta(`[image${b.source && b.source.media_type ? `: ${b.source.media_type}` : ''}]`);
    if (b.type === 'document') return meta(`[document${b.title ? `: ${b.title}` : ''}]`);
    return h('pre', {class: 'json'}, pretty(b));
  });
}

function raw(ev) {
  return h('details', {class: 'raw'}, h('summary', null, 'Event JSON'), h('pre', {class: 'json'}, pretty(ev)));
}

// stamp is when the event was logged; a client event has a time once a brain processed it (one seen live
// was not yet).
function stamp(ev) {
  return ev.processed_at ? h('time', {datetime: ev.processed_at, title: fmtTime(ev.processed_at)},
    new Date(ev.processed_at).toLocaleTimeString()) : h('span', {class: 'meta', title: 'Not yet processed when read'}, 'sent');
}

function head(role, label, ev, extra) {
  return h('div', {class: 'ev-head'}, h('span', {class: `role role-${role}`}, label), extra || null,
    h('span', {class: 'spacer'}), stamp(ev));
}

// errorSource renders a session.error's source (which part failed), when the server gives one.
export function errorSource(err) {
  const src = err && err.source;
  if (!src || typeof src !== 'object') return null;
  const comp = String(src.component || '');
  return h('dl', {class: 'source'},
    h('dt', null, 'Failed in'), h('dd', null, h('span', {class: `badge comp comp-${comp.replace(/[^a-z]/g, '')}`}, comp || 'unknown'),
      ' ', COMPONENTS[comp] || ''),
    src.backend ? [h('dt', null, 'Backend'), h('dd', {class: 'mono'}, String(src.backend))] : null,
    src.reason ? [h('dt', null, 'Reason'), h('dd', null, String(src.reason))] : null);
}

function toolCard(ev, kind, title, input, pending) {
  const perm = ev.evaluated_permission;
  return h('article', {class: `ev tool tool-${kind}${pending ? ' pending' : ''}`, id: `ev-${ev.id}`, tabindex: '-1', dataset: {type: ev.type}},
    head('tool', kind === 'mcp' ? 'MCP tool' : kind === 'custom' ? 'Custom tool' : 'Tool', ev,
      h('span', {class: 'tool-name mono'}, title)),
    perm ? meta(`Permission: ${perm}`) : null,
    h('details', {class: 'io', open: true}, h('summary', null, 'Input'), h('pre', {class: 'json'}, pretty(input))),
    h('div', {class: 'result-slot', 'aria-live': 'polite'}, h('p', {class: 'meta waiting'}, 'No result yet')),
    h('div', {class: 'action-slot'}),
    raw(ev));
}

function resultBlock(ev) {
  return h('div', {class: `result${ev.is_error ? ' is-error' : ''}`},
    h('div', {class: 'ev-head'}, h('span', {class: 'role'}, ev.is_error ? 'Error result' : 'Result'), h('span', {class: 'spacer'}), stamp(ev)),
    h('div', {class: 'result-body'}, blocks(ev.content)),
    ev.is_error ? errorSource(ev) : null);
}

// attach puts a result (or confirmation) into the card of its call if that card is in root; it reports
// whether it did.
function attach(root, useID, node) {
  if (!useID) return false;
  const card = root.querySelector(`#ev-${CSS.escape(useID)}`);
  if (!card) return false;
  const slot = card.querySelector('.result-slot');
  slot.replaceChildren(node);
  card.classList.remove('pending');
  // The question is answered; a note of how (allowed, denied) stays.
  card.querySelectorAll('.action-slot .answer').forEach(el => el.remove());
  if (node.classList.contains('is-error')) card.classList.add('failed');
  return true;
}

function confirmNote(ev) {
  const ok = ev.result === 'allow';
  return h('p', {class: `confirm ${ok ? 'allowed' : 'denied'}`}, ok ? 'Allowed by the user' : 'Denied by the user',
    ev.deny_message ? `: ${ev.deny_message}` : '');
}

function statusLine(ev) {
  let text = ev.type.replace('session.status_', '');
  let cls = '';
  if (ev.type === 'session.status_idle' && ev.stop_reason) {
    const r = ev.stop_reason.type;
    text = r === 'end_turn' ? 'Idle: the turn ended' : r === 'requires_action' ? 'Idle: waiting for you' :
      r === 'retries_exhausted' ? 'Idle: gave up after retries' :
      r === 'budget_reached' ? 'Idle: the budget is spent (raise it to resume)' : `Idle: ${r}`;
    if (r === 'retries_exhausted' || r === 'refusal') cls = ' bad';
    if (r === 'requires_action') cls = ' ask';
    if (r === 'budget_reached') cls = ' warn';
  } else if (ev.type === 'session.status_running') text = 'Running';
  else if (ev.type === 'session.status_rescheduled') { text = 'Rescheduled (retrying)'; cls = ' warn'; }
  else if (ev.type === 'session.status_terminated') { text = 'Terminated'; cls = ' bad'; }
  return h('div', {class: `ev status-line${cls}`, id: `ev-${ev.id}`, tabindex: '-1', dataset: {type: ev.type}},
    h('span', null, text), stamp(ev));
}

// render returns the element for ev, or null when it is shown elsewhere (a result attached to its call, a
// span in the waterfall). root is the transcript, for attaching; ctx.pending is the set of call ids that wait
// for the user, ctx.showSpans shows span events as lines.
export function render(root, ev, ctx) {
  const t = ev.type;
  switch (t) {
  case 'user.message':
    return h('article', {class: 'ev msg user', id: `ev-${ev.id}`, tabindex: '-1', dataset: {type: t}}, head('user', 'You', ev), blocks(ev.content));
  case 'agent.message':
    return h('article', {class: 'ev msg agent', id: `ev-${ev.id}`, tabindex: '-1', dataset: {type: t}}, head('agent', 'Agent', ev), blocks(ev.content));
  case 'system.message':
    return h('article', {class: 'ev msg system', id: `ev-${ev.id}`, tabindex: '-1', dataset: {type: t}}, head('system', 'System', ev), blocks(ev.content));
  case 'agent.thinking':
    return h('details', {class: 'ev thinking', id: `ev-${ev.id}`, dataset: {type: t}},
      h('summary', null, h('span', {class: 'role role-thinking'}, 'Thinking'), ' ',
        h('span', {class: 'meta'}, ev.thinking ? `${ev.thinking.length} characters` : ev.redacted_data ? 'redacted' : '')),
      h('div', {class: 'text'}, ev.thinking || (ev.redacted_data ? '(redacted)' : '')));
  case 'agent.tool_use':
    return toolCard(ev, 'builtin', ev.name, ev.input, ctx.pending.has(ev.id));
  case 'agent.mcp_tool_use':
    return toolCard(ev, 'mcp', `${ev.mcp_server_name} · ${ev.name}`, ev.input, ctx.pending.has(ev.id));
  case 'agent.custom_tool_use':
    return toolCard(ev, 'custom', ev.name, ev.input, ctx.pending.has(ev.id));
  case 'agent.tool_result':
  case 'agent.mcp_tool_result':
  case 'user.custom_tool_result': {
    const useID = ev.tool_use_id || ev.mcp_tool_use_id || ev.custom_tool_use_id;
    const node = resultBlock(ev);
    node.id = `ev-${ev.id}`;
    if (attach(root, useID, node)) return null;
    return h('article', {class: `ev tool orphan${ev.is_error ? ' failed' : ''}`, id: `ev-${ev.id}`, tabindex: '-1', dataset: {type: t}},
      meta(`Result of call ${useID} (the call is on another page)`), node);
  }
  case 'user.tool_confirmation': {
    const node = confirmNote(ev);
    const card = root.querySelector(`#ev-${CSS.escape(ev.tool_use_id || '')}`);
    if (card) {
      card.querySelector('.action-slot').replaceChildren(node);
      card.classList.remove('pending');
      return null;
    }
    return h('div', {class: 'ev line', id: `ev-${ev.id}`, dataset: {type: t}}, node, h('span', {class: 'meta mono'}, ev.tool_use_id));
  }
  case 'user.interrupt':
    return h('div', {class: 'ev status-line warn', id: `ev-${ev.id}`, dataset: {type: t}}, h('span', null, 'Interrupted by you'), stamp(ev));
  case 'session.status_running':
  case 'session.status_idle':
  case 'session.status_rescheduled':
  case 'session.status_terminated':
    return statusLine(ev);
  case 'session.error': {
    const e = ev.error || {};
    const rs = e.retry_status && e.retry_status.type;
    return h('article', {class: `ev error${rs === 'retrying' ? ' retrying' : ''}`, id: `ev-${ev.id}`, tabindex: '-1', role: 'group',
      'aria-label': 'Session error', dataset: {type: t}},
    head('error', 'Error', ev, mono(e.type || '')),
    h('p', {class: 'error-msg'}, e.message || ''),
    rs ? meta(rs === 'retrying' ? 'Retrying' : rs === 'exhausted' ? 'Retries exhausted: the turn is over' :
      rs === 'terminal' ? 'Terminal: the session cannot continue' : rs) : null,
    e.mcp_server_name ? meta(`MCP server: ${e.mcp_server_name}`) : null,
    errorSource(e),
    raw(ev));
  }
  case 'session.usage': {
    const u = ev.usage || {};
    const b = ev.budget && ev.budget.max_list_cost;
    if (!ctx.showSpans) return null;
    return h('div', {class: 'ev span-line', id: `ev-${ev.id}`, dataset: {type: t}},
      mono(`${t}: ${u.list_cost ? u.list_cost.amount : '?'} of ${b ? b.amount : 'no'} cents budget`), stamp(ev));
  }
  case 'user.define_outcome': {
    const r = ev.rubric || {};
    return h('article', {class: 'ev msg user outcome', id: `ev-${ev.id}`, tabindex: '-1', dataset: {type: t}},
      head('user', 'Outcome', ev, h('span', {class: 'meta'}, `up to ${ev.max_iterations || 3} evaluations`)),
      h('div', {class: 'text'}, ev.description || ''),
      h('details', {class: 'io'}, h('summary', null, 'Rubric'),
        r.type === 'file' ? h('p', {class: 'meta mono'}, `file ${r.file_id || ''}`) : h('div', {class: 'text'}, r.content || '')));
  }
  case 'span.sandbox_provision_start':
    // A sandbox that waits for its image's build (the base's, on a first start, takes minutes) says so, spans
    // shown or not.
    if (ev.image && ev.image.status === 'building') {
      return h('div', {class: 'ev status-line', id: `ev-${ev.id}`, dataset: {type: t}},
        h('span', null, `Waiting for the sandbox's image to build (${ev.image.id || 'image'}): a first build takes minutes`), stamp(ev));
    }
    break;
  case 'span.outcome_evaluation_start':
    return h('div', {class: 'ev status-line', id: `ev-${ev.id}`, dataset: {type: t}},
      h('span', null, `Grading the outcome (evaluation ${(ev.iteration || 0) + 1})`), stamp(ev));
  case 'span.outcome_evaluation_ongoing':
    if (!ctx.showSpans) return null;
    return h('div', {class: 'ev span-line', id: `ev-${ev.id}`, dataset: {type: t}}, mono(`${t}: grading`), stamp(ev));
  case 'span.outcome_evaluation_end': {
    const res = ev.result || '';
    const u = ev.usage || {};
    const label = OUTCOME_RESULTS[res] || res;
    const cls = res === 'satisfied' ? ' ok' : res === 'needs_revision' ? ' warn' : ' bad';
    return h('article', {class: `ev msg outcome-end${cls}`, id: `ev-${ev.id}`, tabindex: '-1',
      role: 'group', 'aria-label': 'Outcome evaluation', dataset: {type: t}},
    head('system', 'Grader', ev, h('span', {class: 'mono outcome-result'}, label)),
    h('div', {class: 'text'}, ev.explanation || ''),
    Array.isArray(ev.criteria) && ev.criteria.length ? h('ul', {class: 'criteria'}, ev.criteria.map(c =>
      h('li', null, mono(c.met ? '✓ ' : '✗ '), h('strong', null, String(c.criterion || '')),
        c.explanation ? `: ${c.explanation}` : ''))) : null,
    meta(`Evaluation ${(ev.iteration || 0) + 1} · grader ${u.input_tokens || 0} in / ${u.output_tokens || 0} out tokens`),
    raw(ev));
  }
  case 'session.thread_created':
  case 'session.thread_status_running':
  case 'session.thread_status_idle':
  case 'session.thread_status_rescheduled':
  case 'session.thread_status_terminated':
    return h('div', {class: 'ev status-line', id: `ev-${ev.id}`, dataset: {type: t}},
      h('span', null, `Thread ${ev.agent_name || ev.session_thread_id}: ${t.slice(15).replace('status_', '')}`), stamp(ev));
  case 'agent.thread_message_sent':
  case 'agent.thread_message_received':
    return h('article', {class: 'ev msg agent', id: `ev-${ev.id}`, tabindex: '-1', dataset: {type: t}},
      head('agent', ev.to_session_thread_id ? `To ${ev.to_agent_name || 'the primary'}` : `From ${ev.from_agent_name || 'the primary'}`, ev),
      blocks(ev.content));
  case 'agent.thread_context_compacted':
    return h('div', {class: 'ev status-line', id: `ev-${ev.id}`, dataset: {type: t}}, h('span', null, 'Context compacted'), stamp(ev));
  case 'session.updated':
  case 'session.deleted':
    return h('div', {class: 'ev status-line', id: `ev-${ev.id}`, dataset: {type: t}}, h('span', null, t.replace('session.', 'Session ')), stamp(ev));
  }
  if (SPAN_TYPES.includes(t)) {
    if (!ctx.showSpans) return null;
    return h('div', {class: 'ev span-line', id: `ev-${ev.id}`, dataset: {type: t}}, mono(t), stamp(ev));
  }
  return h('details', {class: 'ev unknown', id: `ev-${ev.id}`, dataset: {type: t}}, h('summary', null, t), h('pre', {class: 'json'}, pretty(ev)));
}
