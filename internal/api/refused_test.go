package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/apitype"
)

// TestRefusedStrings: names and ids with NUL characters and image or document sources whose data is not base64
// are refused at the API with a 400 naming the field, not by the model later.
func TestRefusedStrings(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	id := h.newSession(ctx, agentID, envID)
	for _, tc := range []struct{ method, path, body, want string }{
		{"POST", "/v1/agents", `{"name":"a\u0000b","model":"claude-sonnet-4-6"}`, "name: must not contain NUL"},
		{"POST", "/v1/environments", `{"name":"e\u0000"}`, "name: must not contain NUL"},
		{"POST", "/v1/sessions", `{"agent":"` + agentID + `","environment_id":"` + envID + `","title":"t\u0000"}`,
			"title: must not contain NUL"},
		{"POST", "/v1/vaults", `{"display_name":"\u0000"}`, "display_name: must not contain NUL"},
		{"POST", "/v1/memory_stores", `{"name":"m\u0000"}`, "name: must not contain NUL"},
		{"POST", "/v1/sessions/" + id + "/events",
			`{"events":[{"type":"user.message","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"not base64!"}}]}]}`,
			"events[0].content[0].source.data: not valid base64"},
		{"POST", "/v1/sessions/" + id + "/events",
			`{"events":[{"type":"user.message","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"AAA"}}]}]}`,
			"events[0].content[0].source.data: not valid base64"},
		{"POST", "/v1/sessions",
			`{"agent":"` + agentID + `","environment_id":"` + envID + `","initial_events":[{"type":"user.message","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"%%%"}}]}]}`,
			"initial_events[0].content[0].source.data: not valid base64"},
	} {
		status, _, body := h.do(tc.method, tc.path, tc.body)
		var env envelope
		decodeRaw(t, string(body), &env)
		if status != http.StatusBadRequest || env.Error.Type != apitype.ErrInvalidRequest || !strings.Contains(env.Error.Message, tc.want) {
			t.Errorf("%s %s: %d %s %q, want 400 containing %q", tc.method, tc.path, status, env.Error.Type, env.Error.Message, tc.want)
		}
	}
	// Content may hold any character: a NUL in message text is the user's business.
	if _, err := h.client.Beta.Sessions.Events.Send(ctx, id, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{userText("a\x00b")},
	}); err != nil {
		t.Errorf("text with NUL: %v", err)
	}
	// A valid base64 image is accepted.
	status, _, body := h.do("POST", "/v1/sessions/"+id+"/events",
		`{"events":[{"type":"user.message","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]}]}`)
	if status != http.StatusOK {
		t.Errorf("valid image: %d %s", status, body)
	}
}
