package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/apitype"
)

func TestAgentCreateResolvesConfig(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	a, err := h.client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
		Name:        "coder",
		Description: anthropic.String("writes code"),
		System:      anthropic.String("be brief"),
		Model:       anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-opus-4-6"},
		MCPServers:  []anthropic.BetaManagedAgentsURLMCPServerParams{{Name: "docs", URL: "https://mcp.example.com/sse"}},
		Metadata:    map[string]string{"team": "infra"},
		Tools: []anthropic.BetaAgentNewParamsToolUnion{
			{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{
				Configs: []anthropic.BetaManagedAgentsAgentToolConfigParamsUnion{
					{OfBash: &anthropic.BetaManagedAgentsBashToolConfigParams{Enabled: anthropic.Bool(false)}},
				},
			}},
			{OfMCPToolset: &anthropic.BetaManagedAgentsMCPToolsetParams{MCPServerName: "docs"}},
		},
	})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if a.Version != 1 || a.Name != "coder" || a.Model.ID != "claude-opus-4-6" || a.Metadata["team"] != "infra" {
		t.Fatalf("agent = %s", a.RawJSON())
	}
	var got apitype.Agent
	decodeRaw(t, a.RawJSON(), &got)
	if got.Model.Effort == nil || got.Model.Effort.Type == "" {
		t.Errorf("model.effort not resolved: %s", a.RawJSON())
	}
	if got.ExecutionIdentity.Type != "service_account" {
		t.Errorf("execution_identity = %+v", got.ExecutionIdentity)
	}
	ts := got.Tools[0]
	if ts.DefaultConfig == nil || !ts.DefaultConfig.Enabled || ts.DefaultConfig.PermissionPolicy.Type != apitype.PolicyAlwaysAllow {
		t.Errorf("default_config = %+v", ts.DefaultConfig)
	}
	if len(ts.Configs) != len(apitype.BuiltinTools) {
		t.Fatalf("configs: %d, want one per built-in tool", len(ts.Configs))
	}
	for i, c := range ts.Configs {
		if c.Name != apitype.BuiltinTools[i] || string(c.Type) != c.Name {
			t.Errorf("configs[%d] = %+v, want name and type %s", i, c, apitype.BuiltinTools[i])
		}
		if wantEnabled := c.Name != "bash"; c.Enabled != wantEnabled {
			t.Errorf("configs[%d].enabled = %v, want %v", i, c.Enabled, wantEnabled)
		}
	}
	// The SDK's own decoder sees the toolset's configs.
	if n := len(a.Tools[0].Configs.OfBetaManagedAgentsAgentToolConfigArray); n != len(apitype.BuiltinTools) {
		t.Errorf("SDK decoded %d configs", n)
	}
	if got.Tools[1].MCPServerName != "docs" || got.Tools[1].DefaultConfig == nil {
		t.Errorf("mcp toolset = %+v", got.Tools[1])
	}
	// configs is a required field of the SDK's BetaManagedAgentsMCPToolset: [] when none are set, never omitted.
	mcp := a.Tools[1].AsMCPToolset()
	if !mcp.JSON.Configs.Valid() || mcp.Configs == nil {
		t.Errorf("mcp toolset without configs: %s", mcp.RawJSON())
	}
}

func TestAgentVersions(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	a, err := h.client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
		Name: "v", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-haiku-4-5"},
	})
	if err != nil {
		t.Fatal(err)
	}
	up, err := h.client.Beta.Agents.Update(ctx, a.ID, anthropic.BetaAgentUpdateParams{
		Version: anthropic.Int(1), System: anthropic.String("new prompt"), Metadata: map[string]string{"k": "v"},
	})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	if up.Version != 2 || up.System != "new prompt" || up.Name != "v" || up.Metadata["k"] != "v" {
		t.Fatalf("updated = %s", up.RawJSON())
	}
	// A stale version is a conflict the SDK must not retry.
	_, err = h.client.Beta.Agents.Update(ctx, a.ID, anthropic.BetaAgentUpdateParams{
		Version: anthropic.Int(1), Name: anthropic.String("lost"),
	})
	aerr := wantAPIError(t, err, http.StatusConflict, apitype.ErrConflict)
	if aerr.Response.Header.Get("x-should-retry") != "false" {
		t.Errorf("x-should-retry = %q", aerr.Response.Header.Get("x-should-retry"))
	}
	// An update that changes nothing writes no version.
	same, err := h.client.Beta.Agents.Update(ctx, a.ID, anthropic.BetaAgentUpdateParams{System: anthropic.String("new prompt")})
	if err != nil || same.Version != 2 {
		t.Fatalf("no-op update: version %d, %v", same.Version, err)
	}
	v1, err := h.client.Beta.Agents.Get(ctx, a.ID, anthropic.BetaAgentGetParams{Version: anthropic.Int(1)})
	if err != nil || v1.Version != 1 || v1.System != "" {
		t.Fatalf("get v1: %v %+v", err, v1)
	}
	_, err = h.client.Beta.Agents.Get(ctx, a.ID, anthropic.BetaAgentGetParams{Version: anthropic.Int(9)})
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)

	versions, err := h.client.Beta.Agents.Versions.List(ctx, a.ID, anthropic.BetaAgentVersionListParams{Limit: anthropic.Int(1)})
	if err != nil {
		t.Fatal(err)
	}
	if len(versions.Data) != 1 || versions.Data[0].Version != 2 || versions.NextPage == "" {
		t.Fatalf("versions page 1 = %s", versions.RawJSON())
	}
	var seen []int64
	iter := h.client.Beta.Agents.Versions.ListAutoPaging(ctx, a.ID, anthropic.BetaAgentVersionListParams{Limit: anthropic.Int(1)})
	for iter.Next() {
		seen = append(seen, iter.Current().Version)
	}
	if iter.Err() != nil || len(seen) != 2 || seen[0] != 2 || seen[1] != 1 {
		t.Fatalf("versions = %v, %v", seen, iter.Err())
	}

	archived, err := h.client.Beta.Agents.Archive(ctx, a.ID, anthropic.BetaAgentArchiveParams{})
	if err != nil || archived.ArchivedAt.IsZero() {
		t.Fatalf("archive: %v %s", err, archived.RawJSON())
	}
	list, err := h.client.Beta.Agents.List(ctx, anthropic.BetaAgentListParams{})
	if err != nil || len(list.Data) != 0 {
		t.Fatalf("list without archived: %v %s", err, list.RawJSON())
	}
	list, err = h.client.Beta.Agents.List(ctx, anthropic.BetaAgentListParams{IncludeArchived: anthropic.Bool(true)})
	if err != nil || len(list.Data) != 1 {
		t.Fatalf("list with archived: %v %s", err, list.RawJSON())
	}
}

func TestAgentListPages(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	const n = 7
	for i := range n {
		if _, err := h.client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
			Name: "a" + string(rune('0'+i)), Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "m"},
		}); err != nil {
			t.Fatal(err)
		}
	}
	pages, total := 0, 0
	seen := map[string]bool{}
	page, err := h.client.Beta.Agents.List(ctx, anthropic.BetaAgentListParams{Limit: anthropic.Int(3)})
	for page != nil && err == nil {
		pages++
		if len(page.Data) == 0 {
			t.Fatalf("page %d is empty", pages)
		}
		for _, a := range page.Data {
			if seen[a.ID] {
				t.Fatalf("agent %s listed twice", a.ID)
			}
			seen[a.ID] = true
			total++
		}
		page, err = page.GetNextPage()
	}
	if err != nil || pages != 3 || total != n {
		t.Fatalf("pages=%d total=%d err=%v", pages, total, err)
	}
}

func TestAgentValidation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, tc := range []struct {
		name, body, want string
	}{
		{"no name", `{"model":"m"}`, "name: required"},
		{"no model", `{"name":"x"}`, "model: required"},
		{"bad effort", `{"name":"x","model":{"id":"m","effort":"huge"}}`, "model.effort: unknown effort"},
		{"unknown field", `{"name":"x","model":"m","colour":"red"}`, "colour: unknown field"},
		{"wrong type", `{"name":7,"model":"m"}`, "name: expected a string"},
		{"unknown tool", `{"name":"x","model":"m","tools":[{"type":"agent_toolset_20260401","configs":[{"name":"rm"}]}]}`,
			`tools[0].configs[0].name: unknown built-in tool "rm"`},
		{"custom name", `{"name":"x","model":"m","tools":[{"type":"custom","name":"a b","description":"d","input_schema":{"type":"object"}}]}`,
			"tools[0].name: must be"},
		{"schema type", `{"name":"x","model":"m","tools":[{"type":"custom","name":"ab","description":"d","input_schema":{"type":"string"}}]}`,
			"tools[0].input_schema.type"},
		{"unreferenced server", `{"name":"x","model":"m","mcp_servers":[{"name":"s","url":"https://x.example"}]}`,
			`mcp_servers[0]: MCP server "s" is not referenced`},
		{"duplicate server", `{"name":"x","model":"m","mcp_servers":[{"name":"s","url":"https://x.example"},{"name":"s","url":"https://y.example"}]}`,
			`mcp_servers[1].name: duplicate`},
		{"metadata", `{"name":"x","model":"m","metadata":{"k":"` + strings.Repeat("v", 513) + `"}}`,
			"metadata.k: value longer than 512"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := h.do("POST", "/v1/agents", tc.body)
			if status != http.StatusBadRequest {
				t.Fatalf("status %d: %s", status, body)
			}
			var env envelope
			decodeRaw(t, string(body), &env)
			if env.Error.Type != apitype.ErrInvalidRequest || !strings.Contains(env.Error.Message, tc.want) {
				t.Fatalf("error %+v, want message containing %q", env.Error, tc.want)
			}
		})
	}
}

func TestAgentUpdateSemantics(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	status, _, body := h.do("POST", "/v1/agents", `{"name":"u","description":"d","system":"s",
		"model":{"id":"m","effort":"low","inference_geo":"eu"},
		"mcp_servers":[{"name":"s1","url":"https://s1.example"}],
		"tools":[{"type":"mcp_toolset","mcp_server_name":"s1"},{"type":"custom","name":"c","description":"d","input_schema":{"type":"object"}}],
		"metadata":{"a":"1","b":"2"}}`)
	if status != http.StatusOK {
		t.Fatalf("create: %d %s", status, body)
	}
	var a apitype.Agent
	decodeRaw(t, string(body), &a)
	if len(a.Skills) != 0 || a.Model.Effort.Type != "low" || a.Model.InferenceGeo != "eu" {
		t.Fatalf("created = %s", body)
	}
	update := func(body string) (int, apitype.Agent, string) {
		t.Helper()
		status, _, b := h.do("POST", "/v1/agents/"+a.ID, body)
		var out apitype.Agent
		if status == http.StatusOK {
			decodeRaw(t, string(b), &out)
		}
		return status, out, string(b)
	}

	// null clears description and system; a new model without effort keeps the effort and drops inference_geo.
	status, got, b := update(`{"description":null,"system":null,"model":{"id":"m2"},"metadata":{"a":null,"c":"3"}}`)
	if status != http.StatusOK || got.Version != 2 || got.Description != "" || got.System != "" ||
		got.Model.ID != "m2" || got.Model.Effort.Type != "low" || got.Model.InferenceGeo != "" ||
		len(got.Metadata) != 2 || got.Metadata["b"] != "2" || got.Metadata["c"] != "3" {
		t.Fatalf("update 1: %d %s", status, b)
	}
	// Dropping the server its toolset uses is refused; replacing both together is fine.
	if status, _, b := update(`{"mcp_servers":[]}`); status != http.StatusBadRequest || !strings.Contains(b, "tools[0].mcp_server_name") {
		t.Fatalf("orphaned toolset: %d %s", status, b)
	}
	status, got, b = update(`{"version":2,"mcp_servers":null,"tools":[],"skills":null}`)
	if status != http.StatusOK || got.Version != 3 || len(got.Tools) != 0 || len(got.MCPServers) != 0 || len(got.Skills) != 0 {
		t.Fatalf("clear: %d %s", status, b)
	}
	if status, _, b := update(`{"name":null}`); status != http.StatusBadRequest {
		t.Fatalf("clearing the name: %d %s", status, b)
	}
	if status, _, b := update(`{"version":0}`); status != http.StatusBadRequest {
		t.Fatalf("version 0: %d %s", status, b)
	}
	if status, _, b := h.do("POST", "/v1/agents/agent_nope", `{"name":"x"}`); status != http.StatusNotFound {
		t.Fatalf("unknown agent: %d %s", status, b)
	}
}
