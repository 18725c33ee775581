package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// tableServer is a server whose route table can be walked; its store is never called.
func tableServer(t *testing.T) *Server {
	t.Helper()
	s, err := New(Config{Store: struct{ store.Store }{}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRouteTable: every route of the table declares an access that matches its path family, and each pattern
// is registered once.
func TestRouteTable(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, rt := range tableServer(t).routeTable() {
		if err := checkRoute(rt); err != nil {
			t.Error(err)
		}
		if seen[rt.pattern] {
			t.Errorf("route %s is in the table twice", rt.pattern)
		}
		seen[rt.pattern] = true
	}
	if len(seen) < 60 {
		t.Errorf("the route table has %d routes; expected the whole API", len(seen))
	}
}

// TestCheckRoute: checkRoute refuses a route without an access and each kind of access out of its path family.
func TestCheckRoute(t *testing.T) {
	t.Parallel()
	h := func(http.ResponseWriter, *http.Request) error { return nil }
	for _, c := range []struct {
		pattern string
		access  access
		want    string // in the error; "" for none
	}{
		{"GET /v1/agents", accessAPIKey, ""},
		{"GET /healthz", accessPublic, ""},
		{"GET " + workBase + "/poll", accessTake, ""},
		{"GET /v1/sessions/{session_id}/events", accessSession, ""},
		{"GET /v1/skills/{skill_id}/versions", accessSessionSkill, ""},
		{"GET /v1/files/{file_id}", accessSessionFile, ""},
		{"POST /v1/files", accessSessionOutput, ""},
		{"POST /v1/memory_stores/{memory_store_id}/memories", accessSessionMemoryWrite, ""},
		{"GET /v1/agents", access{}, "declares no access"},
		{"GET /v1/agents", accessPublic, "only the health checks are public"},
		{"GET /healthz", accessAPIKey, "only the health checks are public"},
		{"GET /v1/agents", access{name: "none"}, "accepts no credential"},
		{"GET " + workBase + "/{work_id}", accessAPIKey, "queue accesses"},
		{"GET /v1/sessions/{session_id}", accessOperate, "queue accesses"},
		{"GET /v1/sessions/{session_id}", access{name: "env", accept: kindEnvKey}, "environment keys outside"},
		{"GET /v1/agents", accessSession, "nothing in its path scopes"},
		{"GET /v1/skills/{skill_id}", access{name: "s", accept: kindToken}, "nothing in its path scopes"},
	} {
		err := checkRoute(route{c.pattern, h, c.access})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s with %s: %v", c.pattern, c.access.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s with %s: %v, want an error saying %q", c.pattern, c.access.name, err, c.want)
		}
	}
}

// TestHandleRefusesRouteWithoutAccess: a route that declares no access cannot be registered.
func TestHandleRefusesRouteWithoutAccess(t *testing.T) {
	t.Parallel()
	s := tableServer(t)
	defer func() {
		if v := recover(); v == nil || !strings.Contains(v.(string), "declares no access") {
			t.Errorf("registering a route without access: %v", v)
		}
	}()
	s.handle(route{"GET /v1/nothing", func(http.ResponseWriter, *http.Request) error { return nil }, access{}})
}

// TestCredentialFor: on the work queue every kind is told apart by its prefix; elsewhere only the kinds a route
// accepts are, and any other secret is an API key.
func TestCredentialFor(t *testing.T) {
	t.Parallel()
	env, tok := apitype.EnvironmentKeyPrefix+"x", apitype.SessionsTokenPrefix+"x"
	for _, c := range []struct {
		a      access
		secret string
		want   credKind
	}{
		{accessTake, env, kindEnvKey}, {accessTake, tok, kindToken}, {accessTake, "k", kindAPIKey},
		{accessOperate, env, kindEnvKey}, {accessOperate, tok, kindToken},
		{accessSession, tok, kindToken}, {accessSession, env, kindAPIKey},
		{accessAPIKey, env, kindAPIKey}, {accessAPIKey, tok, kindAPIKey}, {accessAPIKey, "k", kindAPIKey},
	} {
		if got := c.a.credentialFor(c.secret).kind; got != c.want {
			t.Errorf("%s: %q is kind %d, want %d", c.a.name, c.secret, got, c.want)
		}
	}
}
