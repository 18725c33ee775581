package api_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
)

// countingValidator answers every validation valid and counts the calls: the API's part is the routing and the
// refusals; the probing itself is the MCP proxy's (internal/proxy and cmd/corral's TestMCPThroughSDK).
type countingValidator struct{ calls atomic.Int64 }

// post is h.do without the headers.
func post(h *harness, path, body string) (int, []byte) {
	status, _, b := h.do("POST", path, body)
	return status, b
}

func (v *countingValidator) Validate(_ context.Context, vaultID, credentialID string) (*apitype.CredentialValidation, error) {
	v.calls.Add(1)
	return &apitype.CredentialValidation{Type: apitype.ObjectCredentialValidation, VaultID: vaultID, CredentialID: credentialID,
		Status: apitype.ValidationValid, ValidatedAt: apitype.Now()}, nil
}

// TestCredentialValidateRoutes: mcp_oauth_validate reaches the validator for MCP credentials only; another type,
// an unknown credential and a server without a validator get clear errors in the envelope.
func TestCredentialValidateRoutes(t *testing.T) {
	t.Parallel()
	val := &countingValidator{}
	h := newHarness(t, func(c *api.Config) { c.Validator = val })
	status, body := post(h, "/v1/vaults", `{"display_name":"v"}`)
	var v struct{ ID string }
	if status != 200 || json.Unmarshal(body, &v) != nil {
		t.Fatalf("vault: %d %s", status, body)
	}
	create := func(auth string) string {
		status, body := post(h, "/v1/vaults/"+v.ID+"/credentials", `{"auth":`+auth+`}`)
		var c struct{ ID string }
		if status != 200 || json.Unmarshal(body, &c) != nil {
			t.Fatalf("credential: %d %s", status, body)
		}
		return c.ID
	}
	bearer := create(`{"type":"static_bearer","mcp_server_url":"https://mcp.example.com/","token":"tok-123456"}`)
	envVar := create(`{"type":"environment_variable","secret_name":"API_KEY","secret_value":"v-123456","networking":{"type":"unrestricted"}}`)

	status, body = post(h, "/v1/vaults/"+v.ID+"/credentials/"+bearer+"/mcp_oauth_validate", "")
	if status != 200 || !strings.Contains(string(body), `"status":"valid"`) || val.calls.Load() != 1 {
		t.Errorf("static_bearer: %d %s (%d calls)", status, body, val.calls.Load())
	}
	for _, c := range []struct {
		name, path string
		status     int
		errType    apitype.ErrorType
	}{
		{"environment_variable", "/v1/vaults/" + v.ID + "/credentials/" + envVar + "/mcp_oauth_validate", 400, "invalid_request_error"},
		{"unknown credential", "/v1/vaults/" + v.ID + "/credentials/vcrd_missing/mcp_oauth_validate", 404, "not_found_error"},
		{"unknown vault", "/v1/vaults/vlt_missing/credentials/" + bearer + "/mcp_oauth_validate", 404, "not_found_error"},
	} {
		status, body := post(h, c.path, "")
		var env envelope
		_ = json.Unmarshal(body, &env)
		if status != c.status || env.Error.Type != c.errType {
			t.Errorf("%s: %d %s", c.name, status, body)
		}
	}
	if val.calls.Load() != 1 {
		t.Errorf("the validator was called %d times", val.calls.Load())
	}

	h2 := newHarness(t)
	_, body = post(h2, "/v1/vaults", `{"display_name":"v"}`)
	_ = json.Unmarshal(body, &v)
	_, body = post(h2, "/v1/vaults/"+v.ID+"/credentials", `{"auth":{"type":"static_bearer","mcp_server_url":"https://mcp.example.com/","token":"tok-123456"}}`)
	var c struct{ ID string }
	_ = json.Unmarshal(body, &c)
	status, body = post(h2, "/v1/vaults/"+v.ID+"/credentials/"+c.ID+"/mcp_oauth_validate", "")
	if status != 500 || !strings.Contains(string(body), "no MCP proxy") {
		t.Errorf("without a validator: %d %s", status, body)
	}
}
