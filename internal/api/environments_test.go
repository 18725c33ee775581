package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/apitype"
)

func TestEnvironmentLifecycle(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	e, err := h.client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{
		Name: "build box",
		Config: anthropic.BetaEnvironmentNewParamsConfigUnion{OfCloud: &anthropic.BetaCloudConfigParams{
			Networking: anthropic.BetaCloudConfigParamsNetworkingUnion{OfLimited: &anthropic.BetaLimitedNetworkParams{
				AllowedHosts: []string{"pypi.org"}, AllowPackageManagers: anthropic.Bool(true),
			}},
			Packages: anthropic.BetaPackagesParams{Pip: []string{"requests==2.32.0"}},
		}},
		Metadata: map[string]string{"owner": "ci"},
	})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	// The config comes back fully resolved: every package list and networking flag present.
	var cfg struct {
		Config struct {
			Type       string         `json:"type"`
			Networking map[string]any `json:"networking"`
			Packages   map[string]any `json:"packages"`
		} `json:"config"`
		Description *string `json:"description"`
	}
	decodeRaw(t, e.RawJSON(), &cfg)
	if cfg.Config.Type != "cloud" || cfg.Config.Networking["type"] != "limited" ||
		cfg.Config.Networking["allow_mcp_servers"] != false || cfg.Config.Networking["allow_package_managers"] != true {
		t.Fatalf("config = %s", e.RawJSON())
	}
	for _, k := range []string{"apt", "cargo", "gem", "go", "npm", "pip", "type"} {
		if _, ok := cfg.Config.Packages[k]; !ok {
			t.Errorf("packages.%s missing: %s", k, e.RawJSON())
		}
	}
	if cfg.Description != nil {
		t.Errorf("description = %q, want null", *cfg.Description)
	}

	got, err := h.client.Beta.Environments.Get(ctx, e.ID, anthropic.BetaEnvironmentGetParams{})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got.Name != "build box" || got.Metadata["owner"] != "ci" {
		t.Fatalf("get: %v %s", err, got.RawJSON())
	}

	// Updating packages keeps the other managers and the networking.
	up, err := h.client.Beta.Environments.Update(ctx, e.ID, anthropic.BetaEnvironmentUpdateParams{
		Description: anthropic.String("for builds"),
		Config: anthropic.BetaEnvironmentUpdateParamsConfigUnion{OfCloud: &anthropic.BetaCloudConfigParams{
			Packages: anthropic.BetaPackagesParams{Npm: []string{"left-pad"}},
		}},
		Metadata: map[string]string{"owner": "", "tier": "gold"},
	})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	var upd apitype.Environment
	decodeRaw(t, up.RawJSON(), &upd)
	if upd.Config.Packages == nil || len(upd.Config.Packages.Pip) != 1 || len(upd.Config.Packages.Npm) != 1 ||
		upd.Config.Networking.Type != "limited" {
		t.Errorf("merged config = %s", up.RawJSON())
	}
	if _, ok := upd.Metadata["owner"]; ok || upd.Metadata["tier"] != "gold" || *upd.Description != "for builds" {
		t.Errorf("patched = %s", up.RawJSON())
	}

	_, err = h.client.Beta.Environments.Update(ctx, e.ID, anthropic.BetaEnvironmentUpdateParams{
		Config: anthropic.BetaEnvironmentUpdateParamsConfigUnion{OfSelfHosted: &anthropic.BetaSelfHostedConfigParams{}},
	})
	aerr := wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)
	if code := errorCode(t, aerr); code != "invalid_config_type_change" {
		t.Errorf("error_code = %q", code)
	}

	if _, err := h.client.Beta.Environments.Archive(ctx, e.ID, anthropic.BetaEnvironmentArchiveParams{}); err != nil {
		t.Fatal(err)
	}
	_, err = h.client.Beta.Environments.Update(ctx, e.ID, anthropic.BetaEnvironmentUpdateParams{Name: anthropic.String("x")})
	aerr = wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)
	if code := errorCode(t, aerr); code != "environment_archived" {
		t.Errorf("error_code = %q", code)
	}
	list, err := h.client.Beta.Environments.List(ctx, anthropic.BetaEnvironmentListParams{})
	if err != nil || len(list.Data) != 0 {
		t.Fatalf("list: %v %s", err, list.RawJSON())
	}
	list, err = h.client.Beta.Environments.List(ctx, anthropic.BetaEnvironmentListParams{IncludeArchived: anthropic.Bool(true)})
	if err != nil || len(list.Data) != 1 {
		t.Fatalf("list archived: %v %s", err, list.RawJSON())
	}

	del, err := h.client.Beta.Environments.Delete(ctx, e.ID, anthropic.BetaEnvironmentDeleteParams{})
	if err != nil || del.ID != e.ID || del.Type != "environment_deleted" {
		t.Fatalf("delete: %v %s", err, del.RawJSON())
	}
	_, err = h.client.Beta.Environments.Get(ctx, e.ID, anthropic.BetaEnvironmentGetParams{})
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
}

func TestEnvironmentSelfHosted(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	status, _, body := h.do("POST", "/v1/environments", `{"name":"mine","config":{"type":"self_hosted"}}`)
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	var e struct {
		Config json.RawMessage `json:"config"`
	}
	decodeRaw(t, string(body), &e)
	if string(e.Config) != `{"type":"self_hosted"}` {
		t.Errorf("config = %s", e.Config)
	}
	status, _, body = h.do("POST", "/v1/environments", `{"name":"mine","config":{"type":"self_hosted","networking":{"type":"unrestricted"}}}`)
	if status != http.StatusBadRequest {
		t.Errorf("self_hosted with networking: %d %s", status, body)
	}
}

// errorCode returns error.details.error_code of an API error.
func errorCode(t *testing.T, aerr *anthropic.Error) string {
	t.Helper()
	var env envelope
	decodeRaw(t, aerr.RawJSON(), &env)
	code, _ := env.Error.Details["error_code"].(string)
	return code
}

// TestEnvironmentNamesUnique: a second environment with a name in use, or a rename to one, is a 409
// conflict_error naming the field, which clients must not retry; archiving an environment frees its name.
func TestEnvironmentNamesUnique(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	first, err := h.client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	status, hdr, body := h.do("POST", "/v1/environments", `{"name":"prod"}`)
	var env envelope
	decodeRaw(t, string(body), &env)
	if status != http.StatusConflict || env.Error.Type != apitype.ErrConflict || env.Error.Message != `name: an environment named "prod" already exists` ||
		hdr.Get("x-should-retry") != "false" {
		t.Fatalf("duplicate create: %d %s %s", status, hdr, body)
	}
	other, err := h.client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "staging"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.client.Beta.Environments.Update(ctx, other.ID, anthropic.BetaEnvironmentUpdateParams{Name: anthropic.String("prod")})
	if aerr := wantAPIError(t, err, http.StatusConflict, apitype.ErrConflict); !strings.Contains(aerr.Message, "name:") {
		t.Errorf("rename conflict message %q does not name the field", aerr.Message)
	}
	if _, err := h.client.Beta.Environments.Archive(ctx, first.ID, anthropic.BetaEnvironmentArchiveParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.Beta.Environments.Update(ctx, other.ID, anthropic.BetaEnvironmentUpdateParams{Name: anthropic.String("prod")}); err != nil {
		t.Fatalf("rename to the archived environment's name: %v", err)
	}
}
