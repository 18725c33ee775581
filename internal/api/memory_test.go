package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/lib/environments"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/postgres"
	"github.com/corralhq/corral/internal/store/postgres/pgtest"
)

// memoryBackends runs a memory test over a real API server on each store backend: SQLite always, PostgreSQL when
// CORRAL_TEST_POSTGRES is set (pgtest skips with the reason otherwise).
func memoryBackends(t *testing.T, run func(t *testing.T, h *harness)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		run(t, newHarness(t))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		st, err := postgres.Open(ctxT(t), pgtest.NewDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		run(t, harnessOver(t, st))
	})
}

// harnessOver is newHarness over a store the test opened (closed at cleanup); tweak adjusts the config.
func harnessOver(t *testing.T, st store.Store, tweak ...func(*api.Config)) *harness {
	t.Helper()
	cfg := api.Config{
		Store:  st,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Keys:   &api.KeyAuth{Static: testKey, Store: st},
	}
	for _, f := range tweak {
		f(&cfg)
	}
	srv := httptest.NewServer(newAPI(t, cfg).Handler())
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	client := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(srv.URL),
		option.WithAPIKey(testKey), option.WithMaxRetries(0), option.WithHTTPClient(srv.Client()))
	return &harness{t: t, store: st, srv: srv, client: client}
}

func (h *harness) newMemoryStore(ctx context.Context, name string) *anthropic.BetaManagedAgentsMemoryStore {
	h.t.Helper()
	m, err := h.client.Beta.MemoryStores.New(ctx, anthropic.BetaMemoryStoreNewParams{Name: name})
	if err != nil {
		h.t.Fatalf("create memory store %q: %v", name, err)
	}
	return m
}

func (h *harness) newMemory(ctx context.Context, storeID, path, content string, opts ...option.RequestOption) *anthropic.BetaManagedAgentsMemory {
	h.t.Helper()
	m, err := h.client.Beta.MemoryStores.Memories.New(ctx, storeID, anthropic.BetaMemoryStoreMemoryNewParams{
		Path: path, Content: param.NewOpt(content)}, opts...)
	if err != nil {
		h.t.Fatalf("create memory %s: %v", path, err)
	}
	return m
}

// TestMemoryStoresSDK: a memory store's life through the official SDK: create, get, update (metadata patch,
// description cleared), list with paging and include_archived, archive, delete.
func TestMemoryStoresSDK(t *testing.T) {
	t.Parallel()
	memoryBackends(t, func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		c := h.client.Beta.MemoryStores
		created, err := c.New(ctx, anthropic.BetaMemoryStoreNewParams{Name: "User Preferences",
			Description: anthropic.String("what the user likes"), Metadata: map[string]string{"team": "docs", "env": "dev"}})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(created.ID, apitype.PrefixMemoryStore) || created.Type != "memory_store" ||
			created.Name != "User Preferences" || created.Description != "what the user likes" ||
			created.Metadata["team"] != "docs" || !created.ArchivedAt.IsZero() || created.CreatedAt.IsZero() ||
			!strings.Contains(created.RawJSON(), `"archived_at":null`) {
			t.Fatalf("created %s", created.RawJSON())
		}
		got, err := c.Get(ctx, created.ID, anthropic.BetaMemoryStoreGetParams{})
		if err != nil || got.Name != created.Name || got.Metadata["env"] != "dev" {
			t.Fatalf("get: %v %s", err, got.RawJSON())
		}
		upd, err := c.Update(ctx, created.ID, anthropic.BetaMemoryStoreUpdateParams{Name: anthropic.String("Prefs"),
			Description: anthropic.String(""), Metadata: map[string]string{"env": "", "owner": "me"}})
		if err != nil || upd.Name != "Prefs" || upd.Description != "" || upd.Metadata["env"] != "" ||
			upd.Metadata["team"] != "docs" || upd.Metadata["owner"] != "me" || len(upd.Metadata) != 2 ||
			upd.UpdatedAt.Before(created.UpdatedAt) {
			t.Fatalf("update: %v %s", err, upd.RawJSON())
		}

		// Validation: names, descriptions and metadata as the hosted service limits them, naming the field.
		for _, tc := range []struct {
			p     anthropic.BetaMemoryStoreNewParams
			field string
		}{
			{anthropic.BetaMemoryStoreNewParams{Name: ""}, "name"},
			{anthropic.BetaMemoryStoreNewParams{Name: strings.Repeat("n", 256)}, "name"},
			{anthropic.BetaMemoryStoreNewParams{Name: "x", Description: anthropic.String(strings.Repeat("d", 1025))}, "description"},
			{anthropic.BetaMemoryStoreNewParams{Name: "x", Metadata: map[string]string{strings.Repeat("k", 65): "v"}}, "metadata"},
		} {
			_, err := c.New(ctx, tc.p)
			if aerr := wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest); !strings.HasPrefix(aerr.Message, tc.field) {
				t.Errorf("%s: message %q does not name the field", tc.field, aerr.Message)
			}
		}
		status, _, body := h.do("POST", "/v1/memory_stores", `{"name":"x","colour":"red"}`)
		if status != http.StatusBadRequest || !strings.Contains(string(body), "colour: unknown field") {
			t.Errorf("unknown field: %d %s", status, body)
		}
		_, err = c.Get(ctx, "memstore_nope", anthropic.BetaMemoryStoreGetParams{})
		wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)

		// Paging through every store, newest first; archived ones only with include_archived.
		ids := []string{created.ID}
		for i := range 4 {
			ids = append(ids, h.newMemoryStore(ctx, fmt.Sprintf("store %d", i)).ID)
		}
		arch, err := c.Archive(ctx, ids[1], anthropic.BetaMemoryStoreArchiveParams{})
		if err != nil || arch.ArchivedAt.IsZero() {
			t.Fatalf("archive: %v %s", err, arch.RawJSON())
		}
		again, err := c.Archive(ctx, ids[1], anthropic.BetaMemoryStoreArchiveParams{})
		if err != nil || !again.ArchivedAt.Equal(arch.ArchivedAt) {
			t.Fatalf("archive again: %v %s", err, again.RawJSON())
		}
		_, err = c.Update(ctx, ids[1], anthropic.BetaMemoryStoreUpdateParams{Name: anthropic.String("late")})
		wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)
		list := func(includeArchived bool) []string {
			var out []string
			pages := 0
			page, err := c.List(ctx, anthropic.BetaMemoryStoreListParams{Limit: anthropic.Int(2),
				IncludeArchived: anthropic.Bool(includeArchived)})
			for ; err == nil && page != nil; page, err = page.GetNextPage() {
				pages++
				for _, m := range page.Data {
					out = append(out, m.ID)
				}
				if len(page.Data) == 0 {
					t.Fatalf("an empty page: %s", page.RawJSON())
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := (len(out) + 1) / 2; pages != want {
				t.Errorf("%d pages for %d stores, want %d", pages, len(out), want)
			}
			return out
		}
		want := slices.Clone(ids)
		slices.Reverse(want)
		if got := list(true); !slices.Equal(got, want) {
			t.Errorf("list with archived: %v, want %v", got, want)
		}
		want = slices.DeleteFunc(want, func(id string) bool { return id == ids[1] })
		if got := list(false); !slices.Equal(got, want) {
			t.Errorf("list: %v, want %v", got, want)
		}
		future := time.Now().Add(time.Hour)
		page, err := c.List(ctx, anthropic.BetaMemoryStoreListParams{CreatedAtGte: anthropic.Time(future)})
		if err != nil || len(page.Data) != 0 {
			t.Errorf("created_at[gte] in the future: %v %s", err, page.RawJSON())
		}
		page, err = c.List(ctx, anthropic.BetaMemoryStoreListParams{CreatedAtLte: anthropic.Time(future)})
		if err != nil || len(page.Data) != 4 {
			t.Errorf("created_at[lte] in the future: %v %s", err, page.RawJSON())
		}
		_, err = c.List(ctx, anthropic.BetaMemoryStoreListParams{Limit: anthropic.Int(101)})
		wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)

		h.newMemory(ctx, ids[2], "/a.md", "a")
		del, err := c.Delete(ctx, ids[2], anthropic.BetaMemoryStoreDeleteParams{})
		if err != nil || del.ID != ids[2] || del.Type != "memory_store_deleted" {
			t.Fatalf("delete: %v", err)
		}
		_, err = c.Get(ctx, ids[2], anthropic.BetaMemoryStoreGetParams{})
		wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
		_, err = c.Memories.List(ctx, ids[2], anthropic.BetaMemoryStoreMemoryListParams{})
		wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
		_, err = c.Delete(ctx, ids[2], anthropic.BetaMemoryStoreDeleteParams{})
		wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
	})
}

// TestMemoriesSDK: memories through the official SDK: create, get, update, rename, delete; the 409s of a taken
// path and of failed preconditions; no-op updates; the views; versions with each filter; redaction.
func TestMemoriesSDK(t *testing.T) {
	t.Parallel()
	memoryBackends(t, func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		mem := h.client.Beta.MemoryStores.Memories
		st := h.newMemoryStore(ctx, "notes")
		other := h.newMemoryStore(ctx, "other")

		m, err := mem.New(ctx, st.ID, anthropic.BetaMemoryStoreMemoryNewParams{Path: "/notes/todo.md",
			Content: param.NewOpt("buy milk")})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(m.ID, apitype.PrefixMemory) || m.Type != "memory" || m.MemoryStoreID != st.ID ||
			m.Path != "/notes/todo.md" || m.ContentSha256 != apitype.ContentSHA256("buy milk") || m.ContentSizeBytes != 8 ||
			!strings.HasPrefix(m.MemoryVersionID, apitype.PrefixMemVersion) || !strings.Contains(m.RawJSON(), `"content":null`) {
			t.Fatalf("created (basic view) %s", m.RawJSON())
		}
		full, err := mem.New(ctx, st.ID, anthropic.BetaMemoryStoreMemoryNewParams{Path: "/empty.md",
			Content: param.Null[string](), View: anthropic.BetaManagedAgentsMemoryViewFull})
		if err != nil || full.Content != "" || !strings.Contains(full.RawJSON(), `"content":""`) || full.ContentSizeBytes != 0 {
			t.Fatalf("create with null content, full view: %v %s", err, full.RawJSON())
		}
		got, err := mem.Get(ctx, m.ID, anthropic.BetaMemoryStoreMemoryGetParams{MemoryStoreID: st.ID})
		if err != nil || got.Content != "buy milk" || got.MemoryVersionID != m.MemoryVersionID {
			t.Fatalf("get (full by default): %v %s", err, got.RawJSON())
		}
		got, err = mem.Get(ctx, m.ID, anthropic.BetaMemoryStoreMemoryGetParams{MemoryStoreID: st.ID,
			View: anthropic.BetaManagedAgentsMemoryViewBasic})
		if err != nil || !strings.Contains(got.RawJSON(), `"content":null`) || got.ContentSha256 != m.ContentSha256 {
			t.Fatalf("get basic: %v %s", err, got.RawJSON())
		}
		// A memory of another store, through this one's URL, is not found.
		_, err = mem.Get(ctx, m.ID, anthropic.BetaMemoryStoreMemoryGetParams{MemoryStoreID: other.ID})
		wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
		_, err = mem.Update(ctx, m.ID, anthropic.BetaMemoryStoreMemoryUpdateParams{MemoryStoreID: other.ID,
			Content: param.NewOpt("x")})
		wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
		_, err = mem.Delete(ctx, m.ID, anthropic.BetaMemoryStoreMemoryDeleteParams{MemoryStoreID: other.ID})
		wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
		_, err = mem.New(ctx, "memstore_nope", anthropic.BetaMemoryStoreMemoryNewParams{Path: "/a", Content: param.NewOpt("a")})
		if aerr := wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound); !strings.Contains(aerr.Message, "memstore_nope") {
			t.Errorf("unknown store: %s", aerr.Message)
		}

		// Content is UTF-8 text without NUL, on either store.
		_, err = mem.New(ctx, st.ID, anthropic.BetaMemoryStoreMemoryNewParams{Path: "/nul.md", Content: param.NewOpt("a\x00b")})
		if aerr := wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest); !strings.HasPrefix(aerr.Message, "content: ") {
			t.Errorf("NUL in content: %s", aerr.Message)
		}
		uni := h.newMemory(ctx, other.ID, "/日本/ノート.md", "émoji 🎉 and \t tabs\n")
		if got, err := mem.Get(ctx, uni.ID, anthropic.BetaMemoryStoreMemoryGetParams{MemoryStoreID: other.ID}); err != nil ||
			got.Content != "émoji 🎉 and \t tabs\n" || got.Path != "/日本/ノート.md" || got.ContentSizeBytes != int64(len(got.Content)) {
			t.Fatalf("unicode: %v %s", err, got.RawJSON())
		}

		// A taken path is a 409 memory_path_conflict_error, on create and on rename.
		_, err = mem.New(ctx, st.ID, anthropic.BetaMemoryStoreMemoryNewParams{Path: "/notes/todo.md", Content: param.NewOpt("x")})
		wantAPIError(t, err, http.StatusConflict, apitype.ErrMemoryPathConflict)
		_, err = mem.Update(ctx, m.ID, anthropic.BetaMemoryStoreMemoryUpdateParams{MemoryStoreID: st.ID,
			Path: param.NewOpt("/empty.md")})
		wantAPIError(t, err, http.StatusConflict, apitype.ErrMemoryPathConflict)
		// Paths are case-sensitive: another case is another memory.
		h.newMemory(ctx, st.ID, "/Notes/todo.md", "case")

		// Update with a precondition: the wrong digest is a 409, the right one writes a new version.
		_, err = mem.Update(ctx, m.ID, anthropic.BetaMemoryStoreMemoryUpdateParams{MemoryStoreID: st.ID,
			Content:      param.NewOpt("buy oat milk"),
			Precondition: anthropic.BetaManagedAgentsPreconditionParam{ContentSha256: param.NewOpt(apitype.ContentSHA256("other"))}})
		aerr := wantAPIError(t, err, http.StatusConflict, apitype.ErrMemoryPrecondition)
		if aerr.Response.Header.Get("x-should-retry") != "false" {
			t.Errorf("409 without x-should-retry: false")
		}
		v2, err := mem.Update(ctx, m.ID, anthropic.BetaMemoryStoreMemoryUpdateParams{MemoryStoreID: st.ID,
			Content:      param.NewOpt("buy oat milk"),
			Precondition: anthropic.BetaManagedAgentsPreconditionParam{ContentSha256: param.NewOpt(m.ContentSha256)},
			View:         anthropic.BetaManagedAgentsMemoryViewFull})
		if err != nil || v2.Content != "buy oat milk" || v2.MemoryVersionID == m.MemoryVersionID || v2.ID != m.ID {
			t.Fatalf("update: %v %s", err, v2.RawJSON())
		}
		// A no-op update (same content, same path) writes no version.
		noop, err := mem.Update(ctx, m.ID, anthropic.BetaMemoryStoreMemoryUpdateParams{MemoryStoreID: st.ID,
			Content: param.NewOpt("buy oat milk"), Path: param.NewOpt("/notes/todo.md")})
		if err != nil || noop.MemoryVersionID != v2.MemoryVersionID {
			t.Fatalf("no-op update: %v %s", err, noop.RawJSON())
		}
		// A rename keeps the id.
		renamed, err := mem.Update(ctx, m.ID, anthropic.BetaMemoryStoreMemoryUpdateParams{MemoryStoreID: st.ID,
			Path: param.NewOpt("/notes/done/todo.md")})
		if err != nil || renamed.ID != m.ID || renamed.Path != "/notes/done/todo.md" || renamed.ContentSha256 != v2.ContentSha256 ||
			renamed.MemoryVersionID == v2.MemoryVersionID {
			t.Fatalf("rename: %v %s", err, renamed.RawJSON())
		}
		status, _, body := h.do("POST", "/v1/memory_stores/"+st.ID+"/memories/"+m.ID,
			`{"precondition":{"type":"content_sha256","content_sha256":"xyz"}}`)
		if status != http.StatusBadRequest || !strings.Contains(string(body), "precondition.content_sha256") {
			t.Errorf("a malformed precondition: %d %s", status, body)
		}
		status, _, body = h.do("POST", "/v1/memory_stores/"+st.ID+"/memories/"+m.ID, `{"precondition":{"type":"etag"}}`)
		if status != http.StatusBadRequest || !strings.Contains(string(body), "precondition.type") {
			t.Errorf("an unknown precondition: %d %s", status, body)
		}

		// Delete with expected_content_sha256: a mismatch is a 409 and the memory stays.
		_, err = mem.Delete(ctx, m.ID, anthropic.BetaMemoryStoreMemoryDeleteParams{MemoryStoreID: st.ID,
			ExpectedContentSha256: param.NewOpt(m.ContentSha256)})
		wantAPIError(t, err, http.StatusConflict, apitype.ErrMemoryPrecondition)
		del, err := mem.Delete(ctx, m.ID, anthropic.BetaMemoryStoreMemoryDeleteParams{MemoryStoreID: st.ID,
			ExpectedContentSha256: param.NewOpt(v2.ContentSha256)})
		if err != nil || del.ID != m.ID || del.Type != "memory_deleted" {
			t.Fatalf("delete: %v", err)
		}
		_, err = mem.Get(ctx, m.ID, anthropic.BetaMemoryStoreMemoryGetParams{MemoryStoreID: st.ID})
		wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
		_, err = mem.Delete(ctx, m.ID, anthropic.BetaMemoryStoreMemoryDeleteParams{MemoryStoreID: st.ID})
		wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)

		// Versions: created, modified (content), modified (rename), deleted; newest first, each filter.
		vers := h.client.Beta.MemoryStores.MemoryVersions
		all, err := vers.List(ctx, st.ID, anthropic.BetaMemoryStoreMemoryVersionListParams{MemoryID: param.NewOpt(m.ID)})
		if err != nil {
			t.Fatal(err)
		}
		var ops []string
		for _, v := range all.Data {
			ops = append(ops, string(v.Operation))
			if v.CreatedBy.Type != "api_actor" || v.CreatedBy.APIKeyID != api.StaticKeyID || v.MemoryStoreID != st.ID ||
				!strings.Contains(v.RawJSON(), `"content":null`) {
				t.Errorf("version (basic view) %s", v.RawJSON())
			}
		}
		if want := []string{"deleted", "modified", "modified", "created"}; !slices.Equal(ops, want) {
			t.Fatalf("versions of the memory: %v, want %v (newest first; the no-op wrote none)", ops, want)
		}
		created, deleted := all.Data[3], all.Data[0]
		if created.ID != m.MemoryVersionID || created.Path != "/notes/todo.md" || created.ContentSha256 != m.ContentSha256 ||
			created.ContentSizeBytes != 8 {
			t.Errorf("created version %s", created.RawJSON())
		}
		if deleted.Path != "/notes/done/todo.md" || !strings.Contains(deleted.RawJSON(), `"content_sha256":null`) {
			t.Errorf("deleted version %s", deleted.RawJSON())
		}
		v, err := vers.Get(ctx, created.ID, anthropic.BetaMemoryStoreMemoryVersionGetParams{MemoryStoreID: st.ID})
		if err != nil || v.Content != "buy milk" || v.Operation != "created" {
			t.Fatalf("version get (full by default): %v %s", err, v.RawJSON())
		}
		_, err = vers.Get(ctx, created.ID, anthropic.BetaMemoryStoreMemoryVersionGetParams{MemoryStoreID: other.ID})
		wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
		count := func(p anthropic.BetaMemoryStoreMemoryVersionListParams) int {
			t.Helper()
			n := 0
			it := vers.ListAutoPaging(ctx, st.ID, p)
			for it.Next() {
				n++
			}
			if err := it.Err(); err != nil {
				t.Fatal(err)
			}
			return n
		}
		// m's 4 versions and the creations of /empty.md and /Notes/todo.md: 6 in the store.
		for _, tc := range []struct {
			name string
			p    anthropic.BetaMemoryStoreMemoryVersionListParams
			want int
		}{
			{"all, by pages of 2", anthropic.BetaMemoryStoreMemoryVersionListParams{Limit: param.NewOpt[int64](2)}, 6},
			{"created", anthropic.BetaMemoryStoreMemoryVersionListParams{Operation: "created"}, 3},
			{"modified", anthropic.BetaMemoryStoreMemoryVersionListParams{Operation: "modified"}, 2},
			{"deleted", anthropic.BetaMemoryStoreMemoryVersionListParams{Operation: "deleted"}, 1},
			{"api key", anthropic.BetaMemoryStoreMemoryVersionListParams{APIKeyID: param.NewOpt(api.StaticKeyID)}, 6},
			{"other api key", anthropic.BetaMemoryStoreMemoryVersionListParams{APIKeyID: param.NewOpt("apikey_x")}, 0},
			{"session", anthropic.BetaMemoryStoreMemoryVersionListParams{SessionID: param.NewOpt("sesn_x")}, 0},
			{"service account", anthropic.BetaMemoryStoreMemoryVersionListParams{ServiceAccountID: param.NewOpt("svac_x")}, 0},
			{"created_at[gte] future", anthropic.BetaMemoryStoreMemoryVersionListParams{CreatedAtGte: param.NewOpt(time.Now().Add(time.Hour))}, 0},
			{"created_at[lte] future", anthropic.BetaMemoryStoreMemoryVersionListParams{CreatedAtLte: param.NewOpt(time.Now().Add(time.Hour))}, 6},
			{"created_at[lte] past", anthropic.BetaMemoryStoreMemoryVersionListParams{CreatedAtLte: param.NewOpt(time.Now().Add(-time.Hour))}, 0},
			{"full view", anthropic.BetaMemoryStoreMemoryVersionListParams{View: anthropic.BetaManagedAgentsMemoryViewFull}, 6},
		} {
			if got := count(tc.p); got != tc.want {
				t.Errorf("versions %s: %d, want %d", tc.name, got, tc.want)
			}
		}
		_, err = vers.List(ctx, st.ID, anthropic.BetaMemoryStoreMemoryVersionListParams{Operation: "renamed"})
		wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)
		_, err = vers.List(ctx, st.ID, anthropic.BetaMemoryStoreMemoryVersionListParams{View: anthropic.BetaManagedAgentsMemoryViewFull,
			Limit: param.NewOpt[int64](21)})
		wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)

		// Redaction: path and content go, who and when are recorded; the current version of a live memory is
		// refused (409).
		red, err := vers.Redact(ctx, created.ID, anthropic.BetaMemoryStoreMemoryVersionRedactParams{MemoryStoreID: st.ID})
		if err != nil || red.RedactedAt.IsZero() || red.RedactedBy.Type != "api_actor" ||
			!strings.Contains(red.RawJSON(), `"path":null`) || !strings.Contains(red.RawJSON(), `"content":null`) ||
			!strings.Contains(red.RawJSON(), `"content_sha256":null`) || red.Operation != "created" {
			t.Fatalf("redact: %v %s", err, red.RawJSON())
		}
		v, err = vers.Get(ctx, created.ID, anthropic.BetaMemoryStoreMemoryVersionGetParams{MemoryStoreID: st.ID})
		if err != nil || v.Content != "" || v.Path != "" || v.RedactedAt.IsZero() {
			t.Fatalf("a redacted version: %v %s", err, v.RawJSON())
		}
		cur := h.newMemory(ctx, st.ID, "/live.md", "live")
		_, err = vers.Redact(ctx, cur.MemoryVersionID, anthropic.BetaMemoryStoreMemoryVersionRedactParams{MemoryStoreID: st.ID})
		wantAPIError(t, err, http.StatusConflict, apitype.ErrConflict)
		_, err = vers.Redact(ctx, "memver_nope", anthropic.BetaMemoryStoreMemoryVersionRedactParams{MemoryStoreID: st.ID})
		wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
	})
}

// TestMemoryList: lists in path order with path_prefix and depth roll-ups (memory_prefix items), paging through
// every page, the views and the 20-item limit of the full view.
func TestMemoryList(t *testing.T) {
	t.Parallel()
	memoryBackends(t, func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		mem := h.client.Beta.MemoryStores.Memories
		st := h.newMemoryStore(ctx, "tree")
		paths := []string{"/a.md", "/notes/x.md", "/notes/y.md", "/notes/deep/z.md", "/notes/deep/er/w.md",
			"/notes-archive/old.md", "/z/1.md"}
		for i := range 23 {
			paths = append(paths, fmt.Sprintf("/many/%02d.md", i))
		}
		for _, p := range paths {
			h.newMemory(ctx, st.ID, p, "content of "+p)
		}
		// list walks every page with the auto-pager and returns each item as path (roll-ups end in "/") and the
		// number of pages.
		list := func(p anthropic.BetaMemoryStoreMemoryListParams) ([]string, int) {
			t.Helper()
			var out []string
			pages := 0
			page, err := mem.List(ctx, st.ID, p)
			for ; err == nil && page != nil; page, err = page.GetNextPage() {
				pages++
				if len(page.Data) == 0 && pages > 1 {
					t.Fatalf("an empty page after the first: %s", page.RawJSON())
				}
				for _, it := range page.Data {
					switch it.Type {
					case "memory":
						m := it.AsMemory()
						if p.View == anthropic.BetaManagedAgentsMemoryViewFull {
							if m.Content != "content of "+m.Path {
								t.Errorf("full view: %s", it.RawJSON())
							}
						} else if !strings.Contains(it.RawJSON(), `"content":null`) {
							t.Errorf("basic view: %s", it.RawJSON())
						}
						out = append(out, m.Path)
					case "memory_prefix":
						out = append(out, it.AsMemoryPrefix().Path)
					default:
						t.Fatalf("item %s", it.RawJSON())
					}
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			return out, pages
		}
		sorted := slices.Clone(paths)
		slices.Sort(sorted)
		got, pages := list(anthropic.BetaMemoryStoreMemoryListParams{})
		if !slices.Equal(got, sorted) || pages != 2 {
			t.Errorf("everything, default limit 20: %d pages %v", pages, got)
		}
		got, pages = list(anthropic.BetaMemoryStoreMemoryListParams{Limit: param.NewOpt[int64](7),
			View: anthropic.BetaManagedAgentsMemoryViewFull})
		if !slices.Equal(got, sorted) || pages != 5 {
			t.Errorf("everything, full, by 7: %d pages %v", pages, got)
		}
		got, _ = list(anthropic.BetaMemoryStoreMemoryListParams{PathPrefix: param.NewOpt("/notes/")})
		if want := []string{"/notes/deep/er/w.md", "/notes/deep/z.md", "/notes/x.md", "/notes/y.md"}; !slices.Equal(got, want) {
			t.Errorf("/notes/, all depths: %v, want %v (whole segments: not /notes-archive/)", got, want)
		}
		got, _ = list(anthropic.BetaMemoryStoreMemoryListParams{PathPrefix: param.NewOpt("/notes/"), Depth: param.NewOpt[int64](1)})
		if want := []string{"/notes/deep/", "/notes/x.md", "/notes/y.md"}; !slices.Equal(got, want) {
			t.Errorf("/notes/, depth 1: %v, want %v", got, want)
		}
		got, _ = list(anthropic.BetaMemoryStoreMemoryListParams{PathPrefix: param.NewOpt("/notes/"), Depth: param.NewOpt[int64](2)})
		if want := []string{"/notes/deep/er/", "/notes/deep/z.md", "/notes/x.md", "/notes/y.md"}; !slices.Equal(got, want) {
			t.Errorf("/notes/, depth 2: %v, want %v", got, want)
		}
		// Depth 1 at the root, one item a page: the roll-ups page like memories.
		got, pages = list(anthropic.BetaMemoryStoreMemoryListParams{Depth: param.NewOpt[int64](1), Limit: param.NewOpt[int64](1)})
		if want := []string{"/a.md", "/many/", "/notes-archive/", "/notes/", "/z/"}; !slices.Equal(got, want) || pages != 5 {
			t.Errorf("root, depth 1, by 1: %d pages %v, want %v", pages, got, want)
		}
		got, _ = list(anthropic.BetaMemoryStoreMemoryListParams{PathPrefix: param.NewOpt("/nothing/")})
		if len(got) != 0 {
			t.Errorf("an empty prefix: %v", got)
		}

		for _, tc := range []struct {
			name  string
			p     anthropic.BetaMemoryStoreMemoryListParams
			field string
		}{
			{"full view above 20", anthropic.BetaMemoryStoreMemoryListParams{View: anthropic.BetaManagedAgentsMemoryViewFull, Limit: param.NewOpt[int64](21)}, "limit"},
			{"limit 101", anthropic.BetaMemoryStoreMemoryListParams{Limit: param.NewOpt[int64](101)}, "limit"},
			{"prefix without /", anthropic.BetaMemoryStoreMemoryListParams{PathPrefix: param.NewOpt("/notes")}, "path_prefix"},
			{"relative prefix", anthropic.BetaMemoryStoreMemoryListParams{PathPrefix: param.NewOpt("notes/")}, "path_prefix"},
			{"prefix with ..", anthropic.BetaMemoryStoreMemoryListParams{PathPrefix: param.NewOpt("/a/../")}, "path_prefix"},
			{"negative depth", anthropic.BetaMemoryStoreMemoryListParams{Depth: param.NewOpt[int64](-1)}, "depth"},
			{"view", anthropic.BetaMemoryStoreMemoryListParams{View: "everything"}, "view"},
			{"page", anthropic.BetaMemoryStoreMemoryListParams{Page: param.NewOpt("garbage")}, "page"},
		} {
			_, err := mem.List(ctx, st.ID, tc.p)
			if aerr := wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest); !strings.HasPrefix(aerr.Message, tc.field+":") {
				t.Errorf("%s: %q does not name %s", tc.name, aerr.Message, tc.field)
			}
		}
		// 20 in the full view is fine.
		page, err := mem.List(ctx, st.ID, anthropic.BetaMemoryStoreMemoryListParams{View: anthropic.BetaManagedAgentsMemoryViewFull,
			Limit: param.NewOpt[int64](20)})
		if err != nil || len(page.Data) != 20 || page.NextPage == "" {
			t.Errorf("full view, 20: %v", err)
		}
	})
}

// TestMemoryPathRules: every rule of a memory's path is a 400 naming the field and the rule, on create and on
// rename; content is at most 102,400 bytes.
func TestMemoryPathRules(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	mem := h.client.Beta.MemoryStores.Memories
	st := h.newMemoryStore(ctx, "rules")
	m := h.newMemory(ctx, st.ID, "/ok.md", "ok")
	for _, tc := range []struct {
		name, path, rule string
	}{
		{"empty", "", "must not be empty"},
		{"no leading /", "notes/a.md", `must start with "/"`},
		{"21 segments", strings.Repeat("/s", 21), "at most 20 segments"},
		{"empty segment", "/a//b", "empty segment"},
		{"trailing /", "/a/", "empty segment"},
		{".", "/a/./b", `"." segment`},
		{"..", "/a/../b", `".." segment`},
		{"control character", "/a\x07b", "U+0007"},
		{"newline", "/a\nb", "U+000A"},
		{"format character U+200B", "/a\u200bb", "U+200B"},
		{"line separator U+2028", "/a\u2028b", "U+2028"},
		{"paragraph separator U+2029", "/a\u2029b", "U+2029"},
		{"NFD", "/caf" + "e\u0301", "Normalization Form C"},
		{"1025 bytes", "/" + strings.Repeat("x", 1024), "at most 1024 bytes"},
	} {
		_, err := mem.New(ctx, st.ID, anthropic.BetaMemoryStoreMemoryNewParams{Path: tc.path, Content: param.NewOpt("x")})
		aerr := wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)
		if !strings.HasPrefix(aerr.Message, "path: ") || !strings.Contains(aerr.Message, tc.rule) {
			t.Errorf("create, %s: %q, want path: ...%s", tc.name, aerr.Message, tc.rule)
		}
		if tc.path == "" {
			continue // an empty path in an update is omitted by the SDK
		}
		_, err = mem.Update(ctx, m.ID, anthropic.BetaMemoryStoreMemoryUpdateParams{MemoryStoreID: st.ID, Path: param.NewOpt(tc.path)})
		aerr = wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)
		if !strings.HasPrefix(aerr.Message, "path: ") || !strings.Contains(aerr.Message, tc.rule) {
			t.Errorf("rename, %s: %q, want path: ...%s", tc.name, aerr.Message, tc.rule)
		}
	}
	// The limits themselves are fine: 20 segments, 1024 bytes, NFC, any case.
	for _, p := range []string{strings.Repeat("/s", 20), "/" + strings.Repeat("x", 1023), "/caf\u00e9", "/UPPER/lower.md",
		"/with space/and-dash_under.score"} {
		h.newMemory(ctx, st.ID, p, "fine")
	}
	status, _, body := h.do("POST", "/v1/memory_stores/"+st.ID+"/memories", `{"content":"x"}`)
	if status != http.StatusBadRequest || !strings.Contains(string(body), "path: required") {
		t.Errorf("no path: %d %s", status, body)
	}
	status, _, body = h.do("POST", "/v1/memory_stores/"+st.ID+"/memories", `{"path":"/p"}`)
	if status != http.StatusBadRequest || !strings.Contains(string(body), "content: required") {
		t.Errorf("no content: %d %s", status, body)
	}

	big := strings.Repeat("a", apitype.MaxMemoryBytes)
	h.newMemory(ctx, st.ID, "/big.md", big)
	_, err := mem.New(ctx, st.ID, anthropic.BetaMemoryStoreMemoryNewParams{Path: "/bigger.md", Content: param.NewOpt(big + "a")})
	if aerr := wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest); !strings.HasPrefix(aerr.Message, "content: ") ||
		!strings.Contains(aerr.Message, "102400") {
		t.Errorf("content of 102,401 bytes: %q", aerr.Message)
	}
	_, err = mem.Update(ctx, m.ID, anthropic.BetaMemoryStoreMemoryUpdateParams{MemoryStoreID: st.ID, Content: param.NewOpt(big + "a")})
	wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)
	// Multi-byte characters count in bytes.
	_, err = mem.New(ctx, st.ID, anthropic.BetaMemoryStoreMemoryNewParams{Path: "/utf8.md",
		Content: param.NewOpt(strings.Repeat("é", apitype.MaxMemoryBytes/2) + "a")})
	wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)
}

// TestMemoryArchivedStore: an archived store's memories are read and deleted but not written (409), and it cannot
// be attached to a session.
func TestMemoryArchivedStore(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	mem := h.client.Beta.MemoryStores.Memories
	st := h.newMemoryStore(ctx, "old")
	a := h.newMemory(ctx, st.ID, "/a.md", "a")
	b := h.newMemory(ctx, st.ID, "/b.md", "b")
	if _, err := h.client.Beta.MemoryStores.Archive(ctx, st.ID, anthropic.BetaMemoryStoreArchiveParams{}); err != nil {
		t.Fatal(err)
	}
	_, err := mem.New(ctx, st.ID, anthropic.BetaMemoryStoreMemoryNewParams{Path: "/c.md", Content: param.NewOpt("c")})
	if aerr := wantAPIError(t, err, http.StatusConflict, apitype.ErrConflict); !strings.Contains(aerr.Message, "archived") {
		t.Errorf("create in an archived store: %s", aerr.Message)
	}
	_, err = mem.Update(ctx, a.ID, anthropic.BetaMemoryStoreMemoryUpdateParams{MemoryStoreID: st.ID, Content: param.NewOpt("a2")})
	wantAPIError(t, err, http.StatusConflict, apitype.ErrConflict)
	if got, err := mem.Get(ctx, a.ID, anthropic.BetaMemoryStoreMemoryGetParams{MemoryStoreID: st.ID}); err != nil || got.Content != "a" {
		t.Fatalf("get in an archived store: %v", err)
	}
	if page, err := mem.List(ctx, st.ID, anthropic.BetaMemoryStoreMemoryListParams{}); err != nil || len(page.Data) != 2 {
		t.Fatalf("list in an archived store: %v", err)
	}
	if _, err := mem.Delete(ctx, b.ID, anthropic.BetaMemoryStoreMemoryDeleteParams{MemoryStoreID: st.ID}); err != nil {
		t.Fatalf("delete in an archived store: %v", err)
	}
	agentID, envID := h.seed(ctx)
	_, err = h.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agentID)}, EnvironmentID: envID,
		Resources: []anthropic.BetaSessionNewParamsResourceUnion{{OfMemoryStore: &anthropic.BetaManagedAgentsMemoryStoreResourceParam{
			MemoryStoreID: st.ID}}},
	})
	if aerr := wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest); !strings.HasPrefix(aerr.Message, "resources[0].memory_store_id") ||
		!strings.Contains(aerr.Message, "archived") {
		t.Errorf("attach an archived store: %s", aerr.Message)
	}
}

// TestMemorySessionResources: memory_store resources at session create: their shape (snapshot, mount path), the
// session's view of them, and the refusals.
func TestMemorySessionResources(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	prefs, err := h.client.Beta.MemoryStores.New(ctx, anthropic.BetaMemoryStoreNewParams{Name: "User Preferences!",
		Description: anthropic.String("likes and dislikes")})
	if err != nil {
		t.Fatal(err)
	}
	kb := h.newMemoryStore(ctx, "kb")
	newSession := func(res ...*anthropic.BetaManagedAgentsMemoryStoreResourceParam) (*anthropic.BetaManagedAgentsSession, error) {
		p := anthropic.BetaSessionNewParams{Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agentID)},
			EnvironmentID: envID}
		for _, r := range res {
			p.Resources = append(p.Resources, anthropic.BetaSessionNewParamsResourceUnion{OfMemoryStore: r})
		}
		return h.client.Beta.Sessions.New(ctx, p)
	}
	s, err := newSession(
		&anthropic.BetaManagedAgentsMemoryStoreResourceParam{MemoryStoreID: prefs.ID, Instructions: param.NewOpt("read first")},
		&anthropic.BetaManagedAgentsMemoryStoreResourceParam{MemoryStoreID: kb.ID,
			Access: anthropic.BetaManagedAgentsMemoryStoreResourceParamAccessReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	check := func(where string, rs []anthropic.BetaManagedAgentsSessionResourceUnion) {
		t.Helper()
		if len(rs) != 2 {
			t.Fatalf("%s: %d resources", where, len(rs))
		}
		p, k := rs[0].AsMemoryStore(), rs[1].AsMemoryStore()
		if rs[0].Type != "memory_store" || p.MemoryStoreID != prefs.ID || p.Access != "read_write" || p.Instructions != "read first" ||
			p.Name != "User Preferences!" || p.Description != "likes and dislikes" || p.MountPath != "/mnt/memory/user-preferences" {
			t.Errorf("%s: %s", where, rs[0].RawJSON())
		}
		if k.MemoryStoreID != kb.ID || k.Access != "read_only" || k.MountPath != "/mnt/memory/kb" || k.Name != "kb" {
			t.Errorf("%s: %s", where, rs[1].RawJSON())
		}
	}
	check("created", s.Resources)
	got, err := h.client.Beta.Sessions.Get(ctx, s.ID, anthropic.BetaSessionGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	check("get", got.Resources)
	// The snapshot stays when the store is renamed.
	if _, err := h.client.Beta.MemoryStores.Update(ctx, prefs.ID, anthropic.BetaMemoryStoreUpdateParams{Name: anthropic.String("renamed")}); err != nil {
		t.Fatal(err)
	}
	got, _ = h.client.Beta.Sessions.Get(ctx, s.ID, anthropic.BetaSessionGetParams{})
	check("after a rename of the store", got.Resources)
	rs, err := h.client.Beta.Sessions.Resources.Get(ctx, s.Resources[1].ID, anthropic.BetaSessionResourceGetParams{SessionID: s.ID})
	if err != nil || rs.Type != "memory_store" || rs.MountPath != "/mnt/memory/kb" {
		t.Fatalf("resource get: %v %s", err, rs.RawJSON())
	}

	same := h.newMemoryStore(ctx, "KB")
	for _, tc := range []struct {
		name   string
		res    []*anthropic.BetaManagedAgentsMemoryStoreResourceParam
		status int
		msg    string
	}{
		{"unknown store", []*anthropic.BetaManagedAgentsMemoryStoreResourceParam{{MemoryStoreID: "memstore_nope"}},
			http.StatusNotFound, "memstore_nope"},
		{"the same store twice", []*anthropic.BetaManagedAgentsMemoryStoreResourceParam{{MemoryStoreID: kb.ID}, {MemoryStoreID: kb.ID}},
			http.StatusBadRequest, "attached twice"},
		{"the same slug", []*anthropic.BetaManagedAgentsMemoryStoreResourceParam{{MemoryStoreID: kb.ID}, {MemoryStoreID: same.ID}},
			http.StatusBadRequest, "/mnt/memory/kb"},
		{"bad access", []*anthropic.BetaManagedAgentsMemoryStoreResourceParam{{MemoryStoreID: kb.ID, Access: "write_only"}},
			http.StatusBadRequest, "resources[0].access"},
		{"long instructions", []*anthropic.BetaManagedAgentsMemoryStoreResourceParam{{MemoryStoreID: kb.ID,
			Instructions: param.NewOpt(strings.Repeat("i", 4097))}}, http.StatusBadRequest, "resources[0].instructions"},
	} {
		_, err := newSession(tc.res...)
		typ := apitype.ErrInvalidRequest
		if tc.status == http.StatusNotFound {
			typ = apitype.ErrNotFound
		}
		if aerr := wantAPIError(t, err, tc.status, typ); !strings.Contains(aerr.Message, tc.msg) {
			t.Errorf("%s: %q, want %q in it", tc.name, aerr.Message, tc.msg)
		}
	}
	for _, body := range []string{
		`{"type":"memory_store","memory_store_id":"` + kb.ID + `","mount_path":"/mnt/memory/mine"}`,
		`{"type":"memory_store"}`,
		`{"type":"memory_store","memory_store_id":"` + kb.ID + `","colour":"red"}`,
	} {
		status, _, b := h.do("POST", "/v1/sessions", `{"agent":"`+agentID+`","environment_id":"`+envID+`","resources":[`+body+`]}`)
		if status != http.StatusBadRequest || !strings.Contains(string(b), "resources[0].") {
			t.Errorf("%s: %d %s", body, status, b)
		}
	}
	// The session list's memory_store_id filter: the sessions having the store, newest first, in pages.
	s2, err := newSession(&anthropic.BetaManagedAgentsMemoryStoreResourceParam{MemoryStoreID: kb.ID})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		h.newSession(ctx, agentID, envID)
	}
	var listed []string
	it := h.client.Beta.Sessions.ListAutoPaging(ctx, anthropic.BetaSessionListParams{MemoryStoreID: param.NewOpt(kb.ID),
		Limit: param.NewOpt[int64](1)})
	for it.Next() {
		listed = append(listed, it.Current().ID)
	}
	if it.Err() != nil || !slices.Equal(listed, []string{s2.ID, s.ID}) {
		t.Errorf("sessions with %s: %v %v, want %v", kb.ID, it.Err(), listed, []string{s2.ID, s.ID})
	}
	page, err := h.client.Beta.Sessions.List(ctx, anthropic.BetaSessionListParams{MemoryStoreID: param.NewOpt(same.ID)})
	if err != nil || len(page.Data) != 0 {
		t.Errorf("sessions with a store none has: %v %s", err, page.RawJSON())
	}

	// Only files are added to an existing session.
	status, _, b := h.do("POST", "/v1/sessions/"+s.ID+"/resources", `{"type":"memory_store","memory_store_id":"`+same.ID+`"}`)
	if status != http.StatusBadRequest || !strings.Contains(string(b), "only file resources") {
		t.Errorf("add a memory store: %d %s", status, b)
	}
}

// TestMemorySessionsToken: the sessions token of a self-hosted session's work item reads and writes the memories
// of its session's stores, as its session (session_actor), writes only those attached read_write, and reaches no
// other store and no store-level endpoint.
func TestMemorySessionsToken(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, _ := h.seed(ctx)
	rw, ro, elsewhere := h.newMemoryStore(ctx, "rw"), h.newMemoryStore(ctx, "ro"), h.newMemoryStore(ctx, "elsewhere")
	seeded := h.newMemory(ctx, rw.ID, "/seed.md", "seed")
	roMem := h.newMemory(ctx, ro.ID, "/fact.md", "fact")
	secret := h.newMemory(ctx, elsewhere.ID, "/secret.md", "secret")

	envID, key, _ := h.selfHosted(ctx, agentID)
	s, err := h.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agentID)}, EnvironmentID: envID,
		Resources: []anthropic.BetaSessionNewParamsResourceUnion{
			{OfMemoryStore: &anthropic.BetaManagedAgentsMemoryStoreResourceParam{MemoryStoreID: rw.ID}},
			{OfMemoryStore: &anthropic.BetaManagedAgentsMemoryStoreResourceParam{MemoryStoreID: ro.ID,
				Access: anthropic.BetaManagedAgentsMemoryStoreResourceParamAccessReadOnly}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	w := h.queue(ctx, envID, s.ID)
	var polled apitype.Work
	status, _, body := h.do("GET", "/v1/environments/"+envID+"/work/poll", "", bearer(key)...)
	decodeRaw(t, string(body), &polled)
	if status != http.StatusOK || polled.ID != w.ID || polled.Secret == nil {
		t.Fatalf("poll: %d %s", status, body)
	}
	tok := []option.RequestOption{option.WithHeaderDel("X-Api-Key"),
		option.WithAuthToken(apitype.SessionsTokenFromSecret(*polled.Secret))}
	mem := h.client.Beta.MemoryStores.Memories

	// What the SDK's EnvironmentWorker does: read the session, list each store (full, then basic), get, create,
	// update with a precondition, delete with an expected digest.
	sess, err := h.client.Beta.Sessions.Get(ctx, s.ID, anthropic.BetaSessionGetParams{}, tok...)
	if err != nil || len(sess.Resources) != 2 || sess.Resources[0].AsMemoryStore().MountPath != "/mnt/memory/rw" {
		t.Fatalf("the token reads its session: %v", err)
	}
	for _, id := range []string{rw.ID, ro.ID} {
		for _, view := range []anthropic.BetaManagedAgentsMemoryView{anthropic.BetaManagedAgentsMemoryViewFull, anthropic.BetaManagedAgentsMemoryViewBasic} {
			page, err := mem.List(ctx, id, anthropic.BetaMemoryStoreMemoryListParams{View: view, Limit: param.NewOpt[int64](20)}, tok...)
			if err != nil || len(page.Data) != 1 {
				t.Fatalf("the token lists %s (%s): %v", id, view, err)
			}
		}
	}
	if got, err := mem.Get(ctx, roMem.ID, anthropic.BetaMemoryStoreMemoryGetParams{MemoryStoreID: ro.ID}, tok...); err != nil || got.Content != "fact" {
		t.Fatalf("the token reads a read_only store: %v", err)
	}
	created, err := mem.New(ctx, rw.ID, anthropic.BetaMemoryStoreMemoryNewParams{Path: "/learned.md", Content: param.NewOpt("x")}, tok...)
	if err != nil {
		t.Fatalf("the token creates: %v", err)
	}
	upd, err := mem.Update(ctx, seeded.ID, anthropic.BetaMemoryStoreMemoryUpdateParams{MemoryStoreID: rw.ID,
		Content:      param.NewOpt("seed, revised"),
		Precondition: anthropic.BetaManagedAgentsPreconditionParam{ContentSha256: param.NewOpt(seeded.ContentSha256)}}, tok...)
	if err != nil {
		t.Fatalf("the token updates: %v", err)
	}
	if _, err := mem.Delete(ctx, created.ID, anthropic.BetaMemoryStoreMemoryDeleteParams{MemoryStoreID: rw.ID,
		ExpectedContentSha256: param.NewOpt(created.ContentSha256)}, tok...); err != nil {
		t.Fatalf("the token deletes: %v", err)
	}
	// Its writes are the session's.
	vs, err := h.client.Beta.MemoryStores.MemoryVersions.List(ctx, rw.ID, anthropic.BetaMemoryStoreMemoryVersionListParams{
		SessionID: param.NewOpt(s.ID)})
	if err != nil || len(vs.Data) != 3 {
		t.Fatalf("versions by the session: %v %s", err, vs.RawJSON())
	}
	for _, v := range vs.Data {
		if v.CreatedBy.Type != "session_actor" || v.CreatedBy.SessionID != s.ID {
			t.Errorf("a version written with the token: %s", v.RawJSON())
		}
	}
	if v, err := h.client.Beta.MemoryStores.MemoryVersions.Get(ctx, upd.MemoryVersionID,
		anthropic.BetaMemoryStoreMemoryVersionGetParams{MemoryStoreID: rw.ID}); err != nil || v.CreatedBy.SessionID != s.ID {
		t.Fatalf("the update's version: %v", err)
	}

	// Refusals: writes to the read_only store, any use of a store the session does not have, the store-level
	// endpoints and the versions.
	forbidden := func(what string, err error) {
		t.Helper()
		if aerr := wantAPIError(t, err, http.StatusForbidden, apitype.ErrPermission); aerr.Message == "" {
			t.Errorf("%s: no message", what)
		}
	}
	// A route that takes no sessions token tries the secret as an API key: a 401.
	unauthorized := func(what string, err error) {
		t.Helper()
		wantAPIError(t, err, http.StatusUnauthorized, apitype.ErrAuthentication)
	}
	_, err = mem.New(ctx, ro.ID, anthropic.BetaMemoryStoreMemoryNewParams{Path: "/x.md", Content: param.NewOpt("x")}, tok...)
	forbidden("create in read_only", err)
	_, err = mem.Update(ctx, roMem.ID, anthropic.BetaMemoryStoreMemoryUpdateParams{MemoryStoreID: ro.ID, Content: param.NewOpt("y")}, tok...)
	forbidden("update in read_only", err)
	_, err = mem.Delete(ctx, roMem.ID, anthropic.BetaMemoryStoreMemoryDeleteParams{MemoryStoreID: ro.ID}, tok...)
	forbidden("delete in read_only", err)
	_, err = mem.List(ctx, elsewhere.ID, anthropic.BetaMemoryStoreMemoryListParams{}, tok...)
	forbidden("list another store", err)
	_, err = mem.New(ctx, elsewhere.ID, anthropic.BetaMemoryStoreMemoryNewParams{Path: "/x.md", Content: param.NewOpt("x")}, tok...)
	forbidden("create in another store", err)
	// Another store's memory by its id, under a store the session has: not found (the id is looked up in that
	// store only), for a read, an update, a rename and a delete; the memory is untouched.
	_, err = mem.Get(ctx, secret.ID, anthropic.BetaMemoryStoreMemoryGetParams{MemoryStoreID: rw.ID}, tok...)
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
	_, err = mem.Update(ctx, secret.ID, anthropic.BetaMemoryStoreMemoryUpdateParams{MemoryStoreID: rw.ID,
		Content: param.NewOpt("stolen"), Path: param.NewOpt("/stolen.md")}, tok...)
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
	_, err = mem.Delete(ctx, secret.ID, anthropic.BetaMemoryStoreMemoryDeleteParams{MemoryStoreID: rw.ID}, tok...)
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
	if got, err := mem.Get(ctx, secret.ID, anthropic.BetaMemoryStoreMemoryGetParams{MemoryStoreID: elsewhere.ID}); err != nil ||
		got.Content != "secret" || got.Path != "/secret.md" {
		t.Fatalf("the other store's memory after the token's tries: %v", err)
	}
	_, err = h.client.Beta.MemoryStores.Get(ctx, rw.ID, anthropic.BetaMemoryStoreGetParams{}, tok...)
	unauthorized("get a store", err)
	_, err = h.client.Beta.MemoryStores.New(ctx, anthropic.BetaMemoryStoreNewParams{Name: "mine"}, tok...)
	unauthorized("create a store", err)
	_, err = h.client.Beta.MemoryStores.Archive(ctx, rw.ID, anthropic.BetaMemoryStoreArchiveParams{}, tok...)
	unauthorized("archive a store", err)
	_, err = h.client.Beta.MemoryStores.MemoryVersions.Redact(ctx, vs.Data[0].ID,
		anthropic.BetaMemoryStoreMemoryVersionRedactParams{MemoryStoreID: rw.ID}, tok...)
	unauthorized("redact", err)
	// The environment key reaches no memory endpoint.
	status, _, _ = h.do("GET", "/v1/memory_stores/"+rw.ID+"/memories", "", bearer(key)...)
	if status != http.StatusUnauthorized && status != http.StatusForbidden {
		t.Errorf("the environment key lists memories: %d", status)
	}
}

// TestMemoryWorkerSync: the official SDK's SessionMemoryStores (what its EnvironmentWorker runs for a
// self-hosted session) downloads a session's stores with the work item's sessions token, and its final sync
// writes the local edits back: an update under a precondition, a create, a delete with an expected digest. A
// read_only store is pulled and never pushed. (The stores land in a temporary directory instead of their
// /mnt/memory mount paths.)
func TestMemoryWorkerSync(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, _ := h.seed(ctx)
	rw, ro := h.newMemoryStore(ctx, "Team Notes"), h.newMemoryStore(ctx, "facts")
	a := h.newMemory(ctx, rw.ID, "/a.md", "alpha")
	h.newMemory(ctx, rw.ID, "/dir/b.md", "beta")
	for i := range 25 { // more than a page of the full view
		h.newMemory(ctx, rw.ID, fmt.Sprintf("/bulk/%02d.md", i), fmt.Sprint(i))
	}
	h.newMemory(ctx, ro.ID, "/fact.md", "fact")

	envID, key, _ := h.selfHosted(ctx, agentID)
	s, err := h.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agentID)}, EnvironmentID: envID,
		Resources: []anthropic.BetaSessionNewParamsResourceUnion{
			{OfMemoryStore: &anthropic.BetaManagedAgentsMemoryStoreResourceParam{MemoryStoreID: rw.ID}},
			{OfMemoryStore: &anthropic.BetaManagedAgentsMemoryStoreResourceParam{MemoryStoreID: ro.ID,
				Access: anthropic.BetaManagedAgentsMemoryStoreResourceParamAccessReadOnly}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h.queue(ctx, envID, s.ID)
	var polled apitype.Work
	_, _, body := h.do("GET", "/v1/environments/"+envID+"/work/poll", "", bearer(key)...)
	decodeRaw(t, string(body), &polled)
	if polled.Secret == nil {
		t.Fatalf("poll: %s", body)
	}
	tok := []option.RequestOption{option.WithHeaderDel("X-Api-Key"),
		option.WithAuthToken(apitype.SessionsTokenFromSecret(*polled.Secret))}
	got, err := h.client.Beta.Sessions.Get(ctx, s.ID, anthropic.BetaSessionGetParams{}, tok...)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	rwDir, roDir := filepath.Join(root, "team-notes"), filepath.Join(root, "facts")
	raw := strings.NewReplacer(`"/mnt/memory/team-notes"`, strconv.Quote(rwDir), `"/mnt/memory/facts"`, strconv.Quote(roDir)).
		Replace(got.RawJSON())
	if raw == got.RawJSON() {
		t.Fatalf("the session shows no mount paths: %s", raw)
	}
	var sess anthropic.BetaManagedAgentsSession
	decodeRaw(t, raw, &sess)

	logs := &syncBuffer{}
	ms, err := environments.NewSessionMemoryStores(h.client, environments.SessionMemoryStoresOptions{
		Workdir: t.TempDir(), RequestOptions: tok, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := ms.Download(ctx, &sess); err != nil {
		t.Fatalf("download: %v\n%s", err, logs.Bytes())
	}
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("%v\n%s", err, logs.Bytes())
		}
		return string(b)
	}
	if read(filepath.Join(rwDir, "a.md")) != "alpha" || read(filepath.Join(rwDir, "dir", "b.md")) != "beta" ||
		read(filepath.Join(rwDir, "bulk", "24.md")) != "24" || read(filepath.Join(roDir, "fact.md")) != "fact" {
		t.Fatal("download: wrong contents")
	}
	write := func(p, content string) {
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(rwDir, "a.md"), "alpha, edited")
	write(filepath.Join(rwDir, "c.md"), "gamma")
	if err := os.Remove(filepath.Join(rwDir, "dir", "b.md")); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(roDir, "fact.md"), "not pushed")
	ms.Finish(ctx)
	ms.Dispose()

	mem := h.client.Beta.MemoryStores.Memories
	if m, err := mem.Get(ctx, a.ID, anthropic.BetaMemoryStoreMemoryGetParams{MemoryStoreID: rw.ID}); err != nil || m.Content != "alpha, edited" {
		t.Errorf("a.md after the sync: %v %q\n%s", err, m.Content, logs.Bytes())
	}
	paths := map[string]string{}
	it := mem.ListAutoPaging(ctx, rw.ID, anthropic.BetaMemoryStoreMemoryListParams{View: anthropic.BetaManagedAgentsMemoryViewFull})
	for it.Next() {
		paths[it.Current().Path] = it.Current().Content
	}
	if it.Err() != nil || paths["/c.md"] != "gamma" || len(paths) != 27 {
		t.Errorf("the store after the sync (%v): %d memories, /c.md %q, /dir/b.md present: %v\n%s", it.Err(), len(paths),
			paths["/c.md"], paths["/dir/b.md"] != "", logs.Bytes())
	}
	if _, ok := paths["/dir/b.md"]; ok {
		t.Errorf("/dir/b.md was not deleted\n%s", logs.Bytes())
	}
	vs, err := h.client.Beta.MemoryStores.MemoryVersions.List(ctx, rw.ID, anthropic.BetaMemoryStoreMemoryVersionListParams{
		SessionID: param.NewOpt(s.ID)})
	var ops []string
	for _, v := range vs.Data {
		ops = append(ops, string(v.Operation))
	}
	slices.Sort(ops)
	if err != nil || !slices.Equal(ops, []string{"created", "deleted", "modified"}) {
		t.Errorf("the session's versions: %v %v", err, ops)
	}
	if m, err := mem.List(ctx, ro.ID, anthropic.BetaMemoryStoreMemoryListParams{View: anthropic.BetaManagedAgentsMemoryViewFull}); err != nil ||
		len(m.Data) != 1 || m.Data[0].Content != "fact" {
		t.Errorf("the read_only store after the sync: %v", err)
	}
}

// TestGoldenMemory pins the wire shape of the memory payloads: a store, a memory in each view, a list page with
// a roll-up, a version (and a redacted one), a session's memory_store resource, the 409s.
func TestGoldenMemory(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	do := func(method, path, body string, want int) []byte {
		t.Helper()
		status, _, b := h.do(method, path, body)
		if status != want {
			t.Fatalf("%s %s: %d %s", method, path, status, b)
		}
		return b
	}
	var ids struct {
		ID              string `json:"id"`
		MemoryVersionID string `json:"memory_version_id"`
	}
	st := do("POST", "/v1/memory_stores", `{"name":"User Preferences","description":"likes","metadata":{"team":"docs"}}`, 200)
	golden(t, "memory_store", st)
	decodeRaw(t, string(st), &ids)
	base := "/v1/memory_stores/" + ids.ID
	storeID := ids.ID
	m := do("POST", base+"/memories?view=full", `{"path":"/notes/todo.md","content":"buy milk"}`, 200)
	golden(t, "memory_full", m)
	decodeRaw(t, string(m), &ids)
	memID, firstVersion := ids.ID, ids.MemoryVersionID
	do("POST", base+"/memories", `{"path":"/notes/deep/a.md","content":"a"}`, 200)
	golden(t, "memory_basic", do("POST", base+"/memories/"+memID, `{"content":"buy oat milk"}`, 200))
	golden(t, "memory_list", do("GET", base+"/memories?path_prefix=/notes/&depth=1", "", 200))
	golden(t, "memory_version", do("GET", base+"/memory_versions/"+firstVersion, "", 200))
	golden(t, "memory_version_redacted", do("POST", base+"/memory_versions/"+firstVersion+"/redact", "", 200))
	golden(t, "error_memory_precondition", do("POST", base+"/memories/"+memID,
		`{"content":"x","precondition":{"type":"content_sha256","content_sha256":"`+apitype.ContentSHA256("stale")+`"}}`, 409))
	golden(t, "error_memory_path_conflict", do("POST", base+"/memories", `{"path":"/notes/todo.md","content":"x"}`, 409))
	golden(t, "memory_deleted", do("DELETE", base+"/memories/"+memID, "", 200))

	agentID, envID := h.seed(ctxT(t))
	sess := do("POST", "/v1/sessions", `{"agent":"`+agentID+`","environment_id":"`+envID+`",
		"resources":[{"type":"memory_store","memory_store_id":"`+storeID+`","access":"read_only","instructions":"Read first."}]}`, 200)
	var s struct {
		Resources []json.RawMessage `json:"resources"`
	}
	decodeRaw(t, string(sess), &s)
	golden(t, "session_resource_memory_store", s.Resources[0])
}
