package console_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/server"
	"github.com/corralhq/corral/internal/vault"
	"github.com/corralhq/corral/internal/webhook"
)

// delivery is an entry of GET /v1/organizations/webhooks/{id}/deliveries.
type delivery struct {
	Event      apitype.WebhookEvent `json:"event"`
	State      string               `json:"state"`
	Attempts   int                  `json:"attempts"`
	LastStatus *int                 `json:"last_status"`
}

// deliveryOf polls an endpoint's deliveries until the one of the event about object has been attempted.
func (e *env) deliveryOf(endpoint, object string) delivery {
	e.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var l struct{ Data []delivery }
		e.api("GET", "/v1/organizations/webhooks/"+endpoint+"/deliveries", nil, &l)
		if i := slices.IndexFunc(l.Data, func(d delivery) bool { return d.Event.Data.ID == object && d.Attempts > 0 }); i >= 0 {
			return l.Data[i]
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("no delivery about %s to %s was attempted: %+v", object, endpoint, l.Data)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestConsoleWebhooks: an endpoint is created through the console's form (after the API's refusal of a form
// with no URL), its signing secret shown once and not after a reload; it is disabled and enabled, its events
// edited; its deliveries are listed as the server's dispatcher made them (one delivered, about an agent, one
// about a session, linked to its page), and those of an endpoint that answers 503 pending with their next
// attempt; its secret is regenerated in two clicks and shown once; it is deleted in two clicks. The list pages
// with the Page shape's cursors.
func TestConsoleWebhooks(t *testing.T) {
	seal, err := vault.New(vault.NewKey())
	if err != nil {
		t.Fatal(err)
	}
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(ok.Close)
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	t.Cleanup(down.Close)
	e := newEnv(t, false, func(c *server.Config) {
		c.API.Sealer = seal
		// The receivers are on loopback: allowed as an operator allows internal hosts.
		c.Fleet = &server.FleetConfig{Sealer: seal, Webhooks: webhook.SenderConfig{AllowInternal: []string{ok.Listener.Addr().String(), down.Listener.Addr().String()}}}
	})
	const P = "/v1/organizations/webhooks"
	e.login()
	e.do("g w", chromedp.KeyEvent("g"), chromedp.KeyEvent("w"))
	// The page's own form too: the hash changes before the page renders, and the page it replaces has an empty
	// list of its own.
	e.wait("the empty list", `location.hash.startsWith('#/webhooks') && !!document.getElementById('webhook-form') &&
		!!document.querySelector('table.list .empty')`)
	if got := e.eval(`[...document.querySelectorAll('#webhook-form input[type=checkbox]')].map(c => c.value).join(' ')`); got != strings.Join(apitype.WebhookEventTypes, " ") {
		t.Fatalf("the form's event types %q, the API's %q", got, apitype.WebhookEventTypes)
	}

	// The form: refused without a URL (the API's message), then created.
	e.clickCSS("#new-webhook summary")
	bad := e.refused("POST", P, map[string]any{"url": "", "name": "", "description": "", "enabled_events": []string{"agent.created"}})
	e.eval(`document.querySelector('#webhook-form input[value="agent.created"]').click(), ''`)
	e.click("webhook-form-submit")
	e.wait("the API's refusal", formError("webhook-form", bad))
	url := ok.URL + "/hooks"
	e.setValue("webhook-form-url", url)
	e.setValue("webhook-form-name", "ops")
	e.setValue("webhook-form-description", "The ops channel")
	e.click("webhook-form-submit")
	e.wait("the secret, once", `(document.getElementById('new-secret-value')?.value || '').startsWith('whsec_') && !!document.getElementById('copy-secret')`)
	secret := e.eval(`document.getElementById('new-secret-value').value`)
	e.wait("listed", `(() => { const a = document.querySelector('[data-row]'); if (!a || a.textContent !== 'ops') return false;
		const c = a.closest('tr').cells; return c[1].textContent === `+js(url)+` && c[2].textContent === 'enabled' && c[3].textContent === '1'; })()`)
	e.shot("step-webhook-created")
	var l struct{ Data []apitype.WebhookEndpoint }
	e.api("GET", P, nil, &l)
	if len(l.Data) != 1 || l.Data[0].URL != url || l.Data[0].Name != "ops" || l.Data[0].Description != "The ops channel" ||
		!slices.Equal(l.Data[0].EnabledEvents, []string{"agent.created"}) || l.Data[0].SigningSecret != "" {
		t.Fatalf("the endpoints: %+v", l.Data)
	}
	id := l.Data[0].ID
	e.do("reload", chromedp.Reload())
	e.wait("the list again", `!!document.querySelector('[data-row]')`)
	if s := e.eval(`document.body.textContent.includes(` + js(secret) + `) || !!document.getElementById('new-secret-value') ? 'shown' : ''`); s != "" {
		t.Fatal("the signing secret is shown again after a reload")
	}

	// Disable and enable.
	e.clickCSS(`a[href="#/webhooks/` + id + `"]`)
	e.wait("its page", `!!document.querySelector('#webhook-state .status-enabled') && document.getElementById('toggle-webhook').textContent === 'Disable'`+
		` && !!document.querySelector('#deliveries .empty')`)
	e.click("toggle-webhook")
	e.wait("disabled", `!!document.querySelector('#webhook-state .status-disabled') && document.getElementById('toggle-webhook').textContent === 'Enable'`)
	var ep apitype.WebhookEndpoint
	e.api("GET", P+"/"+id, nil, &ep)
	if ep.State != apitype.WebhookDisabled {
		t.Fatalf("after Disable: %+v", ep)
	}
	e.click("toggle-webhook")
	e.wait("enabled", `!!document.querySelector('#webhook-state .status-enabled') && document.getElementById('toggle-webhook').textContent === 'Disable'`)

	// Its events: session.created too.
	e.eval(`document.querySelector('#webhook-edit input[value="session.created"]').click(), ''`)
	e.click("webhook-edit-submit")
	e.wait("saved", `[...document.querySelectorAll('.facts dd')].some(d => d.textContent === '2 enabled')`)
	e.api("GET", P+"/"+id, nil, &ep)
	if !slices.Equal(slices.Sorted(slices.Values(ep.EnabledEvents)), []string{"agent.created", "session.created"}) || ep.URL != url || ep.Name != "ops" {
		t.Fatalf("after the edit: %+v", ep)
	}

	// Deliveries: an agent and a session created, delivered; the same to an endpoint that answers 503, pending.
	downID := e.create(P, map[string]any{"url": down.URL, "name": "down", "enabled_events": []string{"agent.created"}})
	agent := e.create("/v1/agents", map[string]any{"name": "a", "model": "claude-sonnet-4-5"})
	envID := e.create("/v1/environments", map[string]any{"name": "box", "config": map[string]any{"type": "cloud"}})
	sess := e.create("/v1/sessions", map[string]any{"agent": agent, "environment_id": envID})
	for _, o := range []string{agent, sess} {
		if d := e.deliveryOf(id, o); d.State != "delivered" || d.Attempts != 1 || d.LastStatus == nil || *d.LastStatus != http.StatusNoContent {
			t.Fatalf("the delivery about %s: %+v", o, d)
		}
	}
	if d := e.deliveryOf(downID, agent); d.State != "pending" || d.LastStatus == nil || *d.LastStatus != http.StatusServiceUnavailable {
		t.Fatalf("the delivery to the endpoint that is down: %+v", d)
	}
	row := func(object string) string {
		return `[...document.querySelectorAll('#deliveries tr[data-event]')].find(r => !!r.querySelector('a[href="#/` + object + `"]'))`
	}
	e.do("reload", chromedp.Reload())
	e.wait("the deliveries", `(() => { const a = `+row("agents/"+agent)+`, s = `+row("sessions/"+sess)+`; if (!a || !s) return false;
		return a.cells[0].textContent.startsWith('agent.created') && s.cells[0].textContent.startsWith('session.created')
			&& [a, s].every(r => r.cells[2].textContent === 'delivered' && r.cells[3].textContent === '1' && r.cells[4].textContent === '204'); })()`)
	e.shot("webhooks")
	e.open("/webhooks/" + downID)
	e.wait("the pending delivery", `(() => { const r = `+row("agents/"+agent)+`; return !!r && r.cells[2].textContent.startsWith('pendingnext attempt ')
		&& r.cells[4].textContent.startsWith('503'); })()`)
	e.shot("step-webhook-pending")

	// Regenerate: one click arms, the second shows the new secret once.
	e.open("/webhooks/" + id)
	e.wait("its page", `!!document.getElementById('regenerate-secret') && !document.getElementById('new-secret-value')`)
	e.click("regenerate-secret")
	e.wait("armed", `document.getElementById('regenerate-secret').textContent.includes('again') && !document.getElementById('new-secret-value')`)
	e.click("regenerate-secret")
	e.wait("the new secret", `(document.getElementById('new-secret-value')?.value || '').startsWith('whsec_')`)
	if s := e.eval(`document.getElementById('new-secret-value').value`); s == secret {
		t.Fatal("the regenerated secret is the old one")
	}
	e.do("reload", chromedp.Reload())
	e.wait("its page again", `!!document.getElementById('regenerate-secret') && !document.getElementById('new-secret-value')`)

	e.deleteFrom("/webhooks/"+id, "delete-webhook", "#/webhooks", P+"/"+id)
	e.wait("only the other endpoint", `[...document.querySelectorAll('[data-row]')].map(a => a.textContent).join(' ') === 'down'`)

	// The list pages by 50 with the Page shape's after_id and before_id, from a linked page too.
	for i := range 50 {
		e.create(P, map[string]any{"url": down.URL, "name": fmt.Sprintf("ep%02d", i), "enabled_events": []string{"agent.created"}})
	}
	rows := `[...document.querySelectorAll('[data-row]')].map(a => a.textContent)`
	e.do("reload", chromedp.Reload())
	e.wait("the first page", rows+`.length === 50 && `+rows+`[0] === 'down'`)
	e.do("n", chromedp.KeyEvent("n"))
	e.wait("the second page", rows+`.join(' ') === 'ep49' && location.hash.includes('page=a')`)
	e.do("reload", chromedp.Reload())
	e.wait("the second page, linked", rows+`.join(' ') === 'ep49'`)
	e.do("p", chromedp.KeyEvent("p"))
	e.wait("back to the first", rows+`.length === 50 && `+rows+`[0] === 'down' && `+rows+`[49] === 'ep48'`)
}
