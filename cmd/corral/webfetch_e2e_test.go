package main

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/model/modeltest"
)

// TestWebFetchThroughSDK: `corral serve` trusting a real HTTPS page server on 127.0.0.1 (the operator's
// --egress-allow-internal and --egress-ca-file, the only way web_fetch reaches an internal address); an agent
// with the default built-in toolset, created through the official SDK, fetches an HTML page (Markdown in the
// result), a PDF (a document block) and a page that redirects to an internal address nobody allowed (an error
// result naming --egress-allow-internal); the model's next request carries each result.
func TestWebFetchThroughSDK(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("secret")) }))
	defer other.Close()
	internal := strings.TrimPrefix(other.URL, "http://")
	mux := http.NewServeMux()
	mux.HandleFunc("/report", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(`<html><head><title>Herd</title></head><body><article><h1>Herd</h1><p>The herd grazed the <em>north</em> field, ` +
			`and the fences held through the storm, which is more than anyone expected after the last one.</p></article></body></html>`))
	})
	mux.HandleFunc("/report.pdf", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/pdf")
		_, _ = w.Write([]byte("%PDF-1.4\n%%EOF\n"))
	})
	mux.HandleFunc("/to-internal", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://"+internal+"/latest/meta-data", http.StatusFound)
	})
	pages := httptest.NewTLSServer(mux)
	defer pages.Close()
	ca := writePEM(t, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: pages.Certificate().Raw}))

	fetch := func(id, path string) modeltest.ToolUse {
		return modeltest.ToolUse{ID: id, Name: "web_fetch", Input: `{"url":"` + pages.URL + path + `"}`}
	}
	model := modeltest.NewServer(t)
	model.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{fetch("toolu_html", "/report"), fetch("toolu_pdf", "/report.pdf"), fetch("toolu_int", "/to-internal")}},
		modeltest.Turn{Text: "The herd is fine."},
	)
	s := startServer(t, t.TempDir(), model, "--egress-allow-internal", strings.TrimPrefix(pages.URL, "https://"), "--egress-ca-file", ca)
	c := sdkClient(s)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	agentID, envID := sdkAgentEnv(ctx, t, c, anthropic.BetaEnvironmentNewParamsConfigUnion{OfCloud: &anthropic.BetaCloudConfigParams{}})
	sess, err := c.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agentID)}, EnvironmentID: envID})
	if err != nil {
		t.Fatal(err)
	}
	events, raw := sendAndWait(ctx, t, c, sess.ID, "How is the herd? Read "+pages.URL+"/report, "+pages.URL+"/report.pdf and "+pages.URL+"/to-internal.")
	// Each result is matched to its call by what it says: the page fetched, or the refusal.
	var html, pdf, refused *anthropic.BetaManagedAgentsAgentToolResultEvent
	for _, ev := range events {
		switch ev.Type {
		case "agent.tool_use":
			if u := ev.AsAgentToolUse(); u.Name != "web_fetch" || u.EvaluatedPermission != "allow" {
				t.Errorf("tool use %s", u.RawJSON())
			}
		case "agent.tool_result":
			r := ev.AsAgentToolResult()
			switch text := r.Content[0].Text; {
			case strings.HasPrefix(text, "Fetched "+pages.URL+"/report (text/html)"):
				html = &r
			case strings.HasPrefix(text, "Fetched "+pages.URL+"/report.pdf (application/pdf)"):
				pdf = &r
			case strings.Contains(text, "/latest/meta-data"):
				refused = &r
			}
		}
	}
	if html == nil || pdf == nil || refused == nil {
		t.Fatalf("results missing: %s", raw)
	}
	if html.IsError || len(html.Content) != 1 || !strings.Contains(html.Content[0].Text, "The herd grazed the _north_ field") {
		t.Errorf("html result %s", html.RawJSON())
	}
	if pdf.IsError || len(pdf.Content) != 2 || pdf.Content[1].Type != "document" || !strings.Contains(pdf.Content[1].RawJSON(), `"media_type":"application/pdf"`) {
		t.Errorf("pdf result %s", pdf.RawJSON())
	}
	if !refused.IsError || !strings.Contains(refused.Content[0].Text, "--egress-allow-internal "+internal) {
		t.Errorf("redirect result %s", refused.RawJSON())
	}
	reqs := model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests", len(reqs))
	}
	saw := map[string]modeltest.Block{}
	for _, m := range reqs[1].Messages {
		for _, b := range m.Content {
			if b.Type == "tool_result" {
				saw[b.ToolUseID] = b
			}
		}
	}
	if b := saw["toolu_html"]; b.IsError || len(b.Content) != 1 || !strings.Contains(b.Content[0].Text, "_north_ field") {
		t.Errorf("model saw %+v", b)
	}
	if b := saw["toolu_pdf"]; len(b.Content) != 2 || b.Content[1].Type != "document" {
		t.Errorf("model saw %+v", b)
	}
	if b := saw["toolu_int"]; !b.IsError || !strings.Contains(b.Content[0].Text, "internal address") {
		t.Errorf("model saw %+v", b)
	}
}
