package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/model/modeltest"
)

// TestSkillInSandbox: a skill uploaded through the SDK and attached to an agent is introduced to the model by
// name and description only (the fake Messages API sees the system prompt, not SKILL.md's body), and its files
// are readable, not writable, under /mnt/skills/<name> in a real sandbox, in every isolating backend.
func TestSkillInSandbox(t *testing.T) {
	t.Parallel()
	isolatingBackends(t, testSkillInSandbox)
}

func testSkillInSandbox(t *testing.T, sandboxArgs []string) {
	model := modeltest.NewServer(t)
	model.Script(
		bashTurn(t, "cat /mnt/skills/csv-tools/SKILL.md /mnt/skills/csv-tools/scripts/count.sh; "+
			"(echo x >> /mnt/skills/csv-tools/SKILL.md) 2>/dev/null && echo skill-writable || echo skill-read-only"),
		modeltest.Turn{Text: "I read the skill."},
	)
	s := startServer(t, t.TempDir(), model, sandboxArgs...)
	c := sdkClient(s)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const body = "# CSV tools\nCount rows with scripts/count.sh.\n"
	skillMD := "---\nname: csv-tools\ndescription: Counts the rows of CSV files.\n---\n" + body
	sk, err := c.Beta.Skills.New(ctx, anthropic.BetaSkillNewParams{Files: []io.Reader{
		anthropic.File(strings.NewReader(skillMD), "csv-tools/SKILL.md", "text/markdown"),
		anthropic.File(strings.NewReader("wc -l \"$1\"\n"), "csv-tools/scripts/count.sh", "text/plain"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	agent, err := c.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
		Name: "skilled", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"},
		System: anthropic.String("You are careful."),
		Tools:  []anthropic.BetaAgentNewParamsToolUnion{{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{}}},
		Skills: []anthropic.BetaManagedAgentsSkillParamsUnion{{OfCustom: &anthropic.BetaManagedAgentsCustomSkillParams{SkillID: sk.ID}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(agent.Skills) != 1 || agent.Skills[0].Version != sk.LatestVersionID {
		t.Fatalf("agent skills: %s", agent.RawJSON())
	}
	env, err := c.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "skilled"})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := c.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: env.ID})
	if err != nil {
		t.Fatal(err)
	}
	events, _ := sendAndWait(ctx, t, c, sess.ID, "Read your skill.")
	results := toolResults(events)
	if len(results) != 1 {
		t.Fatalf("%d tool results, want 1", len(results))
	}
	want := skillMD + "wc -l \"$1\"\nskill-read-only"
	if results[0].isError || results[0].text != want {
		t.Fatalf("tool result %q (is_error %v), want %q", results[0].text, results[0].isError, want)
	}
	reqs := model.Requests()
	if len(reqs) == 0 {
		t.Fatal("the model saw no request")
	}
	sys := reqs[0].System
	if !strings.HasPrefix(sys, "You are careful.") || !strings.Contains(sys, "csv-tools") ||
		!strings.Contains(sys, "Counts the rows of CSV files.") || !strings.Contains(sys, "/mnt/skills/csv-tools/SKILL.md") ||
		strings.Contains(sys, "Count rows with scripts/count.sh") {
		t.Errorf("system prompt %q: want the agent's, then the skill by name and description only", sys)
	}
}
