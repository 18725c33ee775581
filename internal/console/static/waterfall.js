// The waterfall of a session's spans, built from its log: model requests (span.model_request_start/end),
// sandbox provisioning (span.sandbox_provision_start/end), and tool calls (a call's event to its result's),
// grouped by turn (session.status_running to the idle after it), with the errors where they happened.

import {h, clear, fmtDuration, fmtTime, mono, meta} from './dom.js';
import {errorSource} from './transcript.js';

// The event types the waterfall reads (the events list's types filter).
export const WATERFALL_TYPES = ['span.model_request_start', 'span.model_request_end', 'span.sandbox_provision_start',
  'span.sandbox_provision_end', 'agent.tool_use', 'agent.tool_result', 'agent.mcp_tool_use', 'agent.mcp_tool_result',
  'agent.custom_tool_use', 'user.custom_tool_result', 'user.tool_confirmation', 'session.error', 'session.status_running',
  'session.status_idle', 'session.status_terminated', 'user.interrupt'];

// failureText is what a failed span's end event says (a tool's error result, a provisioning error).
function failureText(ev) {
  if (ev.error && typeof ev.error === 'string') return ev.error;
  if (ev.error && typeof ev.error === 'object' && ev.error.message) return String(ev.error.message);
  if (Array.isArray(ev.content)) {
    const t = ev.content.filter(b => b && b.type === 'text').map(b => b.text).join(' ');
    if (t) return t.length > 400 ? `${t.slice(0, 400)}…` : t;
  }
  return '';
}

const ts = ev => (ev.processed_at ? Date.parse(ev.processed_at) : NaN);

// build groups the events (oldest first) into turns of spans.
export function build(events) {
  const turns = [];
  let turn = null;
  const open = new Map(); // start event id -> span
  const newTurn = ev => {
    turn = {start: ts(ev), end: NaN, spans: [], errors: [], stop: null, startID: ev ? ev.id : ''};
    turns.push(turn);
  };
  for (const ev of events) {
    const t = ts(ev);
    if (ev.type === 'session.status_running') {
      // A turn that waited for the user (requires_action) goes on; one that ended gives way to a new one.
      if (!turn || !isNaN(turn.end)) newTurn(ev);
      turn.waiting = false;
      continue;
    }
    if (!turn) newTurn(ev);
    const span = (kind, label, detail) => {
      const s = {kind, label, detail, start: t, end: NaN, error: false, id: ev.id, endID: ''};
      turn.spans.push(s);
      open.set(ev.id, s);
      return s;
    };
    const close = (startID, error, extra) => {
      const s = open.get(startID);
      if (!s) return null;
      open.delete(startID);
      s.end = t;
      s.error = !!error;
      s.endID = ev.id;
      if (error) {
        s.message = failureText(ev);
        // A failed span's end may name the part that failed, as a session.error does.
        s.source = ev.source || (ev.error && typeof ev.error === 'object' ? ev.error.source : undefined);
      }
      if (extra) s.detail = [s.detail, extra].filter(Boolean).join(' · ');
      return s;
    };
    const toolResult = startID => {
      const s = close(startID, ev.is_error && ev.source, ev.is_error ? 'error result' : '');
      if (s && ev.is_error && !ev.source) s.toolError = true;
    };
    switch (ev.type) {
    case 'span.model_request_start': span('model', 'model request', ''); break;
    case 'span.model_request_end': {
      const u = ev.model_usage || {};
      close(ev.model_request_start_id, ev.is_error, ev.is_error ? 'failed' : `${u.input_tokens || 0} in / ${u.output_tokens || 0} out tokens`);
      break;
    }
    case 'span.sandbox_provision_start':
      span('provision', 'sandbox provision', [ev.backend, ev.image && ev.image.status === 'building' ? 'waiting for the image build' : ''].filter(Boolean).join(' · '));
      break;
    case 'span.sandbox_provision_end': {
      const s = close(ev.provision_start_id, ev.is_error, ev.is_error ? (ev.error || 'failed') : '');
      if (s && ev.duration_ms && isNaN(s.start)) s.start = t - ev.duration_ms;
      break;
    }
    case 'agent.tool_use': span('tool', ev.name, ev.evaluated_permission === 'ask' ? 'asks for confirmation' : ''); break;
    case 'agent.mcp_tool_use': span('mcp', `${ev.mcp_server_name} · ${ev.name}`, 'MCP'); break;
    case 'agent.custom_tool_use': span('custom', ev.name, 'custom tool'); break;
    // A result failed where a part of Corral failed (its source says which); an error result the tool reported
    // (a command's non-zero exit, say) is the model's to handle, not a failure of the turn.
    case 'agent.tool_result': toolResult(ev.tool_use_id); break;
    case 'agent.mcp_tool_result': toolResult(ev.mcp_tool_use_id); break;
    case 'user.custom_tool_result': toolResult(ev.custom_tool_use_id); break;
    case 'user.tool_confirmation': {
      const s = open.get(ev.tool_use_id);
      if (s) s.detail = ev.result === 'allow' ? 'allowed' : 'denied';
      break;
    }
    case 'session.error': turn.errors.push({at: t, ev}); break;
    case 'user.interrupt': turn.errors.push({at: t, ev, interrupt: true}); break;
    case 'session.status_idle':
      if (ev.stop_reason && ev.stop_reason.type === 'requires_action') { turn.waiting = true; break; }
      turn.end = t;
      turn.stop = (ev.stop_reason && ev.stop_reason.type) || 'idle';
      break;
    case 'session.status_terminated':
      turn.end = t;
      turn.stop = 'terminated';
      break;
    }
  }
  for (const tr of turns) {
    // A span still open when its turn ended has no end in the log (a brain that died mid-call, say).
    if (!isNaN(tr.end)) for (const s of tr.spans) if (isNaN(s.end)) { s.end = tr.end; s.unended = true; }
    const all = [tr.start, tr.end, ...tr.spans.flatMap(s => [s.start, s.end]), ...tr.errors.map(e => e.at)].filter(x => !isNaN(x));
    tr.min = all.length ? Math.min(...all) : Date.now();
    tr.max = all.length ? Math.max(...all) : tr.min;
    tr.failed = tr.errors.some(e => !e.interrupt && e.ev.error && e.ev.error.retry_status && e.ev.error.retry_status.type !== 'retrying') ||
      tr.stop === 'retries_exhausted' || tr.spans.some(s => s.error);
  }
  return turns;
}

// state says how a turn stands: its duration once over.
function state(t) {
  if (!isNaN(t.end)) return fmtDuration(t.max - t.min);
  return t.waiting ? 'waiting for you' : 'running';
}

// view renders one turn into el; onPick(eventID) is called when a span is chosen.
export function view(el, turns, index, onPick, onSelect) {
  if (!turns.length) {
    clear(el, h('p', {class: 'empty-title'}, 'No spans yet: they appear once the session runs a turn.'));
    return;
  }
  const i = Math.max(0, Math.min(index, turns.length - 1));
  const tr = turns[i];
  const now = Date.now();
  const end = isNaN(tr.end) ? Math.max(tr.max, now) : tr.max;
  const total = Math.max(end - tr.min, 1);
  const pct = x => `${(Math.max(0, x - tr.min) / total * 100).toFixed(3)}%`;
  const sel = h('select', {id: 'turn-select', 'aria-label': 'Turn', onchange: () => onSelect(Number(sel.value))},
    turns.map((t, j) => h('option', {value: String(j), selected: j === i ? true : null},
      `Turn ${j + 1} · ${new Date(t.min).toLocaleTimeString()} · ${state(t)}${t.failed ? ' · failed' : ''}`)));
  sel.value = String(i);
  const rows = tr.spans.map(s => {
    const running = isNaN(s.end);
    const sEnd = running ? end : s.end;
    const dur = sEnd - s.start;
    const label = `${s.label}${s.detail ? ` (${s.detail})` : ''}: ${running ? 'running' : fmtDuration(dur)}${s.error ? ', failed' : ''}${s.unended ? ', no end in the log' : ''}`;
    return h('li', {class: `wf-row kind-${s.kind}${s.error ? ' failed' : ''}${s.toolError ? ' tool-error' : ''}${running ? ' running' : ''}${s.unended ? ' unended' : ''}`},
      h('button', {type: 'button', class: 'wf-label', title: label, onclick: () => onPick(s.error && s.endID ? s.endID : s.id)},
        h('span', {class: 'wf-kind'}, s.kind), ' ', h('span', {class: 'wf-name'}, s.label),
        h('span', {class: 'wf-dur'}, running ? 'running' : s.unended ? 'no end' : fmtDuration(dur))),
      h('div', {class: 'wf-track', 'aria-hidden': 'true'},
        h('div', {class: 'wf-bar', vars: {'--l': pct(s.start), '--w': `${Math.max(dur / total * 100, 0.4).toFixed(3)}%`}}),
        s.detail ? h('span', {class: 'wf-detail', vars: {'--l': pct(s.start)}}, s.detail) : null));
  });
  const marks = tr.errors.map(e => {
    const er = e.interrupt ? null : e.ev.error || {};
    return h('li', {class: `wf-row mark${e.interrupt ? ' interrupt' : ''}`},
      h('button', {type: 'button', class: 'wf-label', onclick: () => onPick(e.ev.id)},
        h('span', {class: 'wf-kind'}, e.interrupt ? 'interrupt' : 'error'), ' ',
        h('span', {class: 'wf-name'}, e.interrupt ? 'interrupted' : (er.type || 'error')),
        h('span', {class: 'wf-dur'}, e.interrupt ? '' : (er.source && er.source.component) || '')),
      h('div', {class: 'wf-track', 'aria-hidden': 'true'}, h('div', {class: 'wf-mark', vars: {'--l': pct(e.at)}}),
        h('span', {class: 'wf-detail', vars: {'--l': pct(e.at)}}, e.interrupt ? '' : (er.message || '').slice(0, 120))));
  });
  // Where it failed: the last error that ended the turn (or the last one), else the last failed span.
  const errs = tr.errors.filter(e => !e.interrupt);
  const lastErr = errs.findLast(e => !(e.ev.error && e.ev.error.retry_status && e.ev.error.retry_status.type === 'retrying')) || errs.at(-1);
  const failedSpan = tr.spans.findLast(s => s.error);
  let where = null;
  if (lastErr) {
    where = h('div', {class: 'wf-failure', role: 'note'},
      h('strong', null, 'Where it failed: '), (lastErr.ev.error && lastErr.ev.error.message) || lastErr.ev.type,
      errorSource(lastErr.ev.error));
  } else if (failedSpan) {
    where = h('div', {class: 'wf-failure', role: 'note'},
      h('strong', null, `Where it failed: ${failedSpan.kind} `), mono(failedSpan.label),
      failedSpan.message ? [': ', failedSpan.message] : ' (an error result)',
      errorSource({source: failedSpan.source}));
  }
  clear(el,
    h('div', {class: 'wf-head'}, h('label', {for: 'turn-select', class: 'visually-hidden'}, 'Turn'), sel,
      h('span', {class: 'meta'}, `${fmtTime(new Date(tr.min).toISOString())} · ${state(tr)}${isNaN(tr.end) ? '' : ` · ${tr.stop}`}`),
      h('span', {class: 'spacer'}),
      h('button', {type: 'button', class: 'small', disabled: i === 0, onclick: () => onSelect(i - 1)}, '← Earlier turn'),
      h('button', {type: 'button', class: 'small', disabled: i === turns.length - 1, onclick: () => onSelect(i + 1)}, 'Later turn →')),
    where,
    rows.length || marks.length ? h('ol', {class: 'wf', 'aria-label': 'Spans of this turn'},
      h('li', {class: 'wf-row axis', 'aria-hidden': 'true'}, h('span', {class: 'wf-label'}, ''),
        h('div', {class: 'wf-track'}, h('span', {class: 'tick t0'}, '0'), h('span', {class: 'tick t1'}, fmtDuration(total / 2)),
          h('span', {class: 'tick t2'}, fmtDuration(total)))),
      rows, marks) : meta('This turn has no spans.'));
}
