package main

import (
	"context"
	"testing"

	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/model/modeltest"
)

// TestNewModelReadsEnvironment: the command, not the adapters, reads the model credentials and endpoints from
// the environment, under the names the official SDKs use.
func TestNewModelReadsEnvironment(t *testing.T) {
	anth, oai := modeltest.NewServer(t), modeltest.NewServer(t)
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-env")
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "")
	t.Setenv("ANTHROPIC_BASE_URL", anth.URL)
	t.Setenv("OPENAI_API_KEY", "sk-oai-env")
	t.Setenv("OPENAI_BASE_URL", oai.URL+"/v1")
	t.Setenv("OPENAI_ORG_ID", "org-env")
	t.Setenv("OPENAI_PROJECT_ID", "proj-env")
	m, err := newModel()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"claude-test", "openai/gpt-test"} {
		if _, err := m.Call(context.Background(), &model.Request{Model: id, MaxTokens: 10, Messages: []model.Message{
			{Role: "user", Content: []model.Block{{Type: model.BlockText, Text: "hi"}}},
		}}, nil); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	if got := anth.Requests(); len(got) != 1 || got[0].Model != "claude-test" || got[0].Header.Get("authorization") != "Bearer sk-ant-env" {
		t.Fatalf("anthropic requests %+v", got)
	}
	got := oai.Requests()
	if len(got) != 1 || got[0].Model != "gpt-test" || got[0].Header.Get("authorization") != "Bearer sk-oai-env" ||
		got[0].Header.Get("OpenAI-Organization") != "org-env" || got[0].Header.Get("OpenAI-Project") != "proj-env" {
		t.Fatalf("openai requests %+v", got)
	}

	t.Setenv("ANTHROPIC_API_KEY", "")
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "tok-env")
	if m, err = newModel(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Call(context.Background(), &model.Request{Model: "claude-test", MaxTokens: 10, Messages: []model.Message{
		{Role: "user", Content: []model.Block{{Type: model.BlockText, Text: "hi"}}},
	}}, nil); err != nil {
		t.Fatal(err)
	}
	if got := anth.Requests(); len(got) != 2 || got[1].Header.Get("authorization") != "Bearer tok-env" {
		t.Fatalf("anthropic requests with ANTHROPIC_AUTH_TOKEN %+v", got)
	}
}
