package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/client"
	"github.com/corralhq/corral/internal/image/imagetest"
	"github.com/corralhq/corral/internal/model/modeltest"
)

// jqImage is a small Debian package pinned to the version of the base's release (the host's jq, if any, is
// another: bookworm-security's).
const jqImage = "jq=1.6-2.1+deb12u2"

// TestImagesE2E runs `corral serve --images debian` with bwrap: an environment asking for jq gets its image
// built when it is created (the image field says building, then ready), a second environment with the same list
// is ready at once (the layer is shared: nothing is built), a session of the first runs jq from the image, and
// an environment with an unknown package fails with the package named, on the environment, in `corral envs
// get` and as the session.error of a session that needs hands.
func TestImagesE2E(t *testing.T) {
	if sandboxKind() != "bwrap" {
		t.Skip("images need the bwrap backend and root")
	}
	imagetest.Base(t) // built once per machine; the server finds it in the shared cache
	model := modeltest.NewServer(t)
	jqCheck := `{"command":"echo '{\"a\": 5}' | jq .a && dpkg-query -W -f '${Version}\\n' jq; command -v bc || echo no-bc"}`
	model.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: jqCheck}}},
		modeltest.Turn{Text: "jq works."},
		// The same session's next turn, after its environment's packages changed: its sandbox keeps its image.
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: jqCheck}}},
		modeltest.Turn{Text: "Still jq."},
		// A new session of the changed environment: the new image.
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"echo 6*7 | bc; command -v jq || echo no-jq"}`}}},
		modeltest.Turn{Text: "bc works."},
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"true"}`}}},
		modeltest.Turn{Text: "No hands."},
	)
	s := startServer(t, t.TempDir(), model, "--images", "debian", "--egress-allow-internal", strings.Join(imagetest.RegistryGateways(), ","))
	c := s.client()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	pk := &apitype.Packages{Apt: []string{jqImage}}
	first, err := c.EnvironmentCreate(ctx, &client.EnvironmentCreateParams{Name: "jq", Config: apitype.EnvConfig{Type: "cloud", Packages: pk}})
	if err != nil {
		t.Fatal(err)
	}
	if first.Image == nil || first.Image.ID == "" || (first.Image.Status != apitype.ImageBuilding && first.Image.Status != apitype.ImageReady) {
		t.Fatalf("a new environment's image = %+v", first.Image)
	}
	// A session that needs hands at once waits for the build (when the list was built before, e.g. by an
	// earlier run on this cache, there is nothing to wait for).
	sess := newEnvSession(t, c, first.ID, "Use jq.")
	events := waitIdleFor(ctx, t, c, sess)
	if out := resultText(events); !strings.Contains(out, "5") || !strings.Contains(out, "1.6-2.1+deb12u2") || !strings.Contains(out, "no-bc") {
		t.Errorf("jq in the session's sandbox: %s", out)
	}
	ready := waitImage(ctx, t, c, first.ID)
	if ready.Status != apitype.ImageReady || ready.ID != first.Image.ID {
		t.Fatalf("image = %+v, want ready %s", ready, first.Image.ID)
	}
	builds := strings.Count(s.stderr.String(), "building an image")
	second, err := c.EnvironmentCreate(ctx, &client.EnvironmentCreateParams{Name: "jq too",
		Config: apitype.EnvConfig{Type: "cloud", Packages: &apitype.Packages{Apt: []string{jqImage, " " + jqImage}}}})
	if err != nil {
		t.Fatal(err)
	}
	if second.Image == nil || second.Image.Status != apitype.ImageReady || second.Image.ID != first.Image.ID {
		t.Errorf("the same list's image = %+v, want ready %s at once", second.Image, first.Image.ID)
	}

	// The official SDK reads the environment with its image field.
	sdk := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(s.url), option.WithAPIKey(testKey), option.WithMaxRetries(0))
	got, err := sdk.Beta.Environments.Get(ctx, first.ID, anthropic.BetaEnvironmentGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Image apitype.EnvironmentImage `json:"image"`
	}
	if err := json.Unmarshal([]byte(got.RawJSON()), &raw); err != nil || raw.Image.Status != apitype.ImageReady || got.Config.Packages.Apt[0] != jqImage {
		t.Errorf("SDK environment: %v, image %+v, packages %v", err, raw.Image, got.Config.Packages.Apt)
	}

	// The packages change while the session's sandbox runs: it keeps its image; a new session gets the new one.
	changed, err := c.EnvironmentUpdate(ctx, first.ID, &client.EnvironmentUpdateParams{Config: &apitype.EnvConfig{Type: "cloud", Packages: &apitype.Packages{Apt: []string{"bc"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if changed.Image == nil || changed.Image.ID == first.Image.ID {
		t.Fatalf("the changed list's image = %+v (was %s)", changed.Image, first.Image.ID)
	}
	if _, err := c.EventSend(ctx, sess, client.UserMessage("Again.")); err != nil {
		t.Fatal(err)
	}
	before := len(events)
	events = waitIdleAfter(ctx, t, c, sess, before)
	if out := resultText(events[before:]); !strings.Contains(out, "1.6-2.1+deb12u2") || !strings.Contains(out, "no-bc") {
		t.Errorf("the running sandbox after the change: %s", out)
	}
	if img := waitImage(ctx, t, c, first.ID); img.Status != apitype.ImageReady {
		t.Fatalf("the changed list's image: %+v %+v", img, img.Error)
	}
	events = waitIdleFor(ctx, t, c, newEnvSession(t, c, first.ID, "Use bc."))
	if out := resultText(events); !strings.Contains(out, "42") || !strings.Contains(out, "no-jq") {
		t.Errorf("a new session of the changed environment: %s", out)
	}

	// An unknown package: the build fails naming it; envs get says so; a session that needs hands gets a
	// session.error naming it.
	bad, err := c.EnvironmentCreate(ctx, &client.EnvironmentCreateParams{Name: "bad",
		Config: apitype.EnvConfig{Type: "cloud", Packages: &apitype.Packages{Apt: []string{"corral-no-such-package"}}}})
	if err != nil {
		t.Fatal(err)
	}
	failed := waitImage(ctx, t, c, bad.ID)
	if failed.Status != apitype.ImageFailed || failed.Error == nil || failed.Error.Package != "corral-no-such-package" ||
		failed.Error.Manager != "apt" || !strings.Contains(failed.Error.Message, "unknown package") {
		t.Fatalf("failed image = %+v (%+v)", failed, failed.Error)
	}
	cli := exec.Command(filepath.Join(binDir, "corral"), "envs", "get", bad.ID)
	cli.Env = append(cli.Environ(), "CORRAL_URL="+s.url, "CORRAL_API_KEY="+testKey)
	var stdout, stderr bytes.Buffer
	cli.Stdout, cli.Stderr = &stdout, &stderr
	if err := cli.Run(); err != nil || !strings.Contains(stderr.String(), "image: failed") ||
		!strings.Contains(stderr.String(), "apt package corral-no-such-package: unknown package") || !strings.Contains(stdout.String(), `"image"`) {
		t.Errorf("corral envs get: %v\nstdout %s\nstderr %s", err, stdout.String(), stderr.String())
	}
	events = waitIdleFor(ctx, t, c, newEnvSession(t, c, bad.ID, "Run true."))
	var se map[string]any
	for _, e := range events {
		if e["type"] == "session.error" {
			se, _ = e["error"].(map[string]any)
		}
	}
	if se == nil || se["type"] != string(apitype.SessionErrEnvironmentBuild) || se["package"] != "corral-no-such-package" ||
		!strings.Contains(se["message"].(string), "unknown package") {
		t.Errorf("session.error = %v; events %v", se, types(events))
	}
	if n := strings.Count(s.stderr.String(), "building an image"); n > builds+2 {
		t.Errorf("%d builds after the first, want at most 2 (bc's and the bad list's): the shared list built again", n-builds)
	}
}

// waitIdleFor is waitIdle under ctx (a first tool call may wait for an image build).
func waitIdleFor(ctx context.Context, t *testing.T, c *client.Client, sessionID string) []map[string]any {
	t.Helper()
	return waitIdleAfter(ctx, t, c, sessionID, 0)
}

// waitIdleAfter waits until the session is idle (not requires_action) with more than n events, and returns them.
func waitIdleAfter(ctx context.Context, t *testing.T, c *client.Client, sessionID string, n int) []map[string]any {
	t.Helper()
	for {
		events := listEvents(t, c, sessionID)
		if len(events) > n {
			last := events[len(events)-1]
			if sr, _ := last["stop_reason"].(map[string]any); last["type"] == "session.status_idle" && sr["type"] != "requires_action" {
				return events
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("session %s did not go idle; events: %v", sessionID, types(events))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitImage polls the environment until its image is no longer building.
func waitImage(ctx context.Context, t *testing.T, c *client.Client, id string) *apitype.EnvironmentImage {
	t.Helper()
	for {
		e, err := c.EnvironmentGet(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if e.Image != nil && e.Image.Status != apitype.ImageBuilding {
			return e.Image
		}
		select {
		case <-ctx.Done():
			t.Fatalf("environment %s: image still %+v", id, e.Image)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// newEnvSession starts a session of an agent with the toolset in the environment id.
func newEnvSession(t *testing.T, c *client.Client, envID, text string) string {
	t.Helper()
	ctx := context.Background()
	agent, err := c.AgentCreate(ctx, &client.AgentCreateParams{
		Name: "images", Model: apitype.ModelConfig{ID: "claude-sonnet-4-5"}, Tools: []apitype.Tool{{Type: apitype.ToolTypeAgentToolset}},
	})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := c.SessionCreate(ctx, &client.SessionCreateParams{
		Agent: client.AgentRef{ID: agent.ID}, EnvironmentID: envID, InitialEvents: []apitype.NewEvent{client.UserMessage(text)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return sess.ID
}

// resultText is the text of every agent.tool_result of events.
func resultText(events []map[string]any) string {
	var b strings.Builder
	for _, e := range events {
		if e["type"] == "agent.tool_result" {
			j, _ := json.Marshal(e["content"])
			b.Write(j)
		}
	}
	return b.String()
}
