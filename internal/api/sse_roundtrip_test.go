package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/client"
)

// written is a frame as the writer meant it.
type written struct {
	id, event string
	data      []byte
}

// FuzzSSERoundTrip writes frames through the stream's own writer (events, previews, error frames, heartbeat
// comments and raw frames) and checks that the client's SSE reader reads back exactly what was written.
func FuzzSSERoundTrip(f *testing.F) {
	f.Add("sevt_1", "agent.message", []byte(`{"content":[{"type":"text","text":"a <b> & c"}]}`), "sevt_2", []byte("line 1\nline 2"))
	f.Add(" spaced", "", []byte(`{}`), "", []byte(""))
	f.Add("id\r\nwith\nbreaks", "type\rbreak", []byte(`{"k":"v\u2028"}`), "x", []byte("a\r\nb\rc\n"))
	f.Add("sevt_3", "session.status_idle", []byte(`{"stop_reason":{"type":"end_turn"}}`), ":colon", []byte(":not a comment"))
	f.Fuzz(func(t *testing.T, id, typ string, payload []byte, previewID string, raw []byte) {
		rec := httptest.NewRecorder()
		pf, err := newPreviewFilter([]apitype.EventType{apitype.EventAgentMessage})
		if err != nil {
			t.Fatal(err)
		}
		sse := &sseWriter{w: rec, rc: http.NewResponseController(rec), previews: pf}
		var want []written
		now := time.Unix(1700000000, 123000).UTC()

		ev := apitype.Event{ID: id, Type: apitype.EventType(typ), ProcessedAt: &now, Data: payload}
		if data, err := json.Marshal(ev); err == nil {
			if err := sse.event(ev); err != nil {
				t.Fatal(err)
			}
			want = append(want, written{sseField(id), sseField(typ), data})
		}
		if err := sse.comment("ping"); err != nil {
			t.Fatal(err)
		}
		start, _ := json.Marshal(apitype.PreviewStartOf(apitype.EventAgentMessage, previewID))
		if err := sse.preview(start); err != nil {
			t.Fatal(err)
		}
		if previewID != "" { // a preview of no event is not written
			want = append(want, written{"", string(apitype.EventStart), start})
		}
		env := apitype.ErrorEnvelope{Type: apitype.ObjectError, RequestID: id, Error: apitype.ErrorDetail{Type: apitype.ErrAPI, Message: string(payload)}}
		envData, _ := json.Marshal(env)
		sse.error(env)
		want = append(want, written{"", "error", envData})
		// A raw frame: data lines end at "\r\n", "\r" or "\n", and are read back joined by "\n".
		if err := sse.frame(id, typ, raw); err != nil {
			t.Fatal(err)
		}
		norm := bytes.ReplaceAll(bytes.ReplaceAll(raw, []byte("\r\n"), []byte("\n")), []byte("\r"), []byte("\n"))
		want = append(want, written{sseField(id), sseField(typ), norm})

		r := client.NewSSEReader(bytes.NewReader(rec.Body.Bytes()), 0)
		for i, w := range want {
			got, err := r.Next()
			if err != nil {
				t.Fatalf("frame %d: %v; stream:\n%q", i, err, rec.Body.String())
			}
			if got.ID != w.id || got.Event != w.event || !bytes.Equal(got.Data, w.data) {
				t.Fatalf("frame %d = {id %q event %q data %q}, want {id %q event %q data %q}; stream:\n%q",
					i, got.ID, got.Event, got.Data, w.id, w.event, w.data, rec.Body.String())
			}
		}
		if got, err := r.Next(); !errors.Is(err, io.EOF) {
			t.Fatalf("after the frames: %+v, %v; want EOF", got, err)
		}
	})
}

// The client's stream decodes what the writer wrote: events with their fields, and error frames as *client.Error.
func TestSSEWriterToClientEvents(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	sse := &sseWriter{w: rec, rc: http.NewResponseController(rec)}
	now := apitype.Now()
	ev := apitype.Event{ID: "sevt_1", Type: apitype.EventAgentToolUse, ProcessedAt: &now,
		Data: json.RawMessage(`{"name":"bash","input":{"command":"a > b && c"}}`)}
	if err := sse.event(ev); err != nil {
		t.Fatal(err)
	}
	sse.error(apitype.ErrorEnvelope{Type: apitype.ObjectError, RequestID: "req_1", Error: apitype.ErrorDetail{Type: apitype.ErrAPI, Message: "internal server error"}})
	r := client.NewSSEReader(strings.NewReader(rec.Body.String()), 0)
	f, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	var got client.Event
	if err := json.Unmarshal(f.Data, &got); err != nil {
		t.Fatal(err)
	}
	var use apitype.AgentToolUse
	if err := got.Decode(&use); err != nil || got.ID != "sevt_1" || got.Type != apitype.EventAgentToolUse ||
		!got.ProcessedAt.Equal(now) || use.Name != "bash" {
		t.Errorf("event = %+v (%+v), %v", got, use, err)
	}
	if f, err := r.Next(); err != nil || f.Event != "error" || !strings.Contains(string(f.Data), "req_1") {
		t.Errorf("error frame = %+v, %v", f, err)
	}
}
