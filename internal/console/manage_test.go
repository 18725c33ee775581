package console_test

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/blob/localfs"
	"github.com/corralhq/corral/internal/files"
	"github.com/corralhq/corral/internal/server"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/vault"
)

// refused sends a request the API must refuse and returns the message of its error envelope: what the console
// must show for the same input.
func (e *env) refused(method, path string, body any) string {
	e.t.Helper()
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(method, e.srv.URL()+path, bytes.NewReader(b))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("x-api-key", key)
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var env struct {
		Error struct{ Message string } `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode/100 == 2 || env.Error.Message == "" {
		e.t.Fatalf("%s %s %s: %s, message %q: the API should have refused it", method, path, b, resp.Status, env.Error.Message)
	}
	return env.Error.Message
}

// click clicks the element with id.
func (e *env) click(id string) {
	e.t.Helper()
	e.do("click "+id, chromedp.Click(chromedp.ID(id)))
}

// formError is an expression true once the form's alert shows msg.
func formError(form, msg string) string {
	return `(() => { const a = document.getElementById(` + js(form+"-error") + `); return !!a && !a.hidden && a.textContent.includes(` + js(msg) + `); })()`
}

// TestConsoleManageAgents: an agent is created through the console's form (after a refusal whose message the
// page shows), listed, shown, and edited into version 2; an edit made from a stale version shows the API's
// conflict.
func TestConsoleManageAgents(t *testing.T) {
	e := newEnv(t, false)
	e.login()

	e.open("/agents")
	e.wait("agents list", `!!document.getElementById('new-agent') && !!document.querySelector('.empty')`)
	e.click("new-agent")
	e.wait("new agent form", `location.hash === '#/agents/new' && !!document.getElementById('agent-form')`)

	// Bad input: no model. The page shows the API's own message, and keeps the form.
	want := e.refused("POST", "/v1/agents", map[string]any{"name": "helper", "model": ""})
	e.setValue("agent-name", "helper")
	e.click("agent-form-submit")
	e.wait("the API's refusal on the page", formError("agent-form", want))
	if got := e.eval(`document.getElementById('agent-name').value`); got != "helper" {
		t.Errorf("after a refusal the name field holds %q, want what was typed", got)
	}
	// A JSON field that does not parse is refused before any request, naming the field.
	e.setValue("agent-model", "claude-sonnet-4-5")
	e.setValue("agent-tools", `[{"type": `)
	e.click("agent-form-submit")
	e.wait("the JSON field's error", formError("agent-form", "Tools: not valid JSON"))
	e.shot("step-agent-form-error")

	e.setValue("agent-system", "Be helpful.")
	e.setValue("agent-tools", `[{"type": "agent_toolset_20260401"}]`)
	e.setValue("agent-metadata", `{"team": "qa"}`)
	e.click("agent-form-submit")
	e.wait("the new agent's page", `location.hash.startsWith('#/agents/agent_') && document.querySelector('h1')?.textContent === 'helper'`)
	id := strings.TrimPrefix(e.eval(`location.hash`), "#/agents/")
	var a apitype.Agent
	e.api("GET", "/v1/agents/"+id, nil, &a)
	if a.Version != 1 || a.System != "Be helpful." || a.Model.ID != "claude-sonnet-4-5" || len(a.Tools) != 1 ||
		a.Tools[0].Type != "agent_toolset_20260401" || a.Metadata["team"] != "qa" {
		t.Fatalf("the agent the form created: %+v", a)
	}
	e.wait("version 1 current", `document.querySelector('.facts')?.textContent.includes('v1') && document.querySelectorAll('.badge.current').length === 1`)

	e.open("/agents")
	e.wait("the agent in the list", `[...document.querySelectorAll('[data-row]')].some(r => r.textContent === 'helper' && r.getAttribute('href') === '#/agents/`+id+`')`)
	e.shot("step-agents-list-new")

	// Edit: the form is filled from version 1; saving posts version 1 and makes version 2.
	e.open("/agents/" + id)
	e.wait("agent page", `!!document.getElementById('edit-agent')`)
	e.click("edit-agent")
	e.wait("edit form", `location.hash === '#/agents/`+id+`/edit' && document.getElementById('agent-system')?.value === 'Be helpful.'`+
		` && document.getElementById('agent-model').value === 'claude-sonnet-4-5' && document.getElementById('edit-base').textContent.includes('v1')`)
	if got := e.eval(`document.getElementById('agent-tools').value`); !strings.Contains(got, "agent_toolset_20260401") {
		t.Errorf("the tools field holds %q, want the agent's tools", got)
	}
	e.setValue("agent-system", "Be brief.")
	e.setValue("agent-description", "Answers in one line.")
	e.shot("agent-edit")
	e.click("agent-form-submit")
	e.wait("version 2", `location.hash === '#/agents/`+id+`' && document.querySelector('.facts')?.textContent.includes('v2')`+
		` && document.querySelectorAll('.card table.list tbody tr').length === 2 && document.querySelector('.lead')?.textContent === 'Answers in one line.'`)
	if got := e.eval(`document.querySelector('.badge.current')?.closest('tr')?.querySelector('a')?.textContent || ''`); got != "v2" {
		t.Errorf("the version marked current is %q, want v2", got)
	}
	e.shot("step-agent-v2")
	e.api("GET", "/v1/agents/"+id, nil, &a)
	if a.Version != 2 || a.System != "Be brief." || a.Description != "Answers in one line." || len(a.Tools) != 1 || a.Metadata["team"] != "qa" {
		t.Fatalf("the agent after the edit: %+v", a)
	}

	// A stale edit: the form was opened at v2, the agent moved to v3 meanwhile; the API's conflict is shown.
	e.open("/agents/" + id + "/edit")
	e.wait("edit form at v2", `document.getElementById('edit-base')?.textContent.includes('v2')`)
	e.api("POST", "/v1/agents/"+id, map[string]any{"version": 2, "system": "Changed elsewhere."}, nil)
	want = e.refused("POST", "/v1/agents/"+id, map[string]any{"version": 2, "system": "Mine."})
	e.setValue("agent-system", "Mine.")
	e.click("agent-form-submit")
	e.wait("the conflict on the page", formError("agent-form", want))
	e.api("GET", "/v1/agents/"+id, nil, &a)
	if a.Version != 3 || a.System != "Changed elsewhere." {
		t.Fatalf("a refused edit changed the agent: v%d %q", a.Version, a.System)
	}

	// Saving an unchanged form makes no version, and the page says so.
	e.open("/agents/" + id) // from another page: the same hash again would not route
	e.wait("agent page at v3", `document.querySelector('.facts')?.textContent.includes('v3') && !!document.getElementById('edit-agent')`)
	e.click("edit-agent")
	e.wait("edit form at v3", `document.getElementById('edit-base')?.textContent.includes('v3')`)
	e.click("agent-form-submit")
	e.wait("nothing changed", `location.hash === '#/agents/`+id+`?unchanged=1' && document.getElementById('unchanged')?.textContent.includes('v3')`)
	e.api("GET", "/v1/agents/"+id, nil, &a)
	if a.Version != 3 {
		t.Fatalf("an unchanged save made version %d", a.Version)
	}

	// Archive: two clicks, then the list (without archived ones) no longer has it.
	e.open("/agents/" + id)
	e.wait("agent page", `!!document.getElementById('archive-agent')`)
	e.click("archive-agent")
	e.wait("armed", `document.getElementById('archive-agent').textContent.includes('again')`)
	e.api("GET", "/v1/agents/"+id, nil, &a)
	if a.ArchivedAt != nil {
		t.Fatal("one click archived the agent")
	}
	e.click("archive-agent")
	e.wait("archived", `location.hash === '#/agents' && !!document.querySelector('.empty')`)
	e.api("GET", "/v1/agents/"+id, nil, &a)
	if a.ArchivedAt == nil {
		t.Fatal("the agent is not archived")
	}
}

// fakeImages is an image builder whose builds the test finishes: every environment with packages is building
// until the test stores its result.
type fakeImages struct {
	mu    sync.Mutex
	built []string // the environments Build was called for
}

func (f *fakeImages) Check(*apitype.EnvConfig) error { return nil }
func (f *fakeImages) Image(c *apitype.EnvConfig) *apitype.EnvironmentImage {
	if c.Type != apitype.EnvironmentCloud {
		return nil
	}
	return &apitype.EnvironmentImage{Status: apitype.ImageBuilding, ID: "img_test", UpdatedAt: apitype.Now()}
}
func (f *fakeImages) Build(e *apitype.Environment) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.built = append(f.built, e.ID)
}
func (f *fakeImages) Acquire(context.Context, *apitype.EnvConfig) (string, func(), error) {
	return "", nil, context.Canceled
}
func (f *fakeImages) Start(context.Context) error { return nil }
func (f *fakeImages) Stop()                       {}

// TestConsoleManageEnvironments: an environment is created through the console's form (after a refusal whose
// message the page shows), its image build is followed from building to failed with the build's log, and it
// is edited.
func TestConsoleManageEnvironments(t *testing.T) {
	images := &fakeImages{}
	e := newEnv(t, false, func(c *server.Config) { c.Images = images })
	e.login()

	e.open("/environments")
	e.wait("environments list", `!!document.getElementById('new-environment')`)
	e.click("new-environment")
	e.wait("new environment form", `location.hash === '#/environments/new' && !!document.getElementById('env-form')`)
	if e.eval(`String(document.getElementById('env-limited').hidden)`) != "true" {
		t.Error("the limited networking fields show for unrestricted networking")
	}

	// Bad input: a host that is none. The API's message shows on the page.
	want := e.refused("POST", "/v1/environments", map[string]any{"name": "data", "config": map[string]any{"type": "cloud",
		"networking": map[string]any{"type": "limited", "allowed_hosts": []string{"not a host!"}}}})
	e.setValue("env-name", "data")
	e.setValue("env-networking", "limited")
	e.wait("limited fields", `document.getElementById('env-limited').hidden === false`)
	e.setValue("env-hosts", "not a host!")
	e.click("env-form-submit")
	e.wait("the API's refusal on the page", formError("env-form", want))
	e.shot("step-environment-form-error")

	e.setValue("env-hosts", "api.example.com\npypi.org")
	e.eval(`document.getElementById('env-allow-pm').click(), ''`)
	e.setValue("env-pkg-pip", "requests, numpy")
	e.setValue("env-description", "For the data team.")
	e.click("env-form-submit")
	e.wait("the new environment's page", `location.hash.startsWith('#/environments/env_') && document.querySelector('h1')?.textContent === 'data'`)
	id := strings.TrimPrefix(e.eval(`location.hash`), "#/environments/")
	var got apitype.Environment
	e.api("GET", "/v1/environments/"+id, nil, &got)
	n := got.Config.Networking
	if got.Description == nil || *got.Description != "For the data team." || n == nil || n.Type != apitype.NetworkingLimited ||
		strings.Join(n.AllowedHosts, " ") != "api.example.com pypi.org" || n.AllowPackageManagers == nil || !*n.AllowPackageManagers ||
		got.Config.Packages == nil || strings.Join(got.Config.Packages.Pip, " ") != "requests numpy" {
		t.Fatalf("the environment the form created: %+v, networking %+v, packages %+v", got, n, got.Config.Packages)
	}
	images.mu.Lock()
	built := slices.Clone(images.built)
	images.mu.Unlock()
	if len(built) != 1 || built[0] != id {
		t.Errorf("builds started: %v, want the new environment's", built)
	}

	// The build: building, then failed with its log; the page follows it without a reload.
	e.wait("building", `document.getElementById('image-status')?.textContent === 'building' && document.getElementById('packages')?.textContent.includes('requests numpy')`)
	e.shot("step-environment-building")
	const log = "Collecting numpy\nERROR: Could not find a version that satisfies the requirement numpy"
	if err := e.st.EnvironmentImageSet(context.Background(), id, &apitype.EnvironmentImage{Status: apitype.ImageFailed, ID: "img_test",
		UpdatedAt: apitype.Now(), Error: &apitype.ImageBuildError{Manager: "pip", Package: "numpy", Message: log}}); err != nil {
		t.Fatal(err)
	}
	e.wait("failed with its log", `document.getElementById('image-status')?.textContent === 'failed' && document.getElementById('image-log')?.textContent === `+js(log))
	e.shot("environment-failed")

	e.open("/environments")
	e.wait("the environment in the list", `[...document.querySelectorAll('[data-row]')].some(r => r.textContent === 'data')`)

	// Edit: filled from the API; the type is fixed; unrestricted networking and a package fewer.
	e.open("/environments/" + id)
	e.wait("environment page", `!!document.getElementById('edit-environment')`)
	e.click("edit-environment")
	e.wait("edit form", `document.getElementById('env-name')?.value === 'data' && document.getElementById('env-networking').value === 'limited'`+
		` && document.getElementById('env-hosts').value === 'api.example.com\npypi.org' && document.getElementById('env-allow-pm').checked`+
		` && document.getElementById('env-pkg-pip').value === 'requests numpy' && document.getElementById('env-type').disabled`)
	e.setValue("env-name", "data-2")
	e.setValue("env-networking", "unrestricted")
	e.setValue("env-pkg-pip", "requests")
	e.click("env-form-submit")
	e.wait("the edited environment", `location.hash === '#/environments/`+id+`' && document.querySelector('h1')?.textContent === 'data-2'`)
	e.api("GET", "/v1/environments/"+id, nil, &got)
	if got.Name != "data-2" || got.Config.Networking.Type != apitype.NetworkingUnrestricted || strings.Join(got.Config.Packages.Pip, " ") != "requests" ||
		*got.Description != "For the data team." {
		t.Fatalf("the environment after the edit: %+v, networking %+v, packages %+v", got, got.Config.Networking, got.Config.Packages)
	}

	// Changing the type is the API's to refuse; the form does not offer it (the select is disabled), so ask
	// for a refusal the form can send: a name another environment has.
	e.create("/v1/environments", map[string]any{"name": "taken", "config": map[string]any{"type": "cloud"}})
	want = e.refused("POST", "/v1/environments/"+id, map[string]any{"name": "taken"})
	e.open("/environments/" + id + "/edit")
	e.wait("edit form", `document.getElementById('env-name')?.value === 'data-2'`)
	e.setValue("env-name", "taken")
	e.click("env-form-submit")
	e.wait("the name conflict on the page", formError("env-form", want))

	// Archive, in two clicks.
	e.open("/environments/" + id)
	e.wait("environment page", `!!document.getElementById('archive-environment')`)
	e.click("archive-environment")
	e.click("archive-environment")
	e.wait("archived", `location.hash === '#/environments' && ![...document.querySelectorAll('[data-row]')].some(r => r.textContent === 'data-2')`)
	e.api("GET", "/v1/environments/"+id, nil, &got)
	if got.ArchivedAt == nil {
		t.Fatal("the environment is not archived")
	}
}

// secretIn is an expression true if the page holds s anywhere: its markup, its text, or a field's value.
func secretIn(s string) string {
	return `(document.documentElement.outerHTML.includes(` + js(s) + `) || document.body.textContent.includes(` + js(s) + `)` +
		` || [...document.querySelectorAll('input, textarea')].some(i => i.value.includes(` + js(s) + `)))`
}

// TestConsoleManageVaults: a vault is created (after a refusal shown on the page) and renamed; credentials are
// added to it through the form, a secret environment variable and an MCP bearer token; their secrets are sealed
// as typed, never shown on a page again, and replaced by an edit that leaves the other settings as they were.
func TestConsoleManageVaults(t *testing.T) {
	seal, err := vault.New(vault.NewKey())
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, false, func(c *server.Config) { c.API.Sealer = seal })
	e.login()
	// secretOf opens the one sealed secret of a credential.
	secretOf := func(credID string) string {
		t.Helper()
		ss, err := e.st.SecretList(context.Background(), &store.SecretListParams{CredentialID: credID})
		if err != nil || len(ss) != 1 {
			t.Fatalf("secrets of %s: %d, %v", credID, len(ss), err)
		}
		b, err := seal.Open(&ss[0])
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	e.open("/vaults")
	e.wait("vaults list", `!!document.getElementById('new-vault') && !!document.querySelector('.empty')`)
	e.click("new-vault")
	e.wait("new vault form", `!!document.getElementById('vault-form')`)
	want := e.refused("POST", "/v1/vaults", map[string]any{"display_name": ""})
	e.click("vault-form-submit")
	e.wait("the API's refusal on the page", formError("vault-form", want))
	e.setValue("vault-name", "ops")
	e.click("vault-form-submit")
	e.wait("the vault's page", `location.hash.startsWith('#/vaults/vlt_') && document.querySelector('h1')?.textContent === 'ops'`)
	vaultID := strings.TrimPrefix(e.eval(`location.hash`), "#/vaults/")

	// A secret environment variable: first with a name the API refuses, then right.
	const first, second = "s3cr3t-first-value", "s3cr3t-second-value"
	e.click("new-credential")
	e.wait("credential form", `!!document.getElementById('cred-form') && document.getElementById('cred-type').value === 'environment_variable'`+
		` && document.getElementById('cred-secret-value').type === 'password' && document.getElementById('cred-secret-value').value === ''`)
	want = e.refused("POST", "/v1/vaults/"+vaultID+"/credentials", map[string]any{"auth": map[string]any{"type": "environment_variable",
		"secret_name": "1BAD", "secret_value": first, "networking": map[string]any{"type": "unrestricted"},
		"injection_location": map[string]any{"header": true, "body": false}}})
	e.setValue("cred-secret-name", "1BAD")
	e.setValue("cred-secret-value", first)
	e.click("cred-form-submit")
	e.wait("the API's refusal on the page", formError("cred-form", want))
	e.setValue("cred-secret-name", "GITHUB_TOKEN")
	e.setValue("cred-networking", "limited")
	e.setValue("cred-hosts", "api.github.com")
	e.setValue("cred-name", "GitHub")
	e.shot("step-credential-form")
	e.click("cred-form-submit")
	e.wait("the credential in the vault", `location.hash === '#/vaults/`+vaultID+`' && document.getElementById('credentials')?.textContent.includes('$GITHUB_TOKEN')`)
	if e.eval(`String(`+secretIn(first)+`)`) != "false" {
		t.Error("the vault's page shows the secret")
	}
	var creds struct{ Data []apitype.Credential }
	e.api("GET", "/v1/vaults/"+vaultID+"/credentials", nil, &creds)
	if len(creds.Data) != 1 || creds.Data[0].Auth.SecretName != "GITHUB_TOKEN" || creds.Data[0].Auth.Networking == nil ||
		strings.Join(creds.Data[0].Auth.Networking.AllowedHosts, " ") != "api.github.com" {
		t.Fatalf("the credentials: %+v", creds.Data)
	}
	envCred := creds.Data[0].ID
	if got := secretOf(envCred); got != first {
		t.Fatalf("the sealed secret is %q, want what was typed", got)
	}

	// Its edit: the form shows no secret; a new value replaces it, the rest kept.
	e.open("/vaults/" + vaultID + "/credentials/" + envCred + "/edit")
	e.wait("credential edit form", `document.getElementById('cred-name')?.value === 'GitHub' && document.getElementById('cred-secret-name').value === 'GITHUB_TOKEN'`+
		` && document.getElementById('cred-secret-name').disabled && document.getElementById('cred-networking').value === 'limited'`)
	if e.eval(`String(`+secretIn(first)+`)`) != "false" || e.eval(`document.getElementById('cred-secret-value').value`) != "" {
		t.Error("the edit form shows the secret")
	}
	e.shot("credential-edit")
	e.setValue("cred-secret-value", second)
	e.click("cred-form-submit")
	e.wait("back at the vault", `location.hash === '#/vaults/`+vaultID+`' && !!document.getElementById('credentials')`)
	if got := secretOf(envCred); got != second {
		t.Fatalf("after the edit the sealed secret is %q, want the new one", got)
	}
	var c apitype.Credential
	e.api("GET", "/v1/vaults/"+vaultID+"/credentials/"+envCred, nil, &c)
	if c.DisplayName == nil || *c.DisplayName != "GitHub" || c.Auth.Networking == nil || c.Auth.Networking.Type != apitype.NetworkingLimited {
		t.Fatalf("the edit changed more than the secret: %+v", c)
	}
	// A name-only edit keeps the secret.
	e.open("/vaults/" + vaultID + "/credentials/" + envCred + "/edit")
	e.wait("credential edit form", `document.getElementById('cred-name')?.value === 'GitHub'`)
	e.setValue("cred-name", "GitHub bot")
	e.click("cred-form-submit")
	e.wait("renamed", `location.hash === '#/vaults/`+vaultID+`' && document.getElementById('credentials')?.textContent.includes('GitHub bot')`)
	if got := secretOf(envCred); got != second {
		t.Fatalf("a rename changed the sealed secret to %q", got)
	}

	// An MCP bearer token.
	e.click("new-credential")
	e.wait("credential form", `!!document.getElementById('cred-form')`)
	e.setValue("cred-type", "static_bearer")
	e.wait("bearer fields", `document.getElementById('cred-static-bearer').hidden === false && document.getElementById('cred-env-var').hidden === true`)
	e.setValue("cred-mcp-url", "https://mcp.example.com/mcp")
	e.setValue("cred-token", first)
	e.click("cred-form-submit")
	e.wait("the token in the vault", `location.hash === '#/vaults/`+vaultID+`' && document.getElementById('credentials')?.textContent.includes('https://mcp.example.com/mcp')`)
	e.shot("step-vault")
	if e.eval(`String(`+secretIn(first)+` || `+secretIn(second)+`)`) != "false" {
		t.Error("the vault's page shows a secret")
	}

	// The vault renamed.
	e.click("edit-vault")
	e.wait("vault edit form", `document.getElementById('vault-name')?.value === 'ops'`)
	e.setValue("vault-name", "ops-2")
	e.click("vault-form-submit")
	e.wait("renamed vault", `location.hash === '#/vaults/`+vaultID+`' && document.querySelector('h1')?.textContent === 'ops-2'`)
	e.open("/vaults")
	e.wait("the vault in the list", `[...document.querySelectorAll('[data-row]')].some(r => r.textContent === 'ops-2')`)

	// A credential archived from its page, then the vault.
	e.open("/vaults/" + vaultID + "/credentials/" + envCred + "/edit")
	e.wait("credential edit form", `!!document.getElementById('archive-credential')`)
	e.click("archive-credential")
	e.click("archive-credential")
	e.wait("back at the vault", `location.hash === '#/vaults/`+vaultID+`' && !!document.getElementById('credentials')`)
	e.api("GET", "/v1/vaults/"+vaultID+"/credentials/"+envCred, nil, &c)
	if c.ArchivedAt == nil {
		t.Fatal("the credential is not archived")
	}
	e.click("archive-vault")
	e.click("archive-vault")
	e.wait("vault archived", `location.hash === '#/vaults' && !!document.querySelector('.empty')`)
	var vlt apitype.Vault
	e.api("GET", "/v1/vaults/"+vaultID, nil, &vlt)
	if vlt.ArchivedAt == nil {
		t.Fatal("the vault is not archived")
	}
}

// TestConsoleManageEnvironmentKeys: a self-hosted environment is created through the form; a worker key made
// on its page is shown once, works, and is gone from the page once left; revoking takes a second click.
func TestConsoleManageEnvironmentKeys(t *testing.T) {
	e := newEnv(t, false)
	e.login()
	e.open("/environments/new")
	e.wait("new environment form", `!!document.getElementById('env-form')`)
	e.setValue("env-name", "workers")
	e.setValue("env-type", "self_hosted")
	e.wait("no cloud fields", `document.getElementById('env-cloud').hidden === true`)
	e.click("env-form-submit")
	e.wait("the environment's page", `location.hash.startsWith('#/environments/env_') && !!document.getElementById('keys')`)
	envID := strings.TrimPrefix(e.eval(`location.hash`), "#/environments/")
	var got apitype.Environment
	e.api("GET", "/v1/environments/"+envID, nil, &got)
	if got.Config.Type != apitype.EnvironmentSelfHosted {
		t.Fatalf("the form made a %s environment", got.Config.Type)
	}

	e.wait("no keys", `document.getElementById('env-keys').textContent.includes('No keys')`)
	e.setValue("key-name", "worker-1")
	e.click("key-form-submit")
	e.wait("the key, once", `(document.getElementById('new-key-value')?.value || '').startsWith(`+js(apitype.EnvironmentKeyPrefix)+`)`+
		` && document.querySelectorAll('#env-keys tbody tr').length === 1`)
	secret := e.eval(`document.getElementById('new-key-value').value`)
	if hint := e.eval(`document.querySelector('#env-keys tbody tr td:nth-child(2)').textContent`); hint != "…"+secret[len(secret)-4:] {
		t.Errorf("the list shows %q, want the key's last four characters", hint)
	}
	e.shot("environment-key")
	// The key works: a worker's request with it is accepted.
	req, _ := http.NewRequest("GET", e.srv.URL()+"/v1/environments/"+envID+"/work/stats", nil)
	req.Header.Set("x-api-key", secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the key shown is refused: %s", resp.Status)
	}
	// Shown once: the page again does not have it.
	e.open("/sessions")
	e.wait("sessions", `!!document.querySelector('table.sessions')`)
	e.open("/environments/" + envID)
	e.wait("the keys again", `document.querySelectorAll('#env-keys tbody tr').length === 1`)
	if e.eval(`String(`+secretIn(secret)+`)`) != "false" {
		t.Error("the environment's page shows the key again")
	}

	// Revoke: the first click arms, the second revokes.
	e.do("revoke once", chromedp.Click(chromedp.CSS(`#env-keys [data-revoke]`)))
	e.wait("armed", `document.querySelector('#env-keys [data-revoke]').textContent.includes('again')`)
	var keys struct{ Data []apitype.EnvironmentKey }
	e.api("GET", "/v1/environments/"+envID+"/keys", nil, &keys)
	if len(keys.Data) != 1 || keys.Data[0].RevokedAt != nil {
		t.Fatalf("one click revoked the key: %+v", keys.Data)
	}
	e.do("revoke twice", chromedp.Click(chromedp.CSS(`#env-keys [data-revoke]`)))
	e.wait("revoked", `document.querySelector('#env-keys tbody tr').textContent.includes('revoked') && !document.querySelector('#env-keys [data-revoke]')`)
	e.api("GET", "/v1/environments/"+envID+"/keys", nil, &keys)
	if len(keys.Data) != 1 || keys.Data[0].RevokedAt == nil {
		t.Fatalf("the key is not revoked: %+v", keys.Data)
	}
}

// multipartRefused sends the upload the API must refuse (a multipart form of one file part and the fields) to
// path and returns its error message.
func (e *env) multipartRefused(path, part, filename, content string, fields ...string) string {
	e.t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		_ = mw.WriteField(fields[i], fields[i+1])
	}
	w, _ := mw.CreateFormFile(part, filename)
	_, _ = io.WriteString(w, content)
	_ = mw.Close()
	req, _ := http.NewRequest("POST", e.srv.URL()+path, &b)
	req.Header.Set("x-api-key", key)
	req.Header.Set("content-type", mw.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var env struct {
		Error struct{ Message string } `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&env)
	if resp.StatusCode/100 == 2 || env.Error.Message == "" {
		e.t.Fatalf("upload %s to %s %v: %s, message %q: the API should have refused it", filename, path, fields, resp.Status, env.Error.Message)
	}
	return env.Error.Message
}

// TestConsoleManageFiles: a file is uploaded through the console (after a refusal shown on the page), listed,
// downloaded with its bytes, and deleted; a session's outputs are a filtered list reached from the session.
func TestConsoleManageFiles(t *testing.T) {
	blobs, err := localfs.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { blobs.Close() })
	var svc *files.Service
	e := newEnv(t, false, func(c *server.Config) {
		if svc, err = files.New(files.Config{Store: c.Store, Blobs: blobs}); err != nil {
			t.Fatal(err)
		}
		c.API.Files = svc
	})
	e.login()
	const content = "hello, files\n"
	choose := `(() => { const dt = new DataTransfer(); dt.items.add(new File([` + js(content) + `], 'notes.txt', {type: 'text/plain'}));
		const i = document.getElementById('file-input'); i.files = dt.files; return String(i.files.length); })()`

	e.open("/files")
	e.wait("files page", `!!document.getElementById('upload-form') && !!document.querySelector('.empty')`)
	e.click("upload-form-submit")
	e.wait("no file chosen", formError("upload-form", "Choose a file"))
	want := e.multipartRefused("/v1/files", "file", "notes.txt", content, "expires_in_seconds", "5")
	if e.eval(choose) != "1" {
		t.Fatal("could not choose a file")
	}
	e.setValue("file-expires", "5")
	e.click("upload-form-submit")
	e.wait("the API's refusal on the page", formError("upload-form", want))
	if e.eval(choose) != "1" {
		t.Fatal("could not choose a file")
	}
	e.setValue("file-expires", "")
	e.click("upload-form-submit")
	e.wait("the file in the list", `[...document.querySelectorAll('[data-row]')].some(r => r.textContent === 'notes.txt') && document.getElementById('file-input').value === ''`)
	var list struct{ Data []apitype.File }
	e.api("GET", "/v1/files", nil, &list)
	if len(list.Data) != 1 || list.Data[0].Filename != "notes.txt" || list.Data[0].SizeBytes != int64(len(content)) {
		t.Fatalf("files after the upload: %+v", list.Data)
	}
	fileID := list.Data[0].ID

	// The download: the page fetches the content with the key and hands the browser a blob of its bytes.
	e.eval(`window.__blobs = []; (o => { URL.createObjectURL = b => { window.__blobs.push(b); b.text().then(t => { window.__text = t; }); return o.call(URL, b); }; })(URL.createObjectURL), ''`)
	e.do("download", chromedp.Click(chromedp.CSS(`[data-download="`+fileID+`"]`)))
	e.wait("the downloaded bytes", `window.__text === `+js(content))
	e.shot("step-files")

	// A session's outputs, from its page.
	agent := e.create("/v1/agents", map[string]any{"name": "writer", "model": "claude-sonnet-4-5"})
	envID := e.create("/v1/environments", map[string]any{"name": "out", "config": map[string]any{"type": "cloud"}})
	sess := e.create("/v1/sessions", map[string]any{"agent": agent, "environment_id": envID})
	if _, err := svc.CreateOutput(context.Background(), sess, "report.md", strings.NewReader("# Report\n")); err != nil {
		t.Fatal(err)
	}
	e.open("/sessions/" + sess)
	e.wait("session page", `!!document.getElementById('session-outputs')`)
	e.click("session-outputs")
	e.wait("the session's outputs", `document.querySelector('h1')?.textContent === 'Session outputs'`+
		` && [...document.querySelectorAll('[data-row]')].map(r => r.textContent).join() === 'report.md'`)
	e.shot("step-session-outputs")

	// Delete: the first click arms, the second deletes.
	e.open("/files")
	e.wait("files", `document.querySelectorAll('[data-delete]').length === 2`)
	e.do("delete once", chromedp.Click(chromedp.CSS(`[data-delete="`+fileID+`"]`)))
	e.wait("armed", `document.querySelector('[data-delete="`+fileID+`"]').textContent.includes('again')`)
	e.do("delete twice", chromedp.Click(chromedp.CSS(`[data-delete="`+fileID+`"]`)))
	e.wait("deleted", `document.querySelectorAll('[data-delete]').length === 1 && !document.querySelector('[data-delete="`+fileID+`"]')`)
	e.api("GET", "/v1/files", nil, &list)
	if len(list.Data) != 1 || list.Data[0].Filename != "report.md" {
		t.Fatalf("files after the delete: %+v", list.Data)
	}
}

// skillZip is a zip of a skill folder: name/SKILL.md with the given front matter and body.
func skillZip(t *testing.T, name, skillMD string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	w, err := zw.Create(name + "/SKILL.md")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(w, skillMD)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// chooseZip is an expression that puts a zip of bytes b into the file input id, as a user choosing it does.
func chooseZip(id, filename string, b []byte) string {
	return `(() => { const bin = atob(` + js(base64.StdEncoding.EncodeToString(b)) + `); const u = new Uint8Array(bin.length);
		for (let i = 0; i < bin.length; i++) u[i] = bin.charCodeAt(i);
		const dt = new DataTransfer(); dt.items.add(new File([u], ` + js(filename) + `, {type: 'application/zip'}));
		const i = document.getElementById(` + js(id) + `); i.files = dt.files; return String(i.files.length); })()`
}

// TestConsoleManageSkills: a skill is uploaded through the console (after a refusal shown on the page), gets a
// second version (after a refusal of a version that renames it), whose zip downloads, and loses its first.
func TestConsoleManageSkills(t *testing.T) {
	blobs, err := localfs.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { blobs.Close() })
	e := newEnv(t, false, func(c *server.Config) {
		if c.API.Files, err = files.New(files.Config{Store: c.Store, Blobs: blobs}); err != nil {
			t.Fatal(err)
		}
	})
	e.login()
	bad := skillZip(t, "greet", "# no front matter\n")
	v1 := skillZip(t, "greet", "---\nname: greet\ndescription: Says hello.\n---\nSay hello.\n")
	v2 := skillZip(t, "greet", "---\nname: greet\ndescription: Says hello, politely.\n---\nSay hello politely.\n")
	other := skillZip(t, "other", "---\nname: other\ndescription: Another skill.\n---\n")

	e.open("/skills")
	e.wait("skills page", `!!document.getElementById('skill-form') && !!document.querySelector('.empty')`)
	e.click("skill-form-submit")
	e.wait("nothing chosen", formError("skill-form", "Choose the skill"))
	want := e.multipartRefused("/v1/skills", "files[]", "greet.zip", string(bad))
	if e.eval(chooseZip("skill-files", "greet.zip", bad)) != "1" {
		t.Fatal("could not choose the zip")
	}
	e.click("skill-form-submit")
	e.wait("the API's refusal on the page", formError("skill-form", want))
	e.eval(chooseZip("skill-files", "greet.zip", v1))
	e.setValue("skill-name", "Greeter")
	e.click("skill-form-submit")
	e.wait("the skill's page", `location.hash.startsWith('#/skills/skill_') && document.querySelector('h1')?.textContent === 'Greeter'`+
		` && document.querySelectorAll('#skill-versions tbody tr').length === 1`)
	skillID := strings.TrimPrefix(e.eval(`location.hash`), "#/skills/")

	// A version that renames the skill is refused, with the API's message.
	var sk apitype.Skill
	e.api("GET", "/v1/skills/"+skillID, nil, &sk)
	first := sk.LatestVersionID
	want = e.multipartRefused("/v1/skills/"+skillID+"/versions", "files[]", "other.zip", string(other))
	e.eval(chooseZip("version-files", "other.zip", other))
	e.click("version-form-submit")
	e.wait("the version's refusal on the page", formError("version-form", want))
	e.eval(chooseZip("version-files", "greet.zip", v2))
	e.click("version-form-submit")
	e.wait("two versions", `document.querySelectorAll('#skill-versions tbody tr').length === 2`)
	e.api("GET", "/v1/skills/"+skillID, nil, &sk)
	if sk.LatestVersionID == first {
		t.Fatalf("the new version is not the latest: %+v", sk)
	}
	if got := e.eval(`document.querySelector('#skill-versions .badge.current').closest('tr').dataset.version`); got != sk.LatestVersionID {
		t.Errorf("the version marked latest is %q, want %q", got, sk.LatestVersionID)
	}
	if got := e.eval(`document.getElementById('skill-latest').textContent`); got != sk.LatestVersionID {
		t.Errorf("the page's latest version is %q, want %q", got, sk.LatestVersionID)
	}
	if got := e.eval(`document.querySelector('#skill-versions tbody tr').textContent`); !strings.Contains(got, "Says hello, politely.") {
		t.Errorf("the latest version's row: %q", got)
	}
	e.shot("skill")

	// The latest version's zip downloads.
	e.eval(`(o => { URL.createObjectURL = b => { b.arrayBuffer().then(a => { const u = new Uint8Array(a); window.__head = String.fromCharCode(u[0], u[1]); window.__size = u.length; }); return o.call(URL, b); }; })(URL.createObjectURL), ''`)
	e.do("download", chromedp.Click(chromedp.CSS(`[data-download="`+sk.LatestVersionID+`"]`)))
	e.wait("a zip", `window.__head === 'PK' && window.__size > 0`)

	// The first version deleted, in two clicks.
	e.do("delete once", chromedp.Click(chromedp.CSS(`[data-delete-version="`+first+`"]`)))
	e.do("delete twice", chromedp.Click(chromedp.CSS(`[data-delete-version="`+first+`"]`)))
	e.wait("one version", `document.querySelectorAll('#skill-versions tbody tr').length === 1 && !document.querySelector('[data-version="`+first+`"]')`)
	var vs struct{ Data []apitype.SkillVersion }
	e.api("GET", "/v1/skills/"+skillID+"/versions", nil, &vs)
	if len(vs.Data) != 1 || vs.Data[0].ID != sk.LatestVersionID {
		t.Fatalf("versions after the delete: %+v", vs.Data)
	}
	e.open("/skills")
	e.wait("the skill in the list", `[...document.querySelectorAll('[data-row]')].some(r => r.textContent === 'Greeter')`)
}
