package apitype_test

import (
	"encoding/json"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
)

// The API takes these values from clients: Valid must accept exactly the set's constants (case matters, and
// the empty string is not a value).
func TestVocabularyValid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		valid func(string) bool
		good  []string
	}{
		{"EnvironmentType", func(s string) bool { return apitype.EnvironmentType(s).Valid() },
			[]string{"cloud", "self_hosted"}},
		{"PermissionPolicyType", func(s string) bool { return apitype.PermissionPolicyType(s).Valid() },
			[]string{"always_allow", "always_ask", "auto"}},
		{"ConfirmationResult", func(s string) bool { return apitype.ConfirmationResult(s).Valid() },
			[]string{"allow", "deny"}},
		{"SkillSourceType", func(s string) bool { return apitype.SkillSourceType(s).Valid() },
			[]string{"custom", "anthropic"}},
		{"PackagesType", func(s string) bool { return apitype.PackagesType(s).Valid() }, []string{"packages"}},
		{"FileScopeType", func(s string) bool { return apitype.FileScopeType(s).Valid() }, []string{"session"}},
		{"ResourceAccess", func(s string) bool { return apitype.ResourceAccess(s).Valid() },
			[]string{"read_write", "read_only"}},
		{"EffortType", func(s string) bool { return apitype.EffortType(s).Valid() },
			[]string{"low", "medium", "high", "xhigh", "max"}},
		{"SessionErrorType", func(s string) bool { return apitype.SessionErrorType(s).Valid() },
			[]string{"unknown_error", "model_overloaded_error", "model_rate_limited_error", "model_request_failed_error",
				"mcp_connection_failed_error", "mcp_authentication_failed_error", "billing_error",
				"repository_clone_error", "repository_checkout_error", "repository_authentication_error",
				"repository_forbidden_error", "repository_not_found_error", "environment_build_failed_error"}},
	} {
		for _, s := range tc.good {
			if !tc.valid(s) {
				t.Errorf("%s(%q).Valid() = false", tc.name, s)
			}
		}
		for _, s := range []string{"", "ask", "Cloud", "ALLOW", "self-hosted", "always"} {
			if tc.valid(s) {
				t.Errorf("%s(%q).Valid() = true", tc.name, s)
			}
		}
	}
}

// A typed field is written and read as the plain string it holds.
func TestVocabularyJSON(t *testing.T) {
	t.Parallel()
	cfg := apitype.EnvConfig{Type: apitype.EnvironmentCloud,
		Networking: &apitype.Networking{Type: apitype.NetworkingLimited}}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"type":"cloud","networking":{"type":"limited"}}`; string(b) != want {
		t.Errorf("encoded %s, want %s", b, want)
	}
	var back apitype.SessionErrorBody
	if err := json.Unmarshal([]byte(`{"type":"x","message":"m","retry_status":{"type":"exhausted"}}`), &back); err != nil {
		t.Fatal(err)
	}
	if back.RetryStatus.Type != apitype.RetryStatusExhausted {
		t.Errorf("retry_status = %q", back.RetryStatus.Type)
	}
}
