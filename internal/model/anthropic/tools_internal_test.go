package anthropic

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/sandbox/agent"
)

// builtinTools are the sandbox agent's tools, as the brain offers them.
func builtinTools() []model.ToolSpec {
	var tools []model.ToolSpec
	for _, t := range agent.Tools() {
		tools = append(tools, model.ToolSpec{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema})
	}
	return tools
}

var webSearch = model.ToolSpec{Name: "web_search", Server: json.RawMessage(`{"type":"web_search_20250305","name":"web_search","max_uses":3}`)}

// sdkTools is the reference: the request's tools as the SDK encodes them from toolParam, uncached, the last
// client tool marked when mark is set.
func sdkTools(t *testing.T, specs []model.ToolSpec, mark bool) []byte {
	t.Helper()
	var tools []anthropic.ToolUnionParam
	for _, s := range specs {
		if len(s.Server) > 0 {
			tools = append(tools, param.Override[anthropic.ToolUnionParam](s.Server))
		}
	}
	for _, s := range specs {
		if len(s.Server) > 0 {
			continue
		}
		tool, err := toolParam(s)
		if err != nil {
			t.Fatal(err)
		}
		tools = append(tools, anthropic.ToolUnionParam{OfTool: tool})
	}
	if n := len(tools); mark && n > 0 && tools[n-1].OfTool != nil {
		tools[n-1].OfTool.CacheControl = anthropic.NewCacheControlEphemeralParam()
	}
	out, err := json.Marshal(tools)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// requestTools returns the tools of the request params builds for specs, as sent.
func requestTools(t *testing.T, m *Model, specs []model.ToolSpec, mark bool) []byte {
	t.Helper()
	_, body, err := m.params(&model.Request{Model: "c", Tools: specs, CacheBreakpoints: mark, Messages: []model.Message{
		{Role: "user", Content: []model.Block{{Type: model.BlockText, Text: "hi"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var sent struct{ Tools json.RawMessage }
	if err := json.Unmarshal(body, &sent); err != nil {
		t.Fatal(err)
	}
	return sent.Tools
}

// sameJSON reports whether a and b are the same JSON value. (Bytes can differ: the SDK writes a schema's extra
// fields, such as $schema or additionalProperties, in the order of a Go map.)
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("%v: %s", err, a)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return reflect.DeepEqual(va, vb)
}

// TestToolsCachedAsTheSDKEncodes: a request's tools, from the cache or encoded on a miss, are what the SDK sends
// for the same tools, with the cache mark on the last client tool only when asked, whatever the order of server
// and client tools; the same tools are sent as the same bytes from one request to the next; and the cache keeps
// one entry per distinct tool.
func TestToolsCachedAsTheSDKEncodes(t *testing.T) {
	mcp := model.ToolSpec{Name: "mcp__wiki__search", Description: "Search the wiki.", InputSchema: json.RawMessage(
		`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","title":"search",` +
			`"properties":{"q":{"type":"string"},"limit":{"type":"integer","minimum":1}},"required":["q"],"additionalProperties":false}`)}
	bare := model.ToolSpec{Name: "bare"}
	sets := map[string][]model.ToolSpec{
		"builtin":              builtinTools(),
		"server tool first":    append([]model.ToolSpec{webSearch}, append(builtinTools(), mcp, bare)...),
		"server tool last":     append(append(builtinTools(), mcp), webSearch),
		"server tool only":     {webSearch},
		"client tool, no spec": {bare},
	}
	m := New(Config{APIKey: "k"})
	for name, specs := range sets {
		for _, mark := range []bool{false, true} {
			want := sdkTools(t, specs, mark)
			var first []byte
			for try := range 3 { // a miss, then hits
				got := requestTools(t, m, specs, mark)
				if !sameJSON(t, got, want) {
					t.Errorf("%s, mark %v, call %d: tools\n%s\nwant the SDK's\n%s", name, mark, try, got, want)
				}
				if try == 0 {
					first = got
				} else if !bytes.Equal(got, first) {
					t.Errorf("%s, mark %v, call %d: the same tools sent as other bytes", name, mark, try)
				}
			}
		}
	}
	if n, want := len(m.tools.m), len(builtinTools())+2; n != want {
		t.Errorf("%d tools cached, want %d (each distinct client tool once)", n, want)
	}
}

// TestToolCacheKeys: two specs whose parts run together alike are different tools.
func TestToolCacheKeys(t *testing.T) {
	m := New(Config{APIKey: "k"})
	a := []model.ToolSpec{{Name: "ab", Description: "c"}}
	b := []model.ToolSpec{{Name: "a", Description: "bc"}}
	for _, specs := range [][]model.ToolSpec{a, b, a, b} {
		if got, want := requestTools(t, m, specs, false), sdkTools(t, specs, false); !sameJSON(t, got, want) {
			t.Errorf("tools %s, want %s", got, want)
		}
	}
}

// TestToolCacheBound: the cache holds at most maxToolCacheBytes whatever the tools, and a definition larger than
// that is sent, not kept.
func TestToolCacheBound(t *testing.T) {
	m := New(Config{APIKey: "k"})
	filler := strings.Repeat("d", 64<<10)
	for i := range 3 * maxToolCacheBytes / len(filler) {
		specs := []model.ToolSpec{{Name: "t" + strings.Repeat("x", i%7), Description: filler + string(rune('a'+i%26)) + strings.Repeat("!", i)}}
		if got, want := requestTools(t, m, specs, i%2 == 0), sdkTools(t, specs, i%2 == 0); !sameJSON(t, got, want) {
			t.Fatalf("tool %d: the definition sent differs from the SDK's", i)
		}
		if m.tools.bytes > maxToolCacheBytes || len(m.tools.m) == 0 {
			t.Fatalf("tool %d: the cache holds %d bytes in %d entries (bound %d)", i, m.tools.bytes, len(m.tools.m), maxToolCacheBytes)
		}
	}
	huge := []model.ToolSpec{{Name: "huge", Description: strings.Repeat("h", maxToolCacheBytes)}}
	if got, want := requestTools(t, m, huge, true), sdkTools(t, huge, true); !sameJSON(t, got, want) {
		t.Fatal("a definition larger than the cache: sent differently from the SDK's")
	}
	for key := range m.tools.m {
		if strings.Contains(key, "huge") {
			t.Fatal("a definition larger than the cache was kept")
		}
	}
}

// TestToolCacheInvalidSchema: a tool whose schema is not JSON fails the request, every time, and is not kept.
func TestToolCacheInvalidSchema(t *testing.T) {
	m := New(Config{APIKey: "k"})
	specs := []model.ToolSpec{{Name: "broken", InputSchema: json.RawMessage(`{"type":`)}}
	for range 2 {
		_, _, err := m.params(&model.Request{Model: "c", Tools: specs})
		if err == nil || !strings.Contains(err.Error(), "tool broken: input schema") {
			t.Fatalf("params: %v, want the tool's schema error", err)
		}
	}
	if len(m.tools.m) != 0 {
		t.Fatalf("%d tools cached after a schema error", len(m.tools.m))
	}
}

// TestToolCacheConcurrent: requests built at once on one Model share its cache (run with -race).
func TestToolCacheConcurrent(t *testing.T) {
	m := New(Config{APIKey: "k"})
	specs := append(builtinTools(), webSearch)
	req := &model.Request{Model: "c", Tools: specs, CacheBreakpoints: true}
	var (
		wg     sync.WaitGroup
		bodies [8][20][]byte
		errs   [8]error
	)
	for g := range bodies {
		wg.Go(func() {
			for i := range bodies[g] {
				_, body, err := m.params(req)
				bodies[g][i] = body
				if err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Wait()
	want := sdkTools(t, specs, true)
	for g := range bodies {
		if errs[g] != nil {
			t.Fatal(errs[g])
		}
		for _, body := range bodies[g] {
			var sent struct{ Tools json.RawMessage }
			if err := json.Unmarshal(body, &sent); err != nil {
				t.Fatal(err)
			}
			if !sameJSON(t, sent.Tools, want) {
				t.Fatalf("a request built concurrently sent other tools than the SDK's: %s", sent.Tools)
			}
		}
	}
}

// TestServerToolInvalid: a server tool whose definition is not one JSON value fails the request; nothing of it
// is sent.
func TestServerToolInvalid(t *testing.T) {
	m := New(Config{APIKey: "k"})
	for _, def := range []string{`{"type":"web_search_20250305"`, `{} {}`, `nul`} {
		specs := []model.ToolSpec{{Name: "web_search", Server: json.RawMessage(def)}}
		_, body, err := m.params(&model.Request{Model: "c", Tools: specs})
		if err == nil || !strings.Contains(err.Error(), "server tool web_search: invalid definition") || body != nil {
			t.Errorf("%q: body %s, error %v; want the definition refused", def, body, err)
		}
	}
}
