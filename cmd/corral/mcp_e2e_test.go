package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/mcp/mcptest"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/store/postgres/pgtest"
)

// TestMCPThroughSDK is issue 11 end to end through the real binary and the official SDK: `corral serve` trusting
// a real MCP server (official MCP Go SDK) on 127.0.0.1 (--egress-allow-internal), a vault with an mcp_oauth
// credential whose access token expires within a minute (refreshed at the token endpoint, client_secret_post,
// before the first call), an agent with the server and an mcp_toolset (always_allow by default, danger
// always_ask) beside the built-in toolset, in an environment with limited networking and allow_mcp_servers. The
// model calls echo (agent.mcp_tool_use, agent.mcp_tool_result), runs bash in the sandbox to look for the tokens,
// and calls danger, which waits for user.tool_confirmation. mcp_oauth_validate answers valid. Then the red team:
// no token, refresh token or client secret is in any event, API answer, model request, the server's log, any
// file of the data directory, or what bash saw in the sandbox (each isolating backend: bwrap, oci, gvisor).
func TestMCPThroughSDK(t *testing.T) {
	isolatingBackends(t, testMCPThroughSDK)
}

func testMCPThroughSDK(t *testing.T, sandboxArgs []string) {
	cfg := mcptest.Config{ClientID: "corral-e2e", ClientSecret: "client-secret-" + secretString(""), TokenAuth: "client_secret_post"}
	mcpSrv := mcptest.New(t, cfg)
	u, err := url.Parse(mcpSrv.URL)
	if err != nil {
		t.Fatal(err)
	}
	model := modeltest.NewServer(t)
	model.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "toolu_echo", Name: "mcp__tracker__echo", Input: `{"text":"from the SDK"}`}}},
		bashTurn(t, `env; tr '\0' '\n' < /proc/1/environ; grep -rsl 'mcp-' /workspace /tmp /etc 2>/dev/null | head -5; echo sandbox-searched`),
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "toolu_danger", Name: "mcp__tracker__danger", Input: `{}`}}},
		modeltest.Turn{Text: "The tracker is done."},
	)
	data := t.TempDir()
	s := startServer(t, data, model, append(sandboxArgs, "--egress-allow-internal", u.Host)...)
	c := sdkClient(s)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	vault, err := c.Beta.Vaults.New(ctx, anthropic.BetaVaultNewParams{DisplayName: "tracker"})
	if err != nil {
		t.Fatal(err)
	}
	access, refresh := mcpSrv.IssueAccess(), mcpSrv.IssueRefresh()
	cred, err := c.Beta.Vaults.Credentials.New(ctx, vault.ID, anthropic.BetaVaultCredentialNewParams{
		Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{OfMCPOAuth: &anthropic.BetaManagedAgentsMCPOAuthCreateParams{
			AccessToken: access, MCPServerURL: mcpSrv.MCPURL, ExpiresAt: anthropic.Time(time.Now().Add(30 * time.Second)),
			Refresh: anthropic.BetaManagedAgentsMCPOAuthRefreshParams{
				ClientID: cfg.ClientID, RefreshToken: refresh, TokenEndpoint: mcpSrv.TokenURL,
				TokenEndpointAuth: anthropic.BetaManagedAgentsMCPOAuthRefreshParamsTokenEndpointAuthUnion{
					OfClientSecretPost: &anthropic.BetaManagedAgentsTokenEndpointAuthPostParam{ClientSecret: cfg.ClientSecret}},
				Scope: anthropic.String("issues"),
			},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	agent, err := c.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
		Name: "mcp", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"},
		MCPServers: []anthropic.BetaManagedAgentsURLMCPServerParams{{Name: "tracker", URL: mcpSrv.MCPURL}},
		Tools: []anthropic.BetaAgentNewParamsToolUnion{
			{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{}},
			{OfMCPToolset: &anthropic.BetaManagedAgentsMCPToolsetParams{MCPServerName: "tracker",
				DefaultConfig: anthropic.BetaManagedAgentsMCPToolsetDefaultConfigParams{
					PermissionPolicy: anthropic.BetaManagedAgentsMCPToolsetDefaultConfigParamsPermissionPolicyUnion{OfAlwaysAllow: &anthropic.BetaManagedAgentsAlwaysAllowPolicyParam{}}},
				Configs: []anthropic.BetaManagedAgentsMCPToolConfigParams{{Name: "danger",
					PermissionPolicy: anthropic.BetaManagedAgentsMCPToolConfigParamsPermissionPolicyUnion{OfAlwaysAsk: &anthropic.BetaManagedAgentsAlwaysAskPolicyParam{}}}},
			}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	env, err := c.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "mcp", Config: anthropic.BetaEnvironmentNewParamsConfigUnion{
		OfCloud: &anthropic.BetaCloudConfigParams{Networking: anthropic.BetaCloudConfigParamsNetworkingUnion{
			OfLimited: &anthropic.BetaLimitedNetworkParams{AllowMCPServers: anthropic.Bool(true)}}}}})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := c.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: env.ID,
		VaultIDs: []string{vault.ID},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Beta.Sessions.Events.Send(ctx, sess.ID, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{anthropic.BetaManagedAgentsEventParamsOfUserMessage(
			[]anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: "Work the tracker."}}})},
	}); err != nil {
		t.Fatal(err)
	}
	// The danger call waits for the user.
	var askID string
	for askID == "" {
		events, raw := sdkEvents(ctx, t, c, sess.ID)
		if n := len(events); n > 0 && events[n-1].Type == "session.status_idle" {
			idle := events[n-1].AsSessionStatusIdle()
			if idle.StopReason.Type != "requires_action" || len(idle.StopReason.EventIDs) != 1 {
				t.Fatalf("idle with %+v: %s", idle.StopReason, raw)
			}
			askID = idle.StopReason.EventIDs[0]
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no requires_action: %s", raw)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if mcpSrv.Calls("danger") != 0 {
		t.Fatal("the always_ask tool ran before it was confirmed")
	}
	if _, err := c.Beta.Sessions.Events.Send(ctx, sess.ID, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{anthropic.BetaManagedAgentsEventParamsOfUserToolConfirmation(
			anthropic.BetaManagedAgentsUserToolConfirmationEventParamsResultAllow, askID)},
	}); err != nil {
		t.Fatal(err)
	}
	var events []anthropic.BetaManagedAgentsSessionEventUnion
	var raw string
	for {
		events, raw = sdkEvents(ctx, t, c, sess.ID)
		if n := len(events); n > 0 && events[n-1].Type == "session.status_idle" && events[n-1].AsSessionStatusIdle().StopReason.Type == "end_turn" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the turn did not end: %s", raw)
		case <-time.After(100 * time.Millisecond):
		}
	}

	uses := map[string]anthropic.BetaManagedAgentsAgentMCPToolUseEvent{}
	results := map[string]string{}
	for _, ev := range events {
		switch ev.Type {
		case "agent.mcp_tool_use":
			use := ev.AsAgentMCPToolUse()
			uses[use.ID] = use
		case "agent.mcp_tool_result":
			res := ev.AsAgentMCPToolResult()
			var text strings.Builder
			for _, b := range res.Content {
				text.WriteString(b.Text)
			}
			if res.IsError {
				t.Errorf("error result %s", text.String())
			}
			results[uses[res.MCPToolUseID].Name] = text.String()
		case "session.error":
			t.Errorf("session error: %s", ev.RawJSON())
		}
	}
	if len(uses) != 2 || results["echo"] != "echo: from the SDK" || results["danger"] != "danger done" {
		t.Fatalf("uses %d, results %v: %s", len(uses), results, raw)
	}
	for id, use := range uses {
		want := "allow"
		if use.Name == "danger" {
			want = "ask"
			if id != askID {
				t.Errorf("the confirmed call %s is not the danger call %s", askID, id)
			}
		}
		if use.MCPServerName != "tracker" || string(use.EvaluatedPermission) != want || use.Input == nil {
			t.Errorf("use %s: server %q, permission %q, input %v", use.Name, use.MCPServerName, use.EvaluatedPermission, use.Input)
		}
	}
	if got := toolResults(events); len(got) != 1 || !strings.Contains(got[0].text, "sandbox-searched") {
		t.Fatalf("bash results %+v", got)
	}
	if n := mcpSrv.TokenRequests.Load(); n != 1 {
		t.Errorf("%d token requests, want 1 (the refresh before expiry)", n)
	}
	got, err := c.Beta.Vaults.Credentials.Get(ctx, cred.ID, anthropic.BetaVaultCredentialGetParams{VaultID: vault.ID})
	if err != nil {
		t.Fatal(err)
	}
	if exp := got.Auth.ExpiresAt; time.Until(exp) < 30*time.Minute {
		t.Errorf("expires_at after the refresh: %v", exp)
	}

	v, err := c.Beta.Vaults.Credentials.MCPOAuthValidate(ctx, cred.ID, anthropic.BetaVaultCredentialMCPOAuthValidateParams{VaultID: vault.ID})
	if err != nil {
		t.Fatal(err)
	}
	if v.Status != "valid" || !v.HasRefreshToken || v.CredentialID != cred.ID || v.VaultID != vault.ID {
		t.Errorf("validation %s", v.RawJSON())
	}
	// A credential the server refuses, that cannot be refreshed: invalid, the failing answer scrubbed.
	mcpSrv.ExpireAll()
	stale, err := c.Beta.Vaults.Credentials.New(ctx, vault.ID, anthropic.BetaVaultCredentialNewParams{
		Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{OfStaticBearer: &anthropic.BetaManagedAgentsStaticBearerCreateParams{
			Token: mcpSrv.IssueAccess(), MCPServerURL: mcpSrv.SSEURL}},
	})
	if err != nil {
		t.Fatal(err)
	}
	mcpSrv.ExpireAll()
	bad, err := c.Beta.Vaults.Credentials.MCPOAuthValidate(ctx, stale.ID, anthropic.BetaVaultCredentialMCPOAuthValidateParams{VaultID: vault.ID})
	if err != nil {
		t.Fatal(err)
	}
	if bad.Status != "invalid" || bad.MCPProbe.Method != "initialize" || bad.MCPProbe.HTTPResponse.StatusCode != 401 || bad.Refresh.Status != "no_refresh_token" {
		t.Errorf("validation of a refused token %s", bad.RawJSON())
	}

	// The red team.
	var modelReqs strings.Builder
	for _, r := range model.Requests() {
		modelReqs.Write(r.Body)
	}
	places := map[string]string{
		"the session log (SDK)":    raw,
		"the session log (HTTP)":   rawGET(t, s, "/v1/sessions/"+sess.ID+"/events?limit=1000"),
		"the credentials (HTTP)":   rawGET(t, s, "/v1/vaults/"+vault.ID+"/credentials"),
		"the session (HTTP)":       rawGET(t, s, "/v1/sessions/"+sess.ID),
		"the model's requests":     modelReqs.String(),
		"the server's log":         s.stderr.String() + s.stdout.String(),
		"the validation answers":   v.RawJSON() + bad.RawJSON(),
		"what bash saw in sandbox": toolResults(events)[0].text,
	}
	for path, b := range dataDirFiles(t, data) {
		places["the data directory's "+path] = string(b) + " " // an empty file holds nothing either
	}
	forbidden := map[string]string{}
	for i, sec := range mcpSrv.Secrets() {
		forbidden[fmt.Sprintf("MCP secret #%d (%s…)", i, sec[:10])] = sec
	}
	if len(forbidden) < 5 {
		t.Fatalf("only %d secrets to search for", len(forbidden))
	}
	assertNowhere(t, places, forbidden)
	t.Logf("red team: %d secrets (access tokens issued and refreshed, refresh token, client secret) searched in %d places: none found",
		len(forbidden), len(places))
}

// TestMCPProxyProcess runs the MCP proxy as its own process beside brains on other machines: `corral serve
// --brains 0` (the API), `corral proxy` (the only process that opens MCP credentials for the brains) and
// `corral harness --mcp-proxy URL` on one PostgreSQL, the brains reaching the proxy with the shared token. An
// agent's MCP tool is called end to end through the official SDK; a caller without the token is refused; no
// MCP token is in the harness's output or the log.
func TestMCPProxyProcess(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDSN(t)
	mcpSrv := mcptest.New(t, mcptest.Config{ClientID: "corral"})
	u, err := url.Parse(mcpSrv.URL)
	if err != nil {
		t.Fatal(err)
	}
	model := modeltest.NewServer(t)
	model.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "toolu_echo", Name: "mcp__tracker__echo", Input: `{"text":"via corral proxy"}`}}},
		modeltest.Turn{Text: "Done."},
	)
	key := sharedVaultKey(t)
	proxyToken := "proxy-token-" + secretString("")
	env := append(serverEnv(model, testKey), proxyTokenEnv+"="+proxyToken)
	api := startServer(t, t.TempDir(), model, "--db", db, "--brains", "0", "--vault-key-file", key)
	px := startCorral(t, env, "corral: proxy listening on ", "proxy", "--db", db, "--data", t.TempDir(),
		"--vault-key-file", key, "--listen", "127.0.0.1:0", "--egress-allow-internal", u.Host)
	brains := startCorral(t, env, "corral: harness running", "harness", "--db", db, "--data", t.TempDir(),
		"--sandbox", "none", "--brains", "2", "--lease-ttl", "2s", "--poll", "200ms", "--vault-key-file", key, "--mcp-proxy", px.url)

	c := sdkClient(api)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	vault, err := c.Beta.Vaults.New(ctx, anthropic.BetaVaultNewParams{DisplayName: "tracker"})
	if err != nil {
		t.Fatal(err)
	}
	token := mcpSrv.IssueAccess()
	if _, err := c.Beta.Vaults.Credentials.New(ctx, vault.ID, anthropic.BetaVaultCredentialNewParams{
		Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{OfStaticBearer: &anthropic.BetaManagedAgentsStaticBearerCreateParams{
			Token: token, MCPServerURL: mcpSrv.MCPURL}},
	}); err != nil {
		t.Fatal(err)
	}
	agent, err := c.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
		Name: "mcp-remote", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"},
		MCPServers: []anthropic.BetaManagedAgentsURLMCPServerParams{{Name: "tracker", URL: mcpSrv.MCPURL}},
		Tools: []anthropic.BetaAgentNewParamsToolUnion{{OfMCPToolset: &anthropic.BetaManagedAgentsMCPToolsetParams{MCPServerName: "tracker",
			DefaultConfig: anthropic.BetaManagedAgentsMCPToolsetDefaultConfigParams{
				PermissionPolicy: anthropic.BetaManagedAgentsMCPToolsetDefaultConfigParamsPermissionPolicyUnion{OfAlwaysAllow: &anthropic.BetaManagedAgentsAlwaysAllowPolicyParam{}}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	envRes, err := c.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "mcp-remote"})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := c.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: envRes.ID,
		VaultIDs: []string{vault.ID},
	})
	if err != nil {
		t.Fatal(err)
	}
	events, raw := sendAndWait(ctx, t, c, sess.ID, "Echo through the proxy.")
	result := ""
	for _, ev := range events {
		if ev.Type == "agent.mcp_tool_result" {
			for _, b := range ev.AsAgentMCPToolResult().Content {
				result += b.Text
			}
		}
	}
	if result != "echo: via corral proxy" || mcpSrv.Calls("echo") != 1 {
		t.Fatalf("result %q, %d calls: %s", result, mcpSrv.Calls("echo"), raw)
	}

	// Without the token, the proxy answers nobody.
	body := strings.NewReader(`{"session_id":"` + sess.ID + `","server":{"type":"url","name":"tracker","url":"` + mcpSrv.MCPURL + `"}}`)
	resp, err := http.Post(px.url+"/v1/mcp/list_tools", "application/json", body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a request without the token got %s", resp.Status)
	}
	assertNowhere(t, map[string]string{
		"the session log":   raw,
		"the harness's log": brains.stderr.String() + " ",
		"the model's requests": func() string {
			var sb strings.Builder
			for _, r := range model.Requests() {
				sb.Write(r.Body)
			}
			return sb.String()
		}(),
	}, map[string]string{"the MCP token": token})
}
