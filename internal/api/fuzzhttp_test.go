package api_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/vault"
)

// FuzzHTTP drives the whole handler (routing, auth, decoding, validation, the SQLite store) with arbitrary
// bodies and query strings on every endpoint but the stream. Whatever the input, the answer is never a 5xx and
// always a JSON body.
func FuzzHTTP(f *testing.F) {
	st, err := sqlite.Open(context.Background(), "sqlite://"+filepath.Join(f.TempDir(), "fuzz.db"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = st.Close() })
	sealer, err := vault.New(vault.NewKey())
	if err != nil {
		f.Fatal(err)
	}
	handler := newAPI(f, api.Config{Store: st, Keys: &api.KeyAuth{Static: testKey},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxBodyBytes: 64 << 10, Sealer: sealer}).Handler()
	call := func(method, target, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, target, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testKey)
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		return rec
	}
	idOf := func(rec *httptest.ResponseRecorder) string {
		var v struct {
			ID   string `json:"id"`
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || rec.Code != 200 {
			f.Fatalf("seed: %d %s", rec.Code, rec.Body)
		}
		if v.ID == "" && len(v.Data) > 0 {
			return v.Data[0].ID
		}
		return v.ID
	}
	seedFile(f, st, "f1")
	seedFile(f, st, "f2")
	agentID := idOf(call("POST", "/v1/agents", `{"name":"a","model":"m","tools":[{"type":"custom","name":"c","description":"d","input_schema":{"type":"object"}}]}`))
	envID := idOf(call("POST", "/v1/environments", `{"name":"e"}`))
	sessID := idOf(call("POST", "/v1/sessions", `{"agent":"`+agentID+`","environment_id":"`+envID+`","resources":[{"type":"file","file_id":"f1"}]}`))
	evID := idOf(call("POST", "/v1/sessions/"+sessID+"/events", `{"events":[{"type":"user.message","content":[{"type":"text","text":"x"}]}]}`))
	ev, err := apitype.MakeEvent(apitype.EventAgentCustomToolUse, apitype.AgentToolUse{Name: "c", Input: json.RawMessage(`{}`)})
	if err != nil {
		f.Fatal(err)
	}
	if _, err := st.EventAppend(context.Background(), &store.EventAppendParams{SessionID: sessID,
		Events: []apitype.NewEvent{ev}}); err != nil {
		f.Fatal(err)
	}

	vaultID := idOf(call("POST", "/v1/vaults", `{"display_name":"v"}`))
	credID := idOf(call("POST", "/v1/vaults/"+vaultID+"/credentials",
		`{"auth":{"type":"static_bearer","mcp_server_url":"https://m/","token":"t"}}`))

	targets := []string{
		"/v1/agents", "/v1/agents/" + agentID, "/v1/agents/" + agentID + "/versions", "/v1/agents/" + agentID + "/archive",
		"/v1/environments", "/v1/environments/" + envID, "/v1/environments/" + envID + "/archive",
		"/v1/sessions", "/v1/sessions/" + sessID, "/v1/sessions/" + sessID + "/events",
		"/v1/sessions/" + sessID + "/resources", "/v1/sessions/" + sessID + "/resources/x", "/v1/sessions/" + sessID + "/archive",
		"/", "/healthz", "/v1/agents/agent_nope", "/v1/sessions/sesn_nope/events",
		"/v1/vaults", "/v1/vaults/" + vaultID, "/v1/vaults/" + vaultID + "/archive", "/v1/vaults/" + vaultID + "/credentials",
		"/v1/vaults/" + vaultID + "/credentials/" + credID, "/v1/vaults/" + vaultID + "/credentials/" + credID + "/archive",
	}
	methods := []string{"GET", "POST", "DELETE"}
	f.Add(uint8(1), uint8(0), "", `{"name":"x","model":{"id":"m","effort":"low"}}`)
	f.Add(uint8(1), uint8(1), "", `{"version":1,"name":"y","tools":null}`)
	f.Add(uint8(0), uint8(0), "limit=2&include_archived=true&created_at[gte]=2020-01-01T00:00:00Z", "")
	f.Add(uint8(1), uint8(4), "", `{"name":"e","config":{"type":"cloud","networking":{"type":"limited"}}}`)
	f.Add(uint8(1), uint8(5), "", `{"config":{"type":"self_hosted"},"metadata":{"a":null}}`)
	f.Add(uint8(1), uint8(7), "", `{"agent":{"type":"agent","id":"`+agentID+`"},"environment_id":"`+envID+`"}`)
	f.Add(uint8(0), uint8(7), "statuses[]=idle&order=asc&agent_id="+agentID+"&agent_version=1", "")
	f.Add(uint8(1), uint8(8), "", `{"title":"t","metadata":{"k":"v"},"budget":null}`)
	f.Add(uint8(1), uint8(9), "", `{"events":[{"type":"user.custom_tool_result","custom_tool_use_id":"`+evID+`"}]}`)
	f.Add(uint8(0), uint8(9), "types[]=user.message&order=desc&limit=1", "")
	f.Add(uint8(1), uint8(10), "", `{"type":"file","file_id":"f2","mount_path":"/workspace/data/f2"}`)
	f.Add(uint8(2), uint8(11), "", "")
	f.Add(uint8(1), uint8(0), "", `{"name":`)
	f.Add(uint8(1), uint8(17), "", `{"display_name":"w","metadata":{"k":"v"}}`)
	f.Add(uint8(1), uint8(20), "", `{"auth":{"type":"environment_variable","secret_name":"K","secret_value":"v","networking":{"type":"limited","allowed_hosts":["*.a.com"]},"injection_location":{"body":true}}}`)
	f.Add(uint8(1), uint8(20), "", `{"auth":{"type":"mcp_oauth","mcp_server_url":"https://o/","access_token":"a","expires_at":"2999-01-01T00:00:00Z","refresh":{"client_id":"c","refresh_token":"r","token_endpoint":"https://t/","token_endpoint_auth":{"type":"client_secret_basic","client_secret":"s"}}}}`)
	f.Add(uint8(1), uint8(21), "", `{"auth":{"type":"static_bearer","token":"n"},"display_name":null,"metadata":{"a":""}}`)
	f.Add(uint8(0), uint8(20), "limit=1&include_archived=true", "")
	f.Fuzz(func(t *testing.T, m, target uint8, query, body string) {
		method := methods[int(m)%len(methods)]
		url := targets[int(target)%len(targets)]
		if query != "" {
			url += "?" + query
		}
		if _, err := neturl.ParseRequestURI(url); err != nil || strings.ContainsAny(url, " #") {
			return // not a request line a client could send
		}
		rec := call(method, url, body)
		if rec.Code >= 500 {
			t.Fatalf("%s %s %q: %d %s", method, url, body, rec.Code, rec.Body)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%s %s %q: %d non-JSON body %q", method, url, body, rec.Code, rec.Body)
		}
		if rec.Code >= 400 {
			answer(t, method+" "+url+" "+body, rec) // the error envelope
		}
		if rec.Header().Get("request-id") == "" {
			t.Fatalf("%s %s: no request-id", method, url)
		}
		if rec.Code == http.StatusConflict && rec.Header().Get("x-should-retry") != "false" {
			t.Fatalf("409 without x-should-retry: false")
		}
	})
}
