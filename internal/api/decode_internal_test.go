package api

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
)

// The decoder table holds a decoder for exactly the event types a client may send, each once.
func TestClientEventTypes(t *testing.T) {
	t.Parallel()
	names := clientEventNames()
	for _, typ := range []apitype.EventType{
		apitype.EventUserMessage, apitype.EventUserInterrupt, apitype.EventUserToolConfirmation,
		apitype.EventUserCustomToolResult, apitype.EventUserToolResult, apitype.EventUserDefineOutcome,
		apitype.EventSystemMessage, apitype.EventAgentMessage, apitype.EventAgentThinking, apitype.EventAgentToolUse,
		apitype.EventAgentToolResult, apitype.EventAgentMCPToolUse, apitype.EventAgentMCPToolResult,
		apitype.EventAgentCustomToolUse, apitype.EventAgentContextCompacted, apitype.EventSessionStatusRunning,
		apitype.EventSessionStatusIdle, apitype.EventSessionStatusRescheduled, apitype.EventSessionStatusTerminated,
		apitype.EventSessionError, apitype.EventSessionDeleted, apitype.EventSessionUpdated,
		apitype.EventSpanModelRequestStart, apitype.EventSpanModelRequestEnd, apitype.EventSpanSandboxProvisionStart,
		apitype.EventSpanSandboxProvisionEnd, apitype.EventStart, apitype.EventDelta,
	} {
		if got, want := slices.Contains(names, typ), apitype.IsUserEvent(typ); got != want {
			t.Errorf("%s: has a decoder %v, is a client event %v", typ, got, want)
		}
	}
	for i, n := range names {
		if !apitype.IsUserEvent(n) || slices.Index(names, n) != i {
			t.Errorf("decoder %d for %q: not a client event, or a second decoder", i, n)
		}
	}
}

// A field of a named string type (the typed wire vocabulary) that gets a JSON value of another kind is reported
// as the string it is, not as an object.
func TestTypedFieldTypeErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		parse func() error
		want  string
	}{
		{"environment type", func() error {
			_, err := resolveEnvConfig("config", json.RawMessage(`{"type":5}`), nil)
			return err
		}, "config.type: expected a string, got JSON number"},
		{"networking type", func() error {
			_, err := resolveEnvConfig("config", json.RawMessage(`{"type":"cloud","networking":{"type":true}}`), nil)
			return err
		}, "config.networking.type: expected a string, got JSON bool"},
		{"permission policy", func() error {
			_, err := resolveTools("tools", []json.RawMessage{
				json.RawMessage(`{"type":"agent_toolset_20260401","default_config":{"permission_policy":{"type":7}}}`)}, nil)
			return err
		}, "tools[0].default_config.permission_policy.type: expected a string, got JSON number"},
		{"confirmation result", func() error {
			_, err := parseClientEvent("events[0]",
				json.RawMessage(`{"type":"user.tool_confirmation","tool_use_id":"sevt_1","result":[]}`), nil)
			return err
		}, "events[0].result: expected a string, got JSON array"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.parse()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// Each client event type's decoder rejects its own mistakes with the message that names the field, and stores
// what it accepted.
func TestClientEventDecoders(t *testing.T) {
	t.Parallel()
	const text = `[{"type":"text","text":"a"}]`
	for _, tc := range []struct{ event, want string }{
		{`{"type":"user.message","content":[]}`, "events[0].content: required: at least one content block"},
		{`{"type":"user.message","content":[{"type":"search_result"}]}`,
			`events[0].content[0].type: unknown block type "search_result" (want one of text, image, document, redacted)`},
		{`{"type":"user.interrupt","session_thread_id":7}`, "events[0].session_thread_id: expected a string, got JSON number"},
		{`{"type":"user.tool_confirmation","result":"allow"}`, "events[0].tool_use_id: required"},
		{`{"type":"user.tool_confirmation","tool_use_id":"sevt_1","result":"ask"}`, `events[0].result: must be "allow" or "deny"`},
		{`{"type":"user.tool_confirmation","tool_use_id":"sevt_1","result":"allow","deny_message":"no"}`,
			`events[0].deny_message: only allowed with result "deny"`},
		{`{"type":"user.custom_tool_result","tool_use_id":"sevt_1"}`,
			"events[0].tool_use_id: unknown field (user.custom_tool_result answers custom_tool_use_id)"},
		{`{"type":"user.custom_tool_result","content":` + text + `}`, "events[0].custom_tool_use_id: required"},
		{`{"type":"user.tool_result","custom_tool_use_id":"sevt_1"}`,
			"events[0].custom_tool_use_id: unknown field (user.tool_result answers tool_use_id)"},
		{`{"type":"user.tool_result","tool_use_id":"sevt_1","content":[{"type":"redacted"}]}`,
			`events[0].content[0].type: unknown block type "redacted" (want one of text, image, document, search_result)`},
		{`{"type":"user.define_outcome","description":"d"}`, "events[0].rubric: required"},
		{`{"type":"user.define_outcome","description":"d","rubric":{"type":"file","content":"c"}}`,
			"events[0].rubric.content: not allowed with a file rubric"},
		{`{"type":"system.message","content":[{"type":"image"}]}`,
			`events[0].content[0].type: unknown block type "image" (want one of text)`},
		{`{"type":"user.nothing"}`, `events[0].type: unknown event type "user.nothing" (want one of user.message, ` +
			`user.interrupt, user.tool_confirmation, user.custom_tool_result, user.tool_result, user.define_outcome, system.message)`},
		{`{"content":[]}`, "events[0].type: required"},
	} {
		_, err := parseSend([]byte(`{"events":[` + tc.event + `]}`))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: error %v, want %q", tc.event, err, tc.want)
		}
	}

	// Accepted events: the stored payload, and the event each answers.
	for _, tc := range []struct {
		event, data string
		ref         eventRef
	}{
		{`{"type":"user.message","content":` + text + `}`, `{"content":[{"type":"text","text":"a"}]}`, eventRef{}},
		{`{"type":"user.interrupt"}`, `{}`, eventRef{}},
		{`{"type":"user.tool_confirmation","tool_use_id":"sevt_1","result":"deny","deny_message":"no"}`,
			`{"tool_use_id":"sevt_1","result":"deny","deny_message":"no"}`,
			eventRef{"sevt_1", "events[0].tool_use_id", []apitype.EventType{apitype.EventAgentToolUse, apitype.EventAgentMCPToolUse}}},
		{`{"type":"user.custom_tool_result","custom_tool_use_id":"sevt_2","is_error":true}`,
			`{"custom_tool_use_id":"sevt_2","is_error":true}`,
			eventRef{"sevt_2", "events[0].custom_tool_use_id", []apitype.EventType{apitype.EventAgentCustomToolUse}}},
		{`{"type":"user.tool_result","tool_use_id":"sevt_3","content":` + text + `}`,
			`{"tool_use_id":"sevt_3","content":[{"type":"text","text":"a"}]}`,
			eventRef{"sevt_3", "events[0].tool_use_id", []apitype.EventType{apitype.EventAgentToolUse}}},
	} {
		events, err := parseSend([]byte(`{"events":[` + tc.event + `]}`))
		if err != nil {
			t.Errorf("%s: %v", tc.event, err)
			continue
		}
		ce := events[0]
		if string(ce.ev.Data) != tc.data || ce.ref.id != tc.ref.id || ce.ref.path != tc.ref.path ||
			!slices.Equal(ce.ref.kinds, tc.ref.kinds) {
			t.Errorf("%s: stored %s answering %+v, want %s answering %+v", tc.event, ce.ev.Data, ce.ref, tc.data, tc.ref)
		}
	}
}

// TestToolResultSource: a self-hosted worker's failed user.tool_result may say its hands failed (source, with a
// known reason); anything else about a source is refused with the field's path.
func TestToolResultSource(t *testing.T) {
	ev, err := parseClientEvent("events[0]", json.RawMessage(`{"type":"user.tool_result","tool_use_id":"sevt_1","is_error":true,
		"content":[{"type":"text","text":"died"}],"source":{"component":"hands","backend":"bwrap","reason":"sandbox_died"}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got apitype.UserToolResult
	if err := json.Unmarshal(ev.ev.Data, &got); err != nil {
		t.Fatal(err)
	}
	want := apitype.FailureSource{Component: apitype.ComponentHands, Backend: "bwrap", Reason: apitype.ReasonSandboxDied}
	if got.Source == nil || *got.Source != want {
		t.Errorf("stored source %+v, want %+v", got.Source, want)
	}
	for _, tc := range []struct{ name, event, want string }{
		{"not an error", `{"type":"user.tool_result","tool_use_id":"sevt_1","source":{"component":"hands","reason":"timeout"}}`,
			"events[0].source: only an error result"},
		{"another component", `{"type":"user.tool_result","tool_use_id":"sevt_1","is_error":true,"source":{"component":"model","reason":"timeout"}}`,
			"events[0].source.component"},
		{"unknown reason", `{"type":"user.tool_result","tool_use_id":"sevt_1","is_error":true,"source":{"component":"hands","reason":"gremlins"}}`,
			"events[0].source.reason"},
		{"bad backend", `{"type":"user.tool_result","tool_use_id":"sevt_1","is_error":true,"source":{"component":"hands","backend":"a b","reason":"timeout"}}`,
			"events[0].source.backend"},
		{"unknown field", `{"type":"user.tool_result","tool_use_id":"sevt_1","is_error":true,"source":{"component":"hands","reason":"timeout","x":1}}`,
			"x: unknown field"},
		{"custom result", `{"type":"user.custom_tool_result","custom_tool_use_id":"sevt_1","is_error":true,"source":{"component":"hands","reason":"timeout"}}`,
			"events[0].source: unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseClientEvent("events[0]", json.RawMessage(tc.event), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// TestDecodeJSONTrailingData: a body is one JSON object and nothing after it but white space; a stray closing
// bracket after the object (which json.Decoder.More does not see) is refused like any other trailing data.
// FuzzVaultCredential found `{}}` accepted.
func TestDecodeJSONTrailingData(t *testing.T) {
	t.Parallel()
	for _, body := range []string{`{}}`, `{}]`, `{"a":1}}`, `{} }`, `{}{}`, `{} x`, `{},`, `{}"`} {
		var v map[string]any
		err := decodeJSON([]byte(body), &v)
		var ae *apiError
		if !errors.As(err, &ae) || ae.status != 400 || !strings.Contains(ae.msg, "after the top-level object") {
			t.Errorf("%q: %v, want a 400 for the data after the object", body, err)
		}
	}
	for _, body := range []string{`{}`, " {\"a\":[1,{}]} \n", "{}\r\n\t"} {
		var v map[string]any
		if err := decodeJSON([]byte(body), &v); err != nil {
			t.Errorf("%q: %v", body, err)
		}
	}
}
