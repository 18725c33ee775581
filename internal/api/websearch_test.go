package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/api"
)

// TestWebSearchWarning: on a server without a search provider, an agent create or update that enables
// web_search succeeds, with a Warning header naming the flag; one that disables it, or a server with a
// provider, gets none.
func TestWebSearchWarning(t *testing.T) {
	t.Parallel()
	create := func(h *harness, tools string) (int, http.Header, string) {
		code, hdr, body := h.do("POST", "/v1/agents", `{"name":"a","model":"claude-sonnet-4-5","tools":`+tools+`}`,
			"anthropic-beta", "managed-agents-2026-04-01")
		var a struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(body, &a)
		return code, hdr, a.ID
	}
	on := `[{"type":"agent_toolset_20260401","configs":[{"name":"web_search","enabled":true,"blocked_domains":["spam.test"]}]}]`
	off := `[{"type":"agent_toolset_20260401","configs":[{"name":"web_search","enabled":false}]}]`

	h := newHarness(t)
	code, hdr, id := create(h, on)
	if code != http.StatusOK || !strings.Contains(hdr.Get("Warning"), "--web-search") {
		t.Fatalf("create: %d, Warning %q", code, hdr.Get("Warning"))
	}
	if code, hdr, _ := create(h, off); code != http.StatusOK || hdr.Get("Warning") != "" {
		t.Fatalf("create with web_search off: %d, Warning %q", code, hdr.Get("Warning"))
	}
	code, hdr, _ = h.do("POST", "/v1/agents/"+id, `{"version":1,"description":"d"}`, "anthropic-beta", "managed-agents-2026-04-01")
	if code != http.StatusOK || !strings.Contains(hdr.Get("Warning"), "no search provider") {
		t.Fatalf("update: %d, Warning %q", code, hdr.Get("Warning"))
	}

	withProvider := newHarness(t, func(c *api.Config) { c.WebSearch = "searxng" })
	if code, hdr, _ := create(withProvider, on); code != http.StatusOK || hdr.Get("Warning") != "" {
		t.Fatalf("create with a provider: %d, Warning %q", code, hdr.Get("Warning"))
	}
}
