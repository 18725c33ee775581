package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"go.uber.org/goleak"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/harness"
	"github.com/corralhq/corral/internal/model/anthropic"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/bwrap"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
	"github.com/corralhq/corral/internal/server"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
)

// The console is driven in a real headless Chromium against a real server: SQLite, brains calling the fake
// model over HTTP, and bwrap sandboxes running the tools.

const (
	key = "console-test-key"
	// RequireChromiumEnv set to 1 (or CI=true) makes a missing Chromium fail the browser tests instead of
	// skipping them.
	requireChromiumEnv = "CORRAL_REQUIRE_CHROMIUM"
	// screenshotsEnv names the directory the browser tests save their screenshots in (CI keeps it as an
	// artifact); unset, they go to a temporary directory that the test log names.
	screenshotsEnv = "CORRAL_CONSOLE_SCREENSHOTS"
	// docsEnv set to 1 also writes the screenshots of docs/console/ (go test -run TestConsole ./internal/console/).
	docsEnv = "CORRAL_CONSOLE_DOCS"
)

var agentPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "corral-console-agent-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agentPath, err = sandboxtest.BuildAgent(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		// The servers, the fake model and the browsers are stopped: nothing of theirs may run on.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "leaked goroutines:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// chromium returns the browser's path, skipping the test (failing it in CI) without one.
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("CORRAL_CHROMIUM"), "/usr/bin/chromium", "chromium", "chromium-browser"} {
		if p == "" {
			continue
		}
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	const why = "no Chromium (apt-get install chromium, or set CORRAL_CHROMIUM)"
	if os.Getenv(requireChromiumEnv) == "1" || os.Getenv("CI") == "true" {
		t.Fatalf("Chromium required (%s=1 or CI=true): %s", requireChromiumEnv, why)
	}
	t.Skip(why)
	return ""
}

// env is a running server and a browser tab on its console.
type env struct {
	t     *testing.T
	srv   *server.Server
	front *httptest.Server // what the browser reaches: a proxy to srv
	// resumes are the Last-Event-ID headers of the event streams the page opened, in order.
	resumes []string
	st      store.Store
	fake    *modeltest.Server
	ctx     context.Context // the tab
	shots   string
	docs    string
	mu      sync.Mutex
	errors  []string // exceptions and security messages of the page
	// dropStreams makes the proxy answer every event stream with an empty 200 (a server that accepts a stream
	// and ends it at once); streamTimes are when the page asked for one.
	dropStreams atomic.Bool
	streamTimes []time.Time
	// holdNext, when set, holds the answer of the next events list (or of the POST that hold.post names): the
	// proxy sends it upstream, signals held.served, and writes the answer once held.release is closed.
	holdNext atomic.Pointer[hold]
}

type hold struct {
	served, release chan struct{}
	post            string // a POST to a path ending in it, if set; else a GET of a session's events
}

// holds reports whether r is the request hd holds.
func (hd *hold) holds(r *http.Request) bool {
	if hd.post != "" {
		return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, hd.post)
	}
	return r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/events")
}

// newEnv starts a server (with bwrap sandboxes if hands) and a browser; opts adjust the server's config.
func newEnv(t *testing.T, hands bool, opts ...func(*server.Config)) *env {
	t.Helper()
	chrome := chromium(t)
	var sc server.SandboxConfig
	if hands {
		if os.Geteuid() != 0 {
			sandboxtest.Require(t, "bwrap", errors.New("the bwrap backend needs root"))
		}
		sandboxtest.Require(t, "bwrap", bwrap.Available(""))
		prov, err := bwrap.New(bwrap.Config{AgentPath: agentPath})
		if err != nil {
			sandboxtest.Require(t, "bwrap", err)
		}
		sc = server.SandboxConfig{Provider: prov, Pool: sandbox.PoolConfig{WorkspaceRoot: sandboxtest.WorkspaceRoot(t)}}
	}
	st, err := sqlite.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	fake := modeltest.NewServer(t)
	cfg := server.Config{
		Store: st,
		API:   &server.APIConfig{Listen: "127.0.0.1:0", Keys: &api.KeyAuth{Store: st, Static: key}},
		Brain: &harness.Config{
			Model:        anthropic.New(anthropic.Config{APIKey: "test", BaseURL: fake.URL}),
			Workers:      4,
			PollInterval: 50 * time.Millisecond,
			Retry:        harness.RetryPolicy{MaxRetries: 2, BaseDelay: 10 * time.Millisecond, MaxDelay: 20 * time.Millisecond},
		},
		Sandbox: sc,
	}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)

	e := &env{t: t, srv: srv, st: st, fake: fake, shots: os.Getenv(screenshotsEnv)}
	// The browser reaches the server through a proxy whose connections the test can cut, as a network does.
	target, _ := url.Parse(srv.URL())
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host
			if strings.HasSuffix(r.In.URL.Path, "/events/stream") {
				e.mu.Lock()
				e.resumes = append(e.resumes, r.In.Header.Get("Last-Event-ID"))
				e.mu.Unlock()
			}
		},
		FlushInterval: -1, // event streams pass at once
		ErrorLog:      log.New(io.Discard, "", 0),
	}
	e.front = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/events/stream") {
			e.mu.Lock()
			e.streamTimes = append(e.streamTimes, time.Now())
			e.mu.Unlock()
			if e.dropStreams.Load() {
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(http.StatusOK)
				return
			}
		}
		if hd := e.holdNext.Load(); hd != nil && hd.holds(r) && e.holdNext.CompareAndSwap(hd, nil) {
			rec := httptest.NewRecorder()
			rp.ServeHTTP(rec, r)
			close(hd.served)
			<-hd.release
			for k, vs := range rec.Header() {
				w.Header()[k] = vs
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(e.front.Close)
	if e.shots == "" {
		e.shots = filepath.Join(t.TempDir(), "screenshots")
	}
	if err := os.MkdirAll(e.shots, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Getenv(docsEnv) == "1" {
		e.docs = filepath.Join("..", "..", "docs", "console")
		if err := os.MkdirAll(e.docs, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots in %s", e.shots)

	actx, cancelA := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()), chromedp.Flag("force-prefers-reduced-motion", true))...)
	ctx, cancelT := chromedp.NewContext(actx)
	t.Cleanup(func() {
		_ = chromedp.Cancel(ctx) // closes the browser and waits for it
		cancelT()
		cancelA()
	})
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.IsException() || m.Source == "security" || strings.Contains(m.Text, "Content Security Policy") ||
				strings.Contains(m.Text, "TrustedHTML") {
				e.mu.Lock()
				e.errors = append(e.errors, m.String())
				e.mu.Unlock()
			}
		}
	}()
	e.ctx = ctx
	t.Cleanup(func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, m := range e.errors {
			t.Errorf("page error: %s", m)
		}
	})
	return e
}

// do runs actions in the tab, failing the test with what it was doing.
func (e *env) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		e.shot("failed-" + strings.ReplaceAll(what, " ", "-"))
		e.t.Fatalf("%s: %v", what, err)
	}
}

// wait waits until the JavaScript expression is truthy.
func (e *env) wait(what, expr string) {
	e.t.Helper()
	e.do(what, chromedp.Action[chromedp.Void](func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(80*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))(ctx, t)
		return chromedp.Void{}, err
	}))
}

func (e *env) eval(expr string) string {
	e.t.Helper()
	var s string
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		e.t.Fatalf("eval %s: %v", expr, err)
	}
	return s
}

// scheme emulates prefers-color-scheme (dark or light; "" for the system's).
func (e *env) scheme(s string) {
	e.t.Helper()
	var f []*emulation.MediaFeature
	if s != "" {
		f = []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: s}}
	}
	if _, err := chromedp.Call(e.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{Features: f}); err != nil {
		e.t.Fatal(err)
	}
}

// setValue sets the value of the element with id as a user would: input and change events follow.
func (e *env) setValue(id, v string) {
	e.t.Helper()
	e.eval(`(() => { const el = document.getElementById(` + js(id) + `); el.value = ` + js(v) + `;
		el.dispatchEvent(new Event('input', {bubbles: true})); el.dispatchEvent(new Event('change', {bubbles: true})); return el.value; })()`)
}

// shot saves a screenshot of the whole page as name.png (and in docs/console/ when asked, unless name starts
// with failed- or step-).
func (e *env) shot(name string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	// The whole page: the sticky bars stay at their places in the flow, not where the viewport was.
	e.eval(`document.querySelectorAll('.top, .composer').forEach(el => el.style.position = 'static'), ''`)
	defer e.eval(`document.querySelectorAll('.top, .composer').forEach(el => el.style.position = ''), ''`)
	b, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		e.t.Logf("screenshot %s: %v", name, err)
		return
	}
	if err := os.WriteFile(filepath.Join(e.shots, name+".png"), b, 0o644); err != nil {
		e.t.Error(err)
	}
	if e.docs != "" && !strings.HasPrefix(name, "failed-") && !strings.HasPrefix(name, "step-") {
		// Committed: reduced to 256 colours and encoded at the best compression, a third of the size.
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			e.t.Fatal(err)
		}
		var out bytes.Buffer
		if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&out, quantize(img)); err != nil {
			e.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(e.docs, name+".png"), out.Bytes(), 0o644); err != nil {
			e.t.Error(err)
		}
	}
}

// quantize maps img to its 256 most frequent colours (a screenshot of a page has few, besides the shades of
// anti-aliased text), each pixel to the nearest.
func quantize(img image.Image) *image.Paletted {
	b := img.Bounds()
	count := map[color.RGBA]int{}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			count[color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)]++
		}
	}
	cs := slices.SortedFunc(maps.Keys(count), func(a, b color.RGBA) int { return count[b] - count[a] })
	pal := make(color.Palette, 0, 256)
	for _, c := range cs[:min(len(cs), 256)] {
		pal = append(pal, c)
	}
	idx := map[color.RGBA]uint8{}
	out := image.NewPaletted(b, pal)
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
			i, ok := idx[c]
			if !ok {
				i = uint8(pal.Index(c))
				idx[c] = i
			}
			out.SetColorIndex(x, y, i)
		}
	}
	return out
}

// api calls the server's API as a client would.
// api sends a request with the test key and more headers (name, value, ...), and decodes its answer into out.
func (e *env) api(method, path string, body, out any, hdr ...string) {
	e.t.Helper()
	var rd bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd.Reset(b)
	}
	req, err := http.NewRequest(method, e.srv.URL()+path, &rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("x-api-key", key)
	req.Header.Set("content-type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		e.t.Fatalf("%s %s: %s", method, path, resp.Status)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *env) create(path string, body map[string]any) string {
	e.t.Helper()
	var r struct{ ID string }
	e.api("POST", path, body, &r)
	return r.ID
}

func (e *env) message(sessionID, text string) {
	e.t.Helper()
	e.api("POST", "/v1/sessions/"+sessionID+"/events", map[string]any{"events": []any{map[string]any{
		"type": "user.message", "content": []any{map[string]any{"type": "text", "text": text}}}}}, nil)
}

// killSandbox SIGKILLs from the host, as a crashed container dies, the sandbox that runs command: every
// process from the one running it up to the child of this test process (bwrap, the agent, the shell), and
// returns how many it killed. A process of that command that does not descend from this test process is left
// alone, with its ancestors (TestKillSandboxOnlyOwn).
func killSandbox(t *testing.T, command string) int {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	parent := func(pid int) int {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after its closing parenthesis.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 2 {
			return 0
		}
		p, _ := strconv.Atoi(f[1])
		return p
	}
	n := 0
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil || string(bytes.ReplaceAll(bytes.TrimRight(cmd, "\x00"), []byte{0}, []byte{' '})) != command {
			continue
		}
		var chain []int
		p := pid
		for ; p > 1 && p != os.Getpid(); p = parent(p) {
			chain = append(chain, p)
		}
		if p != os.Getpid() {
			continue // not this test's: another test's sandbox, or the user's own process of that command
		}
		for i := len(chain) - 1; i >= 0; i-- { // the sandbox's root first: nothing restarts the rest
			if syscall.Kill(chain[i], syscall.SIGKILL) == nil {
				n++
			}
		}
	}
	return n
}

// js quotes s as a JavaScript string.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// login puts the key in the tab's sessionStorage, as the login form does.
func (e *env) login() {
	e.t.Helper()
	e.open("/sessions")
	e.wait("login form", `!!document.getElementById('api-key')`)
	e.do("log in", chromedp.SendKeys(chromedp.ID("api-key"), key+"\n"))
	e.wait("logged in", `!!document.querySelector('table.sessions')`)
}

func (e *env) open(hash string) {
	e.t.Helper()
	e.do("open "+hash, chromedp.Navigate(e.front.URL+"/console/#"+hash))
}

// transcriptHas is an expression true once the transcript shows text.
func transcriptHas(text string) string {
	return `(document.getElementById('transcript')?.textContent || '').includes(` + js(text) + `)`
}

func TestConsole(t *testing.T) {
	e := newEnv(t, true)
	bashTools := func(policy string) []any {
		return []any{map[string]any{"type": "agent_toolset_20260401",
			"default_config": map[string]any{"enabled": true, "permission_policy": map[string]any{"type": policy}}}}
	}
	askAgent := e.create("/v1/agents", map[string]any{"name": "careful-coder", "model": "claude-sonnet-4-5",
		"system": "You run commands, but ask first.",
		"tools": append(bashTools("always_ask"), map[string]any{"type": "custom", "name": "lookup_order",
			"description":  "Look up an order in the shop's database.",
			"input_schema": map[string]any{"type": "object", "properties": map[string]any{"order": map[string]any{"type": "string"}}}})})
	// A second version, for the diff.
	e.api("POST", "/v1/agents/"+askAgent, map[string]any{"version": 1, "system": "You run commands, but always ask first. Be brief."}, nil)
	envID := e.create("/v1/environments", map[string]any{"name": "sandbox", "config": map[string]any{"type": "cloud"}})

	// Log in: the key is refused first, then accepted; it is in sessionStorage, not in the URL.
	e.open("/sessions")
	e.wait("login form", `!!document.getElementById('api-key')`)
	e.do("bad key", chromedp.SendKeys(chromedp.ID("api-key"), "wrong-key\n"))
	e.wait("refusal", `document.querySelector('.login-error')?.textContent.includes('refused')`)
	e.setValue("api-key", "")
	e.do("good key", chromedp.SendKeys(chromedp.ID("api-key"), key+"\n"))
	e.wait("sessions list", `!!document.querySelector('table.sessions')`)
	if got := e.eval(`sessionStorage.getItem('corral.console.key') + ' ' + location.href`); got != key+" "+e.front.URL+"/console/#/sessions" {
		t.Errorf("after login: key and URL = %q", got)
	}

	// A session whose turn streams live, then is interrupted.
	live := e.create("/v1/sessions", map[string]any{"agent": askAgent, "environment_id": envID, "title": "Interrupt me"})
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	e.fake.Script(modeltest.Turn{Text: "Let me think about this for a long while", Hold: hold})
	e.open("/sessions/" + live)
	e.wait("stream live", `document.getElementById('stream-state')?.dataset.state === 'live'`)
	e.do("write", chromedp.SendKeys(chromedp.ID("message"), "Count the stars, <img src=x onerror=alert(1)> please."))
	e.do("send", chromedp.Click(chromedp.ID("send")))
	e.wait("the turn runs, seen on the stream", transcriptHas("Count the stars")+` && !!document.querySelector('#transcript .preview')`+
		` && document.querySelector('#session-status .badge')?.textContent === 'running'`+
		` && !!document.querySelector('#waterfall .wf-row.kind-model.running')`)
	if n := e.eval(`String(document.querySelectorAll('#transcript img').length)`); n != "0" {
		t.Errorf("the message's markup became %s elements", n)
	}
	e.shot("live-turn")
	e.do("interrupt", chromedp.Click(chromedp.ID("interrupt")))
	e.wait("interrupted", transcriptHas("Interrupted by you")+` && document.querySelector('#session-status .badge')?.textContent === 'idle'`)

	// A call denied, with a reason the model gets.
	e.fake.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"rm -rf /workspace"}`}}},
		modeltest.Turn{Text: "Understood, I will leave the workspace alone."},
	)
	e.do("write", chromedp.SendKeys(chromedp.ID("message"), "Start over from scratch."))
	e.do("send", chromedp.Click(chromedp.ID("send")))
	e.wait("confirmation asked", `!!document.querySelector('#transcript [data-answer=deny]')`)
	e.do("deny", chromedp.SendKeys(chromedp.CSS(`#transcript .answer input[type=text]`), "not today"),
		chromedp.Click(chromedp.CSS(`#transcript [data-answer=deny]`)))
	e.wait("denied", transcriptHas("Denied by the user: not today")+` && `+transcriptHas("leave the workspace alone"))

	// A tool call that asks first: allowed in the console, run in bwrap, its output shown.
	ok := e.create("/v1/sessions", map[string]any{"agent": askAgent, "environment_id": envID, "title": "Tidy the workspace"})
	e.fake.Script(
		modeltest.Turn{Thinking: "The user wants a listing. I will run ls after saying hello.",
			ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"echo hello-from-bwrap; uname -s"}`}}},
		modeltest.Turn{Text: "The sandbox says hello, and it runs Linux."},
	)
	e.open("/sessions/" + ok)
	e.wait("stream live", `document.getElementById('stream-state')?.dataset.state === 'live'`)
	e.do("write", chromedp.SendKeys(chromedp.ID("message"), "Say hello from the sandbox."))
	e.do("send", chromedp.Click(chromedp.ID("send")))
	e.wait("confirmation asked", `!!document.querySelector('#transcript [data-answer=allow]')`)
	e.shot("confirmation")
	e.do("allow", chromedp.Click(chromedp.CSS(`#transcript [data-answer=allow]`)))
	e.wait("tool output", transcriptHas("hello-from-bwrap")+` && `+transcriptHas("Allowed by the user"))

	// The same session goes on with a custom tool call, answered in the console.
	e.fake.Script(
		modeltest.Turn{Text: "I will look the order up.", ToolUses: []modeltest.ToolUse{{Name: "lookup_order", Input: `{"order":"A-1042"}`}}},
		modeltest.Turn{Text: "Order A-1042 shipped on Monday."},
	)
	e.wait("idle", transcriptHas("it runs Linux")+` && document.querySelector('#session-status .badge')?.textContent === 'idle'`)
	e.do("write", chromedp.SendKeys(chromedp.ID("message"), "Where is order A-1042?"))
	e.do("send", chromedp.KeyEvent("\r", chromedp.KeyModifiers(2)) /* Ctrl+Enter */)
	e.wait("custom tool call", `!!document.querySelector('#transcript textarea.custom-result')`)
	e.do("answer", chromedp.SendKeys(chromedp.CSS(`#transcript textarea.custom-result`), `{"status":"shipped","day":"Monday"}`),
		chromedp.Click(chromedp.CSS(`#transcript [data-answer=custom]`)))
	e.wait("answered", transcriptHas("shipped on Monday")+` && document.querySelector('#session-status .badge')?.textContent === 'idle'`)
	e.wait("waterfall turns", `document.querySelectorAll('#turn-select option').length === 2`)
	// The waterfall's first turn shows the sandbox's provisioning and the bash call.
	e.setValue("turn-select", "0")
	e.wait("provision and tool spans", `!!document.querySelector('#waterfall .kind-provision') && !!document.querySelector('#waterfall .kind-tool')`)
	e.shot("session-succeeded")

	// A session that fails in the model: overloaded until the retries give up.
	failed := e.create("/v1/sessions", map[string]any{"agent": askAgent, "environment_id": envID, "title": "Model overloaded"})
	for range 3 {
		e.fake.Script(modeltest.Turn{Err: modeltest.Overloaded()})
	}
	e.message(failed, "Summarise the report.")
	e.open("/sessions/" + failed)
	e.wait("retries exhausted", transcriptHas("gave up after retries")+` && !!document.querySelector('#waterfall .wf-failure')`)
	// The server names the part that failed (error.source), and the console shows it where it failed.
	e.wait("failed in the model", `!!document.querySelector('#waterfall .wf-failure .comp-model')`)
	e.shot("session-failed-model")
	e.scheme("dark")
	e.shot("session-failed-model-dark")
	e.scheme("")

	// A session that fails in the hands: its sandbox is killed from the host while a command runs.
	auto := e.create("/v1/agents", map[string]any{"name": "reckless", "model": "claude-sonnet-4-5", "tools": bashTools("always_allow")})
	hands := e.create("/v1/sessions", map[string]any{"agent": auto, "environment_id": envID, "title": "Sandbox killed"})
	e.fake.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"sleep 600","timeout_ms":900000}`}}},
		modeltest.Turn{Text: "The sandbox died under me."},
	)
	e.message(hands, "Wait for the build.")
	e.open("/sessions/" + hands)
	e.wait("command running", `!!document.querySelector('#waterfall .wf-row.kind-tool.running') && !!document.querySelector('#waterfall .kind-provision:not(.running)')`)
	// The span shows the call started; the command runs a moment later.
	for deadline := time.Now().Add(time.Minute); killSandbox(t, "sleep 600") == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no sandbox process running sleep 600")
		}
	}
	e.wait("hands failure", transcriptHas("The sandbox died under me")+` && !!document.querySelector('#waterfall .wf-row.failed')`)
	e.wait("failed in the hands, in bwrap", `!!document.querySelector('#waterfall .wf-failure .comp-hands') && document.querySelector('#waterfall .wf-failure .source').textContent.includes('sandbox_died') && !!document.querySelector('#transcript .result.is-error .comp-hands')`)
	e.shot("session-failed-hands")

	// The sessions list: filters, live statuses.
	e.open("/sessions")
	e.wait("sessions", `document.querySelectorAll('table.sessions [data-row]').length === 4`)
	e.shot("sessions")
	// The keyboard: ? shows the shortcuts, j/k move in the list, Enter opens, g a goes to the agents.
	e.do("?", chromedp.KeyEvent("?"))
	e.wait("help", `document.getElementById('help').open`)
	e.do("escape", chromedp.KeyEvent(kb.Escape))
	e.wait("help closed", `!document.getElementById('help').open`)
	e.do("help button", chromedp.Click(chromedp.ID("help-button")))
	e.wait("help again", `document.getElementById('help').open && document.activeElement?.id === 'help-close'`)
	e.do("close", chromedp.Click(chromedp.ID("help-close")))
	e.wait("help closed again", `!document.getElementById('help').open`)
	e.do("j j k j", chromedp.KeyEvent("j"), chromedp.KeyEvent("j"), chromedp.KeyEvent("k"), chromedp.KeyEvent("j"))
	second := e.eval(`document.querySelectorAll('table.sessions [data-row]')[1].dataset.id`)
	e.wait("second row focused", `document.activeElement?.dataset.id === `+js(second))
	e.do("open it", chromedp.KeyEvent(kb.Enter))
	e.wait("its page", `location.hash === '#/sessions/' + `+js(second)+` && document.title.endsWith(' · Corral')`)
	e.do("g a", chromedp.KeyEvent("g"), chromedp.KeyEvent("a"))
	e.wait("agents", `location.hash === '#/agents' && document.querySelectorAll('[data-row]').length === 2`)
	e.open("/sessions")
	e.wait("sessions again", `document.querySelectorAll('table.sessions [data-row]').length === 4`)
	e.setValue("f-agent", auto)
	e.wait("filtered", `document.querySelectorAll('table.sessions [data-row]').length === 1 && location.hash.includes('agent=')`)

	// Agents: a diff between the two versions.
	e.open("/agents/" + askAgent + "/diff?a=1&b=2")
	e.wait("diff", `!!document.querySelector('#diff .op-add') && !!document.querySelector('#diff .op-del')`)
	e.shot("agent-diff")
	e.open("/environments/" + envID)
	e.wait("environment", `document.querySelector('h1')?.textContent === 'sandbox'`)

	// A narrow window.
	e.do("narrow", chromedp.EmulateViewport(390, 844))
	e.open("/sessions/" + ok)
	e.wait("narrow session", transcriptHas("shipped on Monday"))
	e.shot("narrow")
	e.do("wide", chromedp.EmulateViewport(1280, 900))

	// Log out: the key is gone.
	e.do("logout", chromedp.Click(chromedp.ID("logout")))
	e.wait("logged out", `!!document.getElementById('api-key') && sessionStorage.getItem('corral.console.key') === null`)
}

// TestConsoleScale: thousands of sessions page with the API's cursors, and a session of 100,000 events opens
// at its tail and pages back and to its start with only a few pages of events in the page at any time.
func TestConsoleScale(t *testing.T) {
	e := newEnv(t, false)
	ctx := context.Background()
	agent := e.create("/v1/agents", map[string]any{"name": "chatty", "model": "claude-sonnet-4-5"})
	envID := e.create("/v1/environments", map[string]any{"name": "big", "config": map[string]any{"type": "cloud"}})
	big := e.create("/v1/sessions", map[string]any{"agent": agent, "environment_id": envID, "title": "One hundred thousand events"})
	const events = 100_000
	for i := 0; i < events; i += 1000 {
		batch := make([]apitype.NewEvent, 0, 1000)
		for j := i; j < i+1000; j++ {
			ev, err := apitype.MakeEvent(apitype.EventAgentMessage, map[string]any{
				"content": []any{map[string]any{"type": "text", "text": fmt.Sprintf("message #%d", j+1)}}})
			if err != nil {
				t.Fatal(err)
			}
			batch = append(batch, ev)
		}
		if _, err := e.st.EventAppend(ctx, &store.EventAppendParams{SessionID: big, Events: batch}); err != nil {
			t.Fatal(err)
		}
	}
	// 1,500 more sessions, straight into the store: a copy of one made through the API, with ids of their own.
	var proto apitype.Session
	e.api("GET", "/v1/sessions/"+big, nil, &proto)
	const sessions = 1500
	for i := range sessions {
		s := proto
		s.ID = apitype.NewID(apitype.PrefixSession)
		title := fmt.Sprintf("Session %04d", i+1)
		s.Title = &title
		s.CreatedAt = proto.CreatedAt.Add(-time.Duration(sessions-i) * time.Second)
		s.UpdatedAt = s.CreatedAt
		if _, _, err := e.st.SessionCreate(ctx, &store.SessionCreateParams{Session: &s}); err != nil {
			t.Fatal(err)
		}
	}
	e.login()

	// The list: 50 a page; Next and Previous follow the cursors (n and p from the keyboard too).
	rows := `document.querySelectorAll('table.sessions [data-row]')`
	first := func() string { return e.eval(rows + `[0]?.dataset.id || ''`) }
	e.wait("first page", rows+`.length === 50`)
	firsts := []string{first()}
	seen := map[string]bool{firsts[0]: true}
	for i := range 5 {
		e.do("next page", chromedp.KeyEvent("n"))
		e.wait(fmt.Sprintf("page %d", i+2), rows+`.length === 50 && `+rows+`[0].dataset.id !== `+js(firsts[i]))
		f := first()
		if seen[f] {
			t.Fatalf("page %d repeats a page", i+2)
		}
		seen[f] = true
		firsts = append(firsts, f)
	}
	for i := 4; i >= 0; i-- {
		// Previous, clicked again only if the list is still on the page it left 10 s later (a click that landed
		// while the page rendered is lost under load); never while a click may still be loading the next page.
		e.wait(fmt.Sprintf("back to page %d", i+1), `(() => { const f = `+rows+`[0]?.dataset.id;
			if (f === `+js(firsts[i])+`) return true;
			if (f === `+js(firsts[i+1])+` && Date.now() - (window.prevClickedAt || 0) > 10000) {
				window.prevClickedAt = Date.now(); document.querySelector('.pager button:first-child').click(); }
			return false; })()`)
		e.eval(`String(window.prevClickedAt = 0)`)
	}

	// The big session opens at its tail.
	evs := `document.querySelectorAll('#transcript .ev').length`
	opened := time.Now()
	e.open("/sessions/" + big)
	e.wait("tail", transcriptHas(fmt.Sprintf("message #%d", events))+` && `+evs+` === 100`)
	t.Logf("a session of %d events shown in %v (its tail; figures, not asserted)", events, time.Since(opened).Round(time.Millisecond))
	heap := e.eval(`String(Math.round((performance.memory?.usedJSHeapSize || 0) / 1024))`)
	idle := `!document.getElementById('transcript').hasAttribute('aria-busy')`
	paged := time.Now()
	for i := range 5 {
		e.do("earlier", chromedp.Click(chromedp.ID("tr-earlier")))
		e.wait("earlier page", idle+` && `+transcriptHas(fmt.Sprintf("message #%d", events-100*(i+1)-50)))
	}
	t.Logf("five pages back in %v; JS heap %s KiB at the tail, %s KiB five pages back", time.Since(paged).Round(time.Millisecond),
		heap, e.eval(`String(Math.round((performance.memory?.usedJSHeapSize || 0) / 1024))`))
	// Five pages back: a window of three pages, the latest page dropped.
	e.wait("five pages back", transcriptHas(fmt.Sprintf("message #%d", events-550))+` && !`+transcriptHas(fmt.Sprintf("message #%d", events))+` && `+evs+` <= 300`)
	e.shot("scale-earlier")
	e.do("oldest", chromedp.Click(chromedp.ID("tr-oldest")))
	e.wait("oldest", idle+` && document.querySelector('#transcript .ev .text')?.textContent === 'message #1' && `+evs+` === 100`)
	e.do("later", chromedp.Click(chromedp.ID("tr-later")))
	e.wait("later", idle+` && `+transcriptHas("message #200")+` && `+evs+` === 200`)
	if n := e.eval(`String(` + evs + `)`); n != "200" {
		t.Errorf("%s events in the page after Oldest and Later", n)
	}

	// An MCP call with its result; a session.error that names the part that failed shows it, in the transcript and
	// the waterfall.
	failed := e.create("/v1/sessions", map[string]any{"agent": agent, "environment_id": envID, "title": "Attributed"})
	var batch []apitype.NewEvent
	for _, ev := range []struct {
		typ  apitype.EventType
		data string
	}{
		{apitype.EventSessionStatusRunning, `{}`},
		{apitype.EventAgentMCPToolUse, `{"mcp_server_name":"tickets","name":"search","input":{"q":"refund"},"evaluated_permission":"allow"}`},
		{apitype.EventSessionError, `{"error":{"type":"unknown_error","message":"<b>sandbox</b> died","retry_status":{"type":"exhausted"},` +
			`"source":{"component":"hands","backend":"bwrap","reason":"sandbox_died"}}}`},
		{apitype.EventSessionStatusIdle, `{"stop_reason":{"type":"retries_exhausted"}}`},
	} {
		batch = append(batch, apitype.NewEvent{Type: ev.typ, Data: json.RawMessage(ev.data), Processed: true})
	}
	// The MCP call first: its result names it by id.
	out, err := e.st.EventAppend(ctx, &store.EventAppendParams{SessionID: failed, Events: batch[:2]})
	if err != nil {
		t.Fatal(err)
	}
	result, err := apitype.MakeEvent(apitype.EventAgentMCPToolResult, apitype.AgentMCPToolResult{MCPToolUseID: out[1].ID,
		Content: []apitype.ContentBlock{apitype.TextBlock("3 tickets about refunds")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.EventAppend(ctx, &store.EventAppendParams{SessionID: failed, Events: append([]apitype.NewEvent{result}, batch[2:]...)}); err != nil {
		t.Fatal(err)
	}
	e.open("/sessions/" + failed)
	e.wait("MCP call", `(document.querySelector('#transcript .tool-mcp')?.textContent || '').includes('tickets · search')`+
		` && (document.querySelector('#transcript .tool-mcp .result')?.textContent || '').includes('3 tickets about refunds')`)
	src := `document.querySelector('#transcript dl.source')?.textContent || ''`
	e.wait("source", `(`+src+`).includes('hands') && (`+src+`).includes('bwrap') && (`+src+`).includes('sandbox_died')`+
		` && (document.querySelector('#waterfall .wf-failure')?.textContent || '').includes('hands')`)
	if n := e.eval(`String(document.querySelectorAll('#transcript b').length)`); n != "0" {
		t.Errorf("the error's markup became %s elements", n)
	}

	// The stream resumes after a drop from the last event it had, and misses nothing appended meanwhile.
	e.wait("live", `document.getElementById('stream-state')?.dataset.state === 'live'`)
	e.mu.Lock()
	streams := len(e.resumes)
	e.mu.Unlock()
	var list struct{ Data []struct{ ID string } }
	e.api("GET", "/v1/sessions/"+failed+"/events?order=desc&limit=1", nil, &list)
	last := list.Data[0].ID
	e.front.CloseClientConnections()
	msg, err := apitype.MakeEvent(apitype.EventAgentMessage, map[string]any{"content": []any{map[string]any{"type": "text", "text": "after the drop"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.EventAppend(ctx, &store.EventAppendParams{SessionID: failed, Events: []apitype.NewEvent{msg}}); err != nil {
		t.Fatal(err)
	}
	e.wait("resumed", transcriptHas("after the drop")+` && document.getElementById('stream-state')?.dataset.state === 'live'`)
	e.mu.Lock()
	resumed := slices.Clone(e.resumes[streams:])
	e.mu.Unlock()
	if len(resumed) == 0 || resumed[0] != last {
		t.Errorf("after the drop the stream reopened with Last-Event-ID %q, want the last event read, %s", resumed, last)
	}
	if n := e.eval(`String([...document.querySelectorAll('#transcript .msg.agent')].filter(el => el.textContent.includes('after the drop')).length)`); n != "1" {
		t.Errorf("the event after the drop is shown %s times", n)
	}
}

// TestConsoleBudget: the session page shows the list cost and the budget, a turn paused at its budget says so,
// and a raised budget shows the resumed turn's cost.
func TestConsoleBudget(t *testing.T) {
	e := newEnv(t, false)
	agent := e.create("/v1/agents", map[string]any{"name": "thrifty", "model": "claude-sonnet-4-5",
		"tools": []any{map[string]any{"type": "agent_toolset_20260401"}}})
	envID := e.create("/v1/environments", map[string]any{"name": "budget", "config": map[string]any{"type": "cloud"}})
	budget := func(cents string) map[string]any {
		return map[string]any{"type": "limit", "max_list_cost": map[string]any{"amount": cents, "currency": "USD"}}
	}
	sess := e.create("/v1/sessions", map[string]any{"agent": agent, "environment_id": envID, "budget": budget("1")})
	// 1000 in / 500 out at $3 / $15 per million: 1.05 cents, shown as $0.02; the second request adds 2.4 cents.
	e.fake.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"true"}`}},
			Usage: modeltest.Usage{InputTokens: 1000, OutputTokens: 500}},
		modeltest.Turn{Text: "All done within budget.", Usage: modeltest.Usage{InputTokens: 3000, OutputTokens: 1000}},
	)
	e.open("/sessions")
	e.wait("login form", `!!document.getElementById('api-key')`)
	e.do("key", chromedp.SendKeys(chromedp.ID("api-key"), key+"\n"))
	e.wait("sessions list", `!!document.querySelector('table.sessions')`)
	e.open("/sessions/" + sess)
	e.wait("stream live", `document.getElementById('stream-state')?.dataset.state === 'live'`+
		` && document.getElementById('session-cost')?.textContent === '$0.00' && document.getElementById('session-budget')?.textContent === '$0.01 cap'`)
	e.message(sess, "Run it.")
	e.wait("paused at the budget", transcriptHas("the budget is spent")+
		` && document.querySelector('#session-status .badge')?.textContent === 'idle'`+
		` && document.getElementById('session-cost')?.textContent === '$0.02'`)
	e.shot("budget-reached")
	e.api("POST", "/v1/sessions/"+sess, map[string]any{"budget": budget("100")}, nil)
	e.wait("resumed", transcriptHas("All done within budget")+
		` && document.getElementById('session-budget')?.textContent === '$1.00 cap'`+
		` && document.getElementById('session-cost')?.textContent === '$0.04'`)
}

// TestKillSandboxOnlyOwn: killSandbox kills only what descends from this test process. A process of the same
// command outside it (a concurrent test run's sandbox, the user's own) survives, as do its ancestors.
func TestKillSandboxOnlyOwn(t *testing.T) {
	t.Parallel()
	command := fmt.Sprintf("sleep %d", 100000+os.Getpid()%100000)
	// Started through a shell that exits at once: the sleep is reparented away from this test process.
	out, err := exec.Command("sh", "-c", command+" >/dev/null 2>&1 & echo $!").Output()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("pid %q: %v", out, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the stray process %d is not running: %v", pid, err)
	}
	if n := killSandbox(t, command); n != 0 {
		t.Errorf("killSandbox killed %d processes of a stray %q outside this test", n, command)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Errorf("the stray process %d was killed: %v", pid, err)
	}
}

// TestConsoleOutcome: the session view shows an outcome readably: its definition with the rubric, each
// evaluation as it starts, and the grader's verdicts with their explanations and criteria.
func TestConsoleOutcome(t *testing.T) {
	e := newEnv(t, false)
	agent := e.create("/v1/agents", map[string]any{"name": "graded", "model": "claude-sonnet-4-5"})
	envID := e.create("/v1/environments", map[string]any{"name": "outcome", "config": map[string]any{"type": "cloud"}})
	sess := e.create("/v1/sessions", map[string]any{"agent": agent, "environment_id": envID})
	verdict := func(result, explanation string) modeltest.Turn {
		in, _ := json.Marshal(map[string]any{"result": result, "explanation": explanation,
			"criteria": []any{map[string]any{"criterion": "Rhymes", "met": result == "satisfied", "explanation": explanation}}})
		return modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "record_evaluation", Input: string(in)}}}
	}
	e.fake.Script(modeltest.Turn{Text: "Roses are red."}, verdict("needs_revision", "It does not rhyme yet."),
		modeltest.Turn{Text: "Roses are red, violets are blue, I rhyme now."}, verdict("satisfied", "It rhymes."))
	e.login()
	e.open("/sessions/" + sess)
	e.wait("stream live", `document.getElementById('stream-state')?.dataset.state === 'live'`)
	e.api("POST", "/v1/sessions/"+sess+"/events", map[string]any{"events": []any{map[string]any{
		"type": "user.define_outcome", "description": "Write a rhyming couplet.",
		"rubric": map[string]any{"type": "text", "content": "It rhymes."}}}}, nil)
	e.wait("graded", transcriptHas("Write a rhyming couplet.")+" && "+transcriptHas("Grading the outcome (evaluation 2)")+
		" && "+transcriptHas("Needs revision: the agent revises")+" && "+transcriptHas("It does not rhyme yet.")+
		" && "+transcriptHas("✗ Rhymes")+" && "+transcriptHas("Satisfied")+" && "+transcriptHas("✓ Rhymes")+
		` && document.querySelectorAll('#transcript .outcome-end').length === 2`+
		` && !document.querySelector('#transcript .ev.unknown')`)
	e.shot("outcome")
}
