package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
	"github.com/corralhq/corral/internal/vault"
)

// TestDeploymentRepositoryTokenRedTeam: a deployment whose resources hold a private github_repository with its
// authorization_token (sealed for the deployment, sealed anew for each run's session) runs, through the
// official SDK, on each isolating backend (bwrap, oci, gvisor). The run's session clones the repository on the
// host and, from bash in the sandbox, reads its log and pushes a commit through the git endpoint, which carries
// the token upstream. The model's next bash turn dumps everything the sandbox can read (sandboxtest.DumpScript:
// every process's environ and cmdline, every file outside /proc, /sys, /dev and /usr, the workspace's clone
// included), and the host searches the dump for the token and the vault's master key. Neither the token nor
// its Basic auth form is in the deployment as the API shows it, the run, the session, its resources and events,
// the model's requests, the server's output or any file of the data directory.
func TestDeploymentRepositoryTokenRedTeam(t *testing.T) {
	t.Parallel()
	isolatingBackends(t, testDeploymentRepositoryTokenRedTeam)
}

func testDeploymentRepositoryTokenRedTeam(t *testing.T, sandboxArgs []string) {
	token := secretString("ghp_e2eDeploymentToken")
	srv := sandboxtest.NewGitServer(t, token)
	repoURL := srv.NewRepo(t, "o/proj")
	head, _, _ := strings.Cut(srv.Log(t, "o/proj", "main"), "\n")

	const mount, dumpDir = "/workspace/repo", "/workspace/.dump"
	model := modeltest.NewServer(t)
	model.Script(
		bashTurn(t, "git -C "+mount+" log --format=%s -1 && cd "+mount+" && git config user.email a@b && git config user.name a && "+
			"echo hi > f && git add f && git commit -q -m from-deployment && git push -q origin HEAD:main 2>&1 && echo pushed-ok && "+
			"git remote get-url origin"),
		// The dump is left in the workspace, where the host reads it; the script names no secret.
		bashTurn(t, sandboxtest.DumpScript(dumpDir)),
		modeltest.Turn{Text: "Pushed, and searched."},
	)
	data := t.TempDir()
	s := startServer(t, data, model, append(sandboxArgs, "--egress-allow-internal", srv.HostPort,
		"--egress-ca-file", writePEM(t, srv.CAPEM))...)
	c := sdkClient(s)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	agentID, envID := sdkAgentEnv(ctx, t, c, anthropic.BetaEnvironmentNewParamsConfigUnion{OfCloud: &anthropic.BetaCloudConfigParams{
		Networking: anthropic.BetaCloudConfigParamsNetworkingUnion{OfLimited: &anthropic.BetaLimitedNetworkParams{AllowedHosts: []string{"127.0.0.1"}}},
	}})
	d, err := c.Beta.Deployments.New(ctx, anthropic.BetaDeploymentNewParams{
		Name: "red team", Agent: anthropic.BetaDeploymentNewParamsAgentUnion{OfString: anthropic.String(agentID)}, EnvironmentID: envID,
		Resources: []anthropic.BetaDeploymentNewParamsResourceUnion{{OfGitHubRepository: &anthropic.BetaManagedAgentsGitHubRepositoryResourceParams{
			URL: repoURL, AuthorizationToken: token, MountPath: anthropic.String(mount),
		}}},
		InitialEvents: []anthropic.BetaManagedAgentsDeploymentInitialEventParamsUnion{{OfUserMessage: &anthropic.BetaManagedAgentsUserMessageEventParams{
			Content: []anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{
				Text: "Push a commit, then look for secrets."}}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Resources) != 1 || d.Resources[0].Type != "github_repository" || d.Resources[0].URL != repoURL || d.Resources[0].MountPath != mount {
		t.Fatalf("the deployment's resources: %s", d.RawJSON())
	}
	gotDeployment := rawGET(t, s, "/v1/deployments/"+d.ID)
	if !strings.Contains(gotDeployment, repoURL) {
		t.Fatalf("GET /v1/deployments/{id} does not show the repository: %s", gotDeployment)
	}

	run, err := c.Beta.Deployments.Run(ctx, d.ID, anthropic.BetaDeploymentRunParams{})
	if err != nil {
		t.Fatal(err)
	}
	if run.SessionID == "" {
		t.Fatalf("the run made no session: %s", run.RawJSON())
	}
	events, rawEvents := waitEndTurn(ctx, t, c, run.SessionID)
	for _, ev := range events {
		if ev.Type == "session.error" {
			t.Errorf("session.error: %s", ev.RawJSON())
		}
	}
	sess, err := c.Beta.Sessions.Get(ctx, run.SessionID, anthropic.BetaSessionGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(sess.Resources) != 1 || sess.Resources[0].Type != "github_repository" || sess.Resources[0].MountPath != mount {
		t.Fatalf("the run's session's resources: %s", sess.RawJSON())
	}
	resID := sess.Resources[0].ID

	// The clone is there, the push went upstream with the token the git endpoint injected, and the sandbox's
	// origin is the endpoint.
	results := toolResults(events)
	if len(results) != 2 {
		t.Fatalf("%d tool results, want 2: %s", len(results), rawEvents)
	}
	want := head + "\npushed-ok\nhttp://" + sandbox.LocalHost + "/git/" + resID
	if results[0].isError || strings.TrimSpace(results[0].text) != want {
		t.Errorf("the clone and push: %q (is_error %v), want %q", results[0].text, results[0].isError, want)
	}
	if log := srv.Log(t, "o/proj", "main"); !strings.HasPrefix(log, "from-deployment\n"+head+"\n") {
		t.Errorf("upstream main: %q, want the sandbox's commit on %q", log, head)
	}
	basic := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + token))
	if seen := srv.Seen(); !strings.Contains(strings.Join(seen, "\n"), "Basic "+basic) {
		t.Errorf("the git server never received the token: %q", seen)
	}

	// What the sandbox can read. The sandbox is still up (it is reaped after --sandbox-idle, 10 minutes), so
	// its workspace, and the dump in it, is there on the host.
	if results[1].isError {
		t.Fatalf("the dump: %q", results[1].text)
	}
	dump := sandboxtest.ReadDump(t, filepath.Join(data, "workspaces", run.SessionID, filepath.Base(dumpDir)))
	// The search is not vacuous: the dump holds the environment, the system's files and the clone.
	for _, f := range []string{"/etc/passwd", mount + "/.git/config", mount + "/f"} {
		if !strings.Contains(string(dump.Files), f+"\n") {
			t.Errorf("the dump did not read %s", f)
		}
	}
	if !strings.Contains(string(dump.All), "PATH=") || !strings.Contains(string(dump.All), "/git/"+resID) {
		t.Errorf("the dump (%d bytes) lacks the environment or the clone's origin", len(dump.All))
	}
	keys, err := vault.ReadKeyFile(filepath.Join(data, vault.KeyFileName))
	if err != nil {
		t.Fatal(err)
	}
	tokenForms := map[string]string{
		"the token":                   token,
		"the token's Basic auth form": basic,
		"the token in base64":         base64.StdEncoding.EncodeToString([]byte(token)),
	}
	sandboxForbidden := map[string]string{}
	for label, f := range tokenForms {
		sandboxForbidden[label] = f
	}
	for i, k := range keys {
		raw, err := base64.StdEncoding.DecodeString(k.Encode())
		if err != nil {
			t.Fatal(err)
		}
		sandboxForbidden[fmt.Sprintf("master key %d (base64)", i)] = k.Encode()
		sandboxForbidden[fmt.Sprintf("master key %d (raw)", i)] = string(raw)
	}
	if found := sandboxtest.SearchSecrets(dump.All, sandboxForbidden); len(found) > 0 {
		t.Errorf("the sandbox can read: %s", strings.Join(found, "; "))
	}
	t.Logf("the sandbox's dump: %d bytes (environ and cmdline of every process, %d files) searched for %d forbidden strings",
		len(dump.All), strings.Count(string(dump.Files), "\n"), len(sandboxForbidden))

	// Everything else: the API, the session's log, the model, the server's output, the data directory (whose
	// vault.key holds the master key, so only the token is searched there).
	places := map[string]string{
		"the deployment create response":     d.RawJSON(),
		"GET /v1/deployments/{id}":           gotDeployment,
		"GET /v1/deployments":                rawGET(t, s, "/v1/deployments"),
		"the run response":                   run.RawJSON(),
		"GET /v1/deployment_runs/{id}":       rawGET(t, s, "/v1/deployment_runs/"+run.ID),
		"the session's events (SDK)":         rawEvents,
		"GET /v1/sessions/{id}":              rawGET(t, s, "/v1/sessions/"+run.SessionID),
		"GET /v1/sessions/{id}/events":       rawGET(t, s, "/v1/sessions/"+run.SessionID+"/events"),
		"GET /v1/sessions/{id}/resources":    rawGET(t, s, "/v1/sessions/"+run.SessionID+"/resources"),
		"GET /v1/sessions/{id}/resources/id": rawGET(t, s, "/v1/sessions/"+run.SessionID+"/resources/"+resID),
		"the server's stderr":                s.stderr.String(),
	}
	if stdout := s.stdout.String(); stdout != "" {
		places["the server's stdout"] = stdout
	}
	for i, r := range model.Requests() {
		places[fmt.Sprintf("model request %d", i+1)] = string(r.Body)
	}
	for p, b := range dataDirFiles(t, data) {
		if len(b) > 0 {
			places[p] = string(b)
		}
	}
	assertNowhere(t, places, tokenForms)
	if reqs := model.Requests(); len(reqs) != 3 || !strings.Contains(string(reqs[1].Body), "pushed-ok") {
		t.Errorf("the model's requests lack the tool results (%d requests)", len(reqs))
	}
}

// waitEndTurn waits until the session (started by its initial events: its user.message is its first event) is
// idle with end_turn, and returns the events and their raw JSON.
func waitEndTurn(ctx context.Context, t *testing.T, c anthropic.Client, sessionID string) ([]anthropic.BetaManagedAgentsSessionEventUnion, string) {
	t.Helper()
	return waitEndTurnAfter(ctx, t, c, sessionID, 1)
}
