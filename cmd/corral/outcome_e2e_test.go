package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/corralhq/corral/internal/model/modeltest"
)

// graderVerdict is a scripted grader answer: a record_evaluation call.
func graderVerdict(result, explanation string) modeltest.Turn {
	in, _ := json.Marshal(map[string]any{"result": result, "explanation": explanation,
		"criteria": []map[string]any{{"criterion": "The file exists", "met": result == "satisfied", "explanation": explanation}}})
	return modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "record_evaluation", Input: string(in)}},
		Usage: modeltest.Usage{InputTokens: 200, OutputTokens: 30}}
}

// TestOutcomesThroughSDK: through the official SDK against `corral serve`: malformed user.define_outcome events
// are the API's 400; an outcome with a file rubric (resolved to text, and shown to the grader) is revised twice and
// then satisfied, with the span.outcome_evaluation_* events and the session's outcome_evaluations saying so and the
// grader's requests counted in the session's usage; then, one session each, an outcome satisfied at once, one
// reaching max_iterations, one whose grader's model fails, and one interrupted while it is graded.
func TestOutcomesThroughSDK(t *testing.T) {
	t.Parallel()
	model := modeltest.NewServer(t)
	s := startServer(t, t.TempDir(), model)
	client := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(s.url),
		option.WithAPIKey(testKey), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	agent, err := client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
		Name: "outcomes", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"}})
	if err != nil {
		t.Fatal(err)
	}
	env, err := client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "outcomes"})
	if err != nil {
		t.Fatal(err)
	}
	newSession := func() *anthropic.BetaManagedAgentsSession {
		t.Helper()
		sess, err := client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
			Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: env.ID})
		if err != nil {
			t.Fatal(err)
		}
		return sess
	}
	textRubric := anthropic.BetaManagedAgentsTextRubricParams{Content: "The file exists."}
	define := func(desc string, rubric anthropic.BetaManagedAgentsUserDefineOutcomeEventParamsRubricUnion, maxIter int64) anthropic.BetaManagedAgentsEventParamsUnion {
		ev := anthropic.BetaManagedAgentsUserDefineOutcomeEventParams{Description: desc, Rubric: rubric}
		if maxIter != 0 {
			ev.MaxIterations = anthropic.Int(maxIter)
		}
		return anthropic.BetaManagedAgentsEventParamsUnion{OfUserDefineOutcome: &ev}
	}
	send := func(id string, evs ...anthropic.BetaManagedAgentsEventParamsUnion) error {
		_, err := client.Beta.Sessions.Events.Send(ctx, id, anthropic.BetaSessionEventSendParams{Events: evs})
		return err
	}

	sess := newSession()
	// Malformed definitions are the API's 400, naming the field.
	for _, c := range []struct {
		ev    anthropic.BetaManagedAgentsEventParamsUnion
		field string
	}{
		{define("x", anthropic.BetaManagedAgentsUserDefineOutcomeEventParamsRubricUnion{OfText: &textRubric}, 21), "max_iterations"},
		{define("x", anthropic.BetaManagedAgentsUserDefineOutcomeEventParamsRubricUnion{OfText: &textRubric}, -1), "max_iterations"},
		{define("", anthropic.BetaManagedAgentsUserDefineOutcomeEventParamsRubricUnion{OfText: &textRubric}, 0), "description"},
		{define("x", anthropic.BetaManagedAgentsUserDefineOutcomeEventParamsRubricUnion{OfText: &anthropic.BetaManagedAgentsTextRubricParams{}}, 0), "rubric.content"},
		{define("x", anthropic.BetaManagedAgentsUserDefineOutcomeEventParamsRubricUnion{OfFile: &anthropic.BetaManagedAgentsFileRubricParams{FileID: "file_nope"}}, 0), "rubric.file_id"},
	} {
		err := send(sess.ID, c.ev)
		var aerr *anthropic.Error
		if !errors.As(err, &aerr) || aerr.StatusCode != http.StatusBadRequest || !strings.Contains(aerr.RawJSON(), c.field) {
			t.Errorf("define_outcome with a bad %s: %v, want a 400 naming it", c.field, err)
		}
	}

	up, err := client.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{
		File: anthropic.File(strings.NewReader("RUBRIC-FROM-FILE: report.txt exists and says done."), "rubric.md", "text/markdown")})
	if err != nil {
		t.Fatal(err)
	}
	model.Script(modeltest.Turn{Text: "v1", Usage: modeltest.Usage{InputTokens: 10, OutputTokens: 5}},
		graderVerdict("needs_revision", "FIX-ONE"), modeltest.Turn{Text: "v2"},
		graderVerdict("needs_revision", "FIX-TWO"), modeltest.Turn{Text: "v3"}, graderVerdict("satisfied", "All met."))
	stream := client.Beta.Sessions.Events.StreamEvents(ctx, sess.ID, anthropic.BetaSessionEventStreamParams{})
	defer stream.Close()
	if err := send(sess.ID, define("Write report.txt.", anthropic.BetaManagedAgentsUserDefineOutcomeEventParamsRubricUnion{
		OfFile: &anthropic.BetaManagedAgentsFileRubricParams{FileID: up.ID}}, 0)); err != nil {
		t.Fatal(err)
	}
	var seen []string
	var starts []anthropic.BetaManagedAgentsSpanOutcomeEvaluationStartEvent
	var ends []anthropic.BetaManagedAgentsSpanOutcomeEvaluationEndEvent
	var outcomeID string
	var agentIn, agentOut int64 // the agent's requests' usage
	for stream.Next() {
		ev := stream.Current()
		seen = append(seen, ev.Type)
		switch ev.Type {
		case "user.define_outcome":
			d := ev.AsUserDefineOutcome()
			outcomeID = d.OutcomeID
			if d.MaxIterations != 3 || d.Rubric.Type != "text" || !strings.Contains(d.Rubric.Content, "RUBRIC-FROM-FILE") {
				t.Errorf("define_outcome echo %s", ev.RawJSON())
			}
		case "span.outcome_evaluation_start":
			starts = append(starts, ev.AsSpanOutcomeEvaluationStart())
		case "span.outcome_evaluation_end":
			ends = append(ends, ev.AsSpanOutcomeEvaluationEnd())
		case "span.model_request_end":
			u := ev.AsSpanModelRequestEnd().ModelUsage
			agentIn, agentOut = agentIn+u.InputTokens, agentOut+u.OutputTokens
		}
		if ev.Type == "session.status_idle" {
			break
		}
	}
	if len(starts) != 3 || len(ends) != 3 || strings.Count(strings.Join(seen, " "), "span.outcome_evaluation_ongoing") != 3 {
		t.Fatalf("events %v", seen)
	}
	for i, want := range []string{"needs_revision", "needs_revision", "satisfied"} {
		e := ends[i]
		if starts[i].Iteration != int64(i) || starts[i].OutcomeID != outcomeID || e.Iteration != int64(i) || e.Result != want ||
			e.OutcomeEvaluationStartID != starts[i].ID || e.Usage.InputTokens != 200 || e.Usage.OutputTokens != 30 {
			t.Errorf("evaluation %d: start %s end %s", i, starts[i].RawJSON(), e.RawJSON())
		}
	}
	if strings.Count(strings.Join(seen, " "), "session.status_idle") != 1 {
		t.Errorf("events %v: the session idles once, at the end", seen)
	}
	reqs := model.Requests()
	if len(reqs) != 6 || !strings.Contains(string(reqs[1].Body), "RUBRIC-FROM-FILE") || !strings.Contains(string(reqs[1].Body), "record_evaluation") ||
		!strings.Contains(string(reqs[2].Body), "FIX-ONE") || !strings.Contains(string(reqs[4].Body), "FIX-TWO") {
		t.Fatalf("%d model requests; want the grader to see the file rubric and the revisions the explanations", len(reqs))
	}
	got, err := client.Beta.Sessions.Get(ctx, sess.ID, anthropic.BetaSessionGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.OutcomeEvaluations) != 1 {
		t.Fatalf("outcome_evaluations %d", len(got.OutcomeEvaluations))
	}
	oe := got.OutcomeEvaluations[0]
	if oe.OutcomeID != outcomeID || oe.Result != "satisfied" || oe.Iteration != 2 || oe.Explanation != "All met." ||
		oe.Description != "Write report.txt." || oe.CompletedAt.IsZero() || oe.Type != "outcome_evaluation" {
		t.Errorf("outcome_evaluations[0] %s", oe.RawJSON())
	}
	// The session's usage is the agent's 3 requests and the grader's 3 (200 and 30 tokens each).
	if got.Status != "idle" || agentIn == 0 || got.Usage.InputTokens != agentIn+600 || got.Usage.OutputTokens != agentOut+90 {
		t.Errorf("usage %s", got.Usage.RawJSON())
	}

	// One outcome per session: satisfied at once; max_iterations 1 reached; a grader model failure; an interrupt
	// while grading.
	// run defines an outcome in a new session and returns its evaluation end; during, if set, runs meanwhile.
	run := func(maxIter int64, during func(sessionID string), turns ...modeltest.Turn) (string, anthropic.BetaManagedAgentsSpanOutcomeEvaluationEndEvent) {
		t.Helper()
		sess := newSession()
		model.DropRequests()
		model.Script(turns...)
		st := client.Beta.Sessions.Events.StreamEvents(ctx, sess.ID, anthropic.BetaSessionEventStreamParams{})
		defer st.Close()
		if err := send(sess.ID, define("Do it.", anthropic.BetaManagedAgentsUserDefineOutcomeEventParamsRubricUnion{OfText: &textRubric}, maxIter)); err != nil {
			t.Fatal(err)
		}
		if during != nil {
			// Waited for before returning: its own requests must not outlive the test's context.
			var wg sync.WaitGroup
			wg.Go(func() { during(sess.ID) })
			defer wg.Wait()
		}
		var end anthropic.BetaManagedAgentsSpanOutcomeEvaluationEndEvent
		var types []string
		for st.Next() {
			ev := st.Current()
			types = append(types, ev.Type)
			if ev.Type == "span.outcome_evaluation_end" {
				end = ev.AsSpanOutcomeEvaluationEnd()
			}
			if ev.Type == "session.status_idle" {
				return sess.ID, end
			}
		}
		t.Fatalf("stream ended: %v (events %v)", st.Err(), types)
		return "", end
	}
	if _, end := run(0, nil, modeltest.Turn{Text: "done"}, graderVerdict("satisfied", "ok")); end.Result != "satisfied" || end.Iteration != 0 {
		t.Errorf("first try: %s", end.RawJSON())
	}
	if _, end := run(1, nil, modeltest.Turn{Text: "done"}, graderVerdict("needs_revision", "missing")); end.Result != "max_iterations_reached" || end.Explanation != "missing" {
		t.Errorf("max_iterations 1: %s", end.RawJSON())
	}
	if _, end := run(0, nil, modeltest.Turn{Text: "done"}, modeltest.Turn{Err: modeltest.Invalid("grader-model-broken")}); end.Result != "failed" ||
		!strings.Contains(end.Explanation, "grader-model-broken") {
		t.Errorf("grader failure: %s", end.RawJSON())
	}

	hold := make(chan struct{})
	defer close(hold)
	g := graderVerdict("satisfied", "never")
	g.Hold = hold
	interruptWhileGrading := func(id string) {
		// The grader's request is the second: interrupt once it is in flight.
		if err := model.WaitRequests(ctx, 2); err != nil {
			t.Error(err)
			return
		}
		if err := send(id, anthropic.BetaManagedAgentsEventParamsUnion{OfUserInterrupt: &anthropic.BetaManagedAgentsUserInterruptEventParams{}}); err != nil {
			t.Error(err)
		}
	}
	id, end := run(0, interruptWhileGrading, modeltest.Turn{Text: "done"}, g)
	if end.Result != "interrupted" {
		t.Errorf("interrupt while grading: %s", end.RawJSON())
	}
	got, err = client.Beta.Sessions.Get(ctx, id, anthropic.BetaSessionGetParams{})
	if err != nil || len(got.OutcomeEvaluations) != 1 || got.OutcomeEvaluations[0].Result != "interrupted" {
		t.Errorf("interrupted session: %v %+v", err, got.OutcomeEvaluations)
	}
}

// TestGraderModelFlag: `serve --grader-model` grades with another model than the agent's; an outcome among a
// session's initial_events shows pending in the create response and is graded like one sent later.
func TestGraderModelFlag(t *testing.T) {
	t.Parallel()
	model := modeltest.NewServer(t)
	model.Script(modeltest.Turn{Text: "done"}, graderVerdict("satisfied", "ok"))
	s := startServer(t, t.TempDir(), model, "--grader-model", "claude-haiku-4-5")
	client := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(s.url),
		option.WithAPIKey(testKey), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	agent, err := client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
		Name: "graded", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"}})
	if err != nil {
		t.Fatal(err)
	}
	env, err := client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "graded"})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: env.ID,
		InitialEvents: []anthropic.BetaSessionNewParamsInitialEventUnion{{OfUserDefineOutcome: &anthropic.BetaManagedAgentsUserDefineOutcomeEventParams{
			Description: "Say done.", Rubric: anthropic.BetaManagedAgentsUserDefineOutcomeEventParamsRubricUnion{
				OfText: &anthropic.BetaManagedAgentsTextRubricParams{Content: "It says done."}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(sess.OutcomeEvaluations) != 1 || sess.OutcomeEvaluations[0].Description != "Say done." ||
		(sess.OutcomeEvaluations[0].Result != "pending" && sess.OutcomeEvaluations[0].Result != "running") {
		t.Errorf("created: outcome_evaluations %+v", sess.OutcomeEvaluations)
	}
	for {
		got, err := client.Beta.Sessions.Get(ctx, sess.ID, anthropic.BetaSessionGetParams{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.OutcomeEvaluations) == 1 && got.OutcomeEvaluations[0].Result == "satisfied" && got.Status == "idle" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("not graded: %s", got.RawJSON())
		}
		time.Sleep(50 * time.Millisecond)
	}
	reqs := model.Requests()
	if len(reqs) != 2 || reqs[0].Model != "claude-sonnet-4-5" || reqs[1].Model != "claude-haiku-4-5" {
		t.Fatalf("%d requests; want the agent's on claude-sonnet-4-5, the grader's on claude-haiku-4-5", len(reqs))
	}
}
