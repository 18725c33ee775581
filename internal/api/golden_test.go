package api_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden payloads in testdata/golden")

var (
	goldenID       = regexp.MustCompile(`\b(agent|env|sesn|sesrsc|sevt|outc|req|vlt|vcrd|memstore|mem|memver)_011C[1-9A-HJ-NP-Za-km-z]{24}\b`)
	goldenTime     = regexp.MustCompile(`"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)"`)
	goldenDuration = regexp.MustCompile(`"duration_seconds":[0-9.e+-]+`)
)

// normalise replaces the volatile parts of a payload (ids, times, durations) and indents it.
func normalise(t *testing.T, raw []byte) []byte {
	t.Helper()
	raw = goldenID.ReplaceAll(raw, []byte("${1}_ID"))
	raw = goldenTime.ReplaceAll(raw, []byte(`"TIME"`))
	raw = goldenDuration.ReplaceAll(raw, []byte(`"duration_seconds":0`))
	var out bytes.Buffer
	if err := json.Indent(&out, bytes.TrimSpace(raw), "", "  "); err != nil {
		t.Fatalf("indent %s: %v", raw, err)
	}
	out.WriteByte('\n')
	return out.Bytes()
}

func golden(t *testing.T, name string, raw []byte) {
	t.Helper()
	got := normalise(t, raw)
	file := filepath.Join("testdata", "golden", name+".json")
	if *update {
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run go test -run TestGolden -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from %s (run with -update if the change is intended):\n%s", name, file, got)
	}
}

// TestGolden pins the wire shape of the main payloads, exactly as a client receives them.
func TestGolden(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	post := func(path, body string) []byte {
		t.Helper()
		status, _, b := h.do("POST", path, body)
		if status != 200 {
			t.Fatalf("POST %s: %d %s", path, status, b)
		}
		return b
	}
	agent := post("/v1/agents", `{"name":"golden","model":"claude-sonnet-4-6","system":"You are terse.",
		"mcp_servers":[{"name":"docs","url":"https://mcp.example.com/mcp"}],
		"tools":[{"type":"agent_toolset_20260401","configs":[{"name":"bash","permission_policy":{"type":"always_ask"}},
			{"name":"web_fetch","allowed_domains":["example.com"]}]},
			{"type":"mcp_toolset","mcp_server_name":"docs"},
			{"type":"custom","name":"lookup","description":"Look up a record.","input_schema":{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}}],
		"metadata":{"team":"infra"}}`)
	golden(t, "agent", agent)
	env := post("/v1/environments", `{"name":"golden env","config":{"type":"cloud","networking":{"type":"limited","allowed_hosts":["pypi.org"]}}}`)
	golden(t, "environment", env)

	var a, e struct {
		ID string `json:"id"`
	}
	decodeRaw(t, string(agent), &a)
	decodeRaw(t, string(env), &e)
	sess := post("/v1/sessions", `{"agent":"`+a.ID+`","environment_id":"`+e.ID+`","title":"golden session",
		"resources":[{"type":"github_repository","url":"https://github.com/corralhq/corral","checkout":{"type":"branch","name":"main"}}],
		"metadata":{"ticket":"42"}}`)
	golden(t, "session", sess)
	var s struct {
		ID string `json:"id"`
	}
	decodeRaw(t, string(sess), &s)
	golden(t, "events_send", post("/v1/sessions/"+s.ID+"/events", `{"events":[{"type":"user.message","content":[{"type":"text","text":"Hello"}]}]}`))

	_, _, notFound := h.do("GET", "/v1/sessions/sesn_011CZkZAtmR3yMPDzynEDxu7", "")
	golden(t, "error_not_found", notFound)
}
