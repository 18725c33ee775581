package api

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
)

// TestCredAuthTypes: every auth type of apitype has an entry in the decoder table, and each entry refuses, on
// create and on update, every field of credAuthIn that is not one of its own.
func TestCredAuthTypes(t *testing.T) {
	t.Parallel()
	sample := map[string]string{
		"mcp_server_url": `"https://mcp.example.com"`, "token": `"t"`, "access_token": `"a"`,
		"expires_at": `"2999-01-01T00:00:00Z"`, "refresh": `{}`, "secret_name": `"X"`, "secret_value": `"v"`,
		"networking": `{"type":"unrestricted"}`, "injection_location": `{"body":true}`,
	}
	if got := len((&credAuthIn{}).present()); got != len(sample) {
		t.Fatalf("credAuthIn has %d fields, the sample %d", got, len(sample))
	}
	now := time.Now()
	for _, typ := range []apitype.CredentialAuthType{apitype.AuthStaticBearer, apitype.AuthMCPOAuth, apitype.AuthEnvironmentVariable} {
		ct, ok := credAuthTypes[typ]
		if !ok {
			t.Errorf("auth type %s has no decoder", typ)
			continue
		}
		for field, v := range sample {
			raw := json.RawMessage(`{"type":"` + string(typ) + `","` + field + `":` + v + `}`)
			_, _, _, cerr := parseCredAuth("auth", raw, now)
			_, uerr := updateCredAuth("auth", raw, &apitype.CredentialAuth{Type: typ}, now)
			for what, err := range map[string]error{"create": cerr, "update": uerr} {
				foreign := err != nil && strings.Contains(err.Error(), "not a field of "+string(typ))
				if own := slices.Contains(ct.fields, field); own == foreign {
					t.Errorf("%s %s with %s: %v", what, typ, field, err)
				}
			}
		}
	}
	if len(credAuthTypes) != 3 {
		t.Errorf("the decoder table has %d types; this test knows 3", len(credAuthTypes))
	}
}
