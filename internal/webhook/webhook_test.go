package webhook

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

const (
	eventID   = "whe_011CZkZx7mWqR4aBCdEfGhJk"
	sessionID = "sesn_011CZkZx7mWqR4aBCdEfGhJk"
	payload   = `{"type":"event","id":"` + eventID + `","created_at":"2026-12-02T10:00:00Z","data":{"type":"session.status_idled","id":"` + sessionID + `"}}`
)

// unwrap verifies a delivery as a receiver does, with the official SDK.
func unwrap(secret string, body []byte, h http.Header) (*anthropic.UnwrapWebhookEvent, error) {
	client := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithWebhookKey(secret))
	return client.Beta.Webhooks.Unwrap(body, h)
}

// endpoint starts a real TLS server on 127.0.0.1 and returns a Sender that trusts its certificate and, unless
// untrusted, its address (--egress-allow-internal), with cfg's other settings.
func endpoint(t *testing.T, h http.Handler, cfg SenderConfig, untrusted bool) (*httptest.Server, *Sender) {
	t.Helper()
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	cfg.RootCAs = srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	if !untrusted {
		cfg.AllowInternal = append(cfg.AllowInternal, srv.Listener.Addr().String())
	}
	return srv, NewSender(cfg)
}

func newSecret(t *testing.T) string {
	t.Helper()
	s, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNewSecret(t *testing.T) {
	a, b := newSecret(t), newSecret(t)
	if a == b {
		t.Fatal("two secrets are equal")
	}
	for _, s := range []string{a, b} {
		enc, ok := strings.CutPrefix(s, "whsec_")
		if !ok {
			t.Fatalf("secret %q has no whsec_ prefix", s)
		}
		if k, err := base64.StdEncoding.DecodeString(enc); err != nil || len(k) != 32 {
			t.Fatalf("secret decodes to %d bytes, %v; want 32", len(k), err)
		}
	}
}

// TestSignStandardVector checks Sign against the Standard Webhooks libraries' own test vector.
func TestSignStandardVector(t *testing.T) {
	h, err := Sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0),
		[]byte(`{"test": 2432232314}`))
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"webhook-id":        "msg_p5jXN8AQM9LWM0D4loKWxJek",
		"webhook-timestamp": "1614265330",
		"webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
	} {
		if got := h.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}

func TestSignVerifiedBySDK(t *testing.T) {
	secret := newSecret(t)
	now := time.Now()
	h, err := Sign(secret, "msg_1", now, []byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := unwrap(secret, []byte(payload), h)
	if err != nil {
		t.Fatalf("Unwrap: %v", err)
	}
	if ev.ID != eventID || ev.Data.ID != sessionID || ev.Data.Type != "session.status_idled" {
		t.Fatalf("unwrapped %+v", ev)
	}

	tampered := strings.Replace(payload, sessionID, "sesn_other", 1)
	if _, err := unwrap(secret, []byte(tampered), h); err == nil {
		t.Error("Unwrap accepted a tampered body")
	}
	if _, err := unwrap(newSecret(t), []byte(payload), h); err == nil {
		t.Error("Unwrap accepted another secret's signature")
	}
	other := h.Clone()
	other.Set("webhook-id", "msg_2")
	if _, err := unwrap(secret, []byte(payload), other); err == nil {
		t.Error("Unwrap accepted a signature of another message id")
	}
	old, err := Sign(secret, "msg_1", now.Add(-10*time.Minute), []byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unwrap(secret, []byte(payload), old); err == nil {
		t.Error("Unwrap accepted a timestamp 10 minutes old")
	}
}

func TestSignMalformedSecret(t *testing.T) {
	for _, s := range []string{
		"",
		"whsec_",
		base64.StdEncoding.EncodeToString(make([]byte, 32)),                // no prefix
		"whsec_!!!!" + base64.StdEncoding.EncodeToString(make([]byte, 32)), // not base64
		"whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 8)),      // too short
		"whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 65)),     // too long
	} {
		h, err := Sign(s, "msg_1", time.Now(), []byte(payload))
		if err == nil {
			t.Errorf("Sign(%q) = %v, want an error", s, h)
			continue
		}
		if enc, _ := strings.CutPrefix(s, "whsec_"); len(enc) > 4 && strings.Contains(err.Error(), enc) {
			t.Errorf("Sign(%q)'s error quotes the secret: %v", s, err)
		}
	}
}

// TestSendVerifiedBySDK: a real TLS endpoint on 127.0.0.1, trusted by the operator, verifies every delivery with
// the official SDK.
func TestSendVerifiedBySDK(t *testing.T) {
	secret := newSecret(t)
	var verified, failed atomic.Int32
	srv, s := endpoint(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ev, err := unwrap(secret, body, r.Header)
		switch {
		case err != nil:
			failed.Add(1)
			http.Error(w, "verify: "+err.Error(), http.StatusBadRequest)
		case r.Method != http.MethodPost || r.URL.Path != "/hooks/corral" || r.URL.RawQuery != "token=t0k3n" ||
			r.Header.Get("Content-Type") != "application/json" || r.Header.Get("User-Agent") != "Corral-Webhooks/1" ||
			ev.ID != eventID || ev.Data.ID != sessionID:
			failed.Add(1)
			http.Error(w, fmt.Sprintf("unexpected %s %s %v %+v", r.Method, r.URL, r.Header, ev), http.StatusBadRequest)
		default:
			verified.Add(1)
			_, _ = io.WriteString(w, `{"ok":true}`)
		}
	}), SenderConfig{}, false)
	for i := range 3 { // the second and third reuse the kept-alive connection
		res := s.Send(t.Context(), srv.URL+"/hooks/corral?token=t0k3n", secret, fmt.Sprintf("msg_%d", i), time.Now(), []byte(payload))
		if !res.Delivered || res.Status != 200 || res.Permanent || res.Err != "" || string(res.Body) != `{"ok":true}` || res.Duration <= 0 {
			t.Fatalf("attempt %d: %+v", i, res)
		}
	}
	if verified.Load() != 3 || failed.Load() != 0 {
		t.Fatalf("endpoint verified %d, failed %d; want 3, 0", verified.Load(), failed.Load())
	}

	// Signed with another secret, the endpoint refuses the delivery: a 400 is not delivered, and retryable.
	res := s.Send(t.Context(), srv.URL+"/hooks/corral?token=t0k3n", newSecret(t), "msg_x", time.Now(), []byte(payload))
	if res.Delivered || res.Permanent || res.Status != 400 || !strings.HasPrefix(res.Err, "HTTP 400: verify: ") {
		t.Fatalf("delivery with another secret: %+v", res)
	}
	if failed.Load() != 1 {
		t.Fatalf("endpoint failed %d verifications, want 1", failed.Load())
	}
}

// TestSendRefusesInternal: a loopback endpoint the operator does not trust is refused before any connection.
func TestSendRefusesInternal(t *testing.T) {
	var hits atomic.Int32
	count := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
	secret := newSecret(t)
	for name, cfg := range map[string]SenderConfig{
		"none":       {},
		"other port": {AllowInternal: []string{"127.0.0.1:1"}},
	} {
		srv, s := endpoint(t, count, cfg, true)
		_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
		for _, u := range []string{srv.URL + "/hook", "https://localhost:" + port + "/hook", "https://[::ffff:127.0.0.1]:" + port + "/hook"} {
			res := s.Send(t.Context(), u, secret, "msg_1", time.Now(), []byte(payload))
			if res.Delivered || !res.Permanent || res.Status != 0 || !strings.HasPrefix(res.Err, "connect: destination not allowed: ") {
				t.Errorf("%s: %s: %+v", name, u, res)
			}
			if strings.Contains(res.Err, secret) || strings.Contains(res.Err, "/hook") {
				t.Errorf("%s: Err %q quotes the secret or the URL", name, res.Err)
			}
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("the endpoint saw %d requests, want none", hits.Load())
	}
}

func TestSendRedirectNotFollowed(t *testing.T) {
	var followed atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/hook", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/elsewhere", http.StatusFound) })
	mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, r *http.Request) { followed.Add(1) })
	srv, s := endpoint(t, mux, SenderConfig{}, false)
	for _, code := range []int{http.StatusFound, http.StatusTemporaryRedirect} {
		mux.HandleFunc(fmt.Sprintf("/hook%d", code), func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/elsewhere", code)
		})
		res := s.Send(t.Context(), fmt.Sprintf("%s/hook%d", srv.URL, code), newSecret(t), "msg_1", time.Now(), []byte(payload))
		want := fmt.Sprintf("HTTP %d: redirects are not followed (Location: /elsewhere)", code)
		if res.Delivered || !res.Permanent || res.Status != code || res.Err != want {
			t.Errorf("%d: %+v, want Err %q", code, res, want)
		}
	}
	if followed.Load() != 0 {
		t.Fatalf("a redirect was followed %d times", followed.Load())
	}
}

func TestSendServerError(t *testing.T) {
	body := "boom\n\x1b[31mred\u202e" + strings.Repeat("x", 500)
	srv, s := endpoint(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, body)
	}), SenderConfig{}, false)
	res := s.Send(t.Context(), srv.URL, newSecret(t), "msg_1", time.Now(), []byte(payload))
	if res.Delivered || res.Permanent || res.Status != 500 {
		t.Fatalf("%+v", res)
	}
	// The start of the body, control and bidi characters replaced, cut at 200 bytes.
	want := "HTTP 500: boom \uFFFD[31mred\uFFFD" + strings.Repeat("x", 200-len("boom \uFFFD[31mred\uFFFD"))
	if res.Err != want {
		t.Fatalf("Err = %q, want %q", res.Err, want)
	}
	if string(res.Body) != body {
		t.Fatalf("Body = %q, want the whole answer", res.Body)
	}
}

// TestSendTimeout: an endpoint that never answers, or stops in the middle of its body, is cut by the timeout.
func TestSendTimeout(t *testing.T) {
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/silent", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	mux.HandleFunc("/stalled", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "part")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	srv, s := endpoint(t, mux, SenderConfig{Timeout: 300 * time.Millisecond}, false)
	t.Cleanup(func() { close(release) }) // before srv.Close, which waits for the handlers
	res := s.Send(t.Context(), srv.URL+"/silent", newSecret(t), "msg_1", time.Now(), []byte(payload))
	if res.Delivered || res.Permanent || res.Status != 0 || res.Err != "timeout after 300ms" {
		t.Errorf("silent: %+v", res)
	}
	res = s.Send(t.Context(), srv.URL+"/stalled", newSecret(t), "msg_1", time.Now(), []byte(payload))
	if res.Delivered || res.Permanent || res.Status != 200 || res.Err != "read response: timeout after 300ms" || string(res.Body) != "part" {
		t.Errorf("stalled: %+v", res)
	}

	// The caller's context is honoured too.
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		time.Sleep(50 * time.Millisecond)
		cancel()
	}()
	res = NewSender(SenderConfig{Timeout: time.Hour, RootCAs: s.client.Transport.(*http.Transport).TLSClientConfig.RootCAs,
		AllowInternal: []string{srv.Listener.Addr().String()}}).Send(ctx, srv.URL+"/silent", newSecret(t), "msg_1", time.Now(), []byte(payload))
	if res.Delivered || res.Permanent || res.Err != "canceled: context canceled" {
		t.Errorf("canceled: %+v", res)
	}
}

// TestSendBoundsResponse: an endpoint answering an endless body is read MaxResponseBytes, and the memory the
// attempt allocates stays far below what the endpoint offers.
func TestSendBoundsResponse(t *testing.T) {
	const offered = 512 << 20
	written := make(chan int64, 1)
	srv, s := endpoint(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte(strings.Repeat("y", 64<<10))
		var n int64
		for n < offered {
			m, err := w.Write(chunk)
			n += int64(m)
			if err != nil {
				break
			}
		}
		written <- n
	}), SenderConfig{MaxResponseBytes: 1000}, false)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res := s.Send(t.Context(), srv.URL, newSecret(t), "msg_1", time.Now(), []byte(payload))
	runtime.ReadMemStats(&after)
	if !res.Delivered || res.Status != 200 || len(res.Body) != 1000 || string(res.Body) != strings.Repeat("y", 1000) {
		t.Fatalf("Status %d Delivered %v Err %q, %d body bytes", res.Status, res.Delivered, res.Err, len(res.Body))
	}
	if n := <-written; n >= offered {
		t.Fatalf("the endpoint wrote its whole body (%d bytes): the sender read it all", n)
	}
	// Server and client share the process: the bound covers both, still far below what was offered.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
		t.Fatalf("the attempt allocated %d bytes", alloc)
	}
}

func TestSendUntrustedCertificate(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	srv.StartTLS()
	defer srv.Close()
	s := NewSender(SenderConfig{AllowInternal: []string{srv.Listener.Addr().String()}}) // system roots
	res := s.Send(t.Context(), srv.URL, newSecret(t), "msg_1", time.Now(), []byte(payload))
	if res.Delivered || res.Permanent || res.Status != 0 || !strings.Contains(res.Err, "certificate") {
		t.Fatalf("%+v", res)
	}
}

func TestSendBadURL(t *testing.T) {
	s := NewSender(SenderConfig{})
	for _, u := range []string{"ftp://example.com/x", "file:///etc/passwd", "https://user:pw@example.com/", "example.com/hook", ""} {
		res := s.Send(t.Context(), u, newSecret(t), "msg_1", time.Now(), []byte(payload))
		if res.Delivered || !res.Permanent || res.Status != 0 || res.Err == "" || strings.Contains(res.Err, "pw") {
			t.Errorf("%q: %+v", u, res)
		}
	}
}

func TestValidateURL(t *testing.T) {
	for raw, ok := range map[string]bool{
		"https://example.com/hooks":           true,
		"http://example.com:8080/a/b?x=1&y=2": true,
		"HTTPS://Example.COM/":                true,
		"https://[2001:db8::1]:8443/h":        true,
		"https://10.0.0.1/h":                  true, // reachability is the egress rules' at each delivery
		"https://example.com/" + strings.Repeat("a", 2048-len("https://example.com/")): true,
		"https://example.com/" + strings.Repeat("a", 2049-len("https://example.com/")): false,
		"":                             false,
		"/relative/path":               false,
		"example.com/hooks":            false,
		"ftp://example.com/":           false,
		"ws://example.com/":            false,
		"https:example.com":            false,
		"https://":                     false,
		"https:///path":                false,
		"https://:443/":                false,
		"https://user@example.com/":    false,
		"https://user:pw@example.com/": false,
		"https://example.com/#frag":    false,
		"https://example.com/#":        false,
		"https://exa mple.com/":        false,
		"https://example.com:port/":    false,
		"https://example.com/\x00":     false,
		"javascript:alert(1)":          false,
	} {
		if err := ValidateURL(raw); (err == nil) != ok {
			t.Errorf("ValidateURL(%q) = %v, want ok=%v", raw, err, ok)
		} else if err != nil && strings.Contains(raw, "pw") && strings.Contains(err.Error(), "pw") {
			t.Errorf("ValidateURL(%q) = %v quotes the password", raw, err)
		}
	}
}

func TestBackoff(t *testing.T) {
	for attempt := 1; attempt <= 20; attempt++ {
		d := min(5*time.Second<<(attempt-1), time.Hour)
		seen := map[time.Duration]bool{}
		for range 200 {
			got := Backoff(attempt)
			if got < d/2 || got > d {
				t.Fatalf("Backoff(%d) = %v, want in [%v, %v]", attempt, got, d/2, d)
			}
			seen[got] = true
		}
		if len(seen) < 2 {
			t.Errorf("Backoff(%d) gave one value in 200 draws: no jitter", attempt)
		}
	}
	for _, attempt := range []int{0, -1} {
		if got := Backoff(attempt); got < 2500*time.Millisecond || got > 5*time.Second {
			t.Errorf("Backoff(%d) = %v, want the first delay's range", attempt, got)
		}
	}
	if got := Backoff(1 << 30); got < 30*time.Minute || got > time.Hour {
		t.Errorf("Backoff(1<<30) = %v, want in [30m, 1h]", got)
	}
}
