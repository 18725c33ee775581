package console_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/corralhq/corral/internal/apitype"
)

// fmtTimeJS is an expression of the page's fmtTime (dom.js) of the JavaScript string s: how the console shows an
// absolute time in this browser's locale.
func fmtTimeJS(s string) string {
	return `new Date(` + s + `).toLocaleString(undefined, {year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit'})`
}

// rfc3339 joins times as the API writes them, by spaces.
func rfc3339(ts []time.Time) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = t.UTC().Format(time.RFC3339Nano)
	}
	return strings.Join(s, " ")
}

// TestConsoleDeployments: a deployment is created through the console's form (after the API's refusal of a
// cron expression that does not parse) with a schedule, listed with its schedule and next run, and shown with
// its 5 upcoming runs. Run now shows "Running…" while the API carries the run out, then the run and its
// session; Pause shows it paused by hand, with no upcoming runs, and Unpause brings them back. A run whose
// environment was archived shows its error, and the deployment paused with its type; the runs are filtered by
// whether they failed, and a run has its page. Archive takes two clicks.
func TestConsoleDeployments(t *testing.T) {
	e := newEnv(t, false)
	agent := e.create("/v1/agents", map[string]any{"name": "nightly", "model": "claude-sonnet-4-5"})
	envID := e.create("/v1/environments", map[string]any{"name": "box", "config": map[string]any{"type": "cloud"}})
	e.login()
	e.do("g y", chromedp.KeyEvent("g"), chromedp.KeyEvent("y"))
	e.wait("the empty list", `location.hash.startsWith('#/deployments') && !!document.querySelector('table.list .empty')`)
	e.click("new-deployment")
	e.wait("the form", `!!document.getElementById('deployment-form') && document.getElementById('d-agent').value === `+js(agent)+
		` && document.getElementById('d-env').value === `+js(envID))
	e.setValue("d-name", "Nightly report")
	e.setValue("d-message", "Write the nightly report.")
	e.setValue("d-tz", "Europe/Paris")
	e.setValue("d-cron", "61 9 * * *")
	msg := map[string]any{"type": "user.message", "content": []any{map[string]any{"type": "text", "text": "Write the nightly report."}}}
	bad := e.refused("POST", "/v1/deployments", map[string]any{"name": "Nightly report", "agent": agent, "environment_id": envID,
		"initial_events": []any{msg}, "schedule": map[string]any{"type": "cron", "expression": "61 9 * * *", "timezone": "Europe/Paris"}})
	e.click("deployment-form-submit")
	e.wait("the API's refusal", formError("deployment-form", bad))
	e.setValue("d-cron", "30 9 * * 1-5")
	e.click("deployment-form-submit")
	e.wait("the deployment's page", `location.hash.startsWith('#/deployments/depl_') && document.querySelectorAll('#upcoming li').length === 5`)
	id := strings.TrimPrefix(e.eval(`location.hash`), "#/deployments/")
	var d apitype.Deployment
	e.api("GET", "/v1/deployments/"+id, nil, &d)
	if d.Name != "Nightly report" || d.Agent.ID != agent || d.EnvironmentID != envID || d.Schedule == nil ||
		d.Schedule.Expression != "30 9 * * 1-5" || d.Schedule.Timezone != "Europe/Paris" || len(d.Schedule.UpcomingRunsAt) != 5 ||
		len(d.InitialEvents) != 1 || !strings.Contains(string(d.InitialEvents[0]), "Write the nightly report.") {
		t.Fatalf("the deployment made by the form: %+v", d)
	}
	if got := e.eval(`[...document.querySelectorAll('#upcoming time')].map(t => new Date(t.getAttribute('datetime')).toISOString().replace('.000Z', 'Z')).join(' ')`); got != rfc3339(d.Schedule.UpcomingRunsAt) {
		t.Fatalf("upcoming runs shown %q, the API's %q", got, rfc3339(d.Schedule.UpcomingRunsAt))
	}
	e.wait("its schedule", `document.getElementById('deployment-schedule').textContent === '30 9 * * 1-5 (Europe/Paris)'`+
		` && document.querySelector('#deployment-status .status-active') !== null && !document.getElementById('paused-reason')`)

	// The list: its schedule, status and next run.
	first := js(d.Schedule.UpcomingRunsAt[0].UTC().Format(time.RFC3339))
	e.open("/deployments")
	e.wait("listed", `(() => { const a = document.querySelector('[data-row]'); if (!a || a.textContent !== 'Nightly report') return false;
		const c = a.closest('tr').cells;
		return c[1].textContent === `+js(agent)+` && c[2].textContent === '30 9 * * 1-5 (Europe/Paris)' && c[3].textContent === 'active'
			&& c[4].textContent === `+fmtTimeJS(first)+`; })()`)
	e.shot("step-deployments")

	// Run now: the button says so while the POST is in flight; then the run's session is linked.
	e.open("/deployments/" + id)
	e.wait("Run now", `!!document.getElementById('run-now')`)
	hd := &hold{served: make(chan struct{}), release: make(chan struct{}), post: "/deployments/" + id + "/run"}
	released := false
	release := func() {
		if !released {
			released = true
			close(hd.release)
		}
	}
	t.Cleanup(release)
	e.holdNext.Store(hd)
	e.click("run-now")
	select {
	case <-hd.served:
	case <-time.After(60 * time.Second):
		t.Fatal("Run now sent no POST .../run")
	}
	e.wait("running", `(() => { const b = document.getElementById('run-now'); return b.disabled && b.textContent === 'Running…'; })()`)
	release()
	e.wait("the run's session", `!!document.querySelector('#run-result a[href^="#/sessions/sesn_"]') && document.querySelectorAll('#runs tbody tr[data-run]').length === 1`+
		` && document.getElementById('run-now').textContent === 'Run now'`)
	var runs struct{ Data []apitype.DeploymentRun }
	e.api("GET", "/v1/deployment_runs?deployment_id="+id, nil, &runs)
	if len(runs.Data) != 1 || runs.Data[0].SessionID == nil || runs.Data[0].Trigger.Type != apitype.TriggerManual {
		t.Fatalf("the runs after Run now: %+v", runs.Data)
	}
	ok := runs.Data[0]
	e.wait("the run's row", `(() => { const r = document.querySelector('#runs tr[data-run=`+js(ok.ID)+`]'); return !!r && r.cells[1].textContent === 'manual'
		&& !!r.querySelector('a[href="#/sessions/`+*ok.SessionID+`"]') && !!document.querySelector('#run-result a[href="#/sessions/`+*ok.SessionID+`"]'); })()`)

	// Pause and unpause.
	e.click("pause")
	e.wait("paused by hand", `(document.getElementById('deployment-status')?.textContent || '') === 'paused (manual)'`+
		` && document.getElementById('paused-reason').textContent.startsWith('Paused by hand.') && !document.getElementById('upcoming') && !!document.getElementById('unpause')`)
	e.api("GET", "/v1/deployments/"+id, nil, &d)
	if d.Status != apitype.DeploymentPaused || d.PausedReason == nil || d.PausedReason.Type != "manual" {
		t.Fatalf("after Pause: %+v", d)
	}
	e.click("unpause")
	e.wait("active again", `!!document.querySelector('#deployment-status .status-active') && !document.getElementById('paused-reason')`+
		` && document.querySelectorAll('#upcoming li').length === 5 && !!document.getElementById('pause')`)

	// A run whose environment is archived fails, and pauses the deployment with its error.
	e.api("POST", "/v1/environments/"+envID+"/archive", map[string]any{}, nil)
	e.click("run-now")
	e.wait("the run's error", `(document.querySelector('#run-result .notice.error')?.textContent || '').includes('environment_archived_error: ')`+
		` && (document.getElementById('deployment-status')?.textContent || '') === 'paused (error: environment_archived_error)'`+
		` && document.querySelector('#paused-reason.error')?.textContent.startsWith('Paused after a run failed with environment_archived_error.')`)
	e.shot("deployments")
	e.api("GET", "/v1/deployment_runs?deployment_id="+id+"&has_error=true", nil, &runs)
	if len(runs.Data) != 1 || runs.Data[0].Error == nil || runs.Data[0].Error.Type != apitype.RunEnvironmentArchived {
		t.Fatalf("the failed runs: %+v", runs.Data)
	}
	failed := runs.Data[0]
	rows := `[...document.querySelectorAll('#runs tr[data-run]')].map(r => r.dataset.run).join(' ')`
	e.wait("both runs, newest first", rows+` === `+js(failed.ID+" "+ok.ID))
	e.setValue("runs-error", "true")
	e.wait("the failed run only", `location.hash.endsWith('?error=true') && `+rows+` === `+js(failed.ID)+
		` && document.querySelector('#runs tr[data-run]').cells[3].textContent === `+js(string(failed.Error.Type)+": "+failed.Error.Message))
	e.setValue("runs-error", "false")
	e.wait("the run that succeeded only", rows+` === `+js(ok.ID)+` && document.getElementById('runs-error').value === 'false'`)

	// A run's page.
	e.clickCSS(`#runs a[href="#/deployment_runs/` + ok.ID + `"]`)
	e.wait("the run's page", `!!document.querySelector('#run-outcome a[href="#/sessions/`+*ok.SessionID+`"]')`+
		` && !!document.querySelector('.crumbs a[href="#/deployments/`+id+`"]')`)

	// Archive: one click arms the button, the second archives.
	e.open("/deployments/" + id)
	e.click("archive-deployment")
	e.wait("armed", `document.getElementById('archive-deployment').textContent.includes('again')`)
	e.api("GET", "/v1/deployments/"+id, nil, &d)
	if d.ArchivedAt != nil {
		t.Fatal("one click archived the deployment")
	}
	e.click("archive-deployment")
	e.wait("the list without it", `location.hash === '#/deployments' && !!document.querySelector('table.list .empty')`)
	e.api("GET", "/v1/deployments/"+id, nil, &d)
	if d.ArchivedAt == nil || len(d.Schedule.UpcomingRunsAt) != 0 {
		t.Fatalf("after Archive: %+v", d)
	}
	e.clickCSS("#f-archived")
	e.wait("archived too", `(() => { const a = document.querySelector('[data-row]'); return !!a && a.closest('tr').cells[3].textContent === 'activearchived'
		&& a.closest('tr').cells[4].textContent === '—'; })()`)
}
