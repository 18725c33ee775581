package console_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// TestConsoleWindowBackToTail: events appended while the transcript's window is off the tail are shown,
// with no gap, once Later brings the window back to the tail; and the note of missed events goes.
func TestConsoleWindowBackToTail(t *testing.T) {
	e := newEnv(t, false)
	ctx := context.Background()
	agent := e.create("/v1/agents", map[string]any{"name": "chatty", "model": "claude-sonnet-4-5"})
	envID := e.create("/v1/environments", map[string]any{"name": "w", "config": map[string]any{"type": "cloud"}})
	sess := e.create("/v1/sessions", map[string]any{"agent": agent, "environment_id": envID, "title": "Window"})
	appendMessages := func(from, to int) {
		t.Helper()
		var batch []apitype.NewEvent
		for j := from; j <= to; j++ {
			ev, err := apitype.MakeEvent(apitype.EventAgentMessage, map[string]any{
				"content": []any{map[string]any{"type": "text", "text": fmt.Sprintf("message #%d", j)}}})
			if err != nil {
				t.Fatal(err)
			}
			batch = append(batch, ev)
		}
		if _, err := e.st.EventAppend(ctx, &store.EventAppendParams{SessionID: sess, Events: batch}); err != nil {
			t.Fatal(err)
		}
	}
	appendMessages(1, 400)
	e.login()
	e.open("/sessions/" + sess)
	shows := func(n int) string {
		return fmt.Sprintf(`[...document.querySelectorAll('#transcript .msg.agent .text')].some(el => el.textContent === 'message #%d')`, n)
	}
	idle := `!document.getElementById('transcript').hasAttribute('aria-busy')`
	e.wait("tail", shows(400)+` && document.getElementById('stream-state')?.dataset.state === 'live'`)
	// Three pages back: the window (three pages) leaves the tail.
	for i := range 3 {
		e.do("earlier", chromedp.Click(chromedp.ID("tr-earlier")))
		e.wait(fmt.Sprintf("earlier %d", i+1), idle+` && `+shows(300-100*i))
	}
	e.wait("off the tail", `!`+shows(400))
	appendMessages(401, 410)
	e.wait("missed", `!document.querySelector('.live-note').hidden`)
	e.do("later", chromedp.Click(chromedp.ID("tr-later")))
	e.wait("back at the tail", idle+` && `+shows(410))
	// What is shown is one run of the log, without a hole where the window left the tail.
	gap := e.eval(`(() => { const ns = [...document.querySelectorAll('#transcript .msg.agent .text')].map(el => Number(el.textContent.replace('message #', '')));
		for (let i = 1; i < ns.length; i++) if (ns[i] !== ns[i - 1] + 1) return ns[i - 1] + ' then ' + ns[i];
		return ns.length ? '' : 'nothing shown'; })()`)
	if gap != "" {
		t.Errorf("back at the tail, the transcript skips events: %s", gap)
	}
	if e.eval(`String(document.querySelector('.live-note').hidden)`) != "true" {
		t.Errorf("back at the tail, the note of missed events is still shown: %s", e.eval(`document.querySelector('.live-note').textContent`))
	}
}

// TestConsoleStreamBackOff: a server that accepts the event stream and ends it at once is asked again after a
// growing delay (500 ms, 1 s, 2 s, ...), not every 500 ms. The check is a lower bound: a slow machine only
// spaces the requests out more.
func TestConsoleStreamBackOff(t *testing.T) {
	e := newEnv(t, false)
	agent := e.create("/v1/agents", map[string]any{"name": "quiet", "model": "claude-sonnet-4-5"})
	envID := e.create("/v1/environments", map[string]any{"name": "b", "config": map[string]any{"type": "cloud"}})
	sess := e.create("/v1/sessions", map[string]any{"agent": agent, "environment_id": envID, "title": "Back-off"})
	e.login()
	e.open("/sessions/" + sess)
	e.wait("live", `document.getElementById('stream-state')?.dataset.state === 'live'`)
	e.mu.Lock()
	before := len(e.streamTimes)
	e.mu.Unlock()
	e.dropStreams.Store(true)
	e.front.CloseClientConnections()
	var times []time.Time
	deadline := time.Now().Add(60 * time.Second)
	for len(times) < 3 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		e.mu.Lock()
		times = slices.Clone(e.streamTimes[before:])
		e.mu.Unlock()
	}
	if len(times) < 3 {
		t.Fatalf("%d stream requests in a minute after the drop, want 3", len(times))
	}
	// 1 s then 2 s between the first three reconnections with a back-off; 1 s in all without.
	if gap := times[2].Sub(times[0]); gap < 2500*time.Millisecond {
		t.Errorf("three stream requests within %v of a server that ends each at once: no back-off", gap)
	}
}

// TestConsoleLiveDuringMove: an event that comes live while the transcript reads its tail again (r, as after LIVE_MAX live events) stays
// on screen, though the page read was answered before the event was logged.
func TestConsoleLiveDuringMove(t *testing.T) {
	e := newEnv(t, false)
	ctx := context.Background()
	agent := e.create("/v1/agents", map[string]any{"name": "live", "model": "claude-sonnet-4-5"})
	envID := e.create("/v1/environments", map[string]any{"name": "l", "config": map[string]any{"type": "cloud"}})
	sess := e.create("/v1/sessions", map[string]any{"agent": agent, "environment_id": envID, "title": "Live"})
	say := func(text string) {
		t.Helper()
		ev, err := apitype.MakeEvent(apitype.EventAgentMessage, map[string]any{"content": []any{map[string]any{"type": "text", "text": text}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.st.EventAppend(ctx, &store.EventAppendParams{SessionID: sess, Events: []apitype.NewEvent{ev}}); err != nil {
			t.Fatal(err)
		}
	}
	say("before")
	e.login()
	e.open("/sessions/" + sess)
	e.wait("live", transcriptHas("before")+` && document.getElementById('stream-state')?.dataset.state === 'live'`)
	hd := &hold{served: make(chan struct{}), release: make(chan struct{})}
	e.holdNext.Store(hd)
	e.do("latest (r)", chromedp.KeyEvent("r"))
	select {
	case <-hd.served:
	case <-time.After(60 * time.Second):
		close(hd.release)
		t.Fatal("the page did not read its tail again")
	}
	say("during the read")
	e.wait("shown live", transcriptHas("during the read"))
	close(hd.release)
	e.wait("read", `!document.getElementById('transcript').hasAttribute('aria-busy')`)
	if e.eval(`String(`+transcriptHas("during the read")+`)`) != "true" {
		t.Error("the event that came live while the tail was read again is no longer shown")
	}
}
