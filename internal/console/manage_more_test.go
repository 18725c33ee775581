package console_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/proxy"
	"github.com/corralhq/corral/internal/server"
	"github.com/corralhq/corral/internal/vault"
)

// TestConsoleManageAgentMultiagent: an agent is created through the form with a roster picked from the other
// agents, an advisor and an aws_role execution identity (after the API's refusal of a role without its ARN,
// shown on the form), read back through the API; the edit form is filled from it, and a roster the API refuses
// (typed in the JSON field) shows the API's message; clearing the field and the identity makes a version without
// them.
func TestConsoleManageAgentMultiagent(t *testing.T) {
	e := newEnv(t, false)
	e.login()
	helper := e.create("/v1/agents", map[string]any{"name": "researcher", "model": "claude-sonnet-4-5"})
	e.create("/v1/agents", map[string]any{"name": "writer", "model": "claude-sonnet-4-5"})

	e.open("/agents/new")
	e.wait("new agent form", `document.getElementById('agent-roster')?.options.length === 2`)
	e.setValue("agent-name", "lead")
	e.setValue("agent-model", "claude-sonnet-4-5")
	e.eval(`(() => { const s = document.getElementById('agent-roster'); [...s.options].forEach(o => o.selected = o.value === ` + js(helper) + `);
		s.dispatchEvent(new Event('change', {bubbles: true})); return ''; })()`)
	e.setValue("agent-advisor", "claude-opus-4-6")
	var m map[string]any
	if err := json.Unmarshal([]byte(e.eval(`document.getElementById('agent-multiagent').value`)), &m); err != nil {
		t.Fatal(err)
	}
	if sub, _ := m["subagents"].(map[string]any); m["type"] != "multiagent_20261001" || sub == nil || len(sub["predefined_agents"].([]any)) != 1 {
		t.Fatalf("the roster picker wrote %v", m)
	}
	e.setValue("agent-identity", "aws_role")
	want := e.refused("POST", "/v1/agents", map[string]any{"name": "lead", "model": "claude-sonnet-4-5", "multiagent": m,
		"execution_identity": map[string]any{"type": "aws_role"}})
	e.click("agent-form-submit")
	e.wait("the API's refusal of the identity", formError("agent-form", want))
	const arn = "arn:aws:iam::123456789012:role/corral"
	e.setValue("agent-role-arn", arn)
	e.click("agent-form-submit")
	e.wait("the new agent's page", `location.hash.startsWith('#/agents/agent_') && document.querySelector('h1')?.textContent === 'lead'`)
	id := strings.TrimPrefix(e.eval(`location.hash`), "#/agents/")
	var a struct {
		Version    int
		Multiagent struct {
			Type      string
			Advisor   struct{ Type, Model string }
			Subagents struct {
				Type             string
				PredefinedAgents []struct {
					Type, ID string
					Version  int
				} `json:"predefined_agents"`
			}
		}
		ExecutionIdentity apitype.ExecutionIdentity `json:"execution_identity"`
	}
	e.api("GET", "/v1/agents/"+id, nil, &a)
	ma := a.Multiagent
	if ma.Type != "multiagent_20261001" || ma.Advisor.Type != "enabled" || ma.Advisor.Model != "claude-opus-4-6" ||
		ma.Subagents.Type != "enabled" || len(ma.Subagents.PredefinedAgents) != 1 || ma.Subagents.PredefinedAgents[0].ID != helper ||
		ma.Subagents.PredefinedAgents[0].Version != 1 {
		t.Fatalf("the agent's multiagent: %+v", ma)
	}
	if a.ExecutionIdentity.Type != apitype.IdentityAWSRole || a.ExecutionIdentity.RoleARN != arn {
		t.Fatalf("the agent's execution identity: %+v", a.ExecutionIdentity)
	}

	// The edit form shows them; a roster that lists an agent twice is the API's to refuse.
	e.open("/agents/" + id + "/edit")
	e.wait("edit form", `document.getElementById('agent-advisor')?.value === 'claude-opus-4-6' && document.getElementById('agent-role-arn').value === `+js(arn)+
		` && document.getElementById('agent-identity').value === 'aws_role' && [...document.getElementById('agent-roster').selectedOptions].map(o => o.value).join() === `+js(helper))
	e.shot("step-agent-multiagent")
	twice := map[string]any{"type": "multiagent_20261001", "subagents": map[string]any{"type": "enabled", "predefined_agents": []string{helper, helper}}}
	want = e.refused("POST", "/v1/agents/"+id, map[string]any{"version": 1, "multiagent": twice})
	b, _ := json.Marshal(twice)
	e.setValue("agent-multiagent", string(b))
	e.click("agent-form-submit")
	e.wait("the API's refusal of the roster", formError("agent-form", want))
	e.setValue("agent-multiagent", "")
	e.setValue("agent-identity", "service_account")
	e.setValue("agent-role-arn", "")
	e.click("agent-form-submit")
	e.wait("version 2", `location.hash === '#/agents/`+id+`' && document.querySelector('.facts')?.textContent.includes('v2')`)
	var raw struct {
		Version           int
		Multiagent        json.RawMessage
		ExecutionIdentity apitype.ExecutionIdentity `json:"execution_identity"`
	}
	e.api("GET", "/v1/agents/"+id, nil, &raw)
	if raw.Version != 2 || string(raw.Multiagent) != "null" || raw.ExecutionIdentity.Type != apitype.IdentityServiceAccount {
		t.Fatalf("after clearing: v%d multiagent %s identity %+v", raw.Version, raw.Multiagent, raw.ExecutionIdentity)
	}
}

// status is the HTTP status of a GET of path.
func (e *env) status(path string) int {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.srv.URL()+path, nil)
	req.Header.Set("x-api-key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// deleteFrom deletes a resource with the two-click button of its page: one click arms it (nothing deleted), the
// second deletes it and shows the list at hash.
func (e *env) deleteFrom(page, button, list, path string) {
	e.t.Helper()
	e.open(page)
	// A page that renders again (a live session, an image's build status) replaces the button and forgets that it
	// was armed: each poll clicks an unarmed button until one is armed, and then one that is armed until the list
	// shows. A click runs its handler at once, so no poll clicks an armed button twice.
	b := `document.getElementById(` + js(button) + `)`
	e.wait("armed "+button, `(() => { const b = `+b+`; if (!b) return false; if (b.textContent.includes('again')) return true; b.click(); return false; })()`)
	if s := e.status(path); s != http.StatusOK {
		e.t.Fatalf("one click on %s: GET %s is %d", button, path, s)
	}
	e.wait("the list after "+button, `(() => { if (location.hash === `+js(list)+`) return true; const b = `+b+`; if (b && !b.disabled) b.click(); return false; })()`)
	if s := e.status(path); s != http.StatusNotFound {
		e.t.Fatalf("after %s: GET %s is %d, want 404", button, path, s)
	}
}

// TestConsoleManageDelete: a credential, a vault (archived first: an archived one can be deleted too), a session
// and an environment are deleted from their pages with two clicks.
func TestConsoleManageDelete(t *testing.T) {
	seal, err := vault.New(vault.NewKey())
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, false, func(c *server.Config) { c.API.Sealer = seal })
	e.login()
	v := e.create("/v1/vaults", map[string]any{"display_name": "ops"})
	c := e.create("/v1/vaults/"+v+"/credentials", map[string]any{"auth": map[string]any{"type": "static_bearer",
		"mcp_server_url": "https://mcp.example.com/mcp", "token": "tok"}})
	e.deleteFrom("/vaults/"+v+"/credentials/"+c+"/edit", "delete-credential", "#/vaults/"+v, "/v1/vaults/"+v+"/credentials/"+c)
	e.api("POST", "/v1/vaults/"+v+"/archive", map[string]any{}, nil)
	e.deleteFrom("/vaults/"+v, "delete-vault", "#/vaults", "/v1/vaults/"+v)

	agent := e.create("/v1/agents", map[string]any{"name": "a", "model": "claude-sonnet-4-5"})
	env := e.create("/v1/environments", map[string]any{"name": "box", "config": map[string]any{"type": "cloud"}})
	s := e.create("/v1/sessions", map[string]any{"agent": agent, "environment_id": env})
	e.deleteFrom("/sessions/"+s, "delete-session", "#/sessions", "/v1/sessions/"+s)
	e.deleteFrom("/environments/"+env, "delete-environment", "#/environments", "/v1/environments/"+env)
}

// TestConsoleManageValidate: Validate on an mcp_oauth credential's page shows the answer of mcp_oauth_validate
// from the server's MCP proxy as text, the same as the API's: a server that cannot be reached (the probe's
// initialize failed with no HTTP answer), then one that refuses the token (its HTTP status and body).
func TestConsoleManageValidate(t *testing.T) {
	seal, err := vault.New(vault.NewKey())
	if err != nil {
		t.Fatal(err)
	}
	// An MCP server that refuses every token.
	mcpSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		w.Write([]byte(`{"error": "token revoked by the test"}`))
	}))
	t.Cleanup(mcpSrv.Close)
	e := newEnv(t, false, func(c *server.Config) {
		c.API.Sealer = seal
		p, err := proxy.NewMCP(proxy.MCPConfig{Store: c.Store, Vault: seal, AllowInternal: []string{"127.0.0.1:1", strings.TrimPrefix(mcpSrv.URL, "http://")}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		c.API.Validator = p
	})
	e.login()
	v := e.create("/v1/vaults", map[string]any{"display_name": "ops"})
	c := e.create("/v1/vaults/"+v+"/credentials", map[string]any{"auth": map[string]any{"type": "mcp_oauth",
		"mcp_server_url": "http://127.0.0.1:1/mcp", "access_token": "tok"}})
	var want apitype.CredentialValidation
	e.api("POST", "/v1/vaults/"+v+"/credentials/"+c+"/mcp_oauth_validate", map[string]any{}, &want)
	if want.MCPProbe == nil {
		t.Fatalf("the API's validation: %+v", want)
	}
	e.open("/vaults/" + v + "/credentials/" + c + "/edit")
	e.wait("the credential's page", `!!document.getElementById('validate-credential')`)
	e.click("validate-credential")
	e.wait("the validation", `document.getElementById('cred-validation')?.textContent.includes('Failed at')`)
	got := e.eval(`document.getElementById('cred-validation').textContent`)
	t.Logf("the page shows: %s", got)
	for _, s := range []string{"Status: " + want.Status, "refresh token: no", "Failed at " + want.MCPProbe.Method, "no HTTP answer"} {
		if !strings.Contains(got, s) {
			t.Errorf("the page shows %q, want %q in it", got, s)
		}
	}

	// A server that refuses the token: the page shows its HTTP status and body.
	refused := e.create("/v1/vaults/"+v+"/credentials", map[string]any{"auth": map[string]any{"type": "mcp_oauth",
		"mcp_server_url": mcpSrv.URL + "/mcp", "access_token": "tok"}})
	e.api("POST", "/v1/vaults/"+v+"/credentials/"+refused+"/mcp_oauth_validate", map[string]any{}, &want)
	if want.MCPProbe == nil || want.MCPProbe.HTTPResponse == nil {
		t.Fatalf("the API's validation against a refusing server: %+v", want)
	}
	e.open("/vaults/" + v + "/credentials/" + refused + "/edit")
	e.wait("the credential's page", `!!document.getElementById('validate-credential')`)
	e.click("validate-credential")
	e.wait("the validation", `document.getElementById('cred-validation')?.textContent.includes('Failed at')`)
	got = e.eval(`document.getElementById('cred-validation').textContent`)
	t.Logf("the page shows: %s", got)
	wants := []string{"Status: " + want.Status, "Failed at " + want.MCPProbe.Method, fmt.Sprintf("HTTP %d", want.MCPProbe.HTTPResponse.StatusCode),
		"token revoked by the test"}
	if want.Refresh != nil {
		wants = append(wants, "Refresh "+want.Refresh.Status)
	}
	for _, s := range wants {
		if !strings.Contains(got, s) {
			t.Errorf("the page shows %q, want %q in it", got, s)
		}
	}
	e.shot("step-credential-validate")
}
