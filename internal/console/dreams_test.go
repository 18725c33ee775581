package console_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/blob/localfs"
	"github.com/corralhq/corral/internal/files"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/server"
)

// dreamUntil polls the dream through the API until ok says it is as wanted.
func (e *env) dreamUntil(id, what string, ok func(*apitype.Dream) bool) *apitype.Dream {
	e.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var d apitype.Dream
		e.api("GET", "/v1/dreams/"+id, nil, &d)
		if ok(&d) {
			return &d
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("dream %s never %s: %+v", id, what, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestConsoleDreams: dreams run by the server's dream runner (their sessions calling the fake model) are listed
// with their status, input store, sessions and output store; a running one (its model reply held) is canceled
// from its page, then archived; a completed one links to its session and to the memory store it wrote.
func TestConsoleDreams(t *testing.T) {
	blobs, err := localfs.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { blobs.Close() })
	e := newEnv(t, false, func(c *server.Config) {
		// A dream's session reads the input sessions' transcripts as files.
		if c.API.Files, err = files.New(files.Config{Store: c.Store, Blobs: blobs}); err != nil {
			t.Fatal(err)
		}
	})
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	storeID := e.create("/v1/memory_stores", map[string]any{"name": "Team notes"})
	agent := e.create("/v1/agents", map[string]any{"name": "worker", "model": "claude-sonnet-4-5"})
	envID := e.create("/v1/environments", map[string]any{"name": "dreams", "config": map[string]any{"type": "cloud"}})
	sess := e.create("/v1/sessions", map[string]any{"agent": agent, "environment_id": envID})
	dream := func() string {
		return e.create("/v1/dreams", map[string]any{"model": "claude-sonnet-4-5", "inputs": []any{
			map[string]any{"type": "memory_store", "memory_store_id": storeID},
			map[string]any{"type": "sessions", "session_ids": []string{sess}}}})
	}

	// A dream whose model reply is held: it runs until canceled.
	e.fake.Script(modeltest.Turn{Text: "Reading the transcripts", Hold: hold})
	held := dream()
	e.login()
	e.do("g d", chromedp.KeyEvent("g"), chromedp.KeyEvent("d"))
	e.wait("the dream listed", `(() => { const a = [...document.querySelectorAll('[data-row]')].find(a => a.textContent === `+js(held)+`);
		if (!a) return false; const r = a.closest('tr');
		return !!r.querySelector('.badge[class*="status-"]') && !!r.querySelector('a[href="#/memory/`+storeID+`"]') && r.cells[3].textContent === '1'; })()`)
	d := e.dreamUntil(held, "running", func(d *apitype.Dream) bool { return d.Status == apitype.DreamRunning })
	e.open("/dreams/" + held)
	e.wait("the running dream", `!!document.querySelector('#dream-status .status-running') && !!document.getElementById('cancel-dream') && !document.getElementById('archive-dream')`+
		` && document.querySelector('#dream-session a')?.getAttribute('href') === '#/sessions/`+*d.SessionID+`'`+
		` && document.querySelector('#dream-sessions a')?.getAttribute('href') === '#/sessions/`+sess+`'`)
	e.shot("step-dream-running")
	e.click("cancel-dream")
	e.click("cancel-dream")
	e.wait("canceled", `!!document.querySelector('#dream-status .status-canceled') && !!document.getElementById('archive-dream')`)
	e.dreamUntil(held, "canceled", func(d *apitype.Dream) bool { return d.Status == apitype.DreamCanceled && d.EndedAt != nil })
	e.click("archive-dream")
	e.click("archive-dream")
	e.wait("archived", `!document.getElementById('archive-dream') && [...document.querySelectorAll('.page-head .badge')].some(b => b.textContent === 'archived')`)
	e.dreamUntil(held, "archived", func(d *apitype.Dream) bool { return d.ArchivedAt != nil })

	// A dream that completes: its session and the store it wrote are linked.
	e.fake.Script(modeltest.Turn{Text: "Nothing new to remember."})
	done := dream()
	d = e.dreamUntil(done, "completed", func(d *apitype.Dream) bool { return d.Status == apitype.DreamCompleted })
	if len(d.Outputs) != 1 || d.SessionID == nil {
		t.Fatalf("the completed dream: %+v", d)
	}
	out := d.Outputs[0].MemoryStoreID
	e.open("/dreams")
	e.wait("only the unarchived dream", `(() => { const rows = [...document.querySelectorAll('[data-row]')].map(a => a.textContent);
		return rows.length === 1 && rows[0] === `+js(done)+`; })()`)
	e.wait("its badge and output store", `(() => { const r = document.querySelector('[data-row]').closest('tr');
		return !!r.querySelector('.status-completed') && !!r.querySelector('a[href="#/memory/`+out+`"]'); })()`)
	e.shot("step-dreams")
	e.open("/dreams/" + done)
	e.wait("the completed dream", `!!document.querySelector('#dream-status .status-completed') && !document.getElementById('cancel-dream') && !!document.getElementById('archive-dream')`+
		` && document.querySelector('#dream-session a')?.getAttribute('href') === '#/sessions/`+*d.SessionID+`'`)
	e.shot("dream")
	e.clickCSS(`#dream-output a`)
	e.wait("the output store", `location.hash === '#/memory/`+out+`' && !!document.getElementById('memories')`)

	// A dream whose model refuses: it fails, and its page shows the error.
	e.fake.Script(modeltest.Turn{Err: modeltest.Invalid("no dreaming today")})
	failed := dream()
	d = e.dreamUntil(failed, "failed", func(d *apitype.Dream) bool { return d.Status == apitype.DreamFailed })
	if d.Error == nil || d.Error.Message == "" {
		t.Fatalf("the failed dream: %+v", d)
	}
	e.open("/dreams/" + failed)
	e.wait("the failed dream's error", `!!document.querySelector('#dream-status .status-failed') && !!document.getElementById('archive-dream')`+
		` && (document.getElementById('dream-error')?.textContent || '') === `+js(string(d.Error.Type)+": "+d.Error.Message))
	e.shot("step-dream-failed")
}
