// A session's page: its header and live status, the waterfall of its spans, the transcript paged through the
// events list (a window of a few pages, never the whole log), the live stream, and the actions a user takes:
// send a message, interrupt, allow or deny a tool call, answer a custom tool call.

import {h, clear, time, statusBadge, toast, pretty, empty, fact, crumbs, mono} from './dom.js';
import {get, sendEvents, id as esc} from './api.js';
import {follow} from './sse.js';
import {render} from './transcript.js';
import {threadsCard} from './threads.js';
import {gone} from './forms.js';
import {build, view, WATERFALL_TYPES} from './waterfall.js';

const PAGE = 100; // events per page of the transcript
const WINDOW = 3; // pages kept on screen
const LIVE_MAX = 2000; // live events appended before the window is read again from the tail
const WF_EVENTS = 1000; // the waterfall reads the latest this many span events
const PENDING_MAX = 200; // tool calls remembered for the action panel (those waiting for the user stay)

const statusOf = {
  'session.status_running': 'running', 'session.status_idle': 'idle',
  'session.status_rescheduled': 'rescheduling', 'session.status_terminated': 'terminated',
};

// dollars shows «Money» in cents as US dollars: {"amount":"1234","currency":"USD"} is $12.34.
function dollars(m) {
  const c = m.amount || '0';
  if (m.currency !== 'USD' || !/^[0-9]+$/.test(c)) return `${c} ${m.currency || ''}`;
  const p = c.padStart(3, '0');
  return `$${p.slice(0, -2)}.${p.slice(-2)}`;
}

export async function sessionPage(main, sessionID) {
  const base = `/v1/sessions/${esc(sessionID)}`;
  const sess = await get(base);
  const ctx = {pending: new Set(), showSpans: false};
  const pendingInfo = new Map(); // call id -> its event, for the action panel

  // Header.
  const badge = h('span', {id: 'session-status'}, statusBadge(sess.status));
  const streamState = h('span', {class: 'stream-state', id: 'stream-state', role: 'status', 'aria-live': 'polite'}, 'connecting…');
  const usage = h('span', {class: 'meta', id: 'session-usage'});
  const cost = h('span', {class: 'meta', id: 'session-cost'});
  const budget = h('span', {class: 'meta', id: 'session-budget'});
  const setUsage = s => {
    const u = s.usage || {};
    usage.textContent = `${u.input_tokens || 0} in / ${u.output_tokens || 0} out tokens · active ${Math.round((s.stats && s.stats.active_seconds) || 0)} s`;
    cost.textContent = u.list_cost ? dollars(u.list_cost) : 'no list price for this model';
    const b = s.budget && s.budget.max_list_cost;
    budget.textContent = b ? `${dollars(b)} cap` : 'none';
  };
  setUsage(sess);
  const interruptBtn = h('button', {type: 'button', class: 'danger', id: 'interrupt', 'aria-keyshortcuts': 'x', onclick: () => interrupt()}, 'Interrupt');
  const setStatus = st => {
    sess.status = st;
    clear(badge, statusBadge(st));
    interruptBtn.disabled = st !== 'running' && st !== 'rescheduling';
  };

  // Action panel: calls that wait for the user.
  const actions = h('section', {class: 'actions-panel', id: 'actions', 'aria-label': 'Waiting for you', hidden: true});

  // Waterfall.
  const wfBody = h('div', {class: 'wf-body', id: 'waterfall'});
  const wfToggle = h('button', {type: 'button', class: 'ghost small', 'aria-expanded': 'true', 'aria-controls': 'waterfall',
    'aria-keyshortcuts': 'w', onclick: () => toggleWF()}, 'Hide');
  const wfSection = h('section', {class: 'card waterfall', 'aria-labelledby': 'wf-title'},
    h('div', {class: 'section-head'}, h('h2', {id: 'wf-title'}, 'Waterfall'), h('span', {class: 'spacer'}), wfToggle), wfBody);
  let wfEvents = [];
  let wfTurn = -1; // -1: follow the latest turn
  let wfTurns = [];
  const drawWF = () => {
    const hadFocus = document.activeElement && document.activeElement.id === 'turn-select';
    wfTurns = build(wfEvents);
    view(wfBody, wfTurns, wfTurn < 0 ? wfTurns.length - 1 : wfTurn, pick, i => { wfTurn = i >= wfTurns.length - 1 ? -1 : i; drawWF(); });
    if (hadFocus) document.getElementById('turn-select')?.focus();
  };
  const toggleWF = () => {
    const hide = !wfBody.hidden;
    wfBody.hidden = hide;
    wfToggle.textContent = hide ? 'Show' : 'Hide';
    wfToggle.setAttribute('aria-expanded', String(!hide));
  };

  // Threads (a multi-agent session's), read again when one starts or changes status.
  const threads = h('section', {class: 'card', id: 'threads', hidden: true});
  const readThreads = () => threadsCard(threads, sessionID).catch(e => toast(e.message, 'error'));
  readThreads();

  // Transcript.
  const list = h('div', {class: 'transcript', id: 'transcript', role: 'log', 'aria-label': 'Transcript', 'aria-live': 'off'});
  // One move of the window at a time: a click while a page loads is ignored.
  let busy = false;
  // The live events that came while the window moved: the pages it read may be older than they are.
  let during = null;
  const nav = f => async () => {
    if (busy) return;
    busy = true;
    during = [];
    list.setAttribute('aria-busy', 'true');
    [earlierBtn, oldestBtn, laterBtn, latestBtn].forEach(b => { b.disabled = true; });
    try {
      await f();
    } catch (e) {
      toast(e.message, 'error');
      draw();
    } finally {
      const late = during;
      during = null;
      for (const ev of late) if (atTail() && !seen.has(ev.id)) appendLive(ev);
      busy = false;
      list.removeAttribute('aria-busy');
      setNav();
    }
  };
  const earlierBtn = h('button', {type: 'button', class: 'small', id: 'tr-earlier', onclick: () => moves.earlier()}, '↑ Earlier events');
  const oldestBtn = h('button', {type: 'button', class: 'small ghost', id: 'tr-oldest', onclick: () => moves.oldest()}, 'Oldest');
  const laterBtn = h('button', {type: 'button', class: 'small', id: 'tr-later', onclick: () => moves.later()}, '↓ Later events');
  const latestBtn = h('button', {type: 'button', class: 'small ghost', id: 'tr-latest', onclick: () => moves.latest()}, 'Latest');
  const liveNote = h('button', {type: 'button', class: 'live-note', hidden: true, onclick: () => moves.latest()});
  const spansBox = h('input', {type: 'checkbox', id: 'show-spans', onchange: () => { ctx.showSpans = spansBox.checked; draw(); }});

  // Composer.
  const text = h('textarea', {id: 'message', rows: 3, placeholder: 'Message the agent… (Ctrl+Enter sends)', 'aria-label': 'Message',
    'data-focus-key': '', 'aria-keyshortcuts': 'm',
    onkeydown: ev => { if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); send(); } }});
  const sendBtn = h('button', {type: 'button', class: 'primary', id: 'send', onclick: () => send()}, 'Send');
  const composer = h('form', {class: 'composer', 'aria-label': 'Send a message', onsubmit: e => { e.preventDefault(); send(); }},
    text, h('div', {class: 'composer-actions'}, sendBtn, interruptBtn));

  const title = sess.title || sess.id;
  const mems = (sess.resources || []).filter(r => r.type === 'memory_store');
  clear(main,
    crumbs(h('a', {href: '#/sessions'}, 'Sessions'), ' / ', mono(sess.id)),
    h('div', {class: 'page-head session-head'},
      h('h1', null, title), badge, streamState, gone('Delete', `/v1/sessions/${esc(sess.id)}`, '#/sessions', 'delete-session')),
    h('dl', {class: 'facts'},
      fact('Agent', null, h('a', {href: `#/agents/${esc(sess.agent.id)}?version=${sess.agent.version}`}, sess.agent.name || sess.agent.id), ` v${sess.agent.version}`),
      fact('Model', {class: 'mono'}, (sess.agent.model && sess.agent.model.id) || ''),
      fact('Environment', null, h('a', {href: `#/environments/${esc(sess.environment_id)}`, class: 'mono'}, sess.environment_id)),
      fact('Created', null, time(sess.created_at)),
      fact('Usage', null, usage),
      fact('List cost', null, cost),
      fact('Budget', null, budget),
      fact('Outputs', null, h('a', {href: `#/files?scope_id=${esc(sess.id)}`, id: 'session-outputs'}, 'Files →')),
      // Its memory stores: where each is mounted, and whether the session may write to it.
      mems.length ? fact('Memory', {id: 'session-memory'}, mems.map(r => h('div', null,
        h('a', {href: `#/memory/${esc(r.memory_store_id)}`, class: 'mono', dataset: {store: r.memory_store_id}}, r.mount_path),
        ` ${r.access || 'read_write'}`))) : null),
    actions,
    threads,
    wfSection,
    h('section', {class: 'card', 'aria-labelledby': 'tr-title'},
      h('div', {class: 'section-head'}, h('h2', {id: 'tr-title'}, 'Transcript'), h('span', {class: 'spacer'}),
        h('label', {class: 'check small'}, spansBox, ' Span events')),
      h('div', {class: 'tr-nav'}, earlierBtn, oldestBtn),
      list,
      h('div', {class: 'tr-nav'}, laterBtn, latestBtn, liveNote)),
    composer);
  setStatus(sess.status);
  if (sess.archived_at || sess.status === 'terminated') {
    text.disabled = true;
    sendBtn.disabled = true;
    text.placeholder = sess.archived_at ? 'This session is archived: it takes no more events.' : 'This session is terminated: it takes no more events.';
  }

  // The transcript's window: pages of one direction ('desc' from the tail, 'asc' from the start), each with the
  // token that reads it and the token of the page after it; lo..hi are on screen.
  let dir = 'desc';
  let pages = [];
  let lo = 0, hi = -1;
  let liveCount = 0, missed = 0;
  const seen = new Set();

  async function fetchPage(token) {
    const r = await get(`${base}/events`, {limit: PAGE, order: dir, page: token || undefined});
    const evs = dir === 'desc' ? r.data.slice().reverse() : r.data;
    return {token, next: r.next_page || '', events: evs};
  }
  const atTail = () => (dir === 'desc' ? lo === 0 : hi === pages.length - 1 && !pages[hi].next);
  const ordered = () => {
    const ps = pages.slice(lo, hi + 1);
    if (dir === 'desc') ps.reverse();
    return ps.flatMap(p => p.events);
  };
  function draw(anchorID) {
    const prevTop = anchorID ? document.getElementById(`ev-${anchorID}`)?.getBoundingClientRect().top : null;
    list.replaceChildren();
    seen.clear();
    const evs = ordered();
    for (const ev of evs) addEvent(ev);
    if (!evs.length) list.appendChild(empty('No events yet.', 'Send a message below to start a turn.'));
    setNav();
    drawActions();
    liveNote.hidden = !missed;
    liveNote.textContent = missed ? `${missed} new event${missed === 1 ? '' : 's'}: show the latest` : '';
    if (anchorID && prevTop != null) {
      const el = document.getElementById(`ev-${anchorID}`);
      if (el) window.scrollBy(0, el.getBoundingClientRect().top - prevTop);
    }
  }
  function setNav() {
    earlierBtn.disabled = busy || !(dir === 'desc' ? !!pages[hi]?.next : lo > 0);
    oldestBtn.disabled = busy || (dir === 'asc' && lo === 0);
    laterBtn.disabled = busy || atTail();
    latestBtn.disabled = busy || atTail();
  }
  function addEvent(ev) {
    if (seen.has(ev.id)) return;
    seen.add(ev.id);
    const el = render(list, ev, ctx);
    const preview = document.getElementById(`ev-${ev.id}`);
    if (preview && preview.classList.contains('preview')) {
      if (el) preview.replaceWith(el);
      else preview.remove();
    } else if (el) list.appendChild(el);
    if (ctx.pending.has(ev.id)) decorate(ev);
  }
  async function earlier() {
    const anchor = ordered()[0]?.id;
    if (dir === 'desc') {
      const tok = pages[hi]?.next;
      if (!tok) return;
      if (hi + 1 >= pages.length) pages.push(await fetchPage(tok));
      else if (!pages[hi + 1].events) pages[hi + 1] = await fetchPage(pages[hi + 1].token);
      hi++;
      if (hi - lo + 1 > WINDOW) lo++;
    } else {
      if (lo === 0) return;
      lo--;
      if (hi - lo + 1 > WINDOW) hi--;
      pages[lo] = await fetchPage(pages[lo].token);
    }
    forget();
    draw(anchor);
  }
  async function later() {
    if (dir === 'desc') {
      if (lo === 0) return;
      const page = await fetchPage(pages[lo - 1].token);
      if (lo === 1 && page.next !== pages[0].next) {
        // The tail grew while the window was off it: the pages read before no longer follow the new tail page
        // (their tokens are sequence numbers), so the window starts again from it instead of leaving a gap.
        pages = [page];
        lo = 0; hi = 0;
      } else {
        lo--;
        pages[lo] = page;
        if (hi - lo + 1 > WINDOW) hi--;
      }
    } else {
      const tok = pages[hi]?.next;
      if (!tok) return;
      if (hi + 1 >= pages.length) pages.push(await fetchPage(tok));
      else pages[hi + 1] = await fetchPage(pages[hi + 1].token);
      hi++;
      if (hi - lo + 1 > WINDOW) lo++;
    }
    // At the tail again, the events that came meanwhile are in the pages just read.
    if (atTail()) { liveCount = 0; missed = 0; }
    forget();
    draw();
  }
  // forget drops the events of the pages off screen (their tokens stay, to read them again): memory holds
  // WINDOW pages however far one pages.
  function forget() {
    pages.forEach((p, i) => { if (i < lo || i > hi) p.events = null; });
  }
  async function oldest() {
    dir = 'asc';
    pages = [await fetchPage('')];
    lo = 0; hi = 0;
    draw();
    window.scrollTo(0, list.offsetTop - 80);
  }
  async function latest() {
    dir = 'desc';
    pages = [await fetchPage('')];
    lo = 0; hi = 0;
    liveCount = 0; missed = 0;
    draw();
    text.scrollIntoView({block: 'end'});
  }

  const moves = {earlier: nav(earlier), later: nav(later), oldest: nav(oldest), latest: nav(latest)};

  // Scrolls to an event of the transcript (from the waterfall); reads the tail if it is not on screen.
  function pick(evID) {
    const el = document.getElementById(`ev-${evID}`);
    if (el) {
      if (el.tagName === 'DETAILS') el.open = true;
      el.scrollIntoView({block: 'center', behavior: 'smooth'});
      el.classList.add('flash');
      setTimeout(() => el.classList.remove('flash'), 1500);
      // Keyboard users land on the answer when there is one.
      (el.querySelector('.action-slot textarea, .action-slot [data-answer]') || el).focus({preventScroll: true});
    } else {
      toast('That event is not on the transcript’s current pages.');
    }
  }

  // Pending calls: those the last idle named as requiring action, less those answered since.
  function decorate(ev) {
    const card = document.getElementById(`ev-${ev.id}`);
    if (!card) return;
    card.classList.add('pending');
    card.querySelector('.action-slot')?.replaceChildren(actionFor(ev));
  }
  function actionFor(ev) {
    if (ev.type === 'agent.custom_tool_use') {
      const ta = h('textarea', {rows: 3, class: 'custom-result', 'aria-label': `Result of ${ev.name}`, placeholder: 'The tool’s result (text)'});
      const isErr = h('input', {type: 'checkbox'});
      return h('form', {class: 'answer', onsubmit: async e => {
        e.preventDefault();
        await answer([{type: 'user.custom_tool_result', custom_tool_use_id: ev.id, content: [{type: 'text', text: ta.value}], is_error: isErr.checked}]);
      }}, h('p', {class: 'ask-title'}, `The agent called the custom tool ${ev.name}: answer it.`), ta,
      h('div', {class: 'row'}, h('label', {class: 'check'}, isErr, ' Is an error'), h('button', {type: 'submit', class: 'primary', 'data-answer': 'custom'}, 'Send result')));
    }
    const reason = h('input', {type: 'text', 'aria-label': 'Reason for denying (optional)', placeholder: 'Reason (optional, sent on deny)'});
    return h('div', {class: 'answer'}, h('p', {class: 'ask-title'}, `The agent asks to run ${ev.mcp_server_name ? `${ev.mcp_server_name} · ` : ''}${ev.name}.`),
      h('div', {class: 'row'},
        h('button', {type: 'button', class: 'primary', 'data-answer': 'allow', onclick: () => answer([{type: 'user.tool_confirmation', tool_use_id: ev.id, result: 'allow'}])}, 'Allow'),
        h('button', {type: 'button', class: 'danger', 'data-answer': 'deny', onclick: () => answer([{type: 'user.tool_confirmation', tool_use_id: ev.id, result: 'deny',
          deny_message: reason.value || undefined}])}, 'Deny'),
        reason));
  }
  function drawActions() {
    const ids = [...ctx.pending];
    actions.hidden = !ids.length;
    if (!ids.length) { actions.replaceChildren(); return; }
    clear(actions, h('h2', null, `Waiting for you (${ids.length})`),
      ids.map(id => {
        const ev = pendingInfo.get(id);
        const onPage = document.getElementById(`ev-${id}`);
        // A call on the transcript's page is answered there; one on another page, here.
        return h('div', {class: 'pending-item'},
          ev ? h('div', null, h('span', {class: 'mono tool-name'}, ev.mcp_server_name ? `${ev.mcp_server_name} · ${ev.name}` : ev.name || ev.type), ' ',
            h('span', {class: 'meta'}, ev.type === 'agent.custom_tool_use' ? 'custom tool: the agent waits for its result' : 'asks for your confirmation'), ' ',
            h('details', {class: 'io inline'}, h('summary', null, 'input'), h('pre', {class: 'json'}, pretty(ev.input)))) : mono(id),
          ev && !onPage ? actionFor(ev) : null,
          onPage ? h('button', {type: 'button', class: 'small', onclick: () => pick(id)}, 'Answer in the transcript ↓') : null);
      }));
  }
  async function answer(events) {
    try {
      await sendEvents(sessionID, events);
      for (const e of events) ctx.pending.delete(e.tool_use_id || e.custom_tool_use_id);
      drawActions();
      toast('Sent.');
    } catch (e) {
      toast(e.message, 'error');
    }
  }
  // refreshPending reads the last idle and the calls it names.
  async function refreshPending(tail) {
    const r = await get(`${base}/events`, {limit: 1, order: 'desc', 'types[]': ['session.status_idle', 'session.status_running']});
    const last = r.data[0];
    ctx.pending.clear();
    if (!last || last.type !== 'session.status_idle' || !last.stop_reason || last.stop_reason.type !== 'requires_action') return;
    const ids = last.stop_reason.event_ids || [];
    const answered = new Set(tail.filter(e => e.type === 'user.tool_confirmation' || e.type === 'user.custom_tool_result')
      .map(e => e.tool_use_id || e.custom_tool_use_id));
    ids.filter(i => !answered.has(i)).forEach(i => ctx.pending.add(i));
    for (const ev of tail) if (ctx.pending.has(ev.id)) pendingInfo.set(ev.id, ev);
    const missing = [...ctx.pending].filter(i => !pendingInfo.has(i));
    if (missing.length) {
      const calls = await get(`${base}/events`, {limit: 200, order: 'desc', 'types[]': ['agent.tool_use', 'agent.mcp_tool_use', 'agent.custom_tool_use']});
      for (const ev of calls.data) if (ctx.pending.has(ev.id)) pendingInfo.set(ev.id, ev);
    }
  }

  async function send() {
    const msg = text.value.trim();
    if (!msg) { text.focus(); return; }
    sendBtn.disabled = true;
    try {
      await sendEvents(sessionID, [{type: 'user.message', content: [{type: 'text', text: msg}]}]);
      text.value = '';
    } catch (e) {
      toast(e.message, 'error');
    } finally {
      sendBtn.disabled = false;
    }
  }
  async function interrupt() {
    try {
      await sendEvents(sessionID, [{type: 'user.interrupt'}]);
      toast('Interrupt sent.');
    } catch (e) {
      toast(e.message, 'error');
    }
  }

  // First read: the tail of the log, the waterfall's spans, the pending calls.
  pages = [await fetchPage('')];
  lo = 0; hi = 0;
  const wf = await get(`${base}/events`, {limit: WF_EVENTS, order: 'desc', 'types[]': WATERFALL_TYPES});
  wfEvents = wf.data.slice().reverse();
  await refreshPending(pages[0].events);
  // The log is read after the session: a status event in it is newer than the session's status.
  const lastStatus = pages[0].events.findLast(ev => statusOf[ev.type]);
  if (lastStatus) setStatus(statusOf[lastStatus.type]);
  draw();
  drawWF();
  drawActions();
  if (pages[0].events.length) text.scrollIntoView({block: 'end'});

  // The live stream, from the last event read: nothing is missed between the read and the stream.
  const tail = pages[0].events;
  const from = tail.length ? tail[tail.length - 1].id : '0';
  const onEvent = ev => {
    if (statusOf[ev.type]) setStatus(statusOf[ev.type]);
    if (ev.type.startsWith('session.thread_')) readThreads();
    if (WATERFALL_TYPES.includes(ev.type)) {
      wfEvents.push(ev);
      if (wfEvents.length > WF_EVENTS * 2) wfEvents = wfEvents.slice(-WF_EVENTS);
      drawWF();
    }
    if (ev.type === 'agent.tool_use' || ev.type === 'agent.mcp_tool_use' || ev.type === 'agent.custom_tool_use') {
      pendingInfo.set(ev.id, ev);
      // Only calls that may still wait for the user are kept: a long session's calls (inputs and all) are not.
      for (const k of pendingInfo.keys()) {
        if (pendingInfo.size <= PENDING_MAX) break;
        if (!ctx.pending.has(k)) pendingInfo.delete(k);
      }
    }
    if (ev.type === 'agent.tool_result' || ev.type === 'agent.mcp_tool_result' || ev.type === 'user.custom_tool_result') {
      const useID = ev.tool_use_id || ev.mcp_tool_use_id || ev.custom_tool_use_id;
      if (!ctx.pending.has(useID)) pendingInfo.delete(useID);
    }
    if (ev.type === 'session.status_idle' && ev.stop_reason && ev.stop_reason.type === 'requires_action') {
      (ev.stop_reason.event_ids || []).forEach(i => ctx.pending.add(i));
      for (const i of ctx.pending) if (pendingInfo.has(i)) decorate(pendingInfo.get(i));
      drawActions();
    }
    if (ev.type === 'user.tool_confirmation' || ev.type === 'user.custom_tool_result') {
      ctx.pending.delete(ev.tool_use_id || ev.custom_tool_use_id);
      drawActions();
    }
    if (during) during.push(ev);
    if (atTail()) {
      if (appendLive(ev)) return;
    } else {
      missed++;
      liveNote.hidden = false;
      liveNote.textContent = `${missed} new event${missed === 1 ? '' : 's'}: show the latest`;
    }
    if (ev.type === 'session.status_idle' || ev.type === 'session.updated') get(base).then(setUsage).catch(() => {});
  };
  // appendLive adds a live event at the tail of the window; it reports whether the window is read again instead
  // (after LIVE_MAX live events).
  function appendLive(ev) {
    const nearBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 200;
    pages[dir === 'desc' ? 0 : hi].events.push(ev);
    addEvent(ev);
    list.querySelector('.empty')?.remove();
    if (++liveCount > LIVE_MAX) { moves.latest(); return true; }
    if (nearBottom) text.scrollIntoView({block: 'end'});
    return false;
  }
  // Previews: the model's answer as it is written, replaced by the logged event when it comes.
  const onPreview = p => {
    if (!atTail()) return;
    if (p.type === 'event_start' && p.event && !seen.has(p.event.id) && !document.getElementById(`ev-${p.event.id}`)) {
      const thinking = p.event.type === 'agent.thinking';
      list.querySelector('.empty')?.remove();
      list.appendChild(h('article', {class: `ev preview ${thinking ? 'thinking' : 'msg agent'}`, id: `ev-${p.event.id}`, 'aria-busy': 'true'},
        h('div', {class: 'ev-head'}, h('span', {class: `role role-${thinking ? 'thinking' : 'agent'}`}, thinking ? 'Thinking' : 'Agent'),
          h('span', {class: 'spacer'}), h('span', {class: 'meta'}, 'writing…')),
        h('div', {class: 'text'})));
    } else if (p.type === 'event_delta' && p.delta && p.delta.content) {
      const el = document.getElementById(`ev-${p.event_id}`);
      if (!el || !el.classList.contains('preview')) return;
      const texts = el.querySelectorAll('.text');
      let t = texts[p.delta.index];
      if (!t) { t = h('div', {class: 'text'}); el.appendChild(t); }
      t.appendChild(document.createTextNode(p.delta.content.text || ''));
    }
  };
  const stop = follow(`${base}/events/stream`, from, onEvent, (state, detail) => {
    streamState.textContent = state === 'live' ? '● live' : state === 'reconnecting' ? `reconnecting… ${detail || ''}` :
      state === 'error' ? `stream error: ${detail || ''}` : `stream closed${detail ? `: ${detail}` : ''}`;
    streamState.dataset.state = state;
  }, onPreview);
  // The waterfall's open spans grow with the clock.
  // (Not while the user is in it: a redraw would take their focus.)
  const tick = setInterval(() => {
    if (sess.status === 'running' && !wfBody.hidden && !document.hidden && !wfBody.contains(document.activeElement)) drawWF();
  }, 1000);

  return {
    cleanup: () => { stop(); clearInterval(tick); },
    keys: {
      m: () => text.focus(),
      x: () => { if (!interruptBtn.disabled) interrupt(); },
      w: () => toggleWF(),
      t: () => {
        const all = [...list.querySelectorAll('details.thinking')];
        const open = !all.some(d => d.open);
        all.forEach(d => { d.open = open; });
      },
      r: () => moves.latest(),
      n: () => moves.later(),
      p: () => moves.earlier(),
    },
  };
}
