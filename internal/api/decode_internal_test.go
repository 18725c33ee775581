package api

import (
	"encoding/json"
	"strings"
	"testing"
)

// A field of a named string type (the typed wire vocabulary) that gets a JSON value of another kind is reported
// as the string it is, not as an object.
func TestTypedFieldTypeErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		parse func() error
		want  string
	}{
		{"environment type", func() error {
			_, err := resolveEnvConfig("config", json.RawMessage(`{"type":5}`), nil)
			return err
		}, "config.type: expected a string, got JSON number"},
		{"networking type", func() error {
			_, err := resolveEnvConfig("config", json.RawMessage(`{"type":"cloud","networking":{"type":true}}`), nil)
			return err
		}, "config.networking.type: expected a string, got JSON bool"},
		{"permission policy", func() error {
			_, err := resolveTools("tools", []json.RawMessage{
				json.RawMessage(`{"type":"agent_toolset_20260401","default_config":{"permission_policy":{"type":7}}}`)}, nil)
			return err
		}, "tools[0].default_config.permission_policy.type: expected a string, got JSON number"},
		{"confirmation result", func() error {
			_, err := parseClientEvent("events[0]",
				json.RawMessage(`{"type":"user.tool_confirmation","tool_use_id":"sevt_1","result":[]}`), nil)
			return err
		}, "events[0].result: expected a string, got JSON array"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.parse()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}
