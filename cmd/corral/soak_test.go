package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/corralhq/corral/internal/image/imagetest"
	"github.com/corralhq/corral/internal/mcp/mcptest"
	"github.com/corralhq/corral/internal/model/modeltest"
)

// TestChaosSoak runs the whole multi-process deployment on a PostgreSQL of its own (`corral serve --brains 0`,
// three `corral harness` on bwrap, `corral proxy`, two `corral worker`), their data directories on one disk (a
// tmpfs of 1.5 GiB and 100 MiB a minute of the run), under a steady load of sessions that use built-in tools, a custom tool, an MCP server's tool
// through the proxy, confirmations and a self-hosted environment's tools, while, all at once, it SIGKILLs a
// random process every few seconds (a supervisor restarts it, as systemd would), restarts PostgreSQL (an
// immediate shutdown: a crash), fills the data disk to the sandboxes' reserve and stalls a worker (SIGSTOP).
// Every tool call reports to a ledger outside Corral (an HTTP server the sandboxes reach, the MCP server's
// count of each text, the client's count of custom-tool calls).
//
// At the end: every event an API call acknowledged or a listing showed is in the log (none lost); no tool call
// ran twice; every session is idle or terminated; during each PostgreSQL outage the API answered 503 with
// retry-after and never a 500; once every process has been stopped, no sandbox process, mount, loop device or
// cgroup is left; and each process's memory stayed under a bound. The figures go to the log.
//
// CORRAL_SOAK (a duration) turns it on: .ci/run runs it for a few minutes in its own step, alone on the
// machine; docs/benchmarks.md has a long run's figures. CORRAL_SOAK_CLIENTS sets the sessions run at once.
func TestChaosSoak(t *testing.T) {
	spec := os.Getenv("CORRAL_SOAK")
	if spec == "" {
		t.Skip("CORRAL_SOAK is not set (a duration, e.g. 3m): the chaos soak runs in its own step of .ci/run, alone on the machine")
	}
	dur, err := time.ParseDuration(spec)
	if err != nil || dur <= 0 {
		t.Fatalf("CORRAL_SOAK=%q: want a positive duration", spec)
	}
	if os.Geteuid() != 0 {
		t.Fatal("the chaos soak needs root: bwrap sandboxes, a tmpfs data disk, a PostgreSQL of its own")
	}
	requireBwrap(t)
	clients := 12
	if v := os.Getenv("CORRAL_SOAK_CLIENTS"); v != "" {
		if clients, err = strconv.Atoi(v); err != nil || clients <= 0 {
			t.Fatalf("CORRAL_SOAK_CLIENTS=%q: want a positive number", v)
		}
	}
	k := newSoak(t, dur)
	k.run(dur, clients)
}

// soakReserveMB is the sandboxes' disk reserve on the soak's data disk; the disk fills stop there.
const soakReserveMB = 64

// soak is one run of TestChaosSoak.
type soak struct {
	t      *testing.T
	root   string // what the soak writes: the data disk and the database
	disk   string // the tmpfs the processes' data directories are on
	pg     *soakPG
	model  *modeltest.Server
	mcp    *mcptest.Server
	ledger *ledger
	procs  []*soakProc
	api    *soakProc
	url    string
	client anthropic.Client

	agents   [3]string // mixed, careful, hosted
	cloudEnv string
	hostEnv  string
	vault    string

	before leftovers // what was on the machine before the soak

	// Figures.
	sessions, settled, terminated atomic.Int64
	events, acked                 atomic.Int64
	kills, pgRestarts, fills      atomic.Int64
	stalls                        atomic.Int64
	status5xx                     statusCounts // every 5xx the SDK client got
	outage                        statusCounts // the probes' answers during PostgreSQL outages
	outageBad                     atomic.Int64
	customMu                      sync.Mutex
	custom                        map[string]map[string]bool // ledger key -> the custom-tool-use event ids that asked for it

	results               chan sessionResult
	resultsOK, resultsErr atomic.Int64
	errorsMu              sync.Mutex
	errorsBy              map[string]int // an error result's first words -> how many
}

// sessionResult is what one session's driver saw: the ids acknowledged or listed, and how it ended.
type sessionResult struct {
	id   string
	seen map[string]bool
	end  string // "idle", "terminated" or why it did not settle
	// state is where the session stood when the driver last looked: its last status event and, while it waits
	// for the client, the calls it named, and what the driver's last answer got. An unsettled session says it.
	state string
}

func newSoak(t *testing.T, dur time.Duration) *soak {
	k := &soak{t: t, custom: map[string]map[string]bool{}, errorsBy: map[string]int{}, results: make(chan sessionResult, 1<<16)}
	k.before = scanLeftovers("")
	root, err := os.MkdirTemp("", "corral-soak-")
	if err != nil {
		t.Fatal(err)
	}
	k.root = root
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil { // PostgreSQL's user reaches its directory under it
		t.Fatal(err)
	}
	k.disk = filepath.Join(root, "disk")
	if err := os.Mkdir(k.disk, 0o755); err != nil {
		t.Fatal(err)
	}
	// The sessions' workspaces stay until the end (about 1.5 MiB each, 50 to 100 sessions a minute): the disk
	// grows with the run, so that only the fills bring it to its reserve.
	size := 1536 + 100*int(dur.Minutes())
	if err := syscall.Mount("tmpfs", k.disk, "tmpfs", 0, fmt.Sprintf("size=%dm", size)); err != nil {
		t.Fatalf("mount the data disk: %v", err)
	}
	t.Cleanup(func() {
		detachMountsUnder(t, k.disk)
		_ = syscall.Unmount(k.disk, syscall.MNT_DETACH)
	})
	k.pg = startSoakPG(t, root)
	return k
}

func (k *soak) run(dur time.Duration, clients int) {
	t := k.t
	k.ledger = startLedger(t)
	k.mcp = mcptest.New(t, mcptest.Config{ClientID: "corral"})
	k.model = modeltest.NewServer(t, modeltest.WithResponder(soakRespond(k.ledger.url)))
	k.startProcesses()
	k.setUp()

	ctx, cancel := context.WithCancel(context.Background())
	var chaos sync.WaitGroup
	k.chaos(ctx, &chaos)
	var mem sync.WaitGroup
	memCtx, memStop := context.WithCancel(context.Background())
	mem.Go(func() { k.sampleMemory(memCtx) })

	// The load: clients sessions at a time, started until the soak's time is up; each is driven to its end.
	start := time.Now()
	until := start.Add(dur)
	settleBy := until.Add(4 * time.Minute)
	var load sync.WaitGroup
	var next atomic.Int64
	for range clients {
		load.Go(func() {
			for time.Now().Before(until) {
				k.session(int(next.Add(1)), settleBy)
			}
		})
	}
	time.Sleep(time.Until(until))
	cancel()
	chaos.Wait()
	t.Logf("soak: faults stopped after %v; every process and PostgreSQL running; waiting for the sessions to settle",
		time.Since(start).Round(time.Second))
	load.Wait()
	memStop()
	mem.Wait()
	close(k.results)
	k.verify(time.Since(start))
}

// startProcesses starts the deployment, each process under a supervisor that restarts it when it dies.
func (k *soak) startProcesses() {
	t := k.t
	key := sharedVaultKey(t)
	apiPort, proxyPort := freePort(t), freePort(t)
	k.url = fmt.Sprintf("http://127.0.0.1:%d", apiPort)
	proxyToken := "proxy-token-" + secretString("")
	env := append(serverEnv(k.model, testKey), proxyTokenEnv+"="+proxyToken,
		"CORRAL_IMAGE_CACHE="+imagetest.CacheDir(), "CORRAL_IMAGE_GC=0")
	mcpURL, err := url.Parse(k.mcp.URL)
	if err != nil {
		t.Fatal(err)
	}
	k.api = k.proc("api", env, "corral: listening on ", "serve", "--listen", fmt.Sprintf("127.0.0.1:%d", apiPort),
		"--data", filepath.Join(k.disk, "api"), "--db", k.pg.dsn, "--brains", "0", "--sandbox", "none",
		"--vault-key-file", key, "--work-lease-ttl", "5s", "--lease-ttl", "3s", "--poll", "200ms")
	k.proc("proxy", env, "corral: proxy listening on ", "proxy", "--db", k.pg.dsn, "--data", filepath.Join(k.disk, "proxy"),
		"--vault-key-file", key, "--listen", fmt.Sprintf("127.0.0.1:%d", proxyPort), "--egress-allow-internal", mcpURL.Host)
	for i := range 3 {
		k.proc(fmt.Sprintf("harness-%d", i+1), env, "corral: harness running", append([]string{"harness",
			"--db", k.pg.dsn, "--data", filepath.Join(k.disk, fmt.Sprintf("harness-%d", i+1)), "--sandbox", "bwrap",
			"--brains", "16", "--lease-ttl", "3s", "--poll", "200ms", "--vault-key-file", key, "--sandbox-idle", "20s",
			"--mcp-proxy", fmt.Sprintf("http://127.0.0.1:%d", proxyPort), "--egress-allow-internal", k.ledger.host}, soakDisk...)...)
	}
}

// soakDisk are the sandboxes' disk flags of the soak: small workspaces, and the reserve the disk fills stop at.
var soakDisk = []string{"--sandbox-disk", "64", "--sandbox-inodes", "16384", "--sandbox-disk-headroom", "8",
	"--sandbox-disk-reserve", strconv.Itoa(soakReserveMB)}

// startWorkers starts the two workers of the self-hosted environment.
func (k *soak) startWorkers(envKey string) {
	env := append(os.Environ(), "CORRAL_IMAGE_CACHE="+imagetest.CacheDir(), "CORRAL_IMAGE_GC=0")
	for i := range 2 {
		k.proc(fmt.Sprintf("worker-%d", i+1), env, "corral: worker ", append([]string{"worker", "--url", k.url,
			"--env", k.hostEnv, "--key", envKey, "--data", filepath.Join(k.disk, fmt.Sprintf("worker-%d", i+1)),
			"--worker-id", fmt.Sprintf("soak-worker-%d", i+1), "--sandbox", "bwrap", "--sandbox-uids", strconv.Itoa(30000 + 10000*i),
			"--session-idle", "5s", "--sandbox-idle", "20s", "--egress-allow-internal", k.ledger.host}, soakDisk...)...)
	}
}

// setUp creates, through the SDK, the soak's agents, environments, vault and the workers' key.
func (k *soak) setUp() {
	t := k.t
	k.client = anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(k.url), option.WithAPIKey(testKey),
		option.WithMaxRetries(12), option.WithRequestTimeout(30*time.Second),
		option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			resp, err := next(r)
			if err == nil && resp.StatusCode >= 500 {
				k.status5xx.add(resp.StatusCode)
			}
			return resp, err
		}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	vault, err := k.client.Beta.Vaults.New(ctx, anthropic.BetaVaultNewParams{DisplayName: "soak"})
	if err != nil {
		t.Fatal(err)
	}
	k.vault = vault.ID
	if _, err := k.client.Beta.Vaults.Credentials.New(ctx, vault.ID, anthropic.BetaVaultCredentialNewParams{
		Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{OfStaticBearer: &anthropic.BetaManagedAgentsStaticBearerCreateParams{
			Token: k.mcp.IssueAccess(), MCPServerURL: k.mcp.MCPURL}},
	}); err != nil {
		t.Fatal(err)
	}
	custom := anthropic.BetaAgentNewParamsToolUnion{OfCustom: &anthropic.BetaManagedAgentsCustomToolParams{Name: "ledger_note",
		Description: "Notes a key in the client's ledger.",
		InputSchema: anthropic.BetaManagedAgentsCustomToolInputSchemaParam{Properties: map[string]any{"key": map[string]any{"type": "string"}}}}}
	allow := anthropic.BetaManagedAgentsMCPToolsetDefaultConfigParamsPermissionPolicyUnion{OfAlwaysAllow: &anthropic.BetaManagedAgentsAlwaysAllowPolicyParam{}}
	for i, p := range []anthropic.BetaAgentNewParams{
		{Name: "soak-mixed", MCPServers: []anthropic.BetaManagedAgentsURLMCPServerParams{{Name: "tracker", URL: k.mcp.MCPURL}},
			Tools: []anthropic.BetaAgentNewParamsToolUnion{{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{}}, custom,
				{OfMCPToolset: &anthropic.BetaManagedAgentsMCPToolsetParams{MCPServerName: "tracker",
					DefaultConfig: anthropic.BetaManagedAgentsMCPToolsetDefaultConfigParams{PermissionPolicy: allow}}}}},
		{Name: "soak-careful", Tools: []anthropic.BetaAgentNewParamsToolUnion{custom, {OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{
			Configs: []anthropic.BetaManagedAgentsAgentToolConfigParamsUnion{{OfBash: &anthropic.BetaManagedAgentsBashToolConfigParams{
				PermissionPolicy: anthropic.BetaManagedAgentsBashToolConfigParamsPermissionPolicyUnion{OfAlwaysAsk: &anthropic.BetaManagedAgentsAlwaysAskPolicyParam{}}}}}}}}},
		{Name: "soak-hosted", Tools: []anthropic.BetaAgentNewParamsToolUnion{{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{}}, custom}},
	} {
		p.Model = anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"}
		a, err := k.client.Beta.Agents.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		k.agents[i] = a.ID
	}
	cloud, err := k.client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "soak-cloud", Config: anthropic.BetaEnvironmentNewParamsConfigUnion{
		OfCloud: &anthropic.BetaCloudConfigParams{Networking: anthropic.BetaCloudConfigParamsNetworkingUnion{
			OfLimited: &anthropic.BetaLimitedNetworkParams{AllowedHosts: []string{"127.0.0.1"}, AllowMCPServers: anthropic.Bool(true)}}}}})
	if err != nil {
		t.Fatal(err)
	}
	k.cloudEnv = cloud.ID
	hosted, err := k.client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "soak-hosted",
		Config: anthropic.BetaEnvironmentNewParamsConfigUnion{OfSelfHosted: &anthropic.BetaSelfHostedConfigParams{}}})
	if err != nil {
		t.Fatal(err)
	}
	k.hostEnv = hosted.ID
	var envKey struct {
		Key string `json:"key"`
	}
	if err := k.client.Post(ctx, "v1/environments/"+hosted.ID+"/keys", map[string]string{"name": "soak"}, &envKey); err != nil {
		t.Fatal(err)
	}
	k.startWorkers(envKey.Key)
}

// soakPlan matches the first user message of a soak session: its marker and its steps.
var soakPlan = regexp.MustCompile(`soak (\S+) plan=(\S+)`)

// soakRespond is the model of the soak: the first user message names the session's steps; each answer makes the
// next step's tool call (as many tool results as the conversation holds have been taken), keyed for the ledger
// with the session's marker and the step's number, then a final text.
func soakRespond(ledgerURL string) func(*modeltest.Request) modeltest.Turn {
	return func(r *modeltest.Request) modeltest.Turn {
		marker, plan, results := "", "", 0
		for _, m := range r.Messages {
			for _, b := range m.Content {
				if b.Type == "tool_result" {
					results++
				}
				if sm := soakPlan.FindStringSubmatch(b.Text); sm != nil && marker == "" && m.Role == "user" {
					marker, plan = sm[1], sm[2]
				}
			}
		}
		steps := strings.Split(plan, ",")
		if marker == "" || results >= len(steps) {
			return modeltest.Turn{Text: "done " + marker}
		}
		key := fmt.Sprintf("%s-%d", marker, results)
		var use modeltest.ToolUse
		switch steps[results] {
		case "bash":
			input, _ := json.Marshal(map[string]string{"command": "curl -sSf --max-time 20 --noproxy '' -x \"$http_proxy\" '" + ledgerURL + "/hit?k=" + key + "'"})
			use = modeltest.ToolUse{Name: "bash", Input: string(input)}
		case "custom":
			use = modeltest.ToolUse{Name: "ledger_note", Input: `{"key":"` + key + `"}`}
		case "mcp":
			use = modeltest.ToolUse{Name: "mcp__tracker__echo", Input: `{"text":"` + key + `"}`}
		}
		return modeltest.Turn{Text: "step " + key, ToolUses: []modeltest.ToolUse{use}}
	}
}

// session drives the soak's n-th session until it settles (idle or terminated) or settleBy passes.
func (k *soak) session(n int, settleBy time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), settleBy)
	defer cancel()
	kind := n % 3
	var steps []string
	alphabet := [][]string{{"bash", "custom", "mcp"}, {"bash", "custom"}, {"bash", "custom"}}[kind]
	for range 3 {
		steps = append(steps, alphabet[rand.IntN(len(alphabet))])
	}
	params := anthropic.BetaSessionNewParams{Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(k.agents[kind])},
		EnvironmentID: k.cloudEnv}
	if kind == 0 {
		params.VaultIDs = []string{k.vault}
	}
	if kind == 2 {
		params.EnvironmentID = k.hostEnv
	}
	sess, err := k.client.Beta.Sessions.New(ctx, params)
	if err != nil {
		k.t.Logf("soak: creating session %d failed after the SDK's retries (not acknowledged): %v", n, err)
		return
	}
	k.sessions.Add(1)
	res := sessionResult{id: sess.ID, seen: map[string]bool{}}
	defer func() { k.results <- res }()
	sent, err := k.client.Beta.Sessions.Events.Send(ctx, sess.ID, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{anthropic.BetaManagedAgentsEventParamsOfUserMessage(
			[]anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{
				Text: fmt.Sprintf("soak m%d plan=%s", n, strings.Join(steps, ","))}}})},
	})
	if err != nil {
		res.end = "the first message was not acknowledged: " + err.Error()
		return
	}
	k.ack(&res, sent)
	answered := map[string]bool{}
	for {
		evs, err := k.listEvents(ctx, sess.ID)
		if ctx.Err() != nil {
			res.end = "did not settle by the deadline; " + cmp.Or(res.state, "no status after the message")
			return
		}
		if err == nil {
			for _, ev := range evs {
				res.seen[ev.ID] = true
			}
			if end := k.step(ctx, sess.ID, evs, answered, &res); end != "" {
				res.end = end
				return
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// step acts on a session's events: the status after the turn began says whether the session settled ("idle",
// "terminated") or waits for the client, whose answers it sends.
func (k *soak) step(ctx context.Context, sid string, evs []anthropic.BetaManagedAgentsSessionEventUnion, answered map[string]bool, res *sessionResult) string {
	began := slices.IndexFunc(evs, func(ev anthropic.BetaManagedAgentsSessionEventUnion) bool { return ev.Type == "user.message" })
	if began < 0 {
		return ""
	}
	var last *anthropic.BetaManagedAgentsSessionEventUnion
	byID := map[string]anthropic.BetaManagedAgentsSessionEventUnion{}
	for i := range evs[began:] {
		ev := &evs[began+i]
		byID[ev.ID] = *ev
		if strings.HasPrefix(ev.Type, "session.status_") && ev.Type != "session.status_rescheduled" {
			last = ev
		}
	}
	if last == nil {
		return ""
	}
	res.state = "last status " + last.Type + " " + last.ID
	switch {
	case last.Type == "session.status_terminated":
		k.terminated.Add(1)
		return "terminated"
	case last.Type != "session.status_idle":
		return ""
	case last.AsSessionStatusIdle().StopReason.Type != "requires_action":
		k.settled.Add(1)
		return "idle"
	}
	for _, id := range last.AsSessionStatusIdle().StopReason.EventIDs {
		ev, ok := byID[id]
		res.state += fmt.Sprintf("; waits for %s (listed %t, answered %t)", id, ok, answered[id])
		if !ok || answered[id] {
			continue
		}
		var send anthropic.BetaManagedAgentsEventParamsUnion
		switch ev.Type {
		case "agent.custom_tool_use":
			key, _ := ev.AsAgentCustomToolUse().Input["key"].(string)
			k.customMu.Lock()
			if k.custom[key] == nil {
				k.custom[key] = map[string]bool{}
			}
			k.custom[key][id] = true
			k.customMu.Unlock()
			send = anthropic.BetaManagedAgentsEventParamsUnion{OfUserCustomToolResult: &anthropic.BetaManagedAgentsUserCustomToolResultEventParams{
				CustomToolUseID: id, Content: []anthropic.BetaManagedAgentsUserCustomToolResultEventParamsContentUnion{{
					OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: "noted " + key}}}}}
		default: // a call waiting for the user's confirmation
			send = anthropic.BetaManagedAgentsEventParamsOfUserToolConfirmation(anthropic.BetaManagedAgentsUserToolConfirmationEventParamsResultAllow, id)
		}
		sent, err := k.client.Beta.Sessions.Events.Send(ctx, sid, anthropic.BetaSessionEventSendParams{
			Events: []anthropic.BetaManagedAgentsEventParamsUnion{send}})
		var aerr *anthropic.Error
		if err != nil {
			res.state += ": the answer got " + err.Error()
		}
		switch {
		case err == nil:
			k.ack(res, sent)
			answered[id] = true
		case errors.As(err, &aerr) && aerr.StatusCode < 500 && aerr.StatusCode != http.StatusTooManyRequests:
			answered[id] = true // already answered by a send whose acknowledgement was lost
		}
	}
	return ""
}

// ack records the events an API call acknowledged.
func (k *soak) ack(res *sessionResult, sent *anthropic.BetaManagedAgentsSendSessionEvents) {
	for _, ev := range sent.Data {
		res.seen[ev.ID] = true
		k.acked.Add(1)
	}
}

// listEvents lists every event of the session.
func (k *soak) listEvents(ctx context.Context, sid string) ([]anthropic.BetaManagedAgentsSessionEventUnion, error) {
	var evs []anthropic.BetaManagedAgentsSessionEventUnion
	iter := k.client.Beta.Sessions.Events.ListAutoPaging(ctx, sid, anthropic.BetaSessionEventListParams{})
	for iter.Next() {
		evs = append(evs, iter.Current())
	}
	return evs, iter.Err()
}

// chaos starts the faults; they stop when ctx is done, leaving every process and PostgreSQL running.
func (k *soak) chaos(ctx context.Context, wg *sync.WaitGroup) {
	every := func(first, period time.Duration, fault func()) {
		wg.Go(func() {
			next := time.After(first)
			for {
				select {
				case <-ctx.Done():
					return
				case <-next:
				}
				fault()
				next = time.After(period/2 + rand.N(period))
			}
		})
	}
	every(2*time.Second, 3*time.Second, func() { // SIGKILL a random process
		p := k.procs[rand.IntN(len(k.procs))]
		if p.kill() {
			k.kills.Add(1)
		}
	})
	every(20*time.Second, 45*time.Second, k.restartPostgres)
	every(30*time.Second, 40*time.Second, k.fillDisk)
	every(10*time.Second, 30*time.Second, k.stallWorker)
}

// restartPostgres stops PostgreSQL at once (no checkpoint: a crash, as far as the data goes), keeps it down a
// few seconds while probing the API, and starts it again.
func (k *soak) restartPostgres() {
	if err := k.pg.ctl("-m", "immediate", "-w", "stop"); err != nil {
		k.t.Errorf("soak: stopping PostgreSQL: %v", err)
		return
	}
	k.pgRestarts.Add(1)
	down := time.Now().Add(5 * time.Second)
	for time.Now().Before(down) {
		k.probe()
		time.Sleep(250 * time.Millisecond)
	}
	if err := k.pg.start(); err != nil {
		k.t.Errorf("soak: starting PostgreSQL again: %v", err)
	}
}

// probe sends one request without retries to the API while the database is down: it must be a 503 with
// retry-after (or no answer at all, when the API process is the one just killed).
func (k *soak) probe() {
	req, _ := http.NewRequest("GET", k.url+"/v1/agents?limit=1", nil)
	req.Header.Set("x-api-key", testKey)
	req.Header.Set("anthropic-version", "2023-06-01")
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return
	}
	resp.Body.Close()
	k.outage.add(resp.StatusCode)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("retry-after") == "" {
		k.outageBad.Add(1)
	}
}

// fillDisk fills the data disk until only the sandboxes' reserve is free, for a few seconds.
func (k *soak) fillDisk() {
	var st syscall.Statfs_t
	if err := syscall.Statfs(k.disk, &st); err != nil {
		k.t.Errorf("soak: statfs: %v", err)
		return
	}
	fill := int64(st.Bavail)*st.Bsize - soakReserveMB<<20
	if fill <= 0 {
		return
	}
	path := filepath.Join(k.disk, "filler")
	f, err := os.Create(path)
	if err != nil {
		k.t.Errorf("soak: %v", err)
		return
	}
	defer os.Remove(path)
	defer f.Close()
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, fill); err != nil {
		k.t.Logf("soak: filling the disk: %v", err)
		return
	}
	k.fills.Add(1)
	time.Sleep(8 * time.Second)
}

// stallWorker stops a worker (SIGSTOP) for a few seconds: its claimed work stalls, its leases lapse.
func (k *soak) stallWorker() {
	var workers []*soakProc
	for _, p := range k.procs {
		if strings.HasPrefix(p.name, "worker-") {
			workers = append(workers, p)
		}
	}
	p := workers[rand.IntN(len(workers))]
	if p.signal(syscall.SIGSTOP) {
		k.stalls.Add(1)
		time.Sleep(8 * time.Second)
		p.signal(syscall.SIGCONT)
	}
}

// sampleMemory records each process's largest resident set.
func (k *soak) sampleMemory(ctx context.Context) {
	for {
		for _, p := range k.procs {
			p.sampleRSS()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// soakMaxRSS is the bound on each process's resident memory.
const soakMaxRSS = 768 << 20

// verify checks the invariants once the load has settled, stops every process and looks for leftovers.
func (k *soak) verify(elapsed time.Duration) {
	t := k.t
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var lost, unsettled int
	for res := range k.results {
		if res.end != "idle" && res.end != "terminated" {
			unsettled++
			t.Errorf("session %s: %s", res.id, res.end)
		}
		evs, err := k.listEvents(ctx, res.id)
		if err != nil {
			t.Errorf("session %s: listing its events at the end: %v", res.id, err)
			continue
		}
		k.events.Add(int64(len(evs)))
		k.countResults(evs)
		have := map[string]bool{}
		for _, ev := range evs {
			have[ev.ID] = true
		}
		for id := range res.seen {
			if !have[id] {
				lost++
				t.Errorf("session %s: event %s was acknowledged or listed, and is not in the log", res.id, id)
			}
		}
		s, err := k.client.Beta.Sessions.Get(ctx, res.id, anthropic.BetaSessionGetParams{})
		if err != nil {
			t.Errorf("session %s: %v", res.id, err)
		} else if s.Status != "idle" && s.Status != "terminated" {
			t.Errorf("session %s is %s at the end", res.id, s.Status)
		}
	}
	// The ledgers: no tool call ran twice.
	dup, calls := 0, 0
	count := func(what string, counts map[string]int) {
		for key, n := range counts {
			calls += n
			if n > 1 {
				dup++
				t.Errorf("%s call %s ran %d times", what, key, n)
			}
		}
	}
	count("bash", k.ledger.counts())
	count("MCP", k.mcp.Echoed())
	custom := map[string]int{}
	k.customMu.Lock()
	for key, ids := range k.custom {
		custom[key] = len(ids)
	}
	k.customMu.Unlock()
	count("custom tool", custom)

	// During the outages: 503 with retry-after, never anything else.
	outage := k.outage.snapshot()
	if k.pgRestarts.Load() > 0 && outage[http.StatusServiceUnavailable] == 0 {
		t.Errorf("no 503 during %d PostgreSQL outages: %v", k.pgRestarts.Load(), outage)
	}
	if n := k.outageBad.Load(); n > 0 {
		t.Errorf("%d answers during PostgreSQL outages were not a 503 with retry-after: %v", n, outage)
	}
	fivexx := k.status5xx.snapshot()
	if fivexx[http.StatusInternalServerError] > 0 {
		t.Errorf("the client got %d answers 500", fivexx[http.StatusInternalServerError])
	}

	// Memory, then a clean stop of everything, then what is left.
	rss := map[string]string{}
	for _, p := range k.procs {
		rss[p.name] = fmt.Sprintf("%.1f MiB", float64(p.maxRSS.Load())/(1<<20))
		if p.maxRSS.Load() > soakMaxRSS {
			t.Errorf("%s reached %d MiB of resident memory, over the bound of %d MiB", p.name, p.maxRSS.Load()>>20, soakMaxRSS>>20)
		}
	}
	bound := len(scanLeftovers(k.disk).minus(k.before)["loop device"])
	for _, p := range k.procs {
		p.stop(t)
	}
	stopped := time.Now()
	// A sandbox's last processes exit, and with them the filesystems and loop devices they hold, a moment after
	// the process that ran it: what is still there after a few seconds is left behind.
	left := scanLeftovers(k.disk).minus(k.before)
	for deadline := time.Now().Add(10 * time.Second); !left.empty() && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		left = scanLeftovers(k.disk).minus(k.before)
	}
	t.Logf("soak: %d workspace loop devices were bound when the processes were stopped; %d left %v after the last one stopped",
		bound, len(left["loop device"]), time.Since(stopped).Round(100*time.Millisecond))
	if !left.empty() {
		t.Errorf("left behind 10s after every process stopped: %s", left.counts())
		for _, line := range left.details() {
			t.Errorf("left behind: %s", line)
		}
	}
	starts := map[string]int64{}
	for _, p := range k.procs {
		starts[p.name] = p.starts.Load()
	}
	t.Logf("soak: %v; %d sessions (%d idle, %d terminated, %d unsettled), %d events (%d acknowledged by the API), %d tool calls; "+
		"faults: %d SIGKILLs, %d PostgreSQL restarts, %d disk fills to the reserve, %d worker stalls; "+
		"lost %d, duplicated %d; answers during outages %v; 5xx the client retried %v; starts %v; largest RSS %v",
		elapsed.Round(time.Second), k.sessions.Load(), k.settled.Load(), k.terminated.Load(), unsettled, k.events.Load(), k.acked.Load(), calls,
		k.kills.Load(), k.pgRestarts.Load(), k.fills.Load(), k.stalls.Load(), lost, dup, outage, fivexx, starts, rss)
	t.Logf("soak: tool results: %d ok, %d errors; the errors by their first words: %v", k.resultsOK.Load(), k.resultsErr.Load(), k.errorKinds())
	for _, p := range k.procs {
		t.Logf("soak: %s logged %v", p.name, p.problems())
	}
	if k.sessions.Load() == 0 || calls == 0 || k.kills.Load() == 0 {
		t.Errorf("the soak did nothing: %d sessions, %d tool calls, %d kills", k.sessions.Load(), calls, k.kills.Load())
	}
}

// countResults counts the tool results of a session's log (the brain's, the MCP proxy's, a worker's), and the
// errors by their first words.
func (k *soak) countResults(evs []anthropic.BetaManagedAgentsSessionEventUnion) {
	for _, ev := range evs {
		var isError bool
		var text strings.Builder
		switch ev.Type {
		case "agent.tool_result":
			r := ev.AsAgentToolResult()
			isError = r.IsError
			for _, b := range r.Content {
				text.WriteString(b.Text)
			}
		case "agent.mcp_tool_result":
			r := ev.AsAgentMCPToolResult()
			isError = r.IsError
			for _, b := range r.Content {
				text.WriteString(b.Text)
			}
		case "user.tool_result":
			r := ev.AsUserToolResult()
			isError = r.IsError
			for _, b := range r.Content {
				text.WriteString(b.Text)
			}
		default:
			continue
		}
		if !isError {
			k.resultsOK.Add(1)
			continue
		}
		k.resultsErr.Add(1)
		words := strings.Fields(text.String())
		words = words[:min(len(words), 8)]
		k.errorsMu.Lock()
		k.errorsBy[strings.Join(words, " ")]++
		k.errorsMu.Unlock()
	}
}

func (k *soak) errorKinds() map[string]int {
	k.errorsMu.Lock()
	defer k.errorsMu.Unlock()
	return maps.Clone(k.errorsBy)
}
