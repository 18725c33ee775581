package api_test

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/price"
)

// TestModelsSDK: the official SDK's Models API works against Corral as against the hosted API: the list of the
// models this server routes (the built-in Claude models and a prices file's), newest first with their display
// names; its pages forward (after_id, the SDK's auto-paging) and backward (before_id); get by id and by a dated
// alias; an unknown id is the API's 404.
func TestModelsSDK(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "prices.json")
	if err := os.WriteFile(file, []byte(`{"models": {"openai/gpt-4o": {"input": "2.50", "output": "10", "display_name": "GPT-4o"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	prices, err := price.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, func(c *api.Config) { c.Prices = prices })
	ctx := ctxT(t)
	want := prices.Models()

	page, err := h.client.Models.List(ctx, anthropic.ModelListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != len(want) || page.HasMore || page.FirstID != want[0].ID || page.LastID != want[len(want)-1].ID {
		t.Fatalf("list: %d models, has_more %v, first %q, last %q; want %d", len(page.Data), page.HasMore, page.FirstID, page.LastID, len(want))
	}
	byID := map[string]anthropic.ModelInfo{}
	for i, m := range page.Data {
		byID[m.ID] = m
		if m.ID != want[i].ID || m.DisplayName != want[i].DisplayName || !m.CreatedAt.Equal(want[i].Released) || m.Type != "model" {
			t.Errorf("model %d: %+v, want %+v", i, m, want[i])
		}
		if i > 0 && m.CreatedAt.After(page.Data[i-1].CreatedAt) {
			t.Errorf("model %s listed after an older one", m.ID)
		}
	}
	if m := byID["claude-sonnet-4-5"]; m.DisplayName != "Claude Sonnet 4.5" || !m.CreatedAt.Equal(time.Date(2025, 9, 29, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("claude-sonnet-4-5: %+v", m)
	}
	if m := byID["openai/gpt-4o"]; m.DisplayName != "GPT-4o" || m.CreatedAt.Unix() != 0 {
		t.Errorf("openai/gpt-4o: %+v", m)
	}

	// Pages of 3: forward by the SDK's own paging, then back from the last one.
	var ids []string
	iter := h.client.Models.ListAutoPaging(ctx, anthropic.ModelListParams{Limit: anthropic.Int(3)})
	for iter.Next() {
		ids = append(ids, iter.Current().ID)
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if len(ids) != len(want) {
		t.Fatalf("auto-paging by 3 gave %d models, want %d: %v", len(ids), len(want), ids)
	}
	for i, id := range ids {
		if id != want[i].ID {
			t.Errorf("auto-paging: model %d is %s, want %s", i, id, want[i].ID)
		}
	}
	first, err := h.client.Models.List(ctx, anthropic.ModelListParams{Limit: anthropic.Int(3)})
	if err != nil || len(first.Data) != 3 || !first.HasMore || first.FirstID != want[0].ID || first.LastID != want[2].ID {
		t.Fatalf("first page of 3: %+v, %v", first, err)
	}
	last := want[len(want)-1].ID
	back, err := h.client.Models.List(ctx, anthropic.ModelListParams{BeforeID: anthropic.String(last), Limit: anthropic.Int(2)})
	if err != nil || len(back.Data) != 2 || !back.HasMore || back.Data[0].ID != want[len(want)-3].ID || back.LastID != want[len(want)-2].ID {
		t.Fatalf("page of 2 before %s: %+v, %v", last, back, err)
	}
	start, err := h.client.Models.List(ctx, anthropic.ModelListParams{BeforeID: anthropic.String(want[2].ID)})
	if err != nil || len(start.Data) != 2 || start.HasMore || start.FirstID != want[0].ID {
		t.Fatalf("page before %s: %+v, %v", want[2].ID, start, err)
	}
	end, err := h.client.Models.List(ctx, anthropic.ModelListParams{AfterID: anthropic.String(last)})
	if err != nil || len(end.Data) != 0 || end.HasMore || end.FirstID != "" || end.LastID != "" {
		t.Fatalf("page after the last: %+v, %v", end, err)
	}
	_, err = h.client.Models.List(ctx, anthropic.ModelListParams{AfterID: anthropic.String("no-such-model")})
	wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)

	for id, name := range map[string]string{"claude-opus-4-6": "Claude Opus 4.6", "claude-sonnet-4-5-20250929": "Claude Sonnet 4.5",
		"openai/gpt-4o": "GPT-4o"} {
		m, err := h.client.Models.Get(ctx, id, anthropic.ModelGetParams{})
		if err != nil || m.ID != id || m.DisplayName != name || m.Type != "model" {
			t.Errorf("get %s: %+v, %v", id, m, err)
		}
	}
	_, err = h.client.Models.Get(ctx, "gpt-5-unrouted", anthropic.ModelGetParams{})
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
}
