package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/lib/environments"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// selfHosted creates a self_hosted environment, a key for it and a session in it.
func (h *harness) selfHosted(ctx context.Context, agentID string) (envID, key, sessionID string) {
	h.t.Helper()
	e, err := h.client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "hosted " + apitype.NewID(""),
		Config: anthropic.BetaEnvironmentNewParamsConfigUnion{OfSelfHosted: &anthropic.BetaSelfHostedConfigParams{}}})
	if err != nil {
		h.t.Fatal(err)
	}
	status, _, body := h.do("POST", "/v1/environments/"+e.ID+"/keys", `{"name":"w"}`)
	var k apitype.EnvironmentKey
	decodeRaw(h.t, string(body), &k)
	if status != http.StatusOK || !strings.HasPrefix(k.Key, apitype.EnvironmentKeyPrefix) || k.EnvironmentID != e.ID {
		h.t.Fatalf("create key: %d %s", status, body)
	}
	return e.ID, k.Key, h.newSession(ctx, agentID, e.ID)
}

// queue queues the session's work item, as the brain does when its built-in tool calls wait.
func (h *harness) queue(ctx context.Context, envID, sessionID string) *apitype.Work {
	h.t.Helper()
	w, _, err := h.store.WorkEnsure(ctx, &store.WorkEnsureParams{ID: apitype.NewID(apitype.PrefixWork),
		EnvironmentID: envID, SessionID: sessionID, At: apitype.Now()})
	if err != nil {
		h.t.Fatal(err)
	}
	return w
}

func bearer(key string) []string { return []string{"Authorization", "Bearer " + key} }

// TestWorkPollerSDK: the SDK's WorkPoller claims an item with the environment key; the item's secret carries a
// sessions token the SDK's parser finds, which heartbeats (412 on a stale expectation, with the current state)
// and stops the item.
func TestWorkPollerSDK(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *api.Config) { c.WorkLeaseTTL = 10 * time.Second })
	ctx := ctxT(t)
	agentID, _ := h.seed(ctx)
	envID, key, sessID := h.selfHosted(ctx, agentID)

	drain := environments.NewWorkPoller(ctx, h.client, environments.WorkPollerOptions{EnvironmentID: envID,
		EnvironmentKey: key, Drain: true, BlockMs: param.Null[int64](), WorkerID: "w1"})
	if drain.Next() || drain.Err() != nil {
		t.Fatalf("an empty queue gave an item or %v", drain.Err())
	}
	drain.Close()

	queued := h.queue(ctx, envID, sessID)
	p := environments.NewWorkPoller(ctx, h.client, environments.WorkPollerOptions{EnvironmentID: envID,
		EnvironmentKey: key, AutoStop: param.NewOpt(false), WorkerID: "w1"})
	defer p.Close()
	if !p.Next() {
		t.Fatalf("poller: %v", p.Err())
	}
	w := p.Current()
	if w.ID != queued.ID || w.Data.Type != "session" || w.Data.ID != sessID || w.EnvironmentID != envID {
		t.Fatalf("polled %+v", w)
	}
	token := apitype.SessionsTokenFromSecret(w.Secret)
	if !strings.HasPrefix(token, apitype.SessionsTokenPrefix) {
		t.Fatalf("secret %q carries no sessions token", w.Secret)
	}
	got, err := h.store.WorkGet(ctx, envID, w.ID)
	if err != nil || got.State != apitype.WorkStarting || got.WorkerID != "w1" {
		t.Fatalf("after the poller's ack: %+v, %v", got, err)
	}

	tok := []option.RequestOption{option.WithAuthToken(token)}
	hb, err := h.client.Beta.Environments.Work.Heartbeat(ctx, w.ID, anthropic.BetaEnvironmentWorkHeartbeatParams{
		EnvironmentID: envID, ExpectedLastHeartbeat: param.NewOpt(apitype.NoHeartbeat)}, tok...)
	if err != nil || !hb.LeaseExtended || hb.State != "active" || hb.TTLSeconds != 10 || hb.LastHeartbeat == "" {
		t.Fatalf("first heartbeat %+v, %v", hb, err)
	}
	_, err = h.client.Beta.Environments.Work.Heartbeat(ctx, w.ID, anthropic.BetaEnvironmentWorkHeartbeatParams{
		EnvironmentID: envID, ExpectedLastHeartbeat: param.NewOpt(apitype.NoHeartbeat)}, tok...)
	aerr := wantAPIError(t, err, http.StatusPreconditionFailed, apitype.ErrInvalidRequest)
	var env envelope
	decodeRaw(t, aerr.RawJSON(), &env)
	cur, _ := env.Error.Details["current_state"].(map[string]any)
	if env.Error.Details["error_code"] != "heartbeat_precondition_failed" || cur["state"] != "active" ||
		cur["last_heartbeat"] != hb.LastHeartbeat {
		t.Fatalf("412 details %v", env.Error.Details)
	}
	hb2, err := h.client.Beta.Environments.Work.Heartbeat(ctx, w.ID, anthropic.BetaEnvironmentWorkHeartbeatParams{
		EnvironmentID: envID, ExpectedLastHeartbeat: param.NewOpt(hb.LastHeartbeat), DesiredTTLSeconds: param.NewOpt(int64(5))}, tok...)
	if err != nil || hb2.TTLSeconds != 5 {
		t.Fatalf("heartbeat echoing last_heartbeat: %+v, %v", hb2, err)
	}

	// The token reads its own session and nothing else.
	if _, err := h.client.Beta.Sessions.Get(ctx, sessID, anthropic.BetaSessionGetParams{}, tok...); err != nil {
		t.Fatalf("the token reads its session: %v", err)
	}

	status, _, body := h.do("POST", "/v1/environments/"+envID+"/work/"+w.ID+"/stop", `{"force":true}`, bearer(token)...)
	if status != http.StatusOK || !strings.Contains(string(body), `"state":"stopped"`) {
		t.Fatalf("stop: %d %s", status, body)
	}
	status, _, _ = h.do("POST", "/v1/environments/"+envID+"/work/"+w.ID+"/stop", "", bearer(key)...)
	if status != http.StatusConflict {
		t.Fatalf("stop of a stopped item: %d", status)
	}
	status, _, _ = h.do("POST", "/v1/environments/"+envID+"/work/"+w.ID+"/heartbeat?expected_last_heartbeat=NO_HEARTBEAT", "", bearer(token)...)
	if status != http.StatusUnauthorized {
		t.Fatalf("the token of a stopped item: %d, want 401", status)
	}

	var st apitype.WorkQueueStats
	status, _, body = h.do("GET", "/v1/environments/"+envID+"/work/stats", "", bearer(key)...)
	decodeRaw(t, string(body), &st)
	if status != http.StatusOK || st.WorkersPolling != 1 || st.Depth != 0 || st.Type != "work_queue_stats" {
		t.Fatalf("stats %d %s", status, body)
	}
	list, err := h.client.Beta.Environments.Work.List(ctx, envID, anthropic.BetaEnvironmentWorkListParams{}, option.WithAuthToken(key))
	if err != nil || len(list.Data) != 1 || list.Data[0].State != "stopped" || list.Data[0].Secret != "" {
		t.Fatalf("list %+v, %v", list, err)
	}
	upd, err := h.client.Beta.Environments.Work.Update(ctx, w.ID, anthropic.BetaEnvironmentWorkUpdateParams{EnvironmentID: envID,
		BetaSelfHostedWorkUpdateRequest: anthropic.BetaSelfHostedWorkUpdateRequestParam{Metadata: map[string]string{"k": "v"}}})
	if err != nil || upd.Metadata["k"] != "v" {
		t.Fatalf("update %+v, %v", upd, err)
	}
	// Two concurrent updates that each fit the 16 pairs but not together: the limit is checked in the store's
	// transaction, so one of them is refused and the item never holds more than 16 pairs.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		md := map[string]string{}
		for j := range 10 {
			md[fmt.Sprintf("u%d-%d", i, j)] = "x"
		}
		wg.Go(func() {
			_, errs[i] = h.client.Beta.Environments.Work.Update(ctx, w.ID, anthropic.BetaEnvironmentWorkUpdateParams{EnvironmentID: envID,
				BetaSelfHostedWorkUpdateRequest: anthropic.BetaSelfHostedWorkUpdateRequestParam{Metadata: md}})
		})
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Errorf("concurrent updates over the limit together: errors %v and %v, want exactly one refused", errs[0], errs[1])
	}
	for _, err := range errs {
		if err != nil {
			if aerr := wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest); !strings.Contains(aerr.Message, "at most 16 pairs") {
				t.Errorf("refused update: %s", aerr.Message)
			}
		}
	}
	stored, err := h.client.Beta.Environments.Work.Get(ctx, w.ID, anthropic.BetaEnvironmentWorkGetParams{EnvironmentID: envID})
	if err != nil || len(stored.Metadata) != 11 {
		t.Fatalf("after the concurrent updates: %v, %d pairs, want 11: %v", err, len(stored.Metadata), stored.Metadata)
	}
	// An empty value deletes its key.
	upd, err = h.client.Beta.Environments.Work.Update(ctx, w.ID, anthropic.BetaEnvironmentWorkUpdateParams{EnvironmentID: envID,
		BetaSelfHostedWorkUpdateRequest: anthropic.BetaSelfHostedWorkUpdateRequestParam{Metadata: map[string]string{"k": ""}}})
	if _, ok := upd.Metadata["k"]; err != nil || ok || len(upd.Metadata) != 10 {
		t.Fatalf("delete a key: %v %v", err, upd.Metadata)
	}
}

// TestWorkAuth: who may call what. Wrong and revoked keys are 401s, a key or token of another environment,
// item or session a 403, and bad parameters 400s.
func TestWorkAuth(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, cloudEnv := h.seed(ctx)
	envID, key, sessID := h.selfHosted(ctx, agentID)
	otherEnv, otherKey, otherSess := h.selfHosted(ctx, agentID)
	w := h.queue(ctx, envID, sessID)
	other := h.queue(ctx, otherEnv, otherSess)

	var polled apitype.Work
	status, _, body := h.do("GET", "/v1/environments/"+envID+"/work/poll?block_ms=999", "", append(bearer(key), "Anthropic-Worker-ID", "w")...)
	decodeRaw(t, string(body), &polled)
	if status != http.StatusOK || polled.ID != w.ID || polled.Secret == nil {
		t.Fatalf("poll: %d %s", status, body)
	}
	token := apitype.SessionsTokenFromSecret(*polled.Secret)
	var otherPolled apitype.Work
	_, _, body = h.do("GET", "/v1/environments/"+otherEnv+"/work/poll", "", bearer(otherKey)...)
	decodeRaw(t, string(body), &otherPolled)
	if otherPolled.ID != other.ID {
		t.Fatalf("poll of the other environment: %s", body)
	}

	base := "/v1/environments/" + envID + "/work"
	for _, c := range []struct {
		name, method, path, body, cred string
		want                           int
	}{
		{"no credential", "GET", base + "/poll", "", "", http.StatusUnauthorized},
		{"wrong environment key", "GET", base + "/poll", "", apitype.EnvironmentKeyPrefix + "nope", http.StatusUnauthorized},
		{"wrong sessions token", "POST", base + "/" + w.ID + "/heartbeat", "", apitype.SessionsTokenPrefix + "nope", http.StatusUnauthorized},
		{"key of another environment", "GET", base + "/poll", "", otherKey, http.StatusForbidden},
		{"API key may not poll", "GET", base + "/poll", "", testKey, http.StatusForbidden},
		{"environment key may not get", "GET", base + "/" + w.ID, "", key, http.StatusForbidden},
		{"environment key outside the work queue", "GET", "/v1/sessions/" + sessID, "", key, http.StatusUnauthorized},
		{"token of another item", "POST", "/v1/environments/" + otherEnv + "/work/" + other.ID + "/stop", "", token, http.StatusForbidden},
		{"token on another session", "GET", "/v1/sessions/" + otherSess + "/events", "", token, http.StatusForbidden},
		{"token may not poll", "GET", base + "/poll", "", token, http.StatusForbidden},
		{"token may not send a message", "POST", "/v1/sessions/" + sessID + "/events",
			`{"events":[{"type":"user.message","content":[{"type":"text","text":"hi"}]}]}`, token, http.StatusForbidden},
		{"token outside its session", "GET", "/v1/agents", "", token, http.StatusUnauthorized},
		{"token on a skill its agent does not name", "GET", "/v1/skills/skill_other/versions/latest/content", "", token, http.StatusForbidden},
		{"token may not delete a skill version", "DELETE", "/v1/skills/skill_other/versions/1", "", token, http.StatusUnauthorized},
		{"token reads its session's events", "GET", "/v1/sessions/" + sessID + "/events", "", token, http.StatusOK},
		{"block_ms 0", "GET", base + "/poll?block_ms=0", "", key, http.StatusBadRequest},
		{"block_ms 1000", "GET", base + "/poll?block_ms=1000", "", key, http.StatusBadRequest},
		{"bad reclaim", "GET", base + "/poll?reclaim_older_than_ms=x", "", key, http.StatusBadRequest},
		{"bad ttl", "POST", base + "/" + w.ID + "/heartbeat?desired_ttl_seconds=0", "", token, http.StatusBadRequest},
		{"unknown item", "POST", base + "/work_nope/ack", "", key, http.StatusNotFound},
		{"ack", "POST", base + "/" + w.ID + "/ack", "", key, http.StatusOK},
		{"ack twice", "POST", base + "/" + w.ID + "/ack", "", key, http.StatusConflict},
		{"cloud environment has no queue", "GET", "/v1/environments/" + cloudEnv + "/work/stats", "", testKey, http.StatusBadRequest},
		{"empty poll is null", "GET", base + "/poll", "", key, http.StatusOK},
	} {
		status, _, body := h.do(c.method, c.path, c.body, bearer(c.cred)...)
		if c.cred == "" {
			status, _, body = h.do(c.method, c.path, c.body, "Authorization", "")
		}
		if status != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, status, body, c.want)
			continue
		}
		if status >= 400 {
			var env envelope
			if err := json.Unmarshal(body, &env); err != nil || env.Type != "error" || env.Error.Message == "" {
				t.Errorf("%s: not an error envelope: %s", c.name, body)
			}
		}
		if c.name == "empty poll is null" && strings.TrimSpace(string(body)) != "null" {
			t.Errorf("empty poll answered %s", body)
		}
	}

	// A sessions token answers its session's tool calls.
	use := h.appendAgent(ctx, sessID, apitype.EventAgentToolUse, apitype.AgentToolUse{Name: "bash", Input: json.RawMessage(`{}`),
		EvaluatedPermission: apitype.PermissionAllow})
	status, _, body = h.do("POST", "/v1/sessions/"+sessID+"/events",
		`{"events":[{"type":"user.tool_result","tool_use_id":"`+use.ID+`","content":[{"type":"text","text":"ok"}]}]}`, bearer(token)...)
	if status != http.StatusOK {
		t.Fatalf("tool result with the token: %d %s", status, body)
	}

	// A revoked key stops working at once.
	keys, err := h.store.EnvironmentKeyList(ctx, envID)
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys %v, %v", keys, err)
	}
	status, _, body = h.do("GET", "/v1/environments/"+envID+"/keys", "")
	if status != http.StatusOK || strings.Contains(string(body), `"key"`) || strings.Contains(string(body), key) {
		t.Fatalf("key list shows the secret: %d %s", status, body)
	}
	if status, _, body := h.do("DELETE", "/v1/environments/"+envID+"/keys/"+keys[0].ID, ""); status != http.StatusOK {
		t.Fatalf("revoke: %d %s", status, body)
	}
	if status, _, _ := h.do("GET", base+"/poll", "", bearer(key)...); status != http.StatusUnauthorized {
		t.Fatalf("poll with a revoked key: %d", status)
	}
	if status, _, _ := h.do("GET", "/v1/sessions/"+sessID+"/events", "", bearer(token)...); status != http.StatusUnauthorized {
		t.Fatalf("the sessions token of an item the revoked key polled: %d, want 401", status)
	}
	if status, _, _ := h.do("DELETE", "/v1/environments/"+otherEnv+"/keys/"+keys[0].ID, ""); status != http.StatusNotFound {
		t.Fatalf("revoke through another environment: %d", status)
	}
}
