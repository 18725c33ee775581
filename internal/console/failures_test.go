package console_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// TestConsoleFailuresShown: the console shows failures where users look (issue 28, item 6). The sessions list
// shows how each session at rest last stopped, errors included, not only "idle"; a command's non-zero exit is
// an error result, not a failed turn; a sandbox that waited for its image's build says so in the transcript and
// the waterfall (item 5); an environment shows its image build, and a failed build says which
// package failed and why.
func TestConsoleFailuresShown(t *testing.T) {
	e := newEnv(t, false)
	ctx := context.Background()
	agent := e.create("/v1/agents", map[string]any{"name": "stopper", "model": "claude-sonnet-4-5",
		"tools": []any{map[string]any{"type": "agent_toolset_20260401"}}})
	envID := e.create("/v1/environments", map[string]any{"name": "stops", "config": map[string]any{"type": "cloud"}})
	// appendEvents writes a session's log as a brain would have, its status with the last append.
	appendEvents := func(sess string, status string, evs ...[2]string) []apitype.Event {
		t.Helper()
		var batch []apitype.NewEvent
		for _, ev := range evs {
			batch = append(batch, apitype.NewEvent{Type: apitype.EventType(ev[0]), Data: json.RawMessage(ev[1]), Processed: true})
		}
		out, err := e.st.EventAppend(ctx, &store.EventAppendParams{SessionID: sess, Events: batch, Status: status})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	newSession := func(title string) string {
		return e.create("/v1/sessions", map[string]any{"agent": agent, "environment_id": envID, "title": title})
	}
	running := [2]string{string(apitype.EventSessionStatusRunning), `{}`}
	idle := func(reason string) [2]string {
		return [2]string{string(apitype.EventSessionStatusIdle), `{"stop_reason":{"type":"` + reason + `"}}`}
	}
	sessErr := func(typ, retry, msg string) [2]string {
		return [2]string{string(apitype.EventSessionError), `{"error":{"type":"` + typ + `","message":"` + msg + `","retry_status":{"type":"` + retry + `"}}}`}
	}

	done := newSession("Finished")
	appendEvents(done, apitype.StatusIdle, running, idle("end_turn"))
	overloaded := newSession("Overloaded")
	appendEvents(overloaded, apitype.StatusIdle, running, idle("end_turn"), running,
		sessErr("model_overloaded_error", "retrying", "overloaded"), sessErr("model_overloaded_error", "exhausted", "overloaded, gave up"),
		idle("retries_exhausted"))
	waiting := newSession("Waiting")
	appendEvents(waiting, apitype.StatusIdle, running, idle("requires_action"))
	budget := newSession("Over budget")
	appendEvents(budget, apitype.StatusIdle, running, idle("budget_reached"))
	mcpDown := newSession("MCP refused")
	appendEvents(mcpDown, apitype.StatusIdle, running,
		sessErr("mcp_authentication_failed_error", "retrying", "no credential of the session's vaults matches it"), idle("end_turn"))
	// A bash call whose command exited 3: an error result the tool reported, no failure source.
	exit := newSession("Exit 3")
	use := appendEvents(exit, "", running, [2]string{string(apitype.EventAgentToolUse), `{"name":"bash","input":{"command":"exit 3"},"evaluated_permission":"allow"}`},
		// Its sandbox waited for the base image's build (issue 28, item 5).
		[2]string{string(apitype.EventSpanSandboxProvisionStart), `{"backend":"bwrap","image":{"id":"base-test","status":"building"}}`})
	appendEvents(exit, apitype.StatusIdle,
		[2]string{string(apitype.EventAgentToolResult), `{"tool_use_id":"` + use[1].ID + `","is_error":true,"content":[{"type":"text","text":"\nexit code: 3"}]}`},
		[2]string{string(apitype.EventAgentMessage), `{"content":[{"type":"text","text":"The check exited 3."}]}`},
		idle("end_turn"))

	e.login()
	stop := func(sess string) string {
		return `(document.querySelector('[data-stop="` + sess + `"]')?.textContent || '')`
	}
	e.wait("stop reasons in the list", stop(done)+` === 'end_turn'`+
		` && `+stop(overloaded)+` === 'error: model overloaded'`+
		` && `+stop(waiting)+`.startsWith('requires_action')`+
		` && `+stop(budget)+`.startsWith('budget_reached')`+
		` && `+stop(mcpDown)+` === 'end_turn · 1 error: mcp authentication failed'`+
		` && `+stop(exit)+` === 'end_turn'`)
	if cls := e.eval(`document.querySelector('[data-stop="` + overloaded + `"]').className`); cls != "sub stop bad" {
		t.Errorf("the failed session's stop has class %q", cls)
	}
	if title := e.eval(`document.querySelector('[data-stop="` + overloaded + `"]').title`); title != "overloaded, gave up\noverloaded" {
		t.Errorf("the failed session's stop says %q on hover", title)
	}
	e.shot("sessions-stop-reasons")

	// The bash call's non-zero exit is an error result in its span, not a failed span or turn.
	e.open("/sessions/" + exit)
	e.wait("waterfall", `!!document.querySelector('#waterfall .wf-row.kind-tool') && `+transcriptHas("The check exited 3."))
	if got := e.eval(`document.querySelector('#turn-select option').textContent + ' | ' + document.querySelectorAll('#waterfall .wf-row.failed, #waterfall .wf-failure').length + ' | ' + document.querySelectorAll('#waterfall .wf-row.tool-error').length`); got[len(got)-6:] != " 0 | 1" || strings.Contains(got, "failed") {
		t.Errorf("the turn of a non-zero exit: %q, want no failure and one error result", got)
	}
	// Its sandbox waited for an image build: the transcript says so, spans hidden, and so does the waterfall.
	if !strings.Contains(e.eval(`document.getElementById('ev-`+use[2].ID+`')?.textContent || ''`), "Waiting for the sandbox's image to build (base-test)") {
		t.Errorf("the transcript does not say the sandbox waited for its image")
	}
	if got := e.eval(`[...document.querySelectorAll('#waterfall .wf-row.kind-provision')].map(r => r.textContent).join('|')`); !strings.Contains(got, "waiting for the image build") {
		t.Errorf("the waterfall's provisioning: %q, want it waiting for the image build", got)
	}

	// An environment whose image failed to build says so, in the list and on its page, with the package and why.
	img := &apitype.EnvironmentImage{Status: apitype.ImageFailed, ID: "img-test", UpdatedAt: apitype.Now(),
		Error: &apitype.ImageBuildError{Manager: "pip", Package: "corral-no-such-package",
			Message: "unknown package (or no version of it for this Python): ERROR: No matching distribution found for corral-no-such-package"}}
	if err := e.st.EnvironmentImageSet(ctx, envID, img); err != nil {
		t.Fatal(err)
	}
	e.open("/environments")
	e.wait("image status in the list", `[...document.querySelectorAll('table.list tbody tr')].some(r => r.textContent.includes('stops') && r.textContent.includes('failed') && r.textContent.includes('pip corral-no-such-package'))`)
	e.open("/environments/" + envID)
	card := `(document.getElementById('env-image')?.textContent || '')`
	e.wait("image card", card+`.includes('failed') && `+card+`.includes('pip package corral-no-such-package failed to build') && `+card+`.includes('No matching distribution found')`)
	e.shot("environment-image-failed")
}
