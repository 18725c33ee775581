package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"go.uber.org/goleak"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/vault"
)

const testKey = "test-key"

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// harness is a real API server on httptest over a SQLite store in a temporary directory, and an official SDK
// client pointed at it.
type harness struct {
	t      *testing.T
	store  store.Store
	srv    *httptest.Server
	client anthropic.Client
	// vault is the Sealer of the server: it opens what the API sealed.
	vault *vault.Vault
	// dbPath is the SQLite file of the store.
	dbPath string
	api    *api.Server
}

func newHarness(t *testing.T, tweak ...func(*api.Config)) *harness {
	t.Helper()
	dbPath := filepath.Join(t.TempDir(), "corral.db")
	st, err := sqlite.Open(context.Background(), "sqlite://"+dbPath)
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	v, err := vault.Open(context.Background(), st, vault.NewKey())
	if err != nil {
		t.Fatalf("open vault: %v", err)
	}
	cfg := api.Config{
		Sealer:            v,
		Store:             st,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
		Keys:              &api.KeyAuth{Static: testKey, Store: st},
		HeartbeatInterval: 50 * time.Millisecond,
		PollInterval:      50 * time.Millisecond,
	}
	for _, f := range tweak {
		f(&cfg)
	}
	a := newAPI(t, cfg)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	client := anthropic.NewClient(
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(srv.URL),
		option.WithAPIKey(testKey),
		option.WithMaxRetries(0),
		option.WithHTTPClient(srv.Client()),
	)
	return &harness{t: t, store: st, srv: srv, client: client, vault: v, dbPath: dbPath, api: a}
}

// setClock replaces the clock of the harness's server.
func (h *harness) setClock(now func() time.Time) { h.api.SetClock(now) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// do sends a raw request with the test key and returns status, headers and body.
func (h *harness) do(method, path, body string, hdr ...string) (int, http.Header, []byte) {
	h.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctxT(h.t), method, h.srv.URL+path, rd) // fail, never hang
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// envelope is the error body.
type envelope struct {
	Type  string `json:"type"`
	Error struct {
		Type    apitype.ErrorType `json:"type"`
		Message string            `json:"message"`
		Details map[string]any    `json:"details"`
	} `json:"error"`
	RequestID string `json:"request_id"`
}

// wantAPIError asserts err is an *anthropic.Error with the status and error type, and returns it.
func wantAPIError(t *testing.T, err error, status int, typ apitype.ErrorType) *anthropic.Error {
	t.Helper()
	var aerr *anthropic.Error
	if !errors.As(err, &aerr) {
		t.Fatalf("got error %v (%T), want *anthropic.Error %d %s", err, err, status, typ)
	}
	if aerr.StatusCode != status || string(aerr.Type()) != string(typ) {
		t.Fatalf("got %d %s (%s), want %d %s", aerr.StatusCode, aerr.Type(), aerr.Message, status, typ)
	}
	if !strings.HasPrefix(aerr.RequestID, apitype.PrefixRequest) {
		t.Errorf("request id %q, want req_...", aerr.RequestID)
	}
	return aerr
}

// decodeRaw decodes an SDK result's raw JSON into v.
func decodeRaw(t *testing.T, raw string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(raw), v); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
}

// seed creates an agent and a cloud environment and returns their ids.
func (h *harness) seed(ctx context.Context) (agentID, envID string) {
	h.t.Helper()
	a, err := h.client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
		Name:  "seed agent",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-6"},
		Tools: []anthropic.BetaAgentNewParamsToolUnion{{
			OfCustom: &anthropic.BetaManagedAgentsCustomToolParams{
				Name: "lookup", Description: "look something up",
				InputSchema: anthropic.BetaManagedAgentsCustomToolInputSchemaParam{
					Properties: map[string]any{"q": map[string]any{"type": "string"}}, Required: []string{"q"},
				},
			},
		}},
	})
	if err != nil {
		h.t.Fatalf("create agent: %v", err)
	}
	e, err := h.client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "seed env"})
	if err != nil {
		h.t.Fatalf("create environment: %v", err)
	}
	return a.ID, e.ID
}

// newSession creates a session on the seeded agent and environment.
func (h *harness) newSession(ctx context.Context, agentID, envID string) string {
	h.t.Helper()
	s, err := h.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent:         anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agentID)},
		EnvironmentID: envID,
	})
	if err != nil {
		h.t.Fatalf("create session: %v", err)
	}
	return s.ID
}

// appendAgent appends a server event to the log as a brain would.
func (h *harness) appendAgent(ctx context.Context, sessionID string, typ apitype.EventType, payload any) apitype.Event {
	h.t.Helper()
	ev, err := apitype.MakeEvent(typ, payload)
	if err != nil {
		h.t.Fatal(err)
	}
	out, err := h.store.EventAppend(ctx, &store.EventAppendParams{SessionID: sessionID, Events: []apitype.NewEvent{ev}})
	if err != nil {
		h.t.Fatalf("append %s: %v", typ, err)
	}
	return out[0]
}

func userText(text string) anthropic.BetaManagedAgentsEventParamsUnion {
	return anthropic.BetaManagedAgentsEventParamsOfUserMessage([]anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{
		{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: text}},
	})
}

// newAPI builds an API server from cfg.
func newAPI(t testing.TB, cfg api.Config) *api.Server {
	t.Helper()
	a, err := api.New(cfg)
	if err != nil {
		t.Fatalf("api.New: %v", err)
	}
	return a
}

// httpServer serves an API built from cfg and returns an SDK client for it.
func httpServer(t *testing.T, cfg api.Config, opts ...option.RequestOption) anthropic.Client {
	t.Helper()
	srv := httptest.NewServer(newAPI(t, cfg).Handler())
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return anthropic.NewClient(append([]option.RequestOption{option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(srv.URL), option.WithAPIKey(testKey), option.WithMaxRetries(0),
		option.WithHTTPClient(srv.Client())}, opts...)...)
}

// deafStore is a store whose subscriptions never fire, like a store written to by another process without
// cross-process notification.
type deafStore struct{ store.Store }

func (deafStore) Subscribe(string) (<-chan struct{}, func()) { return make(chan struct{}), func() {} }

func TestNewRejectsInvalidConfig(t *testing.T) {
	t.Parallel()
	if _, err := api.New(api.Config{}); err == nil {
		t.Error("api.New without a Store succeeded")
	}
	h := newHarness(t)
	if _, err := api.New(api.Config{Store: h.store, MaxBodyBytes: -1}); err == nil {
		t.Error("api.New with a negative MaxBodyBytes succeeded")
	}
	for _, cfg := range []api.Config{{MaxStreams: -1}, {MaxStreamsPerKey: -1}, {StreamWriteTimeout: -time.Second}} {
		cfg.Store = h.store
		if _, err := api.New(cfg); err == nil {
			t.Errorf("api.New with %+v succeeded", cfg)
		}
	}
}
