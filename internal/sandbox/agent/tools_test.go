package agent

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestTools: every declared tool has an object schema whose required fields are among its properties, is
// dispatched by the server (no "unknown tool"), and bash requires its command.
func TestTools(t *testing.T) {
	t.Parallel()
	s, _ := newTestServer(t, true)
	var names []string
	for _, tl := range Tools() {
		names = append(names, tl.Name)
		var sc struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		if err := json.Unmarshal(tl.InputSchema, &sc); err != nil || sc.Type != "object" || len(sc.Properties) == 0 {
			t.Errorf("%s: schema %s (%v)", tl.Name, tl.InputSchema, err)
		}
		for _, r := range sc.Required {
			if _, ok := sc.Properties[r]; !ok {
				t.Errorf("%s: required %q is not a property", tl.Name, r)
			}
		}
		if tl.Name == "bash" && !slices.Equal(sc.Required, []string{"command"}) {
			t.Errorf("bash: required = %v, want [command]", sc.Required)
		}
		if tl.Description == "" {
			t.Errorf("%s: no description", tl.Name)
		}
		if out, _ := handle(t, s, tl.Name, `{}`); strings.Contains(out, "unknown tool") {
			t.Errorf("%s is declared but not dispatched: %s", tl.Name, out)
		}
	}
	if want := []string{"bash", "edit", "read", "write", "glob", "grep"}; !slices.Equal(names, want) {
		t.Errorf("tools = %v, want %v", names, want)
	}
	out, isErr := handle(t, s, "teleport", `{}`)
	if want := `unknown tool "teleport": the sandbox runs bash, edit, read, write, glob and grep`; !isErr || out != want {
		t.Errorf("unknown tool: %v %q, want %q", isErr, out, want)
	}
}
