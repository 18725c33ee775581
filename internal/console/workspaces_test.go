package console_test

import (
	"testing"

	"github.com/corralhq/corral/internal/apitype"
)

// TestConsoleWorkspaces: the workspaces are listed (the default one too) and opened; "Use this workspace" makes
// every page act in it (its agents listed, the default workspace's not); a key created on its page is shown
// once and listed, turned off, and archived in two clicks; the workspace archived in two clicks shows archived
// in the list; one created through the list's form opens its page.
func TestConsoleWorkspaces(t *testing.T) {
	e := newEnv(t, false)
	var ws apitype.Workspace
	e.api("POST", "/v1/organizations/workspaces", map[string]any{"name": "team a"}, &ws)
	e.api("POST", "/v1/agents", map[string]any{"name": "a's agent", "model": "m"}, nil, "anthropic-workspace-id", ws.ID)
	e.create("/v1/agents", map[string]any{"name": "default's agent", "model": "m"})
	e.login()
	e.open("/workspaces")
	e.wait("listed", `(() => { const names = [...document.querySelectorAll('[data-row]')].map(a => a.textContent);
		return names.includes('team a') && names.includes('Default Workspace') && !!document.querySelector('[data-current]'); })()`)
	e.shot("workspaces")

	e.clickCSS(`a[href="#/workspaces/` + ws.ID + `"]`)
	e.wait("its page", `document.getElementById('workspace-id')?.textContent === `+js(ws.ID)+` && !!document.querySelector('#keys .empty')`)
	e.click("use-workspace")
	e.wait("in use", `!!document.querySelector('.page-head [data-current]')`)
	e.open("/agents")
	e.wait("its agents", `(() => { const names = [...document.querySelectorAll('[data-row]')].map(a => a.textContent);
		return names.length === 1 && names[0] === "a's agent"; })()`)
	e.open("/workspaces/" + ws.ID)
	e.wait("its page again", `document.getElementById('workspace-id')?.textContent === `+js(ws.ID))

	// A key: created and shown once, listed; turned off; archived in two clicks.
	e.setValue("key-name", "ci")
	e.click("key-form-submit")
	e.wait("the new key", `(document.getElementById('new-key-value')?.value || '').startsWith('corral-') && !!document.querySelector('#keys tr[data-key]')`)
	e.shot("workspace")
	var keys struct {
		Data []struct{ ID, Name, Status string }
	}
	e.api("GET", "/v1/organizations/api_keys?workspace_id="+ws.ID, nil, &keys)
	if len(keys.Data) != 1 || keys.Data[0].Name != "ci" || keys.Data[0].Status != "active" {
		t.Fatalf("the workspace's keys: %+v", keys.Data)
	}
	k := keys.Data[0].ID
	e.clickCSS(`[data-toggle="` + k + `"]`)
	e.wait("turned off", `document.querySelector('#keys tr[data-key]').cells[2].textContent === 'inactive'`)
	e.clickCSS(`[data-archive-key="` + k + `"]`)
	e.wait("archive armed", `document.querySelector('[data-archive-key]').textContent.startsWith('Click again')`)
	e.clickCSS(`[data-archive-key="` + k + `"]`)
	e.wait("archived key", `document.querySelector('#keys tr[data-key]').cells[2].textContent === 'archived'`)

	// The workspace archived: listed as archived.
	e.click("archive-workspace")
	e.wait("workspace archive armed", `document.getElementById('archive-workspace').textContent.startsWith('Click again')`)
	e.click("archive-workspace")
	e.wait("archived in the list", `(() => { const a = [...document.querySelectorAll('[data-row]')].find(a => a.textContent === 'team a');
		return location.hash.startsWith('#/workspaces') && a && a.closest('tr').cells[2].textContent !== '—'; })()`)
	var got apitype.Workspace
	e.api("GET", "/v1/organizations/workspaces/"+ws.ID, nil, &got)
	if got.ArchivedAt == nil {
		t.Fatal("the workspace is not archived")
	}

	// One created through the form.
	e.clickCSS(`#new-workspace summary`)
	e.setValue("workspace-name", "team b")
	e.click("workspace-form-submit")
	e.wait("the new workspace's page", `document.querySelector('h1')?.textContent === 'team b' && location.hash.startsWith('#/workspaces/wrkspc_')`)
}
