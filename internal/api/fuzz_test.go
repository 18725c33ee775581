package api

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
)

// The request decoders must never panic, and must reject bad input only with a 4xx: a 500 would mean a
// client's mistake is reported as the server's.

func check4xx(t *testing.T, input []byte, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var ae *apiError
	if !errors.As(err, &ae) {
		t.Fatalf("input %q: error %v (%T) is not an API error", input, err, err)
	}
	if ae.status < 400 || ae.status >= 500 || ae.msg == "" || ae.typ == "" {
		t.Fatalf("input %q: %d %s %q", input, ae.status, ae.typ, ae.msg)
	}
}

var agentSeeds = []string{
	`{"name":"a","model":"claude-sonnet-4-6"}`,
	`{"name":"a","model":{"id":"m","effort":{"type":"max"},"speed":"fast"},"system":"s","description":"d","metadata":{"k":"v"}}`,
	`{"name":"a","model":"m","tools":[{"type":"agent_toolset_20260401","default_config":{"enabled":false,"permission_policy":{"type":"always_ask"}},"configs":[{"name":"bash","enabled":true},{"type":"web_fetch","allowed_domains":["a.com"],"max_content_tokens":5,"url_sources":{"user_input":"all","client_tool_results":{"type":"only","tools":[{"type":"tool_reference","name":"x"}]}}},{"name":"web_search","user_location":{"type":"approximate","country":"DE"}}]}]}`,
	`{"name":"a","model":"m","mcp_servers":[{"type":"url","name":"s","url":"https://s.example"}],"tools":[{"type":"mcp_toolset","mcp_server_name":"s","configs":[{"name":"t","permission_policy":{"type":"auto"}}]}]}`,
	`{"name":"a","model":"m","tools":[{"type":"custom","name":"c","description":"d","input_schema":{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}}]}`,
	`{"name":"a","model":"m","skills":[{"type":"anthropic","skill_id":"xlsx"}],"execution_identity":{"type":"aws_role","role_arn":"arn:x"},"multiagent":{"type":"coordinator","agents":["agent_x"]}}`,
	`{"name":1}`, `{"tools":[1]}`, `{"model":{"effort":[]}}`, `{`, `null`, `{"tools":[{"type":"custom","input_schema":"x"}]}`,
}

func FuzzAgentCreate(f *testing.F) {
	for _, s := range agentSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		a, err := parseAgentCreate(body)
		check4xx(t, body, err)
		if err == nil {
			if a.Name == "" || a.Model.ID == "" || a.Model.Effort == nil || a.Tools == nil || a.Metadata == nil {
				t.Fatalf("accepted %q as an incomplete agent %+v", body, a)
			}
			if _, err := json.Marshal(a); err != nil {
				t.Fatalf("accepted %q but cannot encode it: %v", body, err)
			}
		}
	})
}

func FuzzAgentUpdate(f *testing.F) {
	for _, s := range append(agentSeeds, `{"version":1,"description":null,"tools":null,"metadata":{"k":null}}`,
		`{"multiagent":null,"model":{"id":"x"}}`,
		`{"multiagent":{"type":"multiagent_20261001","advisor":{"type":"enabled","model":"m"},"subagents":{"type":"enabled","predefined_agents":["agent_x",{"type":"self"}],"inline_agents":{"type":"disabled"}},"workflows":null}}`,
		`{"multiagent":{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":null,"inline_agents":null},"workflows":{"type":"disabled"}}}`) {
		f.Add([]byte(s))
	}
	base, err := parseAgentCreate([]byte(agentSeeds[3]))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req agentUpdateRequest
		if err := decodeJSON(body, &req); err != nil {
			check4xx(t, body, err)
			return
		}
		cur := *base
		_, err := applyAgentUpdate(&cur, &req)
		check4xx(t, body, err)
	})
}

func FuzzEventSend(f *testing.F) {
	for _, s := range []string{
		`{"events":[{"type":"user.message","content":[{"type":"text","text":"hi"}]},{"type":"system.message","content":[{"type":"text","text":"s"}]}]}`,
		`{"events":[{"type":"user.message","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}},{"type":"document","source":{"type":"text","data":"x"},"title":"t"}]}]}`,
		`{"events":[{"type":"user.interrupt","session_thread_id":"sthr_x"}]}`,
		`{"events":[{"type":"user.tool_confirmation","tool_use_id":"sevt_x","result":"deny","deny_message":"no"}]}`,
		`{"events":[{"type":"user.custom_tool_result","custom_tool_use_id":"sevt_x","content":[{"type":"search_result","source":"https://x","title":"t","content":[{"type":"text","text":"c"}],"citations":{"enabled":true}}],"is_error":false}]}`,
		`{"events":[{"type":"user.tool_result","tool_use_id":"sevt_x","content":[{"type":"document","source":{"type":"url","url":"https://x/y.pdf"}}]}]}`,
		`{"events":[{"type":"user.define_outcome","description":"d","rubric":{"type":"file","file_id":"file_x"},"max_iterations":3}]}`,
		`{"events":[{"type":"user.message","content":[{"type":"foo"}]}]}`, `{"events":{}}`, `{"events":[null]}`, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		events, err := parseSend(body)
		check4xx(t, body, err)
		for _, ce := range events {
			if !apitype.IsUserEvent(ce.ev.Type) || len(ce.ev.Data) == 0 || ce.ev.Processed {
				t.Fatalf("accepted %q as %+v", body, ce.ev)
			}
		}
	})
}

func FuzzSessionCreate(f *testing.F) {
	for _, s := range []string{
		`{"agent":"agent_x","environment_id":"env_x"}`,
		`{"agent":{"type":"agent","id":"agent_x","version":2},"environment_id":"env_x","title":"t","metadata":{"a":"b"},"vault_ids":["vlt_x"]}`,
		`{"agent":{"type":"agent_with_overrides","id":"agent_x","system":null,"model":"m","tools":[],"mcp_servers":[],"skills":[]},"environment_id":"e"}`,
		`{"agent":"a","environment_id":"e","resources":[{"type":"github_repository","url":"https://github.com/a/b","checkout":{"type":"commit","sha":"abcdef1"}},{"type":"file","file_id":"f","mount_path":"/x"}]}`,
		`{"agent":"a","environment_id":"e","budget":{"type":"limit","max_list_cost":{"amount":"2500","currency":"USD"}}}`,
		`{"agent":"a","environment_id":"e","initial_events":[{"type":"user.message","content":[{"type":"text","text":"x"}]}]}`,
		`{"agent":7}`, `{"agent":{"type":"agent"}}`, `{"agent":"a","resources":[{"type":"file","mount_path":"/"}]}`,
	} {
		f.Add([]byte(s))
	}
	now := time.Unix(1_800_000_000, 0).UTC()
	f.Fuzz(func(t *testing.T, body []byte) {
		var req sessionCreateRequest
		if err := decodeJSON(body, &req); err != nil {
			check4xx(t, body, err)
			return
		}
		ref, err := parseAgentRef("agent", req.Agent)
		check4xx(t, body, err)
		if err == nil {
			a, _ := parseAgentCreate([]byte(agentSeeds[3]))
			_, err = ref.snapshot("agent", a)
			check4xx(t, body, err)
		}
		for i, raw := range req.Resources {
			res, _, err := parseResource(index("resources", i), raw, now, true)
			check4xx(t, body, err)
			if err == nil && (res.MountPath == "" || res.MountPath[0] != '/') {
				t.Fatalf("accepted %q with mount path %q", body, res.MountPath)
			}
		}
		for i, raw := range req.InitialEvents {
			_, err := parseClientEvent(index("initial_events", i), raw, []apitype.EventType{apitype.EventUserMessage})
			check4xx(t, body, err)
		}
		if !isNull(req.Budget) {
			_, err := resolveBudget("budget", req.Budget)
			check4xx(t, body, err)
		}
	})
}

func FuzzEnvConfig(f *testing.F) {
	for _, s := range []string{
		`{"type":"cloud"}`, `{"type":"self_hosted"}`,
		`{"type":"cloud","networking":{"type":"limited","allowed_hosts":["*.pypi.org","10.0.0.1:8080"],"allow_mcp_servers":true,"allow_package_managers":true},"packages":{"type":"packages","pip":["x==1"],"apt":[]}}`,
		`{"type":"cloud","networking":{"type":"unrestricted"}}`, `{"type":"cloud","packages":{"npm":null}}`, `{"type":5}`,
	} {
		f.Add([]byte(s))
	}
	prev := defaultEnvConfig()
	f.Fuzz(func(t *testing.T, raw []byte) {
		cfg, err := resolveEnvConfig("config", raw, nil)
		check4xx(t, raw, err)
		if err == nil {
			if v := envConfigView(cfg); v["type"] != cfg.Type {
				t.Fatalf("view of %q = %v", raw, v)
			}
		}
		_, err = resolveEnvConfig("config", raw, &prev)
		check4xx(t, raw, err)
	})
}

func FuzzListQuery(f *testing.F) {
	for _, s := range []string{
		"limit=5&page=" + *itemCursor(time.Unix(1, 0), "agent_x", false), "page=" + *seqCursor(9) + "&order=desc",
		"created_at[gte]=2026-01-01T00:00:00Z&include_archived=true&statuses[]=idle&statuses=running",
		"limit=-1", "page=%%%", "types[]=user.message,agent.message",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.Parse("/v1/x?" + raw)
		if err != nil {
			return
		}
		q := newQuery(u)
		_, _, c, err := listParams(q, defaultLimit, maxLimit)
		check4xx(t, []byte(raw), err)
		if err == nil && c != nil {
			p, _, _, _ := listParams(q, defaultLimit, maxLimit)
			check4xx(t, []byte(raw), itemPageInto(c, &p))
		}
		_, err = q.desc(true)
		check4xx(t, []byte(raw), err)
		_ = q.list("types")
	})
}

// onePEMBlock reports whether s is exactly one PEM block of type CERTIFICATE, without headers, and nothing but
// white space around it, and returns its bytes.
func onePEMBlock(s string) ([]byte, bool) {
	s = strings.TrimSpace(s)
	if strings.Count(s, "-----BEGIN ") != 1 || strings.Count(s, "-----END ") != 1 ||
		!strings.HasPrefix(s, "-----BEGIN CERTIFICATE-----") || !strings.HasSuffix(s, "-----END CERTIFICATE-----") {
		return nil, false
	}
	b, rest := pem.Decode([]byte(s))
	if b == nil || len(rest) != 0 || b.Type != "CERTIFICATE" || len(b.Headers) != 0 {
		return nil, false
	}
	return b.Bytes, true
}

// FuzzCACertificate: a tunnel certificate's PEM, the rule alone (FuzzTunnel drives it through the API). An
// accepted PEM is exactly one CERTIFICATE block of an unexpired CA certificate, and the certificate is its.
func FuzzCACertificate(f *testing.F) {
	now := time.Now()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	var certs []string
	for _, isCA := range []bool{true, false} {
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "CA"}, NotBefore: now.Add(-time.Hour),
			NotAfter: now.Add(24 * time.Hour), BasicConstraintsValid: true, IsCA: isCA, KeyUsage: x509.KeyUsageCertSign}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			f.Fatal(err)
		}
		certs = append(certs, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	}
	ca, leaf := certs[0], certs[1]
	body := strings.TrimSuffix(strings.TrimPrefix(ca, "-----BEGIN CERTIFICATE-----\n"), "-----END CERTIFICATE-----\n")
	for _, s := range []string{ca, leaf, ca + leaf, " \n" + strings.ReplaceAll(ca, "\n", "\r\n") + "\n\n", "x" + ca, ca + "x",
		"-----BEGIN X-----\n" + ca, "-----BEGIN CERTIFICATE-----\n!\n" + ca, ca + "-----END X-----\n",
		"-----BEGIN CERTIFICATE-----\nA: b\n\n" + body + "-----END CERTIFICATE-----\n",
		"-----BEGIN CERTIFICATE-----\n" + strings.ReplaceAll(body, "\n", "") + "\n-----END CERTIFICATE-----",
		"-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n", "", "   "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cert, err := parseCACertificate("ca_certificate_pem", s, now)
		check4xx(t, []byte(s), err)
		if err != nil {
			return
		}
		der, ok := onePEMBlock(s)
		if !ok {
			t.Fatalf("accepted %q: not exactly one CERTIFICATE block", s)
		}
		if !bytes.Equal(cert.Raw, der) || !cert.IsCA || now.After(cert.NotAfter) {
			t.Fatalf("accepted %q as %+v", s, cert)
		}
	})
}

// FuzzCredAuth: a credential's auth, create and update of each type, the rules alone (FuzzVaultCredential drives
// them through the API). An accepted auth has a secret to seal for each one given, none empty, and its document
// has no secret's field.
func FuzzCredAuth(f *testing.F) {
	for _, s := range []string{
		`{"type":"static_bearer","mcp_server_url":"https://a.example/","token":"t"}`,
		`{"type":"mcp_oauth","mcp_server_url":"https://o.example/","access_token":"a","expires_at":"2999-01-01T00:00:00Z","refresh":{"client_id":"c","refresh_token":"r","token_endpoint":"https://o.example/t","token_endpoint_auth":{"type":"client_secret_basic","client_secret":"s"},"scope":"x","resource":"https://o.example/"}}`,
		`{"type":"mcp_oauth","mcp_server_url":"https://o.example/","access_token":"a","refresh":{"client_id":"c","refresh_token":"r","token_endpoint":"https://o.example/t","token_endpoint_auth":{"type":"client_secret_post","client_secret":"s"}}}`,
		`{"type":"mcp_oauth","mcp_server_url":"https://o.example/","access_token":"a","refresh":{"client_id":"c","refresh_token":"r","token_endpoint":"https://o.example/t","token_endpoint_auth":{"type":"none"}}}`,
		`{"type":"environment_variable","secret_name":"K","secret_value":"v","networking":{"type":"limited","allowed_hosts":["*.a.com","1.2.3.4"]},"injection_location":{"body":true}}`,
		`{"type":"environment_variable","secret_name":"K","secret_value":"v","networking":{"type":"unrestricted"}}`,
		`{"type":"static_bearer","token":"n"}`, `{"type":"mcp_oauth","expires_at":null,"refresh":{"refresh_token":"r2","scope":""}}`,
		`{"type":"environment_variable","injection_location":{"header":false}}`, `{"type":"x"}`, `{}`, `[]`, `null`,
	} {
		f.Add([]byte(s))
	}
	now := time.Unix(1_800_000_000, 0).UTC()
	var stored [][]byte // the documents of stored auths, decoded afresh for each update
	for _, s := range []string{
		`{"type":"static_bearer","mcp_server_url":"https://a.example/","token":"t"}`,
		`{"type":"mcp_oauth","mcp_server_url":"https://o.example/","access_token":"a","refresh":{"client_id":"c","refresh_token":"r","token_endpoint":"https://o.example/t","token_endpoint_auth":{"type":"client_secret_basic","client_secret":"s"}}}`,
		`{"type":"environment_variable","secret_name":"K","secret_value":"v","networking":{"type":"unrestricted"}}`,
	} {
		auth, _, _, err := parseCredAuth("auth", []byte(s), now)
		if err != nil {
			f.Fatal(err)
		}
		doc, err := json.Marshal(auth)
		if err != nil {
			f.Fatal(err)
		}
		stored = append(stored, doc)
	}
	secretFields := []string{`"token"`, `"access_token"`, `"refresh_token"`, `"client_secret"`, `"secret_value"`}
	checkAuth := func(t *testing.T, raw []byte, auth *apitype.CredentialAuth, secrets []plain) {
		for _, p := range secrets {
			if p.name == "" || p.value == "" || len(p.value) > maxSecretLen {
				t.Fatalf("accepted %q with a secret %s of %d bytes", raw, p.name, len(p.value))
			}
		}
		doc, err := json.Marshal(auth)
		if err != nil {
			t.Fatalf("accepted %q but cannot encode it: %v", raw, err)
		}
		for _, s := range secretFields {
			if bytes.Contains(doc, []byte(s+":")) {
				t.Fatalf("accepted %q as %s, which has %s", raw, doc, s)
			}
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		auth, secrets, match, err := parseCredAuth("auth", raw, now)
		check4xx(t, raw, err)
		if err == nil {
			if len(secrets) == 0 || match == "" || credAuthTypes[auth.Type].create == nil {
				t.Fatalf("accepted %q as %+v with %d secrets, match %q", raw, auth, len(secrets), match)
			}
			checkAuth(t, raw, &auth, secrets)
		}
		for _, doc := range stored {
			var cur apitype.CredentialAuth
			if err := json.Unmarshal(doc, &cur); err != nil {
				t.Fatal(err)
			}
			secrets, err := updateCredAuth("auth", raw, &cur, now)
			check4xx(t, raw, err)
			if err == nil {
				checkAuth(t, raw, &cur, secrets)
			}
		}
	})
}
