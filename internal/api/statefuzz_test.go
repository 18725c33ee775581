package api_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"net/textproto"
	neturl "net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/proxy"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/postgres"
	"github.com/corralhq/corral/internal/store/postgres/pgtest"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/vault"
)

// The stateful fuzzer: random sequences of valid and invalid requests over every route of the table, sent over
// real HTTP to a real server (a vault, a file service and the MCP proxy's validator, over SQLite and PostgreSQL),
// with a model of the resources it created. It checks, after every request, that the answer is never a 5xx and
// that every error is the API's error envelope; and, every so often and at the end, that every list walked
// forwards with small random limits is complete and without duplicates (the model's set, archived ones with
// include_archived) and that no session event was appended twice (unique ids, the store's contiguous order,
// each event the fuzzer sent once, and none it was refused).
//
// CORRAL_STATEFUZZ_SEED replays one seed (logged by every run); CORRAL_STATEFUZZ_DURATION (e.g. 10m) runs each
// backend that long instead of a few seconds; CORRAL_STATEFUZZ_TRACE logs the requests (and answers) of the routes
// whose pattern holds it (e.g. "POST /v1/sessions").

// sfKind is a kind of resource of the model, named by the path wildcard that takes its id.
type sfKind string

const (
	sfAgent      sfKind = "agent"
	sfEnv        sfKind = "environment"
	sfEnvKey     sfKind = "environment_key"
	sfWork       sfKind = "work"
	sfSession    sfKind = "session"
	sfThread     sfKind = "thread"
	sfResource   sfKind = "resource"
	sfVault      sfKind = "vault"
	sfCredential sfKind = "credential"
	sfMemStore   sfKind = "memory_store"
	sfMemory     sfKind = "memory"
	sfMemVersion sfKind = "memory_version"
	sfDream      sfKind = "dream"
	sfDeployment sfKind = "deployment"
	sfRun        sfKind = "deployment_run"
	sfWebhook    sfKind = "webhook"
	sfTunnel     sfKind = "tunnel"
	sfCert       sfKind = "certificate"
	sfFile       sfKind = "file"
	sfSkill      sfKind = "skill"
	sfSkillVer   sfKind = "skill_version"
	sfModel      sfKind = "model"
	sfGitOp      sfKind = "git_op"
	sfWorkspace  sfKind = "workspace"
	sfAPIKey     sfKind = "api_key"
)

// sfWildcards maps each path wildcard of the route table to the kind of id it takes; sfParents gives the kind
// of the resource a nested kind belongs to.
var (
	sfWildcards = map[string]sfKind{
		"agent_id": sfAgent, "environment_id": sfEnv, "key_id": sfEnvKey, "work_id": sfWork, "session_id": sfSession,
		"thread_id": sfThread, "resource_id": sfResource, "vault_id": sfVault, "credential_id": sfCredential,
		"memory_store_id": sfMemStore, "memory_id": sfMemory, "memory_version_id": sfMemVersion, "dream_id": sfDream,
		"deployment_id": sfDeployment, "deployment_run_id": sfRun, "webhook_endpoint_id": sfWebhook,
		"tunnel_id": sfTunnel, "certificate_id": sfCert, "file_id": sfFile, "skill_id": sfSkill,
		"version": sfSkillVer, "model_id": sfModel, "op": sfGitOp, "workspace_id": sfWorkspace, "api_key_id": sfAPIKey,
	}
	sfParents = map[sfKind]sfKind{
		sfEnvKey: sfEnv, sfWork: sfEnv, sfThread: sfSession, sfResource: sfSession, sfCredential: sfVault,
		sfMemory: sfMemStore, sfMemVersion: sfMemStore, sfCert: sfTunnel, sfSkillVer: sfSkill,
	}
)

// sfRoute is what the fuzzer knows of a route: how to make its body (nil: it takes none) and what a success
// does to the model.
type sfRoute struct {
	body  func(f *stateFuzzer, ids map[string]string) sfBody
	after func(f *stateFuzzer, ids map[string]string, resp []byte)
}

// sfBody is a request body: JSON unless ctype says otherwise (multipart); nonces are the markers of the events
// it sends.
type sfBody struct {
	b      []byte
	ctype  string
	nonces []string
}

// sfJSON is a JSON body of v.
func sfJSON(v any) sfBody {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return sfBody{b: b}
}

type obj = map[string]any

// sfRoutes is the fuzzer's entry for every route of the table (TestStateFuzzCoversRoutes fails for a route
// without one).
var sfRoutes = map[string]sfRoute{
	"GET /{$}":                  {},
	"GET /healthz":              {},
	"GET /v1/models":            {},
	"GET /v1/models/{model_id}": {},

	"POST /v1/agents":                       {body: (*stateFuzzer).agentBody, after: sfCreated(sfAgent, "")},
	"GET /v1/agents":                        {},
	"GET /v1/agents/{agent_id}":             {},
	"POST /v1/agents/{agent_id}":            {body: (*stateFuzzer).agentUpdateBody},
	"POST /v1/agents/{agent_id}/archive":    {after: sfArchived("agent_id")},
	"GET /v1/agents/{agent_id}/versions":    {},
	"POST /v1/environments":                 {body: (*stateFuzzer).envBody, after: (*stateFuzzer).afterEnvCreate},
	"GET /v1/environments":                  {},
	"GET /v1/environments/{environment_id}": {},
	"POST /v1/environments/{environment_id}": {body: func(f *stateFuzzer, _ map[string]string) sfBody {
		return sfJSON(f.oneOf(obj{"description": "d"}, obj{"name": "e2", "metadata": obj{"k": nil}},
			obj{"config": obj{"type": "cloud"}}, obj{"config": obj{"type": "self_hosted"}}))
	}},
	"DELETE /v1/environments/{environment_id}":       {after: sfDeleted("environment_id")},
	"POST /v1/environments/{environment_id}/archive": {after: sfArchived("environment_id")},
	"POST /v1/environments/{environment_id}/keys": {body: func(f *stateFuzzer, _ map[string]string) sfBody {
		return sfJSON(obj{"name": "w" + f.n()})
	}, after: (*stateFuzzer).afterEnvKeyCreate},
	"GET /v1/environments/{environment_id}/keys":                      {},
	"DELETE /v1/environments/{environment_id}/keys/{key_id}":          {after: sfArchived("key_id")},
	"GET /v1/environments/{environment_id}/work/poll":                 {after: (*stateFuzzer).afterPoll},
	"POST /v1/environments/{environment_id}/work/{work_id}/ack":       {},
	"POST /v1/environments/{environment_id}/work/{work_id}/heartbeat": {},
	"POST /v1/environments/{environment_id}/work/{work_id}/stop": {body: func(f *stateFuzzer, _ map[string]string) sfBody {
		return sfJSON(f.oneOf(obj{}, obj{"force": true}, obj{"force": false}))
	}},
	"GET /v1/environments/{environment_id}/work/{work_id}": {},
	"POST /v1/environments/{environment_id}/work/{work_id}": {body: func(f *stateFuzzer, _ map[string]string) sfBody {
		return sfJSON(obj{"metadata": f.oneOf(obj{"k": "v"}, obj{"k": nil}, obj{})})
	}},
	"GET /v1/environments/{environment_id}/work":       {after: sfLearn(sfWork, "environment_id")},
	"GET /v1/environments/{environment_id}/work/stats": {},

	"POST /v1/sessions":                      {body: (*stateFuzzer).sessionBody, after: (*stateFuzzer).afterSessionCreate},
	"GET /v1/sessions":                       {},
	"GET /v1/sessions/{session_id}":          {},
	"POST /v1/sessions/{session_id}":         {body: (*stateFuzzer).sessionUpdateBody},
	"DELETE /v1/sessions/{session_id}":       {after: sfDeleted("session_id")},
	"POST /v1/sessions/{session_id}/archive": {after: sfArchived("session_id")},

	"GET /v1/sessions/{session_id}/events":        {},
	"POST /v1/sessions/{session_id}/events":       {body: (*stateFuzzer).eventsBody, after: (*stateFuzzer).afterEventSend},
	"GET /v1/sessions/{session_id}/events/stream": {},

	"GET /v1/sessions/{session_id}/threads":                             {after: sfLearn(sfThread, "session_id")},
	"GET /v1/sessions/{session_id}/threads/{thread_id}":                 {},
	"POST /v1/sessions/{session_id}/threads/{thread_id}/archive":        {},
	"GET /v1/sessions/{session_id}/threads/{thread_id}/events":          {},
	"GET /v1/sessions/{session_id}/threads/{thread_id}/stream":          {},
	"GET /v1/sessions/{session_id}/resources":                           {},
	"POST /v1/sessions/{session_id}/resources":                          {body: (*stateFuzzer).resourceBody, after: sfCreated(sfResource, "session_id")},
	"GET /v1/sessions/{session_id}/resources/{resource_id}":             {},
	"POST /v1/sessions/{session_id}/resources/{resource_id}":            {body: func(*stateFuzzer, map[string]string) sfBody { return sfJSON(obj{"authorization_token": "ghp_new"}) }},
	"DELETE /v1/sessions/{session_id}/resources/{resource_id}":          {after: sfDeleted("resource_id")},
	"GET /v1/sessions/{session_id}/resources/{resource_id}/git/{op...}": {},
	"POST /v1/sessions/{session_id}/resources/{resource_id}/git/{op...}": {body: func(*stateFuzzer, map[string]string) sfBody {
		return sfBody{b: []byte("0000"), ctype: "application/x-git-upload-pack-request"}
	}},

	"POST /v1/vaults": {body: func(f *stateFuzzer, _ map[string]string) sfBody {
		return sfJSON(obj{"display_name": "v" + f.n(), "metadata": obj{"k": "v"}})
	}, after: sfCreated(sfVault, "")},
	"GET /v1/vaults":            {},
	"GET /v1/vaults/{vault_id}": {},
	"POST /v1/vaults/{vault_id}": {body: func(f *stateFuzzer, _ map[string]string) sfBody {
		return sfJSON(f.oneOf(obj{"display_name": "v2"}, obj{"metadata": obj{"k": nil, "j": "w"}}))
	}},
	"DELETE /v1/vaults/{vault_id}":                                              {after: sfDeleted("vault_id")},
	"POST /v1/vaults/{vault_id}/archive":                                        {after: sfArchived("vault_id")},
	"POST /v1/vaults/{vault_id}/credentials":                                    {body: (*stateFuzzer).credentialBody, after: sfCreated(sfCredential, "vault_id")},
	"GET /v1/vaults/{vault_id}/credentials":                                     {},
	"GET /v1/vaults/{vault_id}/credentials/{credential_id}":                     {},
	"POST /v1/vaults/{vault_id}/credentials/{credential_id}":                    {body: (*stateFuzzer).credentialUpdateBody},
	"DELETE /v1/vaults/{vault_id}/credentials/{credential_id}":                  {after: sfDeleted("credential_id")},
	"POST /v1/vaults/{vault_id}/credentials/{credential_id}/archive":            {after: sfArchived("credential_id")},
	"POST /v1/vaults/{vault_id}/credentials/{credential_id}/mcp_oauth_validate": {},

	"POST /v1/memory_stores": {body: func(f *stateFuzzer, _ map[string]string) sfBody {
		return sfJSON(obj{"name": "notes " + f.n(), "description": "d"})
	}, after: sfCreated(sfMemStore, "")},
	"GET /v1/memory_stores":                   {},
	"GET /v1/memory_stores/{memory_store_id}": {},
	"POST /v1/memory_stores/{memory_store_id}": {body: func(f *stateFuzzer, _ map[string]string) sfBody {
		return sfJSON(f.oneOf(obj{"name": "n2"}, obj{"description": ""}, obj{"metadata": obj{"a": "b"}}))
	}},
	"DELETE /v1/memory_stores/{memory_store_id}":       {after: sfDeleted("memory_store_id")},
	"POST /v1/memory_stores/{memory_store_id}/archive": {after: sfArchived("memory_store_id")},
	"POST /v1/memory_stores/{memory_store_id}/memories": {body: func(f *stateFuzzer, _ map[string]string) sfBody {
		return sfJSON(obj{"path": f.memPath(), "content": f.oneOf("", "remember "+f.n(), nil)})
	}, after: sfCreated(sfMemory, "memory_store_id")},
	"GET /v1/memory_stores/{memory_store_id}/memories":             {},
	"GET /v1/memory_stores/{memory_store_id}/memories/{memory_id}": {},
	"POST /v1/memory_stores/{memory_store_id}/memories/{memory_id}": {body: func(f *stateFuzzer, _ map[string]string) sfBody {
		return sfJSON(f.oneOf(obj{"content": "changed " + f.n()}, obj{"path": f.memPath()},
			obj{"content": "x", "precondition": obj{"type": "content_sha256", "content_sha256": strings.Repeat("ab", 32)}}))
	}},
	"DELETE /v1/memory_stores/{memory_store_id}/memories/{memory_id}":                     {after: sfDeleted("memory_id")},
	"GET /v1/memory_stores/{memory_store_id}/memory_versions":                             {after: sfLearn(sfMemVersion, "memory_store_id")},
	"GET /v1/memory_stores/{memory_store_id}/memory_versions/{memory_version_id}":         {},
	"POST /v1/memory_stores/{memory_store_id}/memory_versions/{memory_version_id}/redact": {},

	"POST /v1/dreams":                    {body: (*stateFuzzer).dreamBody, after: sfCreated(sfDream, "")},
	"GET /v1/dreams":                     {},
	"GET /v1/dreams/{dream_id}":          {},
	"POST /v1/dreams/{dream_id}/archive": {after: sfArchived("dream_id")},
	"POST /v1/dreams/{dream_id}/cancel":  {},

	"POST /v1/deployments":                {body: (*stateFuzzer).deploymentBody, after: sfCreated(sfDeployment, "")},
	"GET /v1/deployments":                 {},
	"GET /v1/deployments/{deployment_id}": {},
	"POST /v1/deployments/{deployment_id}": {body: func(f *stateFuzzer, _ map[string]string) sfBody {
		return sfJSON(f.oneOf(obj{"name": "d2"}, obj{"description": nil}, obj{"schedule": nil},
			obj{"schedule": obj{"type": "cron", "expression": "0 3 * * *", "timezone": "UTC"}}))
	}},
	"POST /v1/deployments/{deployment_id}/archive": {after: sfArchived("deployment_id")},
	"POST /v1/deployments/{deployment_id}/pause":   {},
	"POST /v1/deployments/{deployment_id}/unpause": {},
	"POST /v1/deployments/{deployment_id}/run":     {after: (*stateFuzzer).afterRun},
	"GET /v1/deployment_runs":                      {},
	"GET /v1/deployment_runs/{deployment_run_id}":  {},

	"POST /v1/organizations/workspaces": {body: func(f *stateFuzzer, _ map[string]string) sfBody {
		return sfJSON(obj{"name": "w" + f.n(), "tags": obj{"team": "t"}})
	}, after: sfCreated(sfWorkspace, "")},
	"GET /v1/organizations/workspaces":                {},
	"GET /v1/organizations/workspaces/{workspace_id}": {},
	"POST /v1/organizations/workspaces/{workspace_id}": {body: func(f *stateFuzzer, _ map[string]string) sfBody {
		return sfJSON(f.oneOf(obj{"name": "w2"}, obj{"display_color": "#123456"}, obj{"tags": nil}))
	}},
	"POST /v1/organizations/workspaces/{workspace_id}/archive": {after: sfArchived("workspace_id")},
	"POST /v1/organizations/api_keys": {body: func(f *stateFuzzer, _ map[string]string) sfBody {
		return sfJSON(obj{"name": "k" + f.n()})
	}, after: sfCreated(sfAPIKey, "")},
	"GET /v1/organizations/api_keys":              {},
	"GET /v1/organizations/api_keys/{api_key_id}": {},
	"POST /v1/organizations/api_keys/{api_key_id}": {body: func(f *stateFuzzer, _ map[string]string) sfBody {
		return sfJSON(f.oneOf(obj{"name": "k2"}, obj{"status": "inactive"}, obj{"status": "active"}, obj{"status": "archived"}))
	}},

	"POST /v1/organizations/webhooks": {body: func(f *stateFuzzer, _ map[string]string) sfBody {
		return sfJSON(obj{"url": "https://hooks.example.test/" + f.n(), "enabled_events": []string{"session.created"}, "name": "h"})
	}, after: sfCreated(sfWebhook, "")},
	"GET /v1/organizations/webhooks":                       {},
	"GET /v1/organizations/webhooks/{webhook_endpoint_id}": {},
	"POST /v1/organizations/webhooks/{webhook_endpoint_id}": {body: func(f *stateFuzzer, _ map[string]string) sfBody {
		return sfJSON(f.oneOf(obj{"state": "disabled"}, obj{"state": "enabled"}, obj{"name": "h2", "description": "d"}))
	}},
	"DELETE /v1/organizations/webhooks/{webhook_endpoint_id}":                         {after: sfDeleted("webhook_endpoint_id")},
	"POST /v1/organizations/webhooks/{webhook_endpoint_id}/regenerate_signing_secret": {},
	"GET /v1/organizations/webhooks/{webhook_endpoint_id}/deliveries":                 {},

	"POST /v1/tunnels": {body: func(f *stateFuzzer, _ map[string]string) sfBody {
		return sfJSON(f.oneOf(obj{}, obj{"display_name": "t" + f.n()}))
	}, after: sfCreated(sfTunnel, "")},
	"GET /v1/tunnels":                           {},
	"GET /v1/tunnels/{tunnel_id}":               {},
	"POST /v1/tunnels/{tunnel_id}/archive":      {after: sfArchived("tunnel_id")},
	"POST /v1/tunnels/{tunnel_id}/reveal_token": {},
	"POST /v1/tunnels/{tunnel_id}/rotate_token": {body: func(f *stateFuzzer, _ map[string]string) sfBody {
		return sfJSON(f.oneOf(obj{}, obj{"reason": "leaked"}))
	}},
	"POST /v1/tunnels/{tunnel_id}/certificates": {body: func(f *stateFuzzer, _ map[string]string) sfBody {
		return sfJSON(obj{"ca_certificate_pem": f.cas[f.r.IntN(len(f.cas))]})
	}, after: sfCreated(sfCert, "tunnel_id")},
	"GET /v1/tunnels/{tunnel_id}/certificates":                           {},
	"GET /v1/tunnels/{tunnel_id}/certificates/{certificate_id}":          {},
	"POST /v1/tunnels/{tunnel_id}/certificates/{certificate_id}/archive": {after: sfArchived("certificate_id")},

	"POST /v1/files":                                       {body: (*stateFuzzer).fileBody, after: sfCreated(sfFile, "")},
	"GET /v1/files":                                        {},
	"GET /v1/files/{file_id}":                              {},
	"GET /v1/files/{file_id}/content":                      {},
	"DELETE /v1/files/{file_id}":                           {after: sfDeleted("file_id")},
	"POST /v1/skills":                                      {body: (*stateFuzzer).skillBody, after: (*stateFuzzer).afterSkillCreate},
	"GET /v1/skills":                                       {},
	"GET /v1/skills/{skill_id}":                            {},
	"DELETE /v1/skills/{skill_id}":                         {after: sfDeleted("skill_id")},
	"POST /v1/skills/{skill_id}/versions":                  {body: (*stateFuzzer).skillBody, after: sfCreated(sfSkillVer, "skill_id")},
	"GET /v1/skills/{skill_id}/versions":                   {},
	"GET /v1/skills/{skill_id}/versions/{version}":         {},
	"DELETE /v1/skills/{skill_id}/versions/{version}":      {after: sfDeleted("version")},
	"GET /v1/skills/{skill_id}/versions/{version}/content": {},
}

// sfObject is a resource of the model.
type sfObject struct {
	kind     sfKind
	id       string
	parent   string // the id of the resource it belongs to (sfParents)
	archived bool
	// env is a session's environment; selfHosted says an environment is self-hosted.
	env        string
	selfHosted bool
	// sent counts, per nonce of an event the fuzzer sent to a session, how many times the log must hold it:
	// as many as the accepted body held (once, unless a mutation doubled its event), 0 if it was refused.
	sent map[string]int
	// toolUses are the agent.custom_tool_use ids appended to a session.
	toolUses []string
}

// stateFuzzer is one run: the server, the model and the random source.
type stateFuzzer struct {
	t      *testing.T
	h      *harness
	r      *rand.Rand
	objs   map[sfKind][]*sfObject
	byID   map[string]*sfObject
	gone   map[sfKind][]string // deleted ids, to ask for again
	keys   map[string][]string // environment id → its environment keys
	tokens map[string]string   // session id → the sessions token of its last poll
	cas    []string
	seq    int
	// client follows no redirect: the API answers none.
	client *http.Client
	// requests counts the HTTP requests sent; recent are the last ones, for a failure's message.
	requests int
	recent   []string
	// ok counts the successes of each route, to log the routes the run never got through.
	ok map[string]int
}

func (f *stateFuzzer) n() string { f.seq++; return strconv.Itoa(f.seq) }

func (f *stateFuzzer) oneOf(vs ...any) any { return vs[f.r.IntN(len(vs))] }

func (f *stateFuzzer) chance(p float64) bool { return f.r.Float64() < p }

func (f *stateFuzzer) add(o *sfObject) {
	if f.byID[o.id] != nil {
		f.fail("the server gave id %s twice (%s, %s)", o.id, f.byID[o.id].kind, o.kind)
	}
	f.objs[o.kind] = append(f.objs[o.kind], o)
	f.byID[o.id] = o
}

// remove deletes o and the resources that belong to it from the model.
func (f *stateFuzzer) remove(o *sfObject) {
	if f.byID[o.id] != o {
		return
	}
	delete(f.byID, o.id)
	f.objs[o.kind] = slices.DeleteFunc(f.objs[o.kind], func(x *sfObject) bool { return x == o })
	f.gone[o.kind] = append(f.gone[o.kind], o.id)
	for k, p := range sfParents {
		if p == o.kind {
			for _, c := range slices.Clone(f.objs[k]) {
				if c.parent == o.id {
					f.remove(c)
				}
			}
		}
	}
}

// live returns the model's resources of a kind, of a parent if one is given.
func (f *stateFuzzer) live(k sfKind, parent string) []*sfObject {
	var out []*sfObject
	for _, o := range f.objs[k] {
		if parent == "" || o.parent == parent {
			out = append(out, o)
		}
	}
	return out
}

// pickObj returns a random resource of kind k (of parent, if given), or nil.
func (f *stateFuzzer) pickObj(k sfKind, parent string) *sfObject {
	os := f.live(k, parent)
	if len(os) == 0 {
		return nil
	}
	return os[f.r.IntN(len(os))]
}

// pickID returns an id for a path or a body: most of the time one of the model's (of parent if given), else a
// deleted one, one of another kind, or made up.
func (f *stateFuzzer) pickID(k sfKind, parent string) string {
	switch x := f.r.IntN(100); {
	case x < 84:
		if o := f.pickObj(k, parent); o != nil {
			return o.id
		}
		if o := f.pickObj(k, ""); o != nil {
			return o.id
		}
	case x < 90:
		if g := f.gone[k]; len(g) > 0 {
			return g[f.r.IntN(len(g))]
		}
	case x < 95:
		if len(f.byID) > 0 {
			ids := make([]string, 0, len(f.byID))
			for id := range f.byID {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			return ids[f.r.IntN(len(ids))]
		}
	}
	return f.oneOf("x", "agent_011CZkZAtmR3yMPDzynEDxu7", "sesn_nope", "latest", "1", "%20", "ünï", strings.Repeat("z", 300),
		"..", "memstore_", "drun_x", "a\x00b", "\xff\xfe", "sesn_\u202e", "agent_011C\n").(string)
}

// ref returns an id to reference in a body: most of the time one of the model's that is not archived.
func (f *stateFuzzer) ref(k sfKind) string {
	var os []*sfObject
	for _, o := range f.objs[k] {
		if !o.archived {
			os = append(os, o)
		}
	}
	if len(os) > 0 && f.chance(0.9) {
		return os[f.r.IntN(len(os))].id
	}
	return f.pickID(k, "")
}

// selfHosted returns a self-hosted environment of the model, or "".
func (f *stateFuzzer) selfHosted() string {
	var es []string
	for _, e := range f.objs[sfEnv] {
		if e.selfHosted {
			es = append(es, e.id)
		}
	}
	if len(es) == 0 {
		return ""
	}
	return es[f.r.IntN(len(es))]
}

// fill substitutes a route pattern's wildcards with ids: the innermost from the model, its parents most often
// the ones it belongs to.
func (f *stateFuzzer) fill(pattern string) (method, path string, ids map[string]string) {
	method, path, _ = strings.Cut(pattern, " ")
	path = strings.TrimSuffix(path, "{$}")
	ws := sfWildcardRE.FindAllStringSubmatch(path, -1)
	ids = map[string]string{}
	parent := ""
	for i := len(ws) - 1; i >= 0; i-- {
		name := ws[i][1]
		k := sfWildcards[name]
		var id string
		switch k {
		case sfModel:
			id = f.oneOf("claude-sonnet-4-6", "claude-opus-4-7", "gpt-5", "x").(string)
		case sfGitOp:
			id = f.oneOf("info/refs", "git-upload-pack", "git-receive-pack", "x/y").(string)
		default:
			hosted := k == sfEnv && (strings.Contains(path, "/keys") || strings.Contains(path, "/work"))
			if parent != "" && f.chance(0.9) {
				id = parent
			} else if e := f.selfHosted(); hosted && e != "" && f.chance(0.8) {
				id = e // keys and work queues are self-hosted environments'
			} else {
				id = f.pickID(k, "")
			}
			if o := f.byID[id]; o != nil && o.kind == k {
				parent = o.parent
			} else {
				parent = ""
			}
		}
		ids[name] = id
		seg := neturl.PathEscape(id)
		if k == sfGitOp {
			seg = id
		}
		path = strings.Replace(path, ws[i][0], seg, 1)
	}
	return method, path, ids
}

var sfWildcardRE = regexp.MustCompile(`\{([a-z_]+)(\.\.\.)?\}`)

// query makes a query string: list parameters, filters and the parameters of some routes, valid or not.
func (f *stateFuzzer) query(method string) string {
	if method != "GET" && !f.chance(0.15) || method == "GET" && !f.chance(0.6) {
		return ""
	}
	q := neturl.Values{}
	for range 1 + f.r.IntN(3) {
		switch f.r.IntN(22) {
		case 0, 1:
			q.Set("limit", f.oneOf("1", "2", "3", "0", "-1", "abc", "1000", "1001", "99999999999999999999").(string))
		case 2:
			q.Set("include_archived", f.oneOf("true", "false", "yes").(string))
		case 3:
			q.Set("order", f.oneOf("asc", "desc", "sideways").(string))
		case 4:
			q.Set(f.oneOf("created_at[gte]", "created_at[lte]", "created_at[gt]", "created_at[lt]").(string),
				f.oneOf("2020-01-01T00:00:00Z", time.Now().UTC().Format(time.RFC3339Nano), "yesterday", "9999-12-31T23:59:59Z").(string))
		case 5:
			q.Set("page", f.oneOf("x", "eyJ0IjoxfQ", "eyJzIjotMX0", "eyJpIjoi4pyTIn0", "eyJiIjp0cnVlfQ", "!!", "e30").(string))
		case 6:
			q.Add("statuses[]", f.oneOf("idle", "running", "terminated", "rescheduling", "pending", "nope").(string))
		case 7:
			q.Add("types[]", f.oneOf("user.message", "agent.custom_tool_use", "session.status_idle", "nope").(string))
		case 8:
			q.Set("view", f.oneOf("basic", "full", "huge").(string))
		case 9:
			q.Set("depth", f.oneOf("0", "1", "2", "-1", "x").(string))
		case 10:
			q.Set("path_prefix", f.oneOf("/", "/a/", "/a", "a/", "//", "/ü/").(string))
		case 11:
			q.Set("agent_id", f.pickID(sfAgent, ""))
		case 12:
			q.Set(f.oneOf("memory_id", "session_id", "deployment_id", "memory_store_id", "scope_id").(string), f.pickID(
				f.oneOf(sfMemory, sfSession, sfDeployment, sfMemStore).(sfKind), ""))
		case 13:
			q.Add("ids[]", f.pickID(sfFile, ""))
		case 14:
			q.Set(f.oneOf("source", "trigger_type", "status", "operation", "has_error").(string),
				f.oneOf("custom", "anthropic", "manual", "schedule", "active", "paused", "created", "true", "x").(string))
		case 15:
			q.Set(f.oneOf("after_id", "before_id").(string), f.pickID(sfWebhook, ""))
		case 16:
			q.Set("block_ms", f.oneOf("1", "5", "0", "x").(string))
			q.Set("reclaim_older_than_ms", f.oneOf("0", "1", "5000", "-3").(string))
		case 17:
			q.Set("desired_ttl_seconds", f.oneOf("1", "30", "0", "x").(string))
			q.Set("expected_last_heartbeat", f.oneOf("NO_HEARTBEAT", "", "2020-01-01T00:00:00Z").(string))
		case 18:
			q.Set("expected_content_sha256", f.oneOf(strings.Repeat("0", 64), "x").(string))
		case 19:
			q.Set("version", f.oneOf("1", "2", "0", "x", "999").(string))
		case 20:
			q.Add("event_deltas[]", f.oneOf("agent.message", "agent.thinking", "x").(string))
		case 21:
			q.Set("service", f.oneOf("git-upload-pack", "git-receive-pack", "x").(string))
		}
	}
	return q.Encode()
}

// nonce is a marker to put in an event's text, to find it in the log.
func (f *stateFuzzer) nonce() string { return "fz" + f.n() + "z" }

func sfText(text string) []any { return []any{obj{"type": "text", "text": text}} }

func (f *stateFuzzer) agentBody(map[string]string) sfBody {
	a := obj{"name": "agent " + f.n(), "model": f.oneOf("claude-sonnet-4-6", obj{"id": "claude-opus-4-7", "effort": "low"})}
	if f.chance(0.5) {
		a["tools"] = []any{obj{"type": "custom", "name": "lookup", "description": "d", "input_schema": obj{"type": "object"}}}
	}
	if f.chance(0.3) {
		a["mcp_servers"] = []any{obj{"type": "url", "name": "m", "url": "https://mcp.invalid/m"}}
		a["tools"] = []any{obj{"type": "mcp_toolset", "mcp_server_name": "m"}, obj{"type": "agent_toolset_20260401"}}
	}
	if f.chance(0.2) {
		a["system"], a["description"], a["metadata"] = "be brief", "an agent", obj{"team": "x"}
	}
	if f.chance(0.15) {
		a["multiagent"] = obj{"type": "coordinator", "agents": []any{f.ref(sfAgent), obj{"type": "self"}}}
	}
	if f.chance(0.1) {
		a["skills"] = []any{obj{"type": "custom", "skill_id": f.ref(sfSkill)}}
	}
	return sfJSON(a)
}

func (f *stateFuzzer) agentUpdateBody(ids map[string]string) sfBody {
	u := f.oneOf(obj{"name": "renamed"}, obj{"description": nil, "system": ""}, obj{"metadata": obj{"team": nil}},
		obj{"tools": nil}, obj{"model": "claude-haiku-4-5"}, obj{"multiagent": nil}).(obj)
	u = maps.Clone(u)
	if f.chance(0.4) {
		u["version"] = 1 + f.r.IntN(3)
	}
	return sfJSON(u)
}

func (f *stateFuzzer) envBody(map[string]string) sfBody {
	return sfJSON(obj{"name": "env " + f.n(), "config": f.oneOf(nil, obj{"type": "self_hosted"}, obj{"type": "cloud"},
		obj{"type": "cloud", "networking": obj{"type": "limited", "allowed_hosts": []string{"example.com"}}})})
}

func (f *stateFuzzer) sessionBody(map[string]string) sfBody {
	nonce := f.nonce()
	s := obj{"agent": f.oneOf(f.ref(sfAgent), obj{"type": "agent", "id": f.ref(sfAgent), "version": 1}),
		"environment_id": f.ref(sfEnv)}
	if f.chance(0.5) {
		s["initial_events"] = []any{obj{"type": "user.message", "content": sfText("hello " + nonce)}}
	}
	if f.chance(0.3) {
		s["title"] = "t" + f.n()
	}
	if f.chance(0.3) {
		s["resources"] = []any{f.oneOf(obj{"type": "file", "file_id": f.ref(sfFile)},
			obj{"type": "memory_store", "memory_store_id": f.ref(sfMemStore), "access": "read_only"},
			obj{"type": "github_repository", "url": "https://github.com/corral-fuzz/r", "authorization_token": "ghp_x"})}
	}
	if f.chance(0.2) {
		s["vault_ids"] = []string{f.ref(sfVault)}
	}
	if f.chance(0.1) {
		s["budget"] = obj{"type": "limit", "max_list_cost": obj{"amount": "2500", "currency": "USD"}}
	}
	b := sfJSON(s)
	if s["initial_events"] != nil {
		b.nonces = []string{nonce}
	}
	return b
}

func (f *stateFuzzer) sessionUpdateBody(map[string]string) sfBody {
	return sfJSON(f.oneOf(obj{"title": "t2"}, obj{"metadata": obj{"k": "v"}}, obj{"metadata": obj{"k": nil}},
		obj{"budget": nil}, obj{"agent": obj{"tools": []any{}}}, obj{"vault_ids": []string{}}))
}

func (f *stateFuzzer) eventsBody(ids map[string]string) sfBody {
	var evs []any
	var nonces []string
	sess := f.byID[ids["session_id"]]
	for range 1 + f.r.IntN(3) {
		switch x := f.r.IntN(14); {
		case x >= 10:
			n := f.nonce()
			nonces = append(nonces, n)
			evs = append(evs, obj{"type": "user.message", "content": sfText("say " + n)})
			return sfBodyOf(obj{"events": evs}, nonces)
		case x < 6:
			n := f.nonce()
			nonces = append(nonces, n)
			evs = append(evs, obj{"type": "user.message", "content": sfText("say " + n)})
		case x < 7:
			evs = append(evs, obj{"type": "user.interrupt"})
		case x < 8:
			use := "sevt_nope"
			if sess != nil && len(sess.toolUses) > 0 {
				use = sess.toolUses[f.r.IntN(len(sess.toolUses))]
			}
			evs = append(evs, obj{"type": "user.custom_tool_result", "custom_tool_use_id": use, "content": sfText("42")})
		case x < 9:
			evs = append(evs, obj{"type": "user.define_outcome", "description": "done", "rubric": obj{"type": "text", "content": "r"}})
		default:
			evs = append(evs, obj{"type": "system.message", "content": sfText("sys")})
		}
	}
	return sfBodyOf(obj{"events": evs}, nonces)
}

func sfBodyOf(v any, nonces []string) sfBody {
	b := sfJSON(v)
	b.nonces = nonces
	return b
}

func (f *stateFuzzer) resourceBody(map[string]string) sfBody {
	r := obj{"type": "file", "file_id": f.ref(sfFile)}
	if f.chance(0.3) {
		r["mount_path"] = "/workspace/data/" + f.n()
	}
	return sfJSON(r)
}

func (f *stateFuzzer) credentialBody(map[string]string) sfBody {
	auth := f.oneOf(
		obj{"type": "static_bearer", "mcp_server_url": "https://mcp.invalid/" + f.n(), "token": "t"},
		obj{"type": "environment_variable", "secret_name": "KEY_" + f.n(), "secret_value": "v",
			"networking": obj{"type": "limited", "allowed_hosts": []string{"*.example.com"}}},
		obj{"type": "mcp_oauth", "mcp_server_url": "https://mcp.invalid/o" + f.n(), "access_token": "a",
			"expires_at": "2999-01-01T00:00:00Z", "refresh": obj{"client_id": "c", "refresh_token": "r",
				"token_endpoint": "https://auth.invalid/token", "token_endpoint_auth": obj{"type": "none"}}})
	c := obj{"auth": auth}
	if f.chance(0.3) {
		c["display_name"], c["metadata"] = "c", obj{"k": "v"}
	}
	return sfJSON(c)
}

func (f *stateFuzzer) credentialUpdateBody(map[string]string) sfBody {
	return sfJSON(f.oneOf(obj{"display_name": "c2"}, obj{"metadata": obj{"k": nil}},
		obj{"auth": obj{"type": "static_bearer", "token": "t2"}}, obj{"auth": obj{"type": "environment_variable", "secret_value": "v2"}},
		obj{"auth": obj{"type": "mcp_oauth", "access_token": "a2"}}))
}

func (f *stateFuzzer) memPath() string {
	return f.oneOf("/a/", "/b/", "/a/c/").(string) + f.oneOf("x", "y", "z", f.n()).(string) + ".md"
}

func (f *stateFuzzer) dreamBody(map[string]string) sfBody {
	d := obj{"inputs": []any{obj{"type": "memory_store", "memory_store_id": f.ref(sfMemStore)},
		obj{"type": "sessions", "session_ids": []string{f.ref(sfSession)}}}, "model": "claude-sonnet-4-6"}
	if f.chance(0.3) {
		d["output_behavior"] = obj{"type": "update_existing", "memory_store_id": f.ref(sfMemStore)}
	}
	if f.chance(0.3) {
		d["instructions"] = "tidy up"
	}
	return sfJSON(d)
}

func (f *stateFuzzer) deploymentBody(map[string]string) sfBody {
	d := obj{"name": "depl " + f.n(), "agent": f.ref(sfAgent), "environment_id": f.ref(sfEnv),
		"initial_events": []any{obj{"type": "user.message", "content": sfText("triage")}}}
	if f.chance(0.4) {
		d["schedule"] = obj{"type": "cron", "expression": "0 9 * * 1-5", "timezone": "Europe/Paris"}
	}
	if f.chance(0.2) {
		d["vault_ids"] = []string{f.ref(sfVault)}
	}
	return sfJSON(d)
}

func (f *stateFuzzer) fileBody(map[string]string) sfBody {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	hdr := textproto.MIMEHeader{}
	hdr.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, f.oneOf("a.csv", "../x.txt", "", "ü.bin").(string)))
	hdr.Set("Content-Type", f.oneOf("text/csv", "application/octet-stream", "").(string))
	pw, _ := mw.CreatePart(hdr)
	_, _ = pw.Write(bytes.Repeat([]byte("a,b\n"), f.r.IntN(50)))
	if f.chance(0.3) {
		_ = mw.WriteField("expires_in_seconds", f.oneOf("3600", "10", "x").(string))
	}
	_ = mw.Close()
	return sfBody{b: buf.Bytes(), ctype: mw.FormDataContentType()}
}

func (f *stateFuzzer) skillBody(map[string]string) sfBody {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	name := f.oneOf("csv-tools", "pdf-tools").(string)
	part := func(fn, content string) {
		hdr := textproto.MIMEHeader{}
		hdr.Set("Content-Disposition", fmt.Sprintf(`form-data; name="files[]"; filename=%q`, fn))
		hdr.Set("Content-Type", "text/plain")
		pw, _ := mw.CreatePart(hdr)
		_, _ = pw.Write([]byte(content))
	}
	part(name+"/SKILL.md", "---\nname: "+name+"\ndescription: Tools "+f.n()+".\n---\n# Tools\n")
	if f.chance(0.5) {
		part(name+"/scripts/run.py", "print(1)\n")
	}
	if f.chance(0.2) {
		_ = mw.WriteField("display_name", "skill "+f.n())
	}
	_ = mw.Close()
	return sfBody{b: buf.Bytes(), ctype: mw.FormDataContentType()}
}

// sfCreated adds the created resource, of the path's parent, to the model.
func sfCreated(k sfKind, parentWildcard string) func(*stateFuzzer, map[string]string, []byte) {
	return func(f *stateFuzzer, ids map[string]string, resp []byte) {
		var v struct{ ID string }
		if err := json.Unmarshal(resp, &v); err != nil || v.ID == "" {
			f.fail("create %s: no id in %s", k, resp)
		}
		f.add(&sfObject{kind: k, id: v.ID, parent: ids[parentWildcard]})
	}
}

// sfArchived marks the path's resource archived (an environment key revoked: lists show it still).
func sfArchived(wildcard string) func(*stateFuzzer, map[string]string, []byte) {
	return func(f *stateFuzzer, ids map[string]string, _ []byte) {
		o := f.byID[ids[wildcard]]
		if o == nil || o.kind != sfWildcards[wildcard] {
			f.fail("archived %s, which the model does not have", ids[wildcard])
		}
		o.archived = true
		// archiving a tunnel archives its certificates, a vault its credentials
		for _, c := range f.live(map[sfKind]sfKind{sfTunnel: sfCert, sfVault: sfCredential}[o.kind], o.id) {
			c.archived = true
		}
	}
}

// sfDeleted removes the path's resource from the model.
func sfDeleted(wildcard string) func(*stateFuzzer, map[string]string, []byte) {
	return func(f *stateFuzzer, ids map[string]string, _ []byte) {
		o := f.byID[ids[wildcard]]
		if o == nil || o.kind != sfWildcards[wildcard] {
			f.fail("deleted %s, which the model does not have", ids[wildcard])
		}
		f.remove(o)
	}
}

// sfLearn adds the ids of a list's page to the model: resources the fuzzer does not create itself.
func sfLearn(k sfKind, parentWildcard string) func(*stateFuzzer, map[string]string, []byte) {
	return func(f *stateFuzzer, ids map[string]string, resp []byte) {
		var page struct{ Data []struct{ ID string } }
		_ = json.Unmarshal(resp, &page)
		for _, d := range page.Data {
			if d.ID != "" && f.byID[d.ID] == nil {
				f.add(&sfObject{kind: k, id: d.ID, parent: ids[parentWildcard]})
			}
		}
	}
}

func (f *stateFuzzer) afterEnvCreate(ids map[string]string, resp []byte) {
	var e apitype.Environment
	if err := json.Unmarshal(resp, &e); err != nil || e.ID == "" {
		f.fail("create environment: %s", resp)
	}
	f.add(&sfObject{kind: sfEnv, id: e.ID, selfHosted: e.Config.Type == apitype.EnvironmentSelfHosted})
}

func (f *stateFuzzer) afterEnvKeyCreate(ids map[string]string, resp []byte) {
	var k apitype.EnvironmentKey
	if err := json.Unmarshal(resp, &k); err != nil || k.ID == "" || k.Key == "" {
		f.fail("create environment key: %s", resp)
	}
	f.add(&sfObject{kind: sfEnvKey, id: k.ID, parent: ids["environment_id"]})
	f.keys[ids["environment_id"]] = append(f.keys[ids["environment_id"]], k.Key)
}

func (f *stateFuzzer) afterPoll(ids map[string]string, resp []byte) {
	var w *apitype.Work
	if err := json.Unmarshal(resp, &w); err != nil {
		f.fail("poll: %s", resp)
	}
	if w == nil {
		return
	}
	if f.byID[w.ID] == nil {
		f.add(&sfObject{kind: sfWork, id: w.ID, parent: ids["environment_id"]})
	}
	if w.Secret != nil {
		f.tokens[w.Data.ID] = apitype.SessionsTokenFromSecret(*w.Secret)
	}
}

func (f *stateFuzzer) afterSessionCreate(_ map[string]string, resp []byte) {
	f.addSession(resp, nil)
}

// addSession adds a session, and its resources, to the model; nonces are those of its initial events.
func (f *stateFuzzer) addSession(resp []byte, nonces []string) {
	var s struct {
		ID            string
		EnvironmentID string `json:"environment_id"`
		Resources     []struct{ ID string }
	}
	if err := json.Unmarshal(resp, &s); err != nil || s.ID == "" {
		f.fail("session: %s", resp)
	}
	o := &sfObject{kind: sfSession, id: s.ID, env: s.EnvironmentID, sent: map[string]int{}}
	for _, n := range nonces {
		o.sent[n] = 1
	}
	f.add(o)
	for _, r := range s.Resources {
		if r.ID != "" {
			f.add(&sfObject{kind: sfResource, id: r.ID, parent: s.ID})
		}
	}
}

func (f *stateFuzzer) afterEventSend(ids map[string]string, resp []byte) {
	var echo struct{ Data []struct{ ID string } }
	if err := json.Unmarshal(resp, &echo); err != nil || len(echo.Data) == 0 {
		f.fail("send events: %s", resp)
	}
}

func (f *stateFuzzer) afterRun(_ map[string]string, resp []byte) {
	var run apitype.DeploymentRun
	if err := json.Unmarshal(resp, &run); err != nil || run.ID == "" {
		f.fail("run: %s", resp)
	}
	f.add(&sfObject{kind: sfRun, id: run.ID})
	if run.SessionID != nil {
		code, body := f.send("GET", "/v1/sessions/"+*run.SessionID, sfBody{}, "")
		if code != http.StatusOK {
			f.fail("the run's session %s: %d %s", *run.SessionID, code, body)
		}
		f.addSession(body, nil)
	}
}

func (f *stateFuzzer) afterSkillCreate(_ map[string]string, resp []byte) {
	var sk struct {
		ID              string
		LatestVersionID string `json:"latest_version_id"`
	}
	if err := json.Unmarshal(resp, &sk); err != nil || sk.ID == "" || sk.LatestVersionID == "" {
		f.fail("create skill: %s", resp)
	}
	f.add(&sfObject{kind: sfSkill, id: sk.ID})
	f.add(&sfObject{kind: sfSkillVer, id: sk.LatestVersionID, parent: sk.ID})
}

// mutate spoils a JSON body: fields dropped, nulled or of the wrong type, huge or odd strings, unknown fields,
// or bytes that are no JSON at all.
func (f *stateFuzzer) mutate(b []byte) []byte {
	if f.chance(0.1) {
		switch f.r.IntN(5) {
		case 0:
			return b[:f.r.IntN(len(b)+1)]
		case 1:
			return []byte("null")
		case 2:
			return []byte(f.oneOf("[]", `"x"`, "1e999", "{}", `{"a":1,"a":2}`, "\xff\xfe", "", `{"name":"\ud800"}`).(string))
		case 3:
			return append(slices.Clone(b), " trailing"...)
		default:
			return bytes.Repeat([]byte("["), 10000)
		}
	}
	var v any
	if json.Unmarshal(b, &v) != nil {
		return b
	}
	for range 1 + f.r.IntN(3) {
		v = f.mutateValue(v, 0)
	}
	out, _ := json.Marshal(v)
	return out
}

func (f *stateFuzzer) mutateValue(v any, depth int) any {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if len(keys) == 0 || f.chance(0.15) {
			x[f.oneOf("unknown", "id", "type", "created_at", "__proto__").(string)] = f.junk()
			return x
		}
		k := keys[f.r.IntN(len(keys))]
		switch {
		case f.chance(0.25):
			delete(x, k)
		case f.chance(0.5) && depth < 6:
			x[k] = f.mutateValue(x[k], depth+1)
		default:
			x[k] = f.junk()
		}
		return x
	case []any:
		if len(x) == 0 || f.chance(0.2) {
			return append(x, f.junk())
		}
		i := f.r.IntN(len(x))
		if f.chance(0.2) {
			return slices.Delete(x, i, i+1)
		}
		if f.chance(0.2) {
			return append(x, x[i]) // a duplicate
		}
		x[i] = f.mutateValue(x[i], depth+1)
		return x
	case string:
		if f.chance(0.5) { // a near miss: the id or name spoiled a little
			switch k := f.r.IntN(len(x) + 1); f.r.IntN(4) {
			case 0:
				return x[:k] + "\x00" + x[k:]
			case 1:
				return x[:k]
			case 2:
				return strings.ToUpper(x) + " "
			default:
				return x + f.oneOf("\u202e", "\n", "/..", "%", "é").(string)
			}
		}
	}
	return f.junk()
}

// junk is a value of a random type: nulls, wrong types, huge and odd strings, numbers at the edges.
func (f *stateFuzzer) junk() any {
	switch f.r.IntN(12) {
	case 0:
		return nil
	case 1:
		return f.oneOf(0, -1, 1, 1.5, 1e300, -9223372036854775808, 9007199254740993)
	case 2:
		return f.oneOf(true, false)
	case 3:
		return []any{}
	case 4:
		return obj{}
	case 5:
		return strings.Repeat(f.oneOf("a", "ü", "🦀", "\u202e", "\x00").(string), f.oneOf(256, 1025, 4097, 100001).(int))
	case 6:
		return f.oneOf("", " ", "\u0000", "\xed\xa0\x80", "\u2028", "e\u0301", "../../etc/passwd", "%00", "null", "{}", "a\nb")
	case 7:
		return f.pickID(sfKind(f.oneOf(sfAgent, sfSession, sfFile, sfVault, sfMemStore).(sfKind)), "")
	case 8:
		return []any{nil, "x", 1}
	case 9:
		return obj{"type": f.oneOf("", "text", "file", "agent", "cron", "x")}
	case 10:
		return f.oneOf("2020-01-01T00:00:00Z", "not a time", "0001-01-01T00:00:00Z")
	}
	return "x" + f.n()
}

// auth picks the credential of a request: the API key mostly; on the work queue's routes an environment key or
// the work's sessions token most of the time; sometimes a key of another kind, or a bad or absent one.
func (f *stateFuzzer) auth(pattern string, ids map[string]string) string {
	if strings.Contains(pattern, "/work") && f.chance(0.8) {
		if ks := f.keys[ids["environment_id"]]; len(ks) > 0 && f.chance(0.6) {
			return ks[f.r.IntN(len(ks))]
		}
		if len(f.tokens) > 0 {
			return f.anyToken()
		}
	}
	switch x := f.r.IntN(100); {
	case x < 88:
		return testKey
	case x < 93:
		if tok := f.tokens[ids["session_id"]]; tok != "" {
			return tok
		}
		return f.anyToken()
	case x < 97:
		for _, ks := range f.keys {
			if len(ks) > 0 {
				return ks[0]
			}
		}
	case x < 99:
		return ""
	}
	return "sk-wrong"
}

func (f *stateFuzzer) anyToken() string {
	ss := slices.Sorted(func(yield func(string) bool) {
		for s := range f.tokens {
			if !yield(s) {
				return
			}
		}
	})
	if len(ss) == 0 {
		return testKey
	}
	return f.tokens[ss[f.r.IntN(len(ss))]]
}

func (f *stateFuzzer) fail(format string, args ...any) {
	f.t.Helper()
	f.t.Fatalf("%s\nlast requests:\n%s", fmt.Sprintf(format, args...), strings.Join(f.recent, "\n"))
}

// send sends a request with the API key and returns its status and body, checking the answer's invariants.
func (f *stateFuzzer) send(method, target string, b sfBody, auth string) (int, []byte) {
	if auth == "" {
		auth = testKey
	}
	return f.do(method, target, b, auth, false)
}

// do sends a request (auth "-" for none), keeps it among the recent ones, and fails the run if the answer
// breaks an invariant (exchange).
func (f *stateFuzzer) do(method, target string, b sfBody, auth string, stream bool) (int, []byte) {
	f.t.Helper()
	f.requests++
	line := fmt.Sprintf("%s %s %.300s", method, target, b.b)
	code, body, err := f.exchange(method, target, b, auth, stream)
	f.recent = append(f.recent, fmt.Sprintf("%s → %d %.200s", line, code, body))
	if len(f.recent) > 25 {
		f.recent = f.recent[1:]
	}
	if err != nil {
		f.fail("%s: %v", line, err)
	}
	return code, body
}

// exchange sends a request and checks that the answer is no redirect and no 5xx, that an error is the API's
// error envelope, and that a success is JSON (but for downloads and streams). It uses nothing of f but its
// client, so a burst's requests run it at once.
func (f *stateFuzzer) exchange(method, target string, b sfBody, auth string, stream bool) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rd io.Reader
	if b.b != nil {
		rd = bytes.NewReader(b.b)
	}
	req, err := http.NewRequestWithContext(ctx, method, f.h.srv.URL+target, rd)
	if err != nil {
		return 0, nil, err
	}
	if auth != "-" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	if b.b != nil {
		req.Header.Set("Content-Type", cmp.Or(b.ctype, "application/json"))
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	code := resp.StatusCode
	if stream && code == http.StatusOK {
		cancel() // the stream's head is enough
		_, _ = io.Copy(io.Discard, resp.Body)
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
			return code, nil, fmt.Errorf("a stream of type %q", ct)
		}
		return code, nil, nil
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return code, body, fmt.Errorf("read: %w", err)
	}
	switch {
	case code == http.StatusNotImplemented && strings.Contains(target, "/git/"):
		// The server has no git relay: the fuzzer's sessions' repositories are not reachable, and a relay
		// would answer their requests 502 (the upstream's failure, not the API's).
	case code >= 300 && code < 400:
		return code, body, fmt.Errorf("%d to %q", code, resp.Header.Get("Location"))
	case code >= 500:
		return code, body, fmt.Errorf("%d %s", code, body)
	case code >= 400:
		var e envelope
		if err := json.Unmarshal(body, &e); err != nil || e.Type != "error" || e.Error.Type == "" || e.Error.Message == "" ||
			!strings.HasPrefix(e.RequestID, apitype.PrefixRequest) || resp.Header.Get("request-id") != e.RequestID {
			return code, body, fmt.Errorf("%d is not the error envelope: %q", code, body)
		}
		if !strings.Contains(resp.Header.Get("Content-Type"), "application/json") {
			return code, body, fmt.Errorf("%d error of type %q", code, resp.Header.Get("Content-Type"))
		}
		if code == http.StatusConflict && resp.Header.Get("x-should-retry") != "false" {
			return code, body, errors.New("409 without x-should-retry: false")
		}
	case strings.HasSuffix(strings.SplitN(target, "?", 2)[0], "/content"):
	case code >= 200 && code < 300:
		if !json.Valid(body) {
			return code, body, fmt.Errorf("%d with a body that is no JSON: %q", code, body)
		}
	}
	return code, body, nil
}

// sfCall is a request the fuzzer made up.
type sfCall struct {
	pattern, method, target, auth string
	ids                           map[string]string
	body                          sfBody
	mutated, stream               bool
}

// sfMaxLive is how many resources of a kind a run keeps about: beyond it, their creations are mostly held
// back, so a long run's checks do not grow with it.
const sfMaxLive = 150

// sfCreates are the routes that create a resource of a kind.
var sfCreates = map[string]sfKind{
	"POST /v1/agents": sfAgent, "POST /v1/environments": sfEnv, "POST /v1/sessions": sfSession, "POST /v1/vaults": sfVault,
	"POST /v1/vaults/{vault_id}/credentials": sfCredential, "POST /v1/memory_stores": sfMemStore,
	"POST /v1/memory_stores/{memory_store_id}/memories": sfMemory, "POST /v1/dreams": sfDream,
	"POST /v1/deployments": sfDeployment, "POST /v1/deployments/{deployment_id}/run": sfRun,
	"POST /v1/organizations/webhooks": sfWebhook, "POST /v1/tunnels": sfTunnel, "POST /v1/files": sfFile,
	"POST /v1/skills": sfSkill, "POST /v1/skills/{skill_id}/versions": sfSkillVer,
	"POST /v1/tunnels/{tunnel_id}/certificates": sfCert, "POST /v1/environments/{environment_id}/keys": sfEnvKey,
	"POST /v1/sessions/{session_id}/resources": sfResource, "POST /v1/organizations/workspaces": sfWorkspace,
	"POST /v1/organizations/api_keys": sfAPIKey,
}

// pick picks a route: one on resources the model has none of mostly answers 404, so others (and creations)
// are preferred until it has some, and archives and deletions are held back.
func (f *stateFuzzer) pick(patterns []string) string {
	pattern := patterns[f.r.IntN(len(patterns))]
	for range 4 {
		ws := sfWildcardRE.FindAllStringSubmatch(pattern, -1)
		if len(ws) == 0 {
			if k, ok := sfCreates[pattern]; !ok || len(f.objs[k]) < sfMaxLive || f.chance(0.1) {
				break
			}
			pattern = patterns[f.r.IntN(len(patterns))]
			continue
		}
		k := sfWildcards[ws[len(ws)-1][1]]
		if k == sfGitOp {
			k = sfResource
		}
		if k, ok := sfCreates[pattern]; ok && len(f.objs[k]) >= sfMaxLive && f.chance(0.9) {
			pattern = patterns[f.r.IntN(len(patterns))]
			continue
		}
		destroys := strings.HasSuffix(pattern, "/archive") || strings.HasPrefix(pattern, "DELETE")
		if k == sfModel || len(f.objs[k]) > 0 && (!destroys || f.chance(0.4)) || f.chance(0.2) {
			break
		}
		pattern = patterns[f.r.IntN(len(patterns))]
	}
	return pattern
}

// call makes up a request of a route: path ids, a body (mutated a quarter of the time), a query, a credential.
func (f *stateFuzzer) call(pattern string) *sfCall {
	c := &sfCall{pattern: pattern, stream: strings.HasSuffix(pattern, "/stream")}
	var path string
	c.method, path, c.ids = f.fill(pattern)
	if rt := sfRoutes[pattern]; rt.body != nil {
		c.body = rt.body(f, c.ids)
		if f.chance(0.25) {
			c.mutated = true
			if c.body.ctype == "" {
				c.body.b = f.mutate(c.body.b)
			} else if f.chance(0.5) {
				c.body.b = c.body.b[:f.r.IntN(len(c.body.b)+1)]
			} else {
				c.body.ctype = f.oneOf("application/json", "multipart/form-data", "multipart/form-data; boundary=x").(string)
			}
		}
	} else if c.method == "POST" && f.chance(0.1) {
		c.body = sfBody{b: f.mutate([]byte(`{"x":1}`))}
	}
	if q := f.query(c.method); q != "" {
		path += "?" + q
	}
	c.target = path
	if c.auth = f.auth(pattern, c.ids); c.auth == "" {
		c.auth = "-"
	}
	return c
}

// apply records a call's answer in the model.
func (f *stateFuzzer) apply(c *sfCall, code int, resp []byte) {
	if code >= 200 && code < 300 {
		f.ok[c.pattern]++
	}
	if dbg := os.Getenv("CORRAL_STATEFUZZ_TRACE"); dbg != "" && strings.Contains(c.pattern, dbg) {
		f.t.Logf("%s %s %.300s → %d %.300s", c.method, c.target, c.body.b, code, resp)
	}
	if sess := f.byID[c.ids["session_id"]]; sess != nil && sess.kind == sfSession && c.pattern == "POST /v1/sessions/{session_id}/events" {
		for _, n := range c.body.nonces {
			// an accepted body's events are in the log once each (a mutation may have doubled one or dropped it)
			sess.sent[n] = 0
			if code >= 200 && code < 300 {
				sess.sent[n] = bytes.Count(c.body.b, []byte(n))
			}
		}
	}
	rt := sfRoutes[c.pattern]
	if code < 200 || code >= 300 || rt.after == nil || c.stream {
		return
	}
	rt.after(f, c.ids, resp)
	if c.pattern == "POST /v1/sessions" && !c.mutated {
		s := f.objs[sfSession][len(f.objs[sfSession])-1]
		for _, n := range c.body.nonces {
			s.sent[n] = 1
		}
	}
}

// step sends one random request of the route table, or a burst of them at once, or plays the brain for a
// moment.
func (f *stateFuzzer) step(patterns []string) {
	switch {
	case f.chance(0.03):
		f.brain()
	case f.chance(0.03):
		f.burst(patterns)
	default:
		c := f.call(f.pick(patterns))
		code, resp := f.do(c.method, c.target, c.body, c.auth, c.stream)
		f.apply(c, code, resp)
	}
}

// burst sends 2 to 8 requests at once: creations, reads, and events to one session. Their effects on the model
// do not depend on their order, so they are applied in any.
func (f *stateFuzzer) burst(patterns []string) {
	var calls []*sfCall
	for range 2 + f.r.IntN(7) {
		var p string
		switch f.r.IntN(3) {
		case 0:
			p = "POST /v1/sessions/{session_id}/events"
		default:
			for p = f.pick(patterns); !strings.HasPrefix(p, "GET") && strings.Contains(p, "{") || strings.HasPrefix(p, "DELETE") ||
				strings.HasSuffix(p, "/stream") || strings.HasSuffix(p, "/poll"); p = f.pick(patterns) {
			}
		}
		c := f.call(p)
		if len(calls) > 0 && p == "POST /v1/sessions/{session_id}/events" && f.chance(0.7) {
			c.ids["session_id"] = calls[0].ids["session_id"] // events to one session, at once
			c.target = "/v1/sessions/" + neturl.PathEscape(c.ids["session_id"]) + "/events"
		}
		calls = append(calls, c)
	}
	type answer struct {
		code int
		body []byte
		err  error
	}
	answers := make([]answer, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Go(func() {
			a := &answers[i]
			a.code, a.body, a.err = f.exchange(c.method, c.target, c.body, c.auth, c.stream)
		})
	}
	wg.Wait()
	for i, c := range calls {
		f.requests++
		f.recent = append(f.recent, fmt.Sprintf("(burst) %s %s %.300s → %d %.200s", c.method, c.target, c.body.b, answers[i].code, answers[i].body))
	}
	for i, c := range calls {
		if answers[i].err != nil {
			f.fail("(burst) %s %s: %v", c.method, c.target, answers[i].err)
		}
		f.apply(c, answers[i].code, answers[i].body)
	}
}

// brain does what a brain would, through the store: a custom tool call in a session's log, or its work item
// queued in a self-hosted environment.
func (f *stateFuzzer) brain() {
	ctx := context.Background()
	s := f.pickObj(sfSession, "")
	if s == nil {
		return
	}
	if env := f.byID[s.env]; env != nil && env.selfHosted && f.chance(0.5) {
		if _, _, err := f.h.store.WorkEnsure(ctx, &store.WorkEnsureParams{ID: apitype.NewID(apitype.PrefixWork),
			EnvironmentID: env.id, SessionID: s.id, At: apitype.Now()}); err != nil && !errors.Is(err, store.ErrNotFound) {
			f.fail("queue the work of %s: %v", s.id, err)
		}
		return
	}
	ev, err := apitype.MakeEvent(apitype.EventAgentCustomToolUse, apitype.AgentToolUse{Name: "lookup", Input: json.RawMessage(`{}`)})
	if err != nil {
		f.fail("%v", err)
	}
	out, err := f.h.store.EventAppend(ctx, &store.EventAppendParams{SessionID: s.id, Events: []apitype.NewEvent{ev}})
	if err != nil {
		f.fail("append to %s: %v", s.id, err)
	}
	s.toolUses = append(s.toolUses, out[0].ID)
}

// sfList is a list endpoint whose walk the model checks: the kind it lists, the path (with {} for the parent's
// id) and whether it takes include_archived.
type sfList struct {
	kind     sfKind
	path     string
	archived bool
}

var sfLists = []sfList{
	{sfAgent, "/v1/agents", true}, {sfEnv, "/v1/environments", true}, {sfEnvKey, "/v1/environments/{}/keys", false},
	{sfSession, "/v1/sessions", true}, {sfResource, "/v1/sessions/{}/resources", false},
	{sfVault, "/v1/vaults", true}, {sfCredential, "/v1/vaults/{}/credentials", true},
	{sfMemStore, "/v1/memory_stores", true}, {sfMemory, "/v1/memory_stores/{}/memories", false},
	{sfDream, "/v1/dreams", true}, {sfDeployment, "/v1/deployments", true}, {sfRun, "/v1/deployment_runs", false},
	{sfWebhook, "/v1/organizations/webhooks", false}, {sfTunnel, "/v1/tunnels", true},
	{sfCert, "/v1/tunnels/{}/certificates", true}, {sfFile, "/v1/files", false}, {sfSkill, "/v1/skills", false},
	{sfSkillVer, "/v1/skills/{}/versions", false},
}

// walk lists path forwards with random limits up to max (-max: pages of -max) and returns the ids in order (an
// agent's versions as id@version).
func (f *stateFuzzer) walk(path string, max int) []string {
	var ids []string
	page, after := "", ""
	versions := strings.HasPrefix(path, "/v1/agents/") && strings.HasSuffix(path, "/versions")
	for range 100000 {
		target := path
		sep := "?"
		if strings.Contains(target, "?") {
			sep = "&"
		}
		limit := -max // max < 0: pages of -max
		if max > 0 {
			limit = 1 + f.r.IntN(max)
		}
		target += sep + "limit=" + strconv.Itoa(limit)
		if page != "" {
			target += "&page=" + neturl.QueryEscape(page)
		}
		if after != "" {
			target += "&after_id=" + neturl.QueryEscape(after)
		}
		code, body := f.send("GET", target, sfBody{}, "")
		if code != http.StatusOK {
			f.fail("walk %s: %d %s", target, code, body)
		}
		var p struct {
			Data []struct {
				ID      string
				Version json.RawMessage
			}
			NextPage *string `json:"next_page"`
			HasMore  bool    `json:"has_more"`
			LastID   *string `json:"last_id"`
		}
		if err := json.Unmarshal(body, &p); err != nil {
			f.fail("walk %s: %v %s", target, err, body)
		}
		for _, d := range p.Data {
			if versions { // an agent's versions: one id
				d.ID += "@" + string(d.Version)
			}
			ids = append(ids, d.ID)
		}
		switch {
		case p.NextPage != nil && *p.NextPage != "":
			page = *p.NextPage
		case p.HasMore && p.LastID != nil:
			after = *p.LastID
		default:
			return ids
		}
	}
	f.fail("walk %s: no end", path)
	return nil
}

// checkWalk walks a list with random small limits and with pages of 100, and checks that both give the same
// ids in the same order, none twice; it returns them.
func (f *stateFuzzer) checkWalk(path string) []string {
	small, big := f.walk(path, 7), f.walk(path, -100)
	if !slices.Equal(small, big) {
		f.fail("list %s: by small pages %v, by pages of 100 %v", path, small, big)
	}
	seen := map[string]bool{}
	for _, id := range small {
		if seen[id] {
			f.fail("list %s: %s twice in %v", path, id, small)
		}
		seen[id] = true
	}
	return small
}

// sfWalks are the lists the model does not know the contents of, walked for their consistency alone (with {}
// the id of a resource of the kind).
var sfWalks = []struct {
	kind sfKind
	path string
}{
	{sfAgent, "/v1/agents/{}/versions"}, {sfMemStore, "/v1/memory_stores/{}/memory_versions"},
	{sfSession, "/v1/sessions/{}/threads"}, {sfWebhook, "/v1/organizations/webhooks/{}/deliveries"},
	{"", "/v1/models"}, {"", "/v1/sessions?order=asc"}, {"", "/v1/memory_stores?include_archived=true&created_at[gte]=2020-01-01T00:00:00Z"},
}

// checkList walks a list and compares it with the model: no id twice, and exactly the model's resources (the
// archived ones only with include_archived).
func (f *stateFuzzer) checkList(l sfList, parent string, includeArchived bool) {
	path := strings.Replace(l.path, "{}", neturl.PathEscape(parent), 1)
	if includeArchived {
		path += "?include_archived=true"
	}
	got := f.checkWalk(path)
	seen := map[string]bool{}
	for _, id := range got {
		if seen[id] {
			f.fail("list %s: %s twice in %v", path, id, got)
		}
		seen[id] = true
	}
	want := map[string]bool{}
	for _, o := range f.live(l.kind, parent) {
		if includeArchived || !o.archived || !l.archived {
			want[o.id] = true
		}
	}
	var missing, extra []string
	for id := range want {
		if !seen[id] {
			missing = append(missing, id)
		}
	}
	for id := range seen {
		if !want[id] {
			extra = append(extra, id)
		}
	}
	if len(missing) > 0 || len(extra) > 0 {
		f.fail("list %s: missing %v, unexpected %v (model %d, listed %d)", path, missing, extra, len(want), len(got))
	}
}

// checkVersions checks that an agent's version list holds as many versions as its version number.
func (f *stateFuzzer) checkVersions(id string, listed int) {
	code, body := f.send("GET", "/v1/agents/"+id, sfBody{}, "")
	var a struct{ Version int }
	if err := json.Unmarshal(body, &a); code != http.StatusOK || err != nil {
		f.fail("agent %s: %d %s", id, code, body)
	}
	if a.Version != listed {
		f.fail("agent %s is at version %d, its version list has %d", id, a.Version, listed)
	}
}

// checkEvents checks a session's log: its events listed forwards with small limits are the store's, in order,
// with unique ids and contiguous sequence numbers; each event the fuzzer sent appears once, a refused one never.
func (f *stateFuzzer) checkEvents(s *sfObject) {
	path := "/v1/sessions/" + s.id + "/events"
	var listed []apitype.Event
	page := ""
	for range 100000 {
		target := path + "?limit=" + strconv.Itoa(1+f.r.IntN(7))
		if page != "" {
			target += "&page=" + neturl.QueryEscape(page)
		}
		code, body := f.send("GET", target, sfBody{}, "")
		if code != http.StatusOK {
			f.fail("events %s: %d %s", target, code, body)
		}
		var p struct {
			Data     []json.RawMessage
			NextPage *string `json:"next_page"`
		}
		if err := json.Unmarshal(body, &p); err != nil {
			f.fail("events %s: %v", target, err)
		}
		for _, raw := range p.Data {
			var e struct {
				ID   string
				Type apitype.EventType
			}
			_ = json.Unmarshal(raw, &e)
			listed = append(listed, apitype.Event{ID: e.ID, Type: e.Type, Data: raw})
		}
		if p.NextPage == nil || *p.NextPage == "" {
			break
		}
		page = *p.NextPage
	}
	stored, err := f.h.store.EventList(context.Background(), &store.EventListParams{SessionID: s.id, Limit: 100000})
	if err != nil {
		f.fail("store events of %s: %v", s.id, err)
	}
	seen := map[string]bool{}
	for i, e := range listed {
		if seen[e.ID] {
			f.fail("events of %s: %s twice", s.id, e.ID)
		}
		seen[e.ID] = true
		if i >= len(stored) || stored[i].ID != e.ID {
			f.fail("events of %s: listed #%d is %s, the store's is %v", s.id, i, e.ID, stored[min(i, len(stored)-1)].ID)
		}
	}
	if len(listed) != len(stored) {
		f.fail("events of %s: listed %d, stored %d", s.id, len(listed), len(stored))
	}
	for i, e := range stored {
		if e.Seq != int64(i+1) {
			f.fail("events of %s: #%d has seq %d", s.id, i, e.Seq)
		}
	}
	for n, want := range s.sent {
		got := 0
		for _, e := range listed {
			got += bytes.Count(e.Data, []byte(n))
		}
		if got != want {
			f.fail("events of %s: event %s appears %d times, want %d", s.id, n, got, want)
		}
	}
}

// sfSample is how many parents' lists (and sessions' logs) a check walks: a few in passing, many at the end.
func sfSample(all bool) int {
	if all {
		return 60
	}
	return 2
}

// check walks every list of the model (those of a few parents, or of many at the end) and checks sessions'
// logs.
func (f *stateFuzzer) check(all bool) {
	for _, l := range sfLists {
		var parents []string
		if pk, ok := sfParents[l.kind]; ok {
			for _, p := range f.objs[pk] {
				parents = append(parents, p.id)
			}
			if n := sfSample(all); len(parents) > n {
				f.r.Shuffle(len(parents), func(i, j int) { parents[i], parents[j] = parents[j], parents[i] })
				parents = parents[:n]
			}
		} else {
			parents = []string{""}
		}
		for _, p := range parents {
			f.checkList(l, p, false)
			if l.archived {
				f.checkList(l, p, true)
			}
		}
	}
	for _, w := range sfWalks {
		if w.kind == "" {
			f.checkWalk(w.path)
			continue
		}
		os := slices.Clone(f.objs[w.kind])
		if n := sfSample(all); len(os) > n {
			f.r.Shuffle(len(os), func(i, j int) { os[i], os[j] = os[j], os[i] })
			os = os[:n]
		}
		for _, o := range os {
			ids := f.checkWalk(strings.Replace(w.path, "{}", o.id, 1))
			if w.kind == sfAgent {
				f.checkVersions(o.id, len(ids))
			}
		}
	}
	sessions := slices.Clone(f.objs[sfSession])
	if n := sfSample(all) + 1; len(sessions) > n {
		f.r.Shuffle(len(sessions), func(i, j int) { sessions[i], sessions[j] = sessions[j], sessions[i] })
		sessions = sessions[:n]
	}
	for _, s := range sessions {
		f.checkEvents(s)
	}
}

// statefuzzSettings reads the seed and the duration of a run from the environment.
func statefuzzSettings(t *testing.T) (seed uint64, d time.Duration) {
	d = 3 * time.Second
	if s := os.Getenv("CORRAL_STATEFUZZ_DURATION"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			t.Fatalf("CORRAL_STATEFUZZ_DURATION: %v", err)
		}
	}
	seed = rand.Uint64()
	if s := os.Getenv("CORRAL_STATEFUZZ_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("CORRAL_STATEFUZZ_SEED: %v", err)
		}
	}
	return seed, d
}

// statefuzzServer is the fuzzer's server over st: a vault, a file service and the MCP proxy as validator.
func statefuzzServer(t *testing.T, st store.Store) *harness {
	v, err := vault.Open(context.Background(), st, vault.NewKey())
	if err != nil {
		t.Fatal(err)
	}
	mcp, err := proxy.NewMCP(proxy.MCPConfig{Store: st, Vault: v})
	if err != nil {
		t.Fatal(err)
	}
	h := harnessOver(t, st, func(c *api.Config) { c.Sealer, c.Validator = v, mcp },
		withFiles(t, filepath.Join(t.TempDir(), "blobs"), 1<<20))
	h.vault = v
	return h
}

func runStateFuzz(t *testing.T, h *harness) {
	seed, d := statefuzzSettings(t)
	t.Logf("seed %d (CORRAL_STATEFUZZ_SEED=%d replays it), for %v", seed, seed, d)
	f := &stateFuzzer{t: t, h: h, r: rand.New(rand.NewPCG(seed, seed>>1|1)), objs: map[sfKind][]*sfObject{},
		byID: map[string]*sfObject{}, ok: map[string]int{}, gone: map[sfKind][]string{}, keys: map[string][]string{}, tokens: map[string]string{}}
	f.client = &http.Client{Transport: h.srv.Client().Transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for range 3 {
		f.cas = append(f.cas, newTestCA(t, true, time.Now().Add(90*24*time.Hour)).pem)
	}
	var patterns []string
	for _, rt := range newAPI(t, api.Config{Store: h.store}).RouteAccesses() {
		patterns = append(patterns, rt.Pattern)
	}
	end := time.Now().Add(d)
	steps := 0
	for time.Now().Before(end) {
		f.step(patterns)
		if steps++; steps%400 == 0 {
			f.check(false)
		}
	}
	f.check(true)
	live := 0
	for _, os := range f.objs {
		live += len(os)
	}
	var never []string
	for _, p := range patterns {
		if f.ok[p] == 0 {
			never = append(never, p)
		}
	}
	t.Logf("seed %d: %d steps, %d requests, %d resources in the model; %d of %d routes never succeeded: %v",
		seed, steps, f.requests, live, len(never), len(patterns), never)
}

// TestStateFuzz runs the stateful fuzzer on SQLite and, with CORRAL_TEST_POSTGRES, PostgreSQL.
func TestStateFuzz(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		st, err := sqlite.Open(ctxT(t), "sqlite://"+filepath.Join(t.TempDir(), "corral.db"))
		if err != nil {
			t.Fatal(err)
		}
		runStateFuzz(t, statefuzzServer(t, st))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		st, err := postgres.Open(ctxT(t), pgtest.NewDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		runStateFuzz(t, statefuzzServer(t, st))
	})
}

// TestStateFuzzCoversRoutes: the fuzzer has an entry for every route of the table (which names its body
// generator, if it takes a body) and none for a route that is gone, and a kind for every path wildcard.
func TestStateFuzzCoversRoutes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	table := map[string]bool{}
	for _, rt := range h.api.RouteAccesses() {
		table[rt.Pattern] = true
		if _, ok := sfRoutes[rt.Pattern]; !ok {
			t.Errorf("route %s has no entry in sfRoutes: give it one (its body generator, if it takes a body, and its effect on the model)", rt.Pattern)
		}
		for _, w := range sfWildcardRE.FindAllStringSubmatch(rt.Pattern, -1) {
			if _, ok := sfWildcards[w[1]]; !ok {
				t.Errorf("route %s: wildcard {%s} has no kind in sfWildcards", rt.Pattern, w[1])
			}
		}
	}
	for p := range sfRoutes {
		if !table[p] {
			t.Errorf("sfRoutes has %s, which is not a route", p)
		}
	}
}
