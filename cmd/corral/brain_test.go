package main

import (
	"context"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/harness"
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

// TestWebSearchFlag: --web-search picks a SearXNG provider, Anthropic's server tool or nothing, and refuses
// anything else.
func TestWebSearchFlag(t *testing.T) {
	hf := &handsFlags{egress: egressFlags{allowInternal: "127.0.0.1:8888"}}
	for _, c := range []struct {
		flag          string
		provider, srv bool
		wantErr       bool
		name, noteHas string
	}{
		{"", false, false, false, "", "no search provider"},
		{"searxng=http://127.0.0.1:8888", true, false, false, "searxng", "through searxng"},
		{"anthropic", false, true, false, "anthropic", "server tool"},
		{"searxng=ftp://x", false, false, true, "", ""},
		{"bing=https://x", false, false, true, "", ""},
	} {
		f := brainFlags{webSearch: c.flag}
		var cfg harness.Config
		var stderr strings.Builder
		err := f.setWebTools(&stdio{err: &stderr}, &cfg, hf)
		if (err != nil) != c.wantErr {
			t.Errorf("%q: err %v", c.flag, err)
			continue
		}
		if c.wantErr {
			continue
		}
		if (cfg.WebSearch != nil) != c.provider || cfg.WebSearchServer != c.srv || f.webSearchName() != c.name ||
			!strings.Contains(stderr.String(), c.noteHas) || cfg.WebFetch == nil {
			t.Errorf("%q: provider %v server %v name %q note %q fetcher %v", c.flag, cfg.WebSearch, cfg.WebSearchServer, f.webSearchName(), stderr.String(), cfg.WebFetch)
		}
	}
}
