package api_test

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/vault"
)

// The resource fuzzers: each drives the whole handler (routing, decoding, validation, the SQLite store) with
// arbitrary bodies on the create and update endpoints of one kind of resource. Whatever the input, the answer
// is never a 5xx; a 4xx is the API's error envelope; a 200 is the resource as a GET then shows it.

// fuzzAPI is an API server over a SQLite store in the fuzz target's temporary directory, called in-process.
type fuzzAPI struct {
	store   store.Store
	api     *api.Server
	handler http.Handler
}

func newFuzzAPI(f *testing.F, tweak ...func(*api.Config)) *fuzzAPI {
	f.Helper()
	st, err := sqlite.Open(context.Background(), "sqlite://"+filepath.Join(f.TempDir(), "fuzz.db"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = st.Close() })
	sealer, err := vault.New(vault.NewKey())
	if err != nil {
		f.Fatal(err)
	}
	cfg := api.Config{Store: st, Keys: &api.KeyAuth{Static: testKey}, Sealer: sealer,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxBodyBytes: 64 << 10}
	for _, tw := range tweak {
		tw(&cfg)
	}
	srv := newAPI(f, cfg)
	return &fuzzAPI{store: st, api: srv, handler: srv.Handler()}
}

func (a *fuzzAPI) call(method, target, body string) *httptest.ResponseRecorder {
	ct := ""
	if body != "" {
		ct = "application/json"
	}
	return a.callCT(method, target, ct, body)
}

// callCT is call with a Content-Type.
func (a *fuzzAPI) callCT(method, target, contentType, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testKey)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	a.handler.ServeHTTP(rec, req)
	return rec
}

// seed makes a resource for the fuzzer to update and returns its id; it fails the target if the call fails.
func (a *fuzzAPI) seed(f *testing.F, method, target, body string) string {
	f.Helper()
	rec := a.call(method, target, body)
	var v struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || rec.Code != http.StatusOK || v.ID == "" {
		f.Fatalf("seed %s %s: %d %s", method, target, rec.Code, rec.Body)
	}
	return v.ID
}

// answer checks an answer to what: never a 5xx, always JSON, a 4xx is the error envelope with a type and a
// message. It returns the decoded body of a 200, else nil.
func answer(t *testing.T, what string, rec *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("%s: %d %s", what, rec.Code, rec.Body)
	}
	var v map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("%s: %d, not a JSON object: %q", what, rec.Code, rec.Body)
	}
	if rec.Code >= 400 {
		var env struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil || env.Type != "error" || env.Error.Type == "" ||
			env.Error.Message == "" {
			t.Fatalf("%s: %d, not the error envelope: %s", what, rec.Code, rec.Body)
		}
		return nil
	}
	if rec.Code != http.StatusOK {
		t.Fatalf("%s: unexpected %d %s", what, rec.Code, rec.Body)
	}
	return v
}

// post POSTs body to target and, when it is accepted (got nil otherwise), returns the answer and the path a GET
// reads it back at: get, or for a create (get "") the new id under target; a create is reported as such.
func (a *fuzzAPI) post(t *testing.T, target, get, body string) (what string, got map[string]any, at string, create bool) {
	what = "POST " + target + " " + body
	if got = answer(t, what, a.call("POST", target, body)); got == nil {
		return what, nil, "", false
	}
	id, _ := got["id"].(string)
	if create = get == ""; create {
		get = strings.TrimSuffix(target, "?view=full") + "/" + id
	}
	if id == "" || !strings.HasSuffix(get, "/"+id) {
		t.Fatalf("%s: answered %v", what, got)
	}
	return what, got, get, create
}

// sameAsGet checks that a GET of target shows got, the resource a create or update answered.
func (a *fuzzAPI) sameAsGet(t *testing.T, what, target string, got map[string]any) {
	t.Helper()
	rec := a.call(http.MethodGet, target, "")
	var v map[string]any
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &v) != nil {
		t.Fatalf("%s, then GET %s: %d %s", what, target, rec.Code, rec.Body)
	}
	if !reflect.DeepEqual(v, got) {
		t.Fatalf("%s answered\n%v\nbut GET %s shows\n%v", what, got, target, v)
	}
}

// jsonStrings calls fn with every object key and string value of v, the key under which each value is.
func jsonStrings(v any, key string, fn func(key, s string)) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			fn("", k)
			jsonStrings(e, k, fn)
		}
	case []any:
		for _, e := range v {
			jsonStrings(e, key, fn)
		}
	case string:
		fn(key, v)
	}
}

// secretFields are the names of the secrets of a credential's auth.
var secretFields = map[string]bool{"token": true, "access_token": true, "refresh_token": true, "client_secret": true,
	"secret_value": true}

// checkNoSecret checks that got, a credential the API answered to body, shows none of the secrets body's auth
// gave: neither a secret's field nor its value, unless that value is also one the caller gave or the credential
// already showed (before) outside a secret.
func checkNoSecret(t *testing.T, what, body string, before, got map[string]any) {
	t.Helper()
	var in map[string]any
	if json.Unmarshal([]byte(body), &in) != nil {
		t.Fatalf("%s: accepted a body that is not a JSON object", what)
	}
	var secrets, known []string
	jsonStrings(in["auth"], "", func(k, s string) {
		if secretFields[k] {
			secrets = append(secrets, s)
		} else {
			known = append(known, s)
		}
	})
	delete(in, "auth")
	for _, v := range []any{in, before} {
		jsonStrings(v, "", func(_, s string) { known = append(known, s) })
	}
	jsonStrings(got["auth"], "", func(k, s string) {
		if k == "" && secretFields[s] {
			t.Fatalf("%s: the answer's auth has a field %q: %v", what, s, got)
		}
	})
	jsonStrings(got, "", func(k, s string) {
		if k == "" || k == "type" || k == "id" || k == "vault_id" || strings.HasSuffix(k, "_at") {
			return // a key, or what the server made
		}
		for _, sec := range secrets {
			if strings.Contains(s, sec) && !containsIn(known, sec) {
				t.Fatalf("%s: the answer shows the secret %q (in %s %q): %v", what, sec, k, s, got)
			}
		}
	})
}

// containsIn reports whether some string of list contains s.
func containsIn(list []string, s string) bool {
	for _, e := range list {
		if strings.Contains(e, s) {
			return true
		}
	}
	return false
}

// FuzzVaultCredential: vault create and update, credential create for every auth type, credential update of
// each type. A credential the API accepted shows none of its secrets.
func FuzzVaultCredential(f *testing.F) {
	a := newFuzzAPI(f)
	vaultID := a.seed(f, "POST", "/v1/vaults", `{"display_name":"v","metadata":{"team":"a"}}`)
	creds := "/v1/vaults/" + vaultID + "/credentials"
	staticID := a.seed(f, "POST", creds, `{"display_name":"s","auth":{"type":"static_bearer","mcp_server_url":"https://static.example/mcp","token":"seed-static"}}`)
	oauthID := a.seed(f, "POST", creds, `{"auth":{"type":"mcp_oauth","mcp_server_url":"https://oauth.example/mcp","access_token":"seed-access","expires_at":"2999-01-01T00:00:00Z","refresh":{"client_id":"c","refresh_token":"seed-refresh","token_endpoint":"https://oauth.example/token","token_endpoint_auth":{"type":"client_secret_post","client_secret":"seed-client"},"scope":"read"}}}`)
	envID := a.seed(f, "POST", creds, `{"auth":{"type":"environment_variable","secret_name":"SEED_KEY","secret_value":"seed-value","networking":{"type":"limited","allowed_hosts":["api.example.com"]}}}`)
	const (
		opVaultCreate = iota
		opVaultUpdate
		opCredCreate
		opStaticUpdate
		opOAuthUpdate
		opEnvUpdate
		nOps
	)
	for _, s := range []struct {
		op   uint8
		body string
	}{
		{opVaultCreate, `{"display_name":"w","metadata":{"k":"v"}}`},
		{opVaultCreate, `{"display_name":""}`},
		{opVaultCreate, `{"display_name":"\u0000","metadata":{"":"x"}}`},
		{opVaultUpdate, `{"display_name":"renamed","metadata":{"team":null,"k":"v"}}`},
		{opVaultUpdate, `{"display_name":null}`},
		{opCredCreate, `{"auth":{"type":"static_bearer","mcp_server_url":"https://a.example/","token":"tok-1"},"display_name":"d","metadata":{"a":"b"}}`},
		{opCredCreate, `{"auth":{"type":"static_bearer","mcp_server_url":"https://u:p@a.example/","token":"tok-1"}}`},
		{opCredCreate, `{"auth":{"type":"mcp_oauth","mcp_server_url":"https://o.example/","access_token":"acc-1"}}`},
		{opCredCreate, `{"auth":{"type":"mcp_oauth","mcp_server_url":"https://o.example/","access_token":"acc-1","expires_at":"2999-01-01T00:00:00+02:00","refresh":{"client_id":"c","refresh_token":"ref-1","token_endpoint":"https://o.example/t","token_endpoint_auth":{"type":"none"},"resource":"https://o.example/","scope":""}}}`},
		{opCredCreate, `{"auth":{"type":"mcp_oauth","mcp_server_url":"https://o.example/","access_token":"acc-1","refresh":{"client_id":"c","refresh_token":"ref-1","token_endpoint":"https://o.example/t","token_endpoint_auth":{"type":"client_secret_basic","client_secret":"cs-1"}}}}`},
		{opCredCreate, `{"auth":{"type":"mcp_oauth","mcp_server_url":"https://o.example/","access_token":"acc-1","expires_at":"1999-01-01T00:00:00Z"}}`},
		{opCredCreate, `{"auth":{"type":"environment_variable","secret_name":"API_KEY","secret_value":"val-1","networking":{"type":"unrestricted"},"injection_location":{"body":true,"header":false}}}`},
		{opCredCreate, `{"auth":{"type":"environment_variable","secret_name":"API_KEY","secret_value":"val-1","networking":{"type":"limited","allowed_hosts":["*.example.com","10.0.0.1"]}}}`},
		{opCredCreate, `{"auth":{"type":"environment_variable","secret_name":"1X","secret_value":"v","networking":{"type":"limited","allowed_hosts":["*.1.2.3.4","[::1]"]}}}`},
		{opCredCreate, `{"auth":{"type":"sk-ant-secret"}}`},
		{opCredCreate, `{"auth":null}`},
		{opStaticUpdate, `{"auth":{"type":"static_bearer","token":"tok-2"},"display_name":null,"metadata":{"a":""}}`},
		{opStaticUpdate, `{"auth":{"type":"static_bearer","mcp_server_url":"https://other.example/"}}`},
		{opStaticUpdate, `{"auth":{"type":"mcp_oauth","access_token":"x"}}`},
		{opOAuthUpdate, `{"auth":{"type":"mcp_oauth","access_token":"acc-2","expires_at":null,"refresh":{"refresh_token":"ref-2","scope":"","token_endpoint_auth":{"type":"client_secret_post","client_secret":"cs-2"}}}}`},
		{opOAuthUpdate, `{"auth":{"type":"mcp_oauth","refresh":{"client_id":"other"}}}`},
		{opOAuthUpdate, `{"auth":{"type":"mcp_oauth","refresh":{"token_endpoint_auth":{"type":"none"}}}}`},
		{opEnvUpdate, `{"auth":{"type":"environment_variable","secret_value":"val-2","networking":{"type":"unrestricted"},"injection_location":{"header":false,"body":true}}}`},
		{opEnvUpdate, `{"auth":{"type":"environment_variable","injection_location":{"header":false}}}`},
		{opEnvUpdate, `{"auth":{"type":"environment_variable","secret_name":"OTHER"}}`},
		{opEnvUpdate, `{`},
	} {
		f.Add(s.op, s.body)
	}
	f.Fuzz(func(t *testing.T, op uint8, body string) {
		var target, get string
		switch op % nOps {
		case opVaultCreate:
			target = "/v1/vaults"
		case opVaultUpdate:
			target, get = "/v1/vaults/"+vaultID, "/v1/vaults/"+vaultID
		case opCredCreate:
			target = creds
		case opStaticUpdate:
			target, get = creds+"/"+staticID, creds+"/"+staticID
		case opOAuthUpdate:
			target, get = creds+"/"+oauthID, creds+"/"+oauthID
		case opEnvUpdate:
			target, get = creds+"/"+envID, creds+"/"+envID
		}
		var before map[string]any
		if get != "" {
			if err := json.Unmarshal(a.call("GET", get, "").Body.Bytes(), &before); err != nil {
				t.Fatal(err)
			}
		}
		what, got, get, create := a.post(t, target, get, body)
		if got == nil {
			return
		}
		a.sameAsGet(t, what, get, got)
		if strings.Contains(target, "/credentials") {
			checkNoSecret(t, what, body, before, got)
		}
		if create { // delete what it made, to keep the store small and a credential's server or variable free
			answer(t, "DELETE "+get, a.call("DELETE", get, ""))
		}
	})
}

// FuzzMemory: memory store create and update, memory create and update (?view=full, so that the answer has the
// content), dream create. An accepted memory path comes back unchanged, in the answer and in a GET.
func FuzzMemory(f *testing.F) {
	a := newFuzzAPI(f)
	storeID := a.seed(f, "POST", "/v1/memory_stores", `{"name":"notes","description":"d","metadata":{"k":"v"}}`)
	memories := "/v1/memory_stores/" + storeID + "/memories"
	memID := a.seed(f, "POST", memories, `{"path":"/seed.md","content":"seed"}`)
	agentID := a.seed(f, "POST", "/v1/agents", `{"name":"a","model":"m"}`)
	envID := a.seed(f, "POST", "/v1/environments", `{"name":"e"}`)
	sessID := a.seed(f, "POST", "/v1/sessions", `{"agent":"`+agentID+`","environment_id":"`+envID+`"}`)
	const (
		opStoreCreate = iota
		opStoreUpdate
		opMemoryCreate
		opMemoryUpdate
		opDreamCreate
		nOps
	)
	for _, s := range []struct {
		op   uint8
		body string
	}{
		{opStoreCreate, `{"name":"n","description":null,"metadata":{"a":"b"}}`},
		{opStoreCreate, `{"name":"","description":"x"}`},
		{opStoreUpdate, `{"name":"renamed","description":null,"metadata":{"k":null}}`},
		{opStoreUpdate, `{"name":null}`},
		{opMemoryCreate, `{"path":"/notes/a.md","content":"hello"}`},
		{opMemoryCreate, `{"path":"/é.md","content":null}`},
		{opMemoryCreate, `{"path":"/e\u0301.md","content":""}`},
		{opMemoryCreate, `{"path":"/a/../b","content":"x"}`},
		{opMemoryCreate, `{"path":"/a\u0000b","content":"x"}`},
		{opMemoryCreate, `{"path":"/a","content":"\u0000"}`},
		{opMemoryCreate, `{"path":"/seed.md","content":"taken"}`},
		{opMemoryCreate, `{"path":"/SEED.md","content":"case"}`},
		{opMemoryCreate, `{"path":"/\u212b","content":"kelvin"}`},
		{opMemoryUpdate, `{"content":"new","precondition":{"type":"content_sha256","content_sha256":""}}`},
		{opMemoryUpdate, `{"path":"/moved/seed.md"}`},
		{opMemoryUpdate, `{"path":null}`},
		{opMemoryUpdate, `{"content":null,"precondition":{"type":"content_sha256","content_sha256":"ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef0123456789"}}`},
		{opDreamCreate, `{"inputs":[{"type":"memory_store","memory_store_id":"` + storeID + `"},{"type":"sessions","session_ids":["` + sessID + `"]}],"model":"claude-sonnet-4-6"}`},
		{opDreamCreate, `{"inputs":[{"type":"sessions","session_ids":["` + sessID + `"]},{"type":"memory_store","memory_store_id":"` + storeID + `"}],"model":{"id":"m","speed":"standard"},"instructions":"i","output_behavior":{"type":"update_existing","memory_store_id":"` + storeID + `"}}`},
		{opDreamCreate, `{"inputs":[{"type":"memory_store","memory_store_id":"` + storeID + `"},{"type":"sessions","session_ids":["` + sessID + `","` + sessID + `"]}],"model":"m"}`},
		{opDreamCreate, `{"inputs":[],"model":7}`},
	} {
		f.Add(s.op, s.body)
	}
	f.Fuzz(func(t *testing.T, op uint8, body string) {
		var target, get string
		switch op % nOps {
		case opStoreCreate:
			target = "/v1/memory_stores"
		case opStoreUpdate:
			target, get = "/v1/memory_stores/"+storeID, "/v1/memory_stores/"+storeID
		case opMemoryCreate:
			target = memories + "?view=full"
		case opMemoryUpdate:
			target, get = memories+"/"+memID+"?view=full", memories+"/"+memID
		case opDreamCreate:
			target = "/v1/dreams"
		}
		what, got, get, create := a.post(t, target, get, body)
		if got == nil {
			return
		}
		a.sameAsGet(t, what, get, got)
		var req struct {
			Path *string `json:"path"`
		}
		if op%nOps == opMemoryCreate || op%nOps == opMemoryUpdate {
			if err := json.Unmarshal([]byte(body), &req); err != nil {
				t.Fatalf("%s: accepted, but: %v", what, err)
			}
			if req.Path != nil && got["path"] != *req.Path {
				t.Fatalf("%s: path %q came back as %q", what, *req.Path, got["path"])
			}
		}
		switch {
		case op%nOps == opDreamCreate: // end it, so that another update_existing dream may start
			answer(t, "cancel "+get, a.call("POST", get+"/cancel", ""))
		case create:
			answer(t, "DELETE "+get, a.call("DELETE", get, ""))
		}
	})
}

// FuzzTunnel: tunnel create, rotate_token, certificate create (whose body the fuzzer gives as the PEM itself, or
// whole). An accepted PEM is exactly one CA certificate block, and the certificate's fingerprint is its.
func FuzzTunnel(f *testing.F) {
	a := newFuzzAPI(f)
	tunnelID := a.seed(f, "POST", "/v1/tunnels", `{"display_name":"t"}`)
	ca := newTestCA(f, true, time.Now().Add(10*365*24*time.Hour))
	leaf := newTestCA(f, false, time.Now().Add(24*time.Hour))
	const (
		opCreate = iota
		opRotate
		opCertPEM // body is the PEM, put in {"ca_certificate_pem":...}
		opCertBody
		nOps
	)
	crlf := strings.ReplaceAll(ca.pem, "\n", "\r\n")
	b64 := strings.TrimSuffix(strings.TrimPrefix(ca.pem, "-----BEGIN CERTIFICATE-----\n"), "-----END CERTIFICATE-----\n")
	for _, s := range []struct {
		op   uint8
		body string
	}{
		{opCreate, ``}, {opCreate, `{}`}, {opCreate, `{"display_name":"x"}`}, {opCreate, `{"display_name":null}`},
		{opCreate, `{"display_name":""}`}, {opCreate, `{"domain":"x"}`}, {opCreate, `[]`},
		{opRotate, ``}, {opRotate, `{"reason":"leaked"}`}, {opRotate, `{"reason":null}`}, {opRotate, `{"reason":7}`},
		{opCertPEM, ca.pem}, {opCertPEM, "\n  " + crlf + "\n"}, {opCertPEM, leaf.pem}, {opCertPEM, ca.pem + ca.keyPEM},
		{opCertPEM, ca.pem + leaf.pem}, {opCertPEM, "note\n" + ca.pem}, {opCertPEM, ca.pem + "note"},
		{opCertPEM, "-----BEGIN CERTIFICATE-----\nProc-Type: 4,ENCRYPTED\n\n" + b64 + "-----END CERTIFICATE-----\n"},
		{opCertPEM, "-----BEGIN CERTIFICATE-----\n" + strings.ReplaceAll(b64, "\n", "") + "\n-----END CERTIFICATE-----"},
		{opCertPEM, "-----BEGIN X-----\n" + ca.pem},
		{opCertPEM, "-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----\n"},
		{opCertBody, `{"ca_certificate_pem":null}`}, {opCertBody, `{}`}, {opCertBody, `{"ca_certificate_pem":""}`},
	} {
		f.Add(s.op, s.body)
	}
	certs := "/v1/tunnels/" + tunnelID + "/certificates"
	f.Fuzz(func(t *testing.T, op uint8, body string) {
		var target string
		switch op % nOps {
		case opCreate:
			target = "/v1/tunnels"
		case opRotate:
			target = "/v1/tunnels/" + tunnelID + "/rotate_token"
		case opCertPEM:
			body = `{"ca_certificate_pem":` + jsonQuote(body) + `}`
			target = certs
		case opCertBody:
			target = certs
		}
		what := "POST " + target + " " + body
		got := answer(t, what, a.call("POST", target, body))
		if got == nil {
			return
		}
		id, _ := got["id"].(string)
		switch op % nOps {
		case opCreate:
			a.sameAsGet(t, what, "/v1/tunnels/"+id, got)
			answer(t, "archive", a.call("POST", "/v1/tunnels/"+id+"/archive", ""))
		case opRotate:
			if tok, _ := got["tunnel_token"].(string); !strings.HasPrefix(tok, "ctt_") {
				t.Fatalf("%s: answered %v", what, got)
			}
		default:
			var req struct {
				PEM string `json:"ca_certificate_pem"`
			}
			if err := json.Unmarshal([]byte(body), &req); err != nil {
				t.Fatalf("%s: accepted, but: %v", what, err)
			}
			der, ok := api.OnePEMBlock(req.PEM)
			if !ok {
				t.Fatalf("%s: accepted a PEM that is not exactly one CERTIFICATE block", what)
			}
			cert, err := x509.ParseCertificate(der)
			if err != nil || !cert.IsCA {
				t.Fatalf("%s: accepted a certificate that is no CA: %v", what, err)
			}
			sum := sha256.Sum256(der)
			if got["fingerprint"] != hex.EncodeToString(sum[:]) {
				t.Fatalf("%s: fingerprint %v, want %x", what, got["fingerprint"], sum)
			}
			a.sameAsGet(t, what, certs+"/"+id, got)
			answer(t, "archive", a.call("POST", certs+"/"+id+"/archive", "")) // make room for the next
		}
	})
}

// FuzzDeploymentWebhook: deployment create and update (their agent, events, resources, vaults, budget and cron
// schedule with its time zone), webhook endpoint create and update. The server's clock stands still, so that a
// schedule's upcoming runs are the same in the answer and in the GET.
func FuzzDeploymentWebhook(f *testing.F) {
	a := newFuzzAPI(f)
	now := time.Date(2026, 3, 29, 0, 59, 30, 0, time.UTC) // just before a DST change in Europe
	a.api.SetClock(func() time.Time { return now })
	agentID := a.seed(f, "POST", "/v1/agents", `{"name":"a","model":"m"}`)
	envID := a.seed(f, "POST", "/v1/environments", `{"name":"e"}`)
	vaultID := a.seed(f, "POST", "/v1/vaults", `{"display_name":"v"}`)
	seedFile(f, a.store, "file_f")
	events := `"initial_events":[{"type":"user.message","content":[{"type":"text","text":"go"}]}]`
	base := `"agent":"` + agentID + `","environment_id":"` + envID + `",` + events
	deplID := a.seed(f, "POST", "/v1/deployments", `{"name":"d",`+base+`,"schedule":{"type":"cron","expression":"0 9 * * 1-5","timezone":"Europe/Berlin"}}`)
	hookID := a.seed(f, "POST", "/v1/organizations/webhooks", `{"url":"https://hooks.example.com/x","enabled_events":["session.created"]}`)
	const (
		opDeplCreate = iota
		opDeplUpdate
		opHookCreate
		opHookUpdate
		nOps
	)
	for _, s := range []struct {
		op   uint8
		body string
	}{
		{opDeplCreate, `{"name":"n",` + base + `}`},
		{opDeplCreate, `{"name":"n","description":"d","metadata":{"k":"v"},"agent":{"type":"agent","id":"` + agentID + `","version":1},"environment_id":"` + envID + `",` + events + `,"vault_ids":["` + vaultID + `"],"resources":[{"type":"file","file_id":"file_f"}],"budget":{"type":"limit","max_list_cost":{"amount":"10","currency":"USD"}}}`},
		{opDeplCreate, `{"name":"n",` + base + `,"schedule":{"type":"cron","expression":"30 2 * * *","timezone":"Europe/Berlin"}}`},
		{opDeplCreate, `{"name":"n",` + base + `,"schedule":{"type":"cron","expression":"0 0 30 2 *","timezone":"UTC"}}`},
		{opDeplCreate, `{"name":"n",` + base + `,"schedule":{"type":"cron","expression":"@hourly","timezone":"Local"}}`},
		{opDeplCreate, `{"name":"n",` + base + `,"schedule":{"type":"cron","expression":"* * * * *","timezone":"../../etc/passwd"}}`},
		{opDeplCreate, `{"name":"n",` + base + `,"schedule":{"type":"cron","expression":"*/0 * * * *","timezone":"UTC"}}`},
		{opDeplCreate, `{"name":"n",` + base + `,"schedule":{"type":"interval"}}`},
		{opDeplCreate, `{"name":"n","agent":"agent_nope","environment_id":"` + envID + `",` + events + `}`},
		{opDeplUpdate, `{"schedule":null,"name":"triage","metadata":{"team":"infra"}}`},
		{opDeplUpdate, `{"schedule":{"type":"cron","expression":"59 23 31 12 *","timezone":"Pacific/Kiritimati"},"description":null}`},
		{opDeplUpdate, `{"initial_events":null}`},
		{opDeplUpdate, `{"vault_ids":null,"resources":null,"budget":null,"agent":"` + agentID + `"}`},
		{opHookCreate, `{"url":"https://h.example.com/","enabled_events":["session.created","session.created"],"name":"n","description":"d"}`},
		{opHookCreate, `{"url":"http://127.0.0.1/","enabled_events":["session.created"]}`},
		{opHookCreate, `{"url":"https://h.example.com/","enabled_events":[]}`},
		{opHookCreate, `{"url":"https://h.example.com/","enabled_events":["nope"]}`},
		{opHookUpdate, `{"state":"disabled","name":"","url":"https://other.example.com/"}`},
		{opHookUpdate, `{"state":"paused"}`},
		{opHookUpdate, `{"enabled_events":["deployment.created","vault.created"]}`},
	} {
		f.Add(s.op, s.body)
	}
	f.Fuzz(func(t *testing.T, op uint8, body string) {
		var target, get string
		switch op % nOps {
		case opDeplCreate:
			target = "/v1/deployments"
		case opDeplUpdate:
			target, get = "/v1/deployments/"+deplID, "/v1/deployments/"+deplID
		case opHookCreate:
			target = "/v1/organizations/webhooks"
		case opHookUpdate:
			target, get = "/v1/organizations/webhooks/"+hookID, "/v1/organizations/webhooks/"+hookID
		}
		what, got, get, create := a.post(t, target, get, body)
		if got == nil {
			return
		}
		if op%nOps == opHookCreate {
			if sec, _ := got["signing_secret"].(string); sec == "" {
				t.Fatalf("%s: no signing secret in %v", what, got)
			}
			delete(got, "signing_secret") // shown once
		}
		a.sameAsGet(t, what, get, got)
		if sched, ok := got["schedule"].(map[string]any); ok && sched != nil {
			runs, _ := sched["upcoming_runs_at"].([]any)
			prev := now
			for _, r := range runs {
				at, err := time.Parse(time.RFC3339Nano, r.(string))
				if err != nil || !at.After(prev) {
					t.Fatalf("%s: upcoming runs %v not after %s and increasing", what, runs, now)
				}
				prev = at
			}
		}
		switch {
		case create && op%nOps == opHookCreate:
			answer(t, "DELETE "+get, a.call("DELETE", get, ""))
		case create:
			answer(t, "archive "+get, a.call("POST", get+"/archive", ""))
		}
	})
}

// uploadBoundary is the multipart boundary of FuzzUpload's bodies.
const uploadBoundary = "fuzzboundary"

// multipartBody writes parts (form name, file name, content type, content; a file name "" for a field) with
// uploadBoundary.
func multipartBody(tb testing.TB, parts ...[4]string) string {
	tb.Helper()
	var b strings.Builder
	mw := multipart.NewWriter(&b)
	if err := mw.SetBoundary(uploadBoundary); err != nil {
		tb.Fatal(err)
	}
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		cd := `form-data; name="` + p[0] + `"`
		if p[1] != "" {
			cd += `; filename="` + p[1] + `"`
		}
		h.Set("Content-Disposition", cd)
		if p[2] != "" {
			h.Set("Content-Type", p[2])
		}
		w, err := mw.CreatePart(h)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := io.WriteString(w, p[3]); err != nil {
			tb.Fatal(err)
		}
	}
	if err := mw.Close(); err != nil {
		tb.Fatal(err)
	}
	return b.String()
}

// FuzzUpload: the multipart decoders of the file upload, the skill create and the skill version create, with
// an arbitrary body under a fixed boundary. An uploaded file's content is the file part's, byte for byte.
func FuzzUpload(f *testing.F) {
	a := newFuzzAPI(f, withFiles(f, f.TempDir(), 1<<20))
	const md = "---\nname: csv-tools\ndescription: Reads CSV.\n---\n# CSV\n"
	var zbuf bytes.Buffer
	zw := zip.NewWriter(&zbuf)
	for name, content := range map[string]string{"csv/SKILL.md": md, "csv/read.py": "print(1)\n"} {
		w, err := zw.Create(name)
		if err != nil {
			f.Fatal(err)
		}
		if _, err := io.WriteString(w, content); err != nil {
			f.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		f.Fatal(err)
	}
	ct := "multipart/form-data; boundary=" + uploadBoundary
	rec := a.callCT("POST", "/v1/skills", ct, multipartBody(f, [4]string{"files[]", "csv/SKILL.md", "text/markdown", md}))
	var sk struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &sk); err != nil || rec.Code != http.StatusOK {
		f.Fatalf("seed skill: %d %s", rec.Code, rec.Body)
	}
	const (
		opFile = iota
		opSkill
		opSkillVersion
		nOps
	)
	for _, s := range []struct {
		op    uint8
		parts [][4]string
	}{
		{opFile, [][4]string{{"file", "a.txt", "text/plain", "hello"}}},
		{opFile, [][4]string{{"file", "../../etc/passwd", "", "x"}, {"expires_in_seconds", "", "", "3600"}}},
		{opFile, [][4]string{{"file", "a.txt", "text/plain", ""}}},
		{opFile, [][4]string{{"file", "a", "", "1"}, {"file", "b", "", "2"}}},
		{opFile, [][4]string{{"expires_in_seconds", "", "", "-1"}, {"file", "a\\x.bin", "application/octet-stream", "\x00\xff"}}},
		{opSkill, [][4]string{{"display_name", "", "", "CSV"}, {"files[]", "csv/SKILL.md", "", md}, {"files[]", "csv/lib/x.py", "", "x"}}},
		{opSkill, [][4]string{{"files", "csv.zip", "application/zip", zbuf.String()}}},
		{opSkill, [][4]string{{"files[]", "csv/SKILL.md", "", md}, {"files[]", "csv/../x", "", "x"}}},
		{opSkill, [][4]string{{"files[]", "x.zip", "", "PK\x03\x04 not really"}}},
		{opSkill, [][4]string{{"display_name", "", "", "only a name"}}},
		{opSkillVersion, [][4]string{{"files[]", "csv/SKILL.md", "", md + "more\n"}}},
		{opSkillVersion, [][4]string{{"files[]", "csv/SKILL.md", "", strings.Replace(md, "csv-tools", "other", 1)}}},
	} {
		f.Add(s.op, multipartBody(f, s.parts...))
	}
	f.Add(uint8(opFile), "--"+uploadBoundary+"\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\nunterminated")
	f.Add(uint8(opSkill), "not multipart at all")
	f.Fuzz(func(t *testing.T, op uint8, body string) {
		var target string
		switch op % nOps {
		case opFile:
			target = "/v1/files"
		case opSkill:
			target = "/v1/skills"
		case opSkillVersion:
			target = "/v1/skills/" + sk.ID + "/versions"
		}
		what := fmt.Sprintf("POST %s %q", target, body)
		got := answer(t, what, a.callCT("POST", target, ct, body))
		if got == nil {
			return
		}
		id, _ := got["id"].(string)
		switch op % nOps {
		case opFile:
			a.sameAsGet(t, what, "/v1/files/"+id, got)
			var sent []byte
			mr := multipart.NewReader(strings.NewReader(body), uploadBoundary)
			for {
				p, err := mr.NextPart()
				if err != nil {
					t.Fatalf("%s: accepted, but no file part: %v", what, err)
				}
				if p.FormName() == "file" {
					if sent, err = io.ReadAll(p); err != nil {
						t.Fatalf("%s: accepted, but the file part does not read: %v", what, err)
					}
					break
				}
			}
			content := a.call("GET", "/v1/files/"+id+"/content", "")
			if content.Code != http.StatusOK || !bytes.Equal(content.Body.Bytes(), sent) {
				t.Fatalf("%s: content %d %q, want %q", what, content.Code, content.Body, sent)
			}
			answer(t, "DELETE", a.call("DELETE", "/v1/files/"+id, ""))
		case opSkill:
			a.sameAsGet(t, what, "/v1/skills/"+id, got)
		case opSkillVersion:
			a.sameAsGet(t, what, "/v1/skills/"+sk.ID+"/versions/"+id, got)
		}
	})
}

// FuzzAdmin: the admin API's bodies: workspace create and update, API key create and update.
func FuzzAdmin(f *testing.F) {
	a := newFuzzAPI(f)
	wsID := a.seed(f, "POST", "/v1/organizations/workspaces", `{"name":"w"}`)
	keyID := a.seed(f, "POST", "/v1/organizations/api_keys", `{"name":"k","workspace_id":"`+wsID+`"}`)
	const (
		opCreate = iota
		opUpdate
		opKeyCreate
		opKeyUpdate
		nOps
	)
	for _, s := range []struct {
		op   uint8
		body string
	}{
		{opCreate, `{"name":"x"}`}, {opCreate, `{}`}, {opCreate, `{"name":""}`}, {opCreate, `{"name":null}`},
		{opCreate, `{"name":"x","display_color":"#a1b2c3","tags":{"k":"v"}}`}, {opCreate, `{"name":"x","tags":null}`},
		{opCreate, `{"name":"x","data_residency":{"workspace_geo":"us"}}`}, {opCreate, `{"name":"x","external_key_id":"k"}`},
		{opUpdate, `{"name":"y"}`}, {opUpdate, `{"display_color":""}`}, {opUpdate, `{"display_color":"blue"}`},
		{opUpdate, `{"tags":{"":"v"}}`}, {opUpdate, `[]`},
		{opKeyCreate, `{}`}, {opKeyCreate, `{"workspace_id":"` + wsID + `"}`}, {opKeyCreate, `{"workspace_id":"wrkspc_no"}`},
		{opKeyCreate, `{"name":7}`},
		{opKeyUpdate, `{"status":"inactive"}`}, {opKeyUpdate, `{"status":"active","name":"n"}`}, {opKeyUpdate, `{"status":"x"}`},
		{opKeyUpdate, `{"name":""}`},
	} {
		f.Add(s.op, s.body)
	}
	f.Fuzz(func(t *testing.T, op uint8, body string) {
		var target string
		switch op % nOps {
		case opCreate:
			target = "/v1/organizations/workspaces"
		case opUpdate:
			target = "/v1/organizations/workspaces/" + wsID
		case opKeyCreate:
			target = "/v1/organizations/api_keys"
		case opKeyUpdate:
			target = "/v1/organizations/api_keys/" + keyID
		}
		what := "POST " + target + " " + body
		got := answer(t, what, a.call("POST", target, body))
		if got == nil {
			return
		}
		id, _ := got["id"].(string)
		switch op % nOps {
		case opCreate, opUpdate:
			if name, _ := got["name"].(string); name == "" || len(name) > 40 {
				t.Fatalf("%s: accepted the name %q", what, name)
			}
			a.sameAsGet(t, what, "/v1/organizations/workspaces/"+id, got)
		case opKeyCreate:
			if secret, _ := got["secret"].(string); !strings.HasPrefix(secret, "corral-") {
				t.Fatalf("%s: no secret in %v", what, got)
			}
			delete(got, "secret")
			a.sameAsGet(t, what, "/v1/organizations/api_keys/"+id, got)
		default:
			a.sameAsGet(t, what, "/v1/organizations/api_keys/"+id, got)
		}
	})
}
