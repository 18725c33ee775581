package fakemodel

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// messagesUsage is the Messages API usage object.
type messagesUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	ServerToolUse            *struct {
		WebSearchRequests int64 `json:"web_search_requests"`
	} `json:"server_tool_use,omitempty"`
}

func (u Usage) messages() messagesUsage {
	m := messagesUsage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CacheCreationInputTokens: u.CacheCreationInputTokens, CacheReadInputTokens: u.CacheReadInputTokens}
	if u.WebSearchRequests > 0 {
		m.ServerToolUse = &struct {
			WebSearchRequests int64 `json:"web_search_requests"`
		}{u.WebSearchRequests}
	}
	return m
}

// writeMessagesError writes an error in the Anthropic error envelope.
func writeMessagesError(w http.ResponseWriter, e *ErrorReply) {
	r := e.normalize()
	setRetryAfter(w.Header(), r.RetryAfter)
	w.Header().Set("request-id", "req_fake")
	writeJSON(w, r.Status, messagesErrorBody(r))
}

func messagesErrorBody(r ErrorReply) map[string]any {
	return map[string]any{
		"type":       "error",
		"error":      map[string]string{"type": r.Type, "message": r.Message},
		"request_id": "req_fake",
	}
}

// messageContent builds the complete content blocks of a turn, as a non-streaming reply carries them.
func messageContent(t Turn, reqID int) []map[string]any {
	var content []map[string]any
	if t.Thinking != "" {
		content = append(content, map[string]any{"type": "thinking", "thinking": t.Thinking, "signature": signature(t)})
	}
	for _, b := range t.ServerBlocks {
		var m map[string]any
		_ = json.Unmarshal([]byte(b), &m)
		content = append(content, m)
	}
	if t.Text != "" {
		content = append(content, map[string]any{"type": "text", "text": t.Text})
	}
	for i, u := range t.ToolUses {
		content = append(content, map[string]any{
			"type": "tool_use", "id": toolID(u, reqID, i), "name": u.Name, "input": json.RawMessage(toolInput(u)),
		})
	}
	return content
}

func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	received := time.Now()
	req, turn, reqID, ok := s.receive(w, r, decodeMessagesRequest)
	if !ok {
		return
	}
	defer s.observed(req, received)
	ctx := r.Context()
	if turn.Err != nil {
		if s.hold(ctx, turn.Hold) {
			writeMessagesError(w, turn.Err)
		}
		return
	}
	msgID := fmt.Sprintf("msg_fake_%03d", reqID)
	if !req.Stream {
		n := len(tokens(turn.Thinking)) + len(tokens(turn.Text))
		for _, u := range turn.ToolUses {
			n += len(jsonTokens(toolInput(u)))
		}
		if !s.sleep(ctx, s.cfg.ttft+time.Duration(n)*s.cfg.perToken) || !s.hold(ctx, turn.Hold) {
			return
		}
		if turn.Disconnect {
			panic(http.ErrAbortHandler)
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": msgID, "type": "message", "role": "assistant", "model": req.Model,
			"content": messageContent(turn, reqID), "stop_reason": stopReason(turn), "stop_sequence": nil,
			"usage": usageFor(turn, req, n).messages(),
		})
		return
	}
	s.streamMessages(w, r, req, turn, msgID, reqID)
}

// streamMessages writes a turn as a Messages API event stream.
func (s *Server) streamMessages(w http.ResponseWriter, r *http.Request, req *Request, turn Turn, msgID string, reqID int) {
	ctx := r.Context()
	rc := http.NewResponseController(w)
	w.Header().Set("content-type", "text/event-stream")
	w.Header().Set("cache-control", "no-cache")
	w.Header().Set("request-id", "req_fake")
	w.WriteHeader(http.StatusOK)
	send := func(event string, data any) bool {
		b, err := json.Marshal(data)
		if err != nil {
			panic(fmt.Sprintf("fakemodel: marshal %s: %v", event, err))
		}
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}

	deltas := 0
	held := false
	// delta sends one content delta, waiting the latency first; after the first text delta (the first delta of
	// any kind when the turn has no text) it applies Hold, StreamErr and Disconnect. It returns false when the
	// stream is over.
	delta := func(index int, d map[string]any) bool {
		wait := s.cfg.perToken
		if deltas == 0 {
			wait = s.cfg.ttft
		}
		if !s.sleep(ctx, wait) {
			return false
		}
		deltas++
		if !send("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": d}) {
			return false
		}
		if held || (turn.Text != "" && d["type"] != "text_delta") {
			return true
		}
		held = true
		return s.afterFirst(w, r, turn, send)
	}

	u := usageFor(turn, req, 0) // output tokens are reported at the end
	start := u.messages()
	start.OutputTokens = 1
	if !send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": msgID, "type": "message", "role": "assistant", "model": req.Model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": start,
	}}) || !send("ping", map[string]string{"type": "ping"}) {
		return
	}

	index := 0
	block := func(startBlock map[string]any, ds []map[string]any) bool {
		if !send("content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": startBlock}) {
			return false
		}
		for _, d := range ds {
			if !delta(index, d) {
				return false
			}
		}
		ok := send("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
		index++
		return ok
	}
	if turn.Thinking != "" {
		var ds []map[string]any
		for _, tok := range tokens(turn.Thinking) {
			ds = append(ds, map[string]any{"type": "thinking_delta", "thinking": tok})
		}
		ds = append(ds, map[string]any{"type": "signature_delta", "signature": signature(turn)})
		if !block(map[string]any{"type": "thinking", "thinking": "", "signature": ""}, ds) {
			return
		}
	}
	for _, raw := range turn.ServerBlocks {
		var b map[string]any
		if err := json.Unmarshal([]byte(raw), &b); err != nil {
			panic("fakemodel: ServerBlocks: " + err.Error())
		}
		var ds []map[string]any
		if in, ok := b["input"]; ok && b["type"] == "server_tool_use" {
			js, _ := json.Marshal(in)
			b["input"] = map[string]any{}
			ds = append(ds, map[string]any{"type": "input_json_delta", "partial_json": string(js)})
		}
		if !block(b, ds) {
			return
		}
	}
	if turn.Text != "" {
		var ds []map[string]any
		for _, tok := range tokens(turn.Text) {
			ds = append(ds, map[string]any{"type": "text_delta", "text": tok})
		}
		if !block(map[string]any{"type": "text", "text": ""}, ds) {
			return
		}
	}
	for i, tu := range turn.ToolUses {
		var ds []map[string]any
		for _, tok := range jsonTokens(toolInput(tu)) {
			ds = append(ds, map[string]any{"type": "input_json_delta", "partial_json": tok})
		}
		if !block(map[string]any{"type": "tool_use", "id": toolID(tu, reqID, i), "name": tu.Name, "input": map[string]any{}}, ds) {
			return
		}
	}
	if !held && !s.afterFirst(w, r, turn, send) { // a turn without content
		return
	}
	final := usageFor(turn, req, deltas).messages()
	if !send("message_delta", map[string]any{
		"type": "message_delta", "delta": map[string]any{"stop_reason": stopReason(turn), "stop_sequence": nil},
		"usage": final,
	}) {
		return
	}
	send("message_stop", map[string]string{"type": "message_stop"})
}

// afterFirst applies Hold, StreamErr and Disconnect after the first text delta; false ends the stream.
func (s *Server) afterFirst(w http.ResponseWriter, r *http.Request, turn Turn, send func(string, any) bool) bool {
	if !s.hold(r.Context(), turn.Hold) {
		return false
	}
	if turn.StreamErr != nil {
		send("error", messagesErrorBody(turn.StreamErr.normalize()))
		return false
	}
	if turn.Disconnect {
		panic(http.ErrAbortHandler)
	}
	return true
}
