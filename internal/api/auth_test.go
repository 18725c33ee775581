package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
)

// TestCredentialReach: each kind of credential, valid and used on its own environment, work item and session,
// is refused (401 or 403, with the error envelope) by every route of the table whose access does not take it.
func TestCredentialReach(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, _ := h.seed(ctx)
	envID, key, sessID := h.selfHosted(ctx, agentID)
	w := h.queue(ctx, envID, sessID)
	var polled apitype.Work
	status, _, body := h.do("GET", "/v1/environments/"+envID+"/work/poll", "", bearer(key)...)
	decodeRaw(t, string(body), &polled)
	if status != http.StatusOK || polled.ID != w.ID || polled.Secret == nil {
		t.Fatalf("poll: %d %s", status, body)
	}
	token := apitype.SessionsTokenFromSecret(*polled.Secret)
	routes := newAPI(t, api.Config{Store: h.store}).RouteAccesses()
	fill := strings.NewReplacer("{$}", "", "{environment_id}", envID, "{session_id}", sessID, "{work_id}", w.ID,
		"{agent_id}", "agent_x", "{vault_id}", "vlt_x", "{credential_id}", "vcrd_x", "{file_id}", "file_x",
		"{skill_id}", "skill_x", "{version}", "1", "{resource_id}", "sesrsc_x", "{key_id}", "envkey_x", "{thread_id}", "sthr_x",
		"{model_id}", "claude-sonnet-4-6", "{memory_store_id}", "memstore_x", "{memory_id}", "mem_x",
		"{memory_version_id}", "memver_x", "{dream_id}", "drm_x", "{deployment_id}", "depl_x",
		"{deployment_run_id}", "drun_x", "{webhook_endpoint_id}", "whep_x",
		"{tunnel_id}", "tnl_x", "{certificate_id}", "tcrt_x", "{op...}", "info/refs", "{workspace_id}", "wrkspc_x",
		"{api_key_id}", "apikey_x")

	for _, kind := range []struct {
		name, secret string
		takes        func(api.RouteAccess) bool
	}{
		{"API key", testKey, func(r api.RouteAccess) bool { return r.APIKey }},
		{"environment key", key, func(r api.RouteAccess) bool { return r.EnvKey }},
		{"sessions token", token, func(r api.RouteAccess) bool { return r.Token }},
	} {
		t.Run(kind.name, func(t *testing.T) {
			refused := 0
			for _, rt := range routes {
				if rt.Public || kind.takes(rt) {
					continue
				}
				method, path, _ := strings.Cut(rt.Pattern, " ")
				path = fill.Replace(path)
				if strings.Contains(path, "{") {
					t.Fatalf("%s: no value for a wildcard of %s", rt.Pattern, path)
				}
				body := ""
				if method == http.MethodPost {
					body = "{}"
				}
				status, _, resp := h.do(method, path, body, bearer(kind.secret)...)
				var env envelope
				_ = json.Unmarshal(resp, &env)
				switch {
				case status == http.StatusUnauthorized && env.Error.Type == apitype.ErrAuthentication,
					status == http.StatusForbidden && env.Error.Type == apitype.ErrPermission:
					refused++
				default:
					t.Errorf("%s %s with an %s: %d %s, want a 401 or 403 refusal", method, path, kind.name, status, resp)
				}
			}
			if refused == 0 {
				t.Errorf("no route refuses an %s", kind.name)
			}
		})
	}
}
