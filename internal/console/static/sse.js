// The live stream of a session's events: Server-Sent Events read over fetch (EventSource cannot send the API
// key header), resumed after a drop with Last-Event-ID, so no event is missed or repeated.

import {headers} from './api.js';

// follow streams the events of the stream at path (a session's, or a thread's) appended after lastEventID (an event id, or "0" for the whole log),
// calling onEvent(event) for each, onPreview(frame) for the previews of a model answer being written
// (event_start, event_delta: not log events, they have no id), and onState(state, detail) when the connection
// changes ('live', 'reconnecting', 'closed'). It returns a function that stops it.
export function follow(path, lastEventID, onEvent, onState, onPreview) {
  let last = lastEventID;
  let stopped = false;
  let ctrl = null;
  let delay = 500;

  async function once() {
    ctrl = new AbortController();
    const h = headers({accept: 'text/event-stream'});
    if (last) h['Last-Event-ID'] = last;
    const q = onPreview ? '?event_deltas[]=agent.message&event_deltas[]=agent.thinking' : '';
    const resp = await fetch(`${path}${q}`, {headers: h, signal: ctrl.signal,
      cache: 'no-store', credentials: 'omit', referrerPolicy: 'no-referrer'});
    if (!resp.ok) {
      const err = new Error(`stream: HTTP ${resp.status}`);
      err.status = resp.status;
      throw err;
    }
    onState('live');
    // The back-off starts again only once the stream has carried something (an event, a preview, a ping):
    // a server that accepts the stream and drops or fails it at once is not asked again every 500 ms.
    const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    for (;;) {
      const {value, done} = await reader.read();
      if (done) return;
      buf += value;
      let i;
      // Frames end with a blank line; the API writes \n line ends.
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const frame = buf.slice(0, i);
        buf = buf.slice(i + 2);
        dispatch(frame);
      }
      if (buf.length > 64 << 20) throw new Error('stream: frame too large');
    }
  }

  function dispatch(frame) {
    let evID = null;
    let type = 'message';
    const data = [];
    let comment = false;
    for (const line of frame.split('\n')) {
      if (line.startsWith(':')) comment = true;
      if (line === '' || line.startsWith(':')) continue;
      const c = line.indexOf(':');
      const field = c < 0 ? line : line.slice(0, c);
      let val = c < 0 ? '' : line.slice(c + 1);
      if (val.startsWith(' ')) val = val.slice(1);
      if (field === 'id') evID = val;
      else if (field === 'event') type = val;
      else if (field === 'data') data.push(val);
    }
    if (!data.length) {
      if (comment) delay = 500;
      return;
    }
    let ev;
    try { ev = JSON.parse(data.join('\n')); } catch { return; }
    if (type === 'error' || (ev && ev.type === 'error' && ev.error)) {
      onState('error', ev.error && ev.error.message);
      return;
    }
    delay = 500;
    if (type === 'event_start' || type === 'event_delta') {
      if (onPreview) onPreview(ev);
      return;
    }
    if (evID) last = evID;
    onEvent(ev);
  }

  (async () => {
    while (!stopped) {
      try {
        await once();
        if (stopped) break;
        onState('reconnecting', 'the server closed the stream');
      } catch (e) {
        if (stopped || e.name === 'AbortError') break;
        if (e.status === 401 || e.status === 403 || e.status === 404) {
          onState('closed', e.message);
          return;
        }
        onState('reconnecting', e.message);
      }
      await new Promise(r => setTimeout(r, delay));
      delay = Math.min(delay * 2, 15000);
    }
    onState('closed');
  })();

  return () => {
    stopped = true;
    if (ctrl) ctrl.abort();
  };
}
