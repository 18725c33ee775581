package console_test

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// TestConsoleThreads: a multi-agent session's page lists its threads (agent, status, parent, usage) and shows
// the children's cross-posted events; a thread's page shows its own transcript. A single-agent session's page
// has no threads table.
func TestConsoleThreads(t *testing.T) {
	e := newEnv(t, false)
	agent := e.create("/v1/agents", map[string]any{"name": "coordinator", "model": "claude-sonnet-4-5"})
	envID := e.create("/v1/environments", map[string]any{"name": "threads", "config": map[string]any{"type": "cloud"}})
	single := e.create("/v1/sessions", map[string]any{"agent": agent, "environment_id": envID})
	sess := e.create("/v1/sessions", map[string]any{"agent": agent, "environment_id": envID})

	now := time.Now().UTC()
	p := apitype.SessionThread{Type: apitype.ObjectSessionThread, ID: apitype.NewID(apitype.PrefixThread), Status: apitype.StatusRunning,
		Agent: apitype.ThreadAgent{Type: apitype.ThreadAgentAgent, Name: "coordinator"}, CreatedAt: now, UpdatedAt: now}
	c := apitype.SessionThread{Type: apitype.ObjectSessionThread, ID: apitype.NewID(apitype.PrefixThread), ParentThreadID: &p.ID,
		Status: apitype.StatusIdle, Agent: apitype.ThreadAgent{Type: apitype.ThreadAgentInline, Name: "researcher"},
		Usage:     &apitype.SessionUsage{InputTokens: 1234, OutputTokens: 56},
		CreatedAt: now.Add(time.Millisecond), UpdatedAt: now.Add(time.Millisecond)}
	appendIn := func(thread string, crossPost bool, typ apitype.EventType, payload any, threads ...apitype.SessionThread) {
		t.Helper()
		ev, err := apitype.MakeEvent(typ, payload)
		if err != nil {
			t.Fatal(err)
		}
		ev.Processed, ev.Thread, ev.CrossPost = true, thread, crossPost
		if _, err := e.st.EventAppend(context.Background(), &store.EventAppendParams{SessionID: sess,
			Events: []apitype.NewEvent{ev}, Threads: threads}); err != nil {
			t.Fatalf("append %s: %v", typ, err)
		}
	}
	msg := func(s string) apitype.AgentMessage {
		return apitype.AgentMessage{Content: []apitype.ContentBlock{{Type: apitype.ContentText, Text: s}}}
	}
	appendIn("", false, apitype.EventSessionThreadCreated, apitype.ThreadCreated{SessionThreadID: c.ID, AgentName: "researcher"}, p, c)
	appendIn("", false, apitype.EventAgentMessage, msg("The coordinator plans."))
	appendIn(c.ID, false, apitype.EventAgentMessage, msg("The researcher digs quietly."))
	appendIn(c.ID, true, apitype.EventSessionThreadStatusIdle, apitype.ThreadStatus{SessionThreadID: c.ID, AgentName: "researcher"})

	e.login()
	e.open("/sessions/" + single)
	e.wait("single-agent session", transcriptHas("No events yet.")+` && document.getElementById('threads')?.hidden`)

	e.open("/sessions/" + sess)
	e.wait("threads table", `document.querySelectorAll('#threads tbody tr').length === 2`)
	row := `document.querySelector('#threads tr[data-id="` + c.ID + `"]').textContent`
	e.wait("the child's row", row+`.includes('researcher') && `+row+`.includes('idle') && `+row+`.includes('coordinator') && `+
		row+`.includes('1234 in / 56 out')`)
	e.wait("the session's transcript", transcriptHas("The coordinator plans.")+" && "+transcriptHas("Thread researcher: idle")+
		" && !"+transcriptHas("digs quietly")+` && !document.querySelector('#transcript .ev.unknown')`)
	e.shot("threads")

	e.do("open the child", chromedp.Click(chromedp.CSS(`#threads tr[data-id="`+c.ID+`"] a`)))
	e.wait("the child's transcript", transcriptHas("The researcher digs quietly.")+" && "+transcriptHas("Thread researcher: idle")+
		" && !"+transcriptHas("The coordinator plans.")+` && location.hash.endsWith('/threads/`+c.ID+`')`)
	// Live: the child's new events, not the primary's.
	appendIn("", false, apitype.EventAgentMessage, msg("The coordinator waits."))
	appendIn(c.ID, false, apitype.EventAgentMessage, msg("The researcher found it."))
	e.wait("the child's live event", transcriptHas("The researcher found it.")+" && !"+transcriptHas("The coordinator waits."))
	e.shot("thread")
}
