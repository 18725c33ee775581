// Package storetest is the conformance suite of the store port: every adapter (sqlite, postgres) runs Run, Bench
// and, from its TestMain, RunCrashChild. An adapter's test file is:
//
//	func TestMain(m *testing.M) {
//		if storetest.RunCrashChild(harness) {
//			return
//		}
//		goleak.VerifyTestMain(m)
//	}
//	func TestConformance(t *testing.T)   { storetest.Run(t, harness) }
//	func BenchmarkStore(b *testing.B)    { storetest.Bench(b, harness) }
//
// Every test opens its own store on a fresh database (Harness.NewDSN), so the tests run in parallel. The
// durability test re-executes the test binary as a child process (see RunCrashChild), kills it mid-stream with
// SIGKILL and checks that every append the child saw acknowledged is in the log.
//
// Where the port leaves a choice to the adapter, the suite accepts either answer and says so at the assertion:
// renewing or releasing a lease on a deleted session gives ErrLeaseLost or ErrNotFound; claiming an unknown
// session by id gives ErrNoWork or ErrNotFound.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// Harness is how an adapter plugs into the suite.
type Harness struct {
	// NewDSN returns the DSN of a fresh, empty database for one test (own file, or own schema).
	NewDSN func(t testing.TB) string
	// Open opens a store on a DSN (applying migrations).
	Open func(ctx context.Context, dsn string) (store.Store, error)
}

// Run runs every conformance test as a subtest of t, in parallel.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"AgentCreateGet", testAgentCreateGet},
		{"AgentPutVersion", testAgentPutVersion},
		{"AgentPutVersionRace", testAgentPutVersionRace},
		{"AgentArchive", testAgentArchive},
		{"AgentList", testAgentList},
		{"Environment", testEnvironment},
		{"EnvironmentNames", testEnvironmentNames},
		{"EnvironmentList", testEnvironmentList},
		{"SessionCreate", testSessionCreate},
		{"SessionUpdate", testSessionUpdate},
		{"SessionList", testSessionList},
		{"SessionDelete", testSessionDelete},
		{"SessionState", testSessionState},
		{"EventAppendOpen", testEventAppendOpen},
		{"EventAppend", testEventAppend},
		{"EventAppendConditions", testEventAppendConditions},
		{"EventAppendSessionState", testEventAppendSessionState},
		{"EventAppendWithID", testEventAppendWithID},
		{"EventGet", testEventGet},
		{"EventMarkProcessed", testEventMarkProcessed},
		{"EventAppendMarkProcessed", testEventAppendMarkProcessed},
		{"EventListSlices", testEventListSlices},
		{"EventListMaxBytes", testEventListMaxBytes},
		{"EventListTimeFilters", testEventListTimeFilters},
		{"ThreadEventScopes", testThreadEventScopes},
		{"ThreadAppend", testThreadAppend},
		{"ThreadAppendsConcurrent", testThreadAppendsConcurrent},
		{"ThreadArchive", testThreadArchive},
		{"ThreadList", testThreadList},
		{"ConcurrentAppendsOneSession", testConcurrentAppendsOneSession},
		{"ConcurrentAppendsManySessions", testConcurrentAppendsManySessions},
		{"ExpectedSeqRace", testExpectedSeqRace},
		{"FailedAppendsInGroup", testFailedAppendsInGroup},
		{"Subscribe", testSubscribe},
		{"Preview", testPreview},
		{"LeaseClaimNoWork", testLeaseClaimNoWork},
		{"LeaseFencing", testLeaseFencing},
		{"LeaseRenew", testLeaseRenew},
		{"LeaseReleaseWakeSeq", testLeaseReleaseWakeSeq},
		{"LeaseClaimSessionID", testLeaseClaimSessionID},
		{"LeaseClaimLimit", testLeaseClaimLimit},
		{"LeaseClaimLapsedFirst", testLeaseClaimLapsedFirst},
		{"EventAppendRelease", testEventAppendRelease},
		{"LeaseClaimRace", testLeaseClaimRace},
		{"WaitRunnable", testWaitRunnable},
		{"Leader", testLeader},
		{"APIKey", testAPIKey},
		{"Vault", testVault},
		{"VaultList", testVaultList},
		{"VaultCascade", testVaultCascade},
		{"Credential", testCredential},
		{"CredentialList", testCredentialList},
		{"SecretRewrap", testSecretRewrap},
		{"MasterKey", testMasterKey},
		{"ResourceSecret", testResourceSecret},
		{"WorkLifecycle", testWorkLifecycle},
		{"Stats", testStats},
		{"GroupCommits", testGroupCommits},
		{"WorkLeaseExpiry", testWorkLeaseExpiry},
		{"WorkDurable", testWorkDurable},
		{"WorkPollRace", testWorkPollRace},
		{"WaitWork", testWaitWork},
		{"EnvironmentKeys", testEnvironmentKeys},
		{"File", testFile},
		{"FileList", testFileList},
		{"FileExpired", testFileExpired},
		{"Skill", testSkill},
		{"Dream", testDream},
		{"DreamTarget", testDreamTarget},
		{"DreamList", testDreamList},
		{"Deployment", testDeployment},
		{"DeploymentList", testDeploymentList},
		{"DeploymentListDue", testDeploymentListDue},
		{"DeploymentFire", testDeploymentFire},
		{"DeploymentFireRace", testDeploymentFireRace},
		{"DeploymentRun", testDeploymentRun},
		{"DeploymentRunList", testDeploymentRunList},
		{"MemoryStore", testMemoryStore},
		{"MemoryStoreDelete", testMemoryStoreDelete},
		{"MemoryWrite", testMemoryWrite},
		{"MemoryPutRace", testMemoryPutRace},
		{"MemoryRenameRace", testMemoryRenameRace},
		{"MemoryList", testMemoryList},
		{"MemoryListLiteral", testMemoryListLiteral},
		{"MemoryVersions", testMemoryVersions},
		{"WebhookEndpoint", testWebhookEndpoint},
		{"WebhookEndpointList", testWebhookEndpointList},
		{"WebhookEndpointDelete", testWebhookEndpointDelete},
		{"WebhookLogEvents", testWebhookLogEvents},
		{"WebhookNoEndpointEnabled", testWebhookNoEndpointEnabled},
		{"WebhookEventAppend", testWebhookEventAppend},
		{"WebhookFanOut", testWebhookFanOut},
		{"WebhookFanOutRace", testWebhookFanOutRace},
		{"WebhookDeliveriesDue", testWebhookDeliveriesDue},
		{"WebhookClaimDue", testWebhookClaimDue},
		{"WebhookAttempt", testWebhookAttempt},
		{"WebhookDeliveryList", testWebhookDeliveryList},
		{"WebhookPrune", testWebhookPrune},
		{"Tunnel", testTunnel},
		{"TunnelArchive", testTunnelArchive},
		{"TunnelList", testTunnelList},
		{"TunnelCertificate", testTunnelCertificate},
		{"TunnelCertificateRace", testTunnelCertificateRace},
		{"TunnelCertificateList", testTunnelCertificateList},
		{"Workspace", testWorkspace},
		{"WorkspaceOwners", testWorkspaceOwners},
		{"WebhookFanOutWorkspaces", testWebhookFanOutWorkspaces},
		{"RateTake", testRateTake},
		{"Slots", testSlots},
		{"APIKeyUpdate", testAPIKeyUpdate},
		{"Close", testClose},
		{"CloseDuringAppends", testCloseDuringAppends},
		{"Durability", testDurability},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, h)
		})
	}
}

// open opens a store on a fresh database, closed when the test ends.
func (h Harness) open(t testing.TB) store.Store {
	t.Helper()
	s, err := h.Open(context.Background(), h.NewDSN(t))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return s
}

// Assertions.

func must(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func mustIs(t testing.TB, err, want error, what string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

func mustIsOneOf(t testing.TB, err error, what string, want ...error) {
	t.Helper()
	for _, w := range want {
		if errors.Is(err, w) {
			return
		}
	}
	t.Fatalf("%s: got error %v, want one of %v", what, err, want)
}

func equal[T comparable](t testing.TB, got, want T, what string) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

func sameTime(t testing.TB, got, want time.Time, what string) {
	t.Helper()
	if !got.Equal(want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

// jsonEqual reports whether two JSON documents are equal as values.
func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// Fixtures.

var ctxBg = context.Background()

// base is a fixed creation time for fixtures; tests that need distinct times add offsets.
var base = time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)

func newAgent(created time.Time) *apitype.Agent {
	return &apitype.Agent{
		Type:      apitype.ObjectAgent,
		ID:        apitype.NewID(apitype.PrefixAgent),
		Version:   1,
		Name:      "agent",
		System:    "You are helpful.",
		Model:     apitype.ModelConfig{ID: "claude-sonnet-4-5"},
		Tools:     []apitype.Tool{{Type: apitype.ToolTypeAgentToolset}},
		Metadata:  map[string]string{"team": "a"},
		CreatedAt: created,
		UpdatedAt: created,
	}
}

func newEnvironment(created time.Time) *apitype.Environment {
	return &apitype.Environment{
		Type:      apitype.ObjectEnvironment,
		ID:        apitype.NewID(apitype.PrefixEnvironment),
		Name:      "env",
		Config:    apitype.EnvConfig{Type: apitype.EnvironmentCloud, Networking: &apitype.Networking{Type: apitype.NetworkingUnrestricted}},
		Metadata:  map[string]string{},
		CreatedAt: created,
		UpdatedAt: created,
	}
}

func newSession(agentID string, agentVersion int, created time.Time) *apitype.Session {
	return &apitype.Session{
		Type:          apitype.ObjectSession,
		ID:            apitype.NewID(apitype.PrefixSession),
		EnvironmentID: "env_x",
		Status:        apitype.StatusIdle,
		Agent:         apitype.SessionAgent{Type: apitype.ObjectAgent, ID: agentID, Version: agentVersion, Name: "agent"},
		Metadata:      map[string]string{"k": "v"},
		CreatedAt:     created,
		UpdatedAt:     created,
	}
}

// createSession creates a session with the given initial events.
func createSession(t testing.TB, s store.Store, initial ...apitype.NewEvent) *apitype.Session {
	t.Helper()
	sess, _, err := s.SessionCreate(ctxBg, &store.SessionCreateParams{
		Session: newSession("agent_x", 1, apitype.Now()), InitialEvents: initial,
	})
	must(t, err, "create session")
	return sess
}

func userMessage(text string) apitype.NewEvent {
	e, err := apitype.MakeEvent(apitype.EventUserMessage, apitype.UserMessage{
		Content: []apitype.ContentBlock{apitype.TextBlock(text)},
	})
	if err != nil {
		panic(err)
	}
	return e
}

func agentMessage(text string) apitype.NewEvent {
	e, err := apitype.MakeEvent(apitype.EventAgentMessage, apitype.AgentMessage{
		Content: []apitype.ContentBlock{apitype.TextBlock(text)},
	})
	if err != nil {
		panic(err)
	}
	return e
}

// appendEvents appends events without conditions.
func appendEvents(t testing.TB, s store.Store, sessionID string, events ...apitype.NewEvent) []apitype.Event {
	t.Helper()
	out, err := s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sessionID, Events: events})
	must(t, err, "append")
	return out
}

// allEvents returns the whole log of a session.
func allEvents(t testing.TB, s store.Store, sessionID string) []apitype.Event {
	t.Helper()
	var out []apitype.Event
	var after int64
	for {
		page, err := s.EventList(ctxBg, &store.EventListParams{SessionID: sessionID, AfterSeq: after, Limit: 1000})
		must(t, err, "list events")
		out = append(out, page...)
		if len(page) < 1000 {
			return out
		}
		after = page[len(page)-1].Seq
	}
}

// checkContiguous fails unless events have seqs 1..len(events) in order and unique ids.
func checkContiguous(t testing.TB, events []apitype.Event) {
	t.Helper()
	ids := make(map[string]bool, len(events))
	for i, e := range events {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d, want %d (gap or duplicate)", i, e.Seq, i+1)
		}
		if ids[e.ID] {
			t.Fatalf("duplicate event id %s", e.ID)
		}
		ids[e.ID] = true
	}
}

func seqs(events []apitype.Event) []int64 {
	out := make([]int64, len(events))
	for i, e := range events {
		out[i] = e.Seq
	}
	return out
}

func seqRange(from, to int64) []int64 {
	var out []int64
	if from <= to {
		for s := from; s <= to; s++ {
			out = append(out, s)
		}
	} else {
		for s := from; s >= to; s-- {
			out = append(out, s)
		}
	}
	return out
}

func equalSeqs(t testing.TB, got []apitype.Event, want []int64, what string) {
	t.Helper()
	if g := seqs(got); !slices.Equal(g, want) {
		t.Fatalf("%s: got seqs %v, want %v", what, g, want)
	}
}

// waitSignal fails unless ch receives within a few seconds.
func waitSignal(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no signal", what)
	}
}

// drain empties a coalesced signal channel.
func drain(ch <-chan struct{}) {
	select {
	case <-ch:
	default:
	}
}
