package console_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// clickCSS clicks the first element sel matches.
func (e *env) clickCSS(sel string) {
	e.t.Helper()
	e.do("click "+sel, chromedp.Click(chromedp.CSS(sel)))
}

// rowsOf is an expression: the names of the memories table's rows, joined by spaces.
const memoryRows = `[...document.querySelectorAll('#memories tbody [data-row]')].map(a => a.textContent).join(' ')`

// TestConsoleMemory: a memory store is created through the console (after the API's refusal of a nameless one),
// memories are made at nested paths and the directories browsed down and back up; a memory is opened and
// edited, and its new version listed; an edit made from content that changed meanwhile shows the API's 409; an
// old version is redacted; a version written by a session links to the session, whose page links back to the
// store at its mount path; the store is archived.
func TestConsoleMemory(t *testing.T) {
	e := newEnv(t, false)
	e.login()

	e.do("g m", chromedp.KeyEvent("g"), chromedp.KeyEvent("m"))
	e.wait("memory stores page", `location.hash === '#/memory' && document.querySelector('[data-nav="memory"]')?.getAttribute('aria-current') === 'page' && `+`!!document.getElementById('store-form') && !!document.querySelector('.empty')`)
	want := e.refused("POST", "/v1/memory_stores", map[string]any{"name": ""})
	e.click("store-form-submit")
	e.wait("the API's refusal on the page", formError("store-form", want))
	e.setValue("store-name", "User Preferences!")
	e.setValue("store-description", "What the user likes")
	e.click("store-form-submit")
	e.wait("the store's page", `location.hash.startsWith('#/memory/memstore_') && document.querySelector('h1')?.textContent === 'User Preferences!'`)
	storeID := strings.TrimPrefix(e.eval(`location.hash`), "#/memory/")
	if got := e.eval(`document.getElementById('store-mount').textContent`); got != apitype.MemoryMount+"/"+apitype.MemorySlug("User Preferences!", storeID) ||
		got != "/mnt/memory/user-preferences" {
		t.Errorf("mount path shown %q", got)
	}
	e.wait("no memories yet", `!!document.querySelector('#memories .empty')`)

	// Memories at nested paths: two through the form, one through the API.
	e.setValue("new-memory-path", "/notes/todo.md")
	e.setValue("new-memory-content", "buy milk")
	e.click("memory-form-submit")
	e.wait("the new memory opened", `document.getElementById('memory-text')?.textContent === 'buy milk'`)
	todoID := e.eval(`new URLSearchParams(location.hash.split('?')[1]).get('memory')`)
	e.open("/memory/" + storeID)
	e.wait("the store's page", `!!document.getElementById('new-memory-path')`)
	e.setValue("new-memory-path", "/notes/deep/plan.md")
	e.setValue("new-memory-content", "step one\nstep two\n")
	e.click("memory-form-submit")
	e.wait("the second memory opened", `(document.getElementById('memory-text')?.textContent || '').startsWith('step one')`)
	planID := e.eval(`new URLSearchParams(location.hash.split('?')[1]).get('memory')`)
	e.create("/v1/memory_stores/"+storeID+"/memories", map[string]any{"path": "/top.md", "content": "top"})

	// Browsing: the root holds notes/ and top.md; notes/ holds deep/ and todo.md; deep/ holds plan.md.
	e.open("/memory/" + storeID)
	e.wait("the root directory", memoryRows+` === 'notes/ top.md'`)
	e.clickCSS(`[data-prefix="/notes/"] a`)
	e.wait("notes/", memoryRows+` === 'deep/ todo.md' && location.hash.includes('prefix=%2Fnotes%2F')`)
	e.clickCSS(`[data-prefix="/notes/deep/"] a`)
	e.wait("notes/deep/", memoryRows+` === 'plan.md'`)
	if got := e.eval(`document.getElementById('mem-crumbs').textContent`); got != "/notes/deep/" {
		t.Errorf("breadcrumbs %q", got)
	}
	e.shot("step-memory-browse")
	e.clickCSS(`#mem-crumbs a:nth-of-type(2)`) // "/", then "notes"
	e.wait("notes/ again", memoryRows+` === 'deep/ todo.md'`)

	// Open todo.md: its content, size and short sha; then edit it.
	e.clickCSS(`[data-memory="` + todoID + `"] a`)
	e.wait("todo.md opened", `document.getElementById('memory-text')?.textContent === 'buy milk' && document.getElementById('memory-content')?.value === 'buy milk'`)
	var m apitype.Memory
	e.api("GET", "/v1/memory_stores/"+storeID+"/memories/"+todoID, nil, &m)
	if got := e.eval(`document.querySelector('[data-memory="` + todoID + `"]').textContent`); !strings.Contains(got, "8 B") || !strings.Contains(got, m.ContentSHA256[:12]) {
		t.Errorf("todo.md's row %q (sha %s)", got, m.ContentSHA256)
	}
	createdVersion := m.MemoryVersionID
	e.setValue("memory-content", "buy milk and eggs")
	e.click("memory-edit-submit")
	e.wait("saved", `document.getElementById('memory-text')?.textContent === 'buy milk and eggs'`)
	e.api("GET", "/v1/memory_stores/"+storeID+"/memories/"+todoID, nil, &m)
	if m.Content == nil || *m.Content != "buy milk and eggs" || m.MemoryVersionID == createdVersion {
		t.Fatalf("after the edit: %+v", m)
	}
	e.wait("the new version listed as current", `(() => { const r = document.querySelector('#versions [data-version="`+m.MemoryVersionID+`"]');
		return !!r && r.textContent.includes('modified') && !!r.querySelector('.badge.current') && !r.querySelector('[data-redact]'); })()`)
	e.wait("the old version redactable", `!!document.querySelector('#versions [data-version="`+createdVersion+`"] [data-redact]')`)
	if got := e.eval(`document.querySelector('#versions [data-version="` + m.MemoryVersionID + `"]').textContent`); !strings.Contains(got, "key static") {
		t.Errorf("the version's author: %q", got)
	}

	// A change made between showing and saving: the page shows the API's 409, and keeps what was typed.
	shown := m.ContentSHA256
	e.api("POST", "/v1/memory_stores/"+storeID+"/memories/"+todoID, map[string]any{"content": "oat milk"}, nil)
	want = e.refused("POST", "/v1/memory_stores/"+storeID+"/memories/"+todoID,
		map[string]any{"content": "x", "precondition": map[string]any{"type": "content_sha256", "content_sha256": shown}})
	e.setValue("memory-content", "buy milk, eggs and bread")
	e.click("memory-edit-submit")
	e.wait("the conflict on the page", formError("memory-edit", want)+` && document.getElementById('memory-edit-error').textContent.includes('409')`)
	if got := e.eval(`document.getElementById('memory-content').value`); got != "buy milk, eggs and bread" {
		t.Errorf("the field after the conflict: %q", got)
	}
	e.api("GET", "/v1/memory_stores/"+storeID+"/memories/"+todoID, nil, &m)
	if *m.Content != "oat milk" {
		t.Fatalf("the conflicting save wrote: %q", *m.Content)
	}
	// docs/console: the directory, a memory's 409, the versions (without the toast of the save before).
	e.eval(`document.getElementById('toast').className = 'toast', ''`)
	e.shot("memory-store")

	// The old version redacted, in two clicks.
	e.clickCSS(`#versions [data-version="` + createdVersion + `"] [data-redact]`)
	e.clickCSS(`#versions [data-version="` + createdVersion + `"] [data-redact]`)
	e.wait("redacted", `!!document.querySelector('#versions [data-version="`+createdVersion+`"] .badge.redacted')`)
	var v apitype.MemoryVersion
	e.api("GET", "/v1/memory_stores/"+storeID+"/memory_versions/"+createdVersion, nil, &v)
	if v.RedactedAt == nil || v.Path != nil {
		t.Fatalf("the version after the redaction: %+v", v)
	}

	// The memory renamed (its id kept); then its versions alone, and of those the modifications.
	e.open("/memory/" + storeID + "?memory=" + todoID)
	e.wait("todo.md as it now is", `document.getElementById('memory-text')?.textContent === 'oat milk'`)
	e.setValue("memory-path", "/archive/todo.md")
	e.click("memory-edit-submit")
	e.wait("renamed", `document.querySelector('#memory-view h2')?.textContent === '/archive/todo.md'`)
	e.api("GET", "/v1/memory_stores/"+storeID+"/memories/"+todoID, nil, &m)
	if m.Path != "/archive/todo.md" || *m.Content != "oat milk" {
		t.Fatalf("after the rename: %+v", m)
	}
	e.click("memory-versions-link")
	e.wait("its versions", `document.getElementById('ver-memory')?.value === `+js(todoID)+` && (() => { const rs = [...document.querySelectorAll('#versions tbody tr')];
		return rs.length === 4 && rs.every(r => r.querySelector('.badge.redacted') || r.querySelector('a').getAttribute('href').includes(`+js(todoID)+`)); })()`)
	e.setValue("ver-op", "modified")
	e.wait("its modifications", `(() => { const rs = [...document.querySelectorAll('#versions tbody tr')];
		return rs.length === 3 && rs.every(r => r.querySelector('.op-modified')); })()`)

	// A memory deleted, in two clicks: its directory is empty, and its deletion is a version.
	e.open("/memory/" + storeID + "?prefix=/notes/deep/&memory=" + planID)
	e.wait("plan.md opened", `(document.getElementById('memory-text')?.textContent || '').startsWith('step one')`)
	e.click("delete-memory")
	e.click("delete-memory")
	e.wait("plan.md gone", `!document.getElementById('memory-view') && !!document.querySelector('#memories .empty') && location.hash.includes('prefix=')`)
	e.wait("its deletion listed", `[...document.querySelectorAll('#versions tbody tr')].some(r => r.querySelector('.op-deleted') && r.textContent.includes('/notes/deep/plan.md'))`)

	// A session with the store: its page links to the store at its mount path; a version its mount writes
	// links to the session.
	agent := e.create("/v1/agents", map[string]any{"name": "rememberer", "model": "claude-sonnet-4-5"})
	envID := e.create("/v1/environments", map[string]any{"name": "memory", "config": map[string]any{"type": "cloud"}})
	sess := e.create("/v1/sessions", map[string]any{"agent": agent, "environment_id": envID, "title": "Remembers",
		"resources": []any{map[string]any{"type": "memory_store", "memory_store_id": storeID, "access": "read_only"}}})
	e.create("/v1/sessions", map[string]any{"agent": agent, "environment_id": envID, "title": "Has no memory"})
	path, content := "/notes/from-session.md", "learnt"
	if _, err := e.st.MemoryWrite(context.Background(), &store.MemoryWriteParams{StoreID: storeID, Op: store.MemoryOpPut,
		Path: &path, Content: &content, Actor: apitype.Actor{Type: apitype.ActorSession, SessionID: sess}, At: time.Now().UTC(),
		NewMemoryID: apitype.NewID(apitype.PrefixMemory), NewVersionID: apitype.NewID(apitype.PrefixMemVersion)}); err != nil {
		t.Fatal(err)
	}
	e.open("/sessions/" + sess)
	e.wait("the session's memory store", `(() => { const a = document.querySelector('#session-memory a');
		return !!a && a.getAttribute('href') === '#/memory/`+storeID+`' && a.textContent === '/mnt/memory/user-preferences'
			&& a.parentElement.textContent.includes('read_only'); })()`)
	e.clickCSS(`#session-memory a`)
	e.wait("the store from the session", `document.querySelector('h1')?.textContent === 'User Preferences!'`)
	e.click("store-sessions")
	e.wait("the sessions with the store", `location.hash === '#/sessions?memory=`+storeID+`' && !!document.getElementById('f-memory')`+
		` && [...document.querySelectorAll('table.sessions [data-row]')].map(a => a.dataset.id).join() === `+js(sess))
	e.clickCSS(`#f-memory a`)
	e.wait("the store again", `document.querySelector('h1')?.textContent === 'User Preferences!'`)
	e.wait("the session's version", `[...document.querySelectorAll('#versions tbody tr')].some(r =>
		r.querySelector('.op-created') && r.querySelector('a[href="#/sessions/`+sess+`"]'))`)
	e.shot("step-memory-session-version")

	// A directory of more memories than a page: Next and Previous over the API's cursors, for the memories and
	// for the versions.
	for i := range 55 {
		e.create("/v1/memory_stores/"+storeID+"/memories", map[string]any{"path": fmt.Sprintf("/many/%02d.md", i), "content": "x"})
	}
	e.open("/memory/" + storeID + "?prefix=/many/")
	e.wait("the first page", `document.querySelectorAll('#memories tbody tr').length === 50 && !document.getElementById('mem-next').disabled`+
		` && document.getElementById('mem-prev').disabled && !document.getElementById('ver-next').disabled`)
	e.click("mem-next")
	e.wait("the second page", memoryRows+` === '50.md 51.md 52.md 53.md 54.md' && document.getElementById('mem-next').disabled`)
	e.click("mem-prev")
	e.wait("the first page again", `(`+memoryRows+`).startsWith('00.md 01.md') && document.querySelectorAll('#memories tbody tr').length === 50`)
	first := e.eval(`document.querySelector('#versions tbody tr').dataset.version`)
	e.click("ver-next")
	e.wait("the versions' second page", `document.querySelectorAll('#versions tbody tr').length === 20 && !document.querySelector('#versions [data-version="`+first+`"]')`)

	// The store's name and description edited, then the store archived.
	e.setValue("store-edit-description", "Likes and dislikes")
	e.click("store-edit-submit")
	e.wait("the new description", `document.querySelector('.lead')?.textContent === 'Likes and dislikes'`)
	e.click("archive-store")
	e.click("archive-store")
	e.wait("archived", `!!document.getElementById('store-archived') && !document.getElementById('archive-store') && !document.getElementById('memory-form')`)
	var st apitype.MemoryStore
	e.api("GET", "/v1/memory_stores/"+storeID, nil, &st)
	if st.ArchivedAt == nil || st.Description != "Likes and dislikes" {
		t.Fatalf("the store: %+v", st)
	}
	// Archived stores are listed only with the Archived filter.
	e.open("/memory")
	e.wait("no store listed", `!!document.querySelector('.empty')`)
	e.click("f-archived")
	e.wait("the archived store listed", `[...document.querySelectorAll('[data-row]')].some(r => r.textContent === 'User Preferences!')`)
	e.shot("step-memory-stores")

	// A store deleted, in two clicks, with its memories.
	scratch := e.create("/v1/memory_stores", map[string]any{"name": "Scratch"})
	e.create("/v1/memory_stores/"+scratch+"/memories", map[string]any{"path": "/a.md", "content": "a"})
	e.open("/memory/" + scratch)
	e.wait("the scratch store", memoryRows+` === 'a.md'`)
	e.click("delete-store")
	e.click("delete-store")
	e.wait("back to the list", `location.hash.startsWith('#/memory') && !location.hash.startsWith('#/memory/') && !!document.getElementById('store-form')`)
	if msg := e.refused("GET", "/v1/memory_stores/"+scratch, nil); !strings.Contains(msg, scratch) {
		t.Errorf("the deleted store: %q", msg)
	}
}
