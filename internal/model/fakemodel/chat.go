package fakemodel

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

const chatPath = "/v1/chat/completions"

// writeChatError writes an error in the OpenAI error envelope. A "prompt is too long" message carries the code
// context_length_exceeded, as OpenAI reports it.
func writeChatError(w http.ResponseWriter, e *ErrorReply) {
	r := e.normalize()
	setRetryAfter(w.Header(), r.RetryAfter)
	var code any
	if strings.Contains(r.Message, "prompt is too long") {
		code = "context_length_exceeded"
	}
	writeJSON(w, r.Status, map[string]any{
		"error": map[string]any{"message": r.Message, "type": r.Type, "param": nil, "code": code},
	})
}

// finishReason maps an Anthropic stop reason to a chat completions finish reason.
func finishReason(stop string) string {
	switch stop {
	case "tool_use":
		return "tool_calls"
	case "max_tokens":
		return "length"
	case "refusal":
		return "content_filter"
	default:
		return "stop"
	}
}

func (u Usage) chat() map[string]any {
	return map[string]any{
		"prompt_tokens":         u.InputTokens + u.CacheReadInputTokens,
		"completion_tokens":     u.OutputTokens,
		"total_tokens":          u.InputTokens + u.CacheReadInputTokens + u.OutputTokens,
		"prompt_tokens_details": map[string]any{"cached_tokens": u.CacheReadInputTokens},
	}
}

func chatToolCall(u ToolUse, reqID, i int) map[string]any {
	return map[string]any{
		"id": toolID(u, reqID, i), "type": "function",
		"function": map[string]any{"name": u.Name, "arguments": toolInput(u)},
	}
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	received := time.Now()
	req, turn, reqID, ok := s.receive(w, r, decodeChatRequest)
	if !ok {
		return
	}
	defer s.observed(req, received)
	ctx := r.Context()
	if turn.Err != nil {
		if s.hold(ctx, turn.Hold) {
			writeChatError(w, turn.Err)
		}
		return
	}
	id := fmt.Sprintf("chatcmpl-fake-%03d", reqID)
	created := time.Now().Unix()
	if !req.Stream {
		n := len(tokens(turn.Text))
		if !s.sleep(ctx, s.cfg.ttft+time.Duration(n)*s.cfg.perToken) || !s.hold(ctx, turn.Hold) {
			return
		}
		if turn.Disconnect {
			panic(http.ErrAbortHandler)
		}
		msg := map[string]any{"role": "assistant", "content": turn.Text}
		if turn.Text == "" {
			msg["content"] = nil
		}
		if turn.Thinking != "" {
			msg["reasoning_content"] = turn.Thinking
		}
		if len(turn.ToolUses) > 0 {
			var calls []map[string]any
			for i, u := range turn.ToolUses {
				calls = append(calls, chatToolCall(u, reqID, i))
			}
			msg["tool_calls"] = calls
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finishReason(stopReason(turn))}},
			"usage":   usageFor(turn, req, n).chat(),
		})
		return
	}

	rc := http.NewResponseController(w)
	w.Header().Set("content-type", "text/event-stream")
	w.Header().Set("cache-control", "no-cache")
	w.WriteHeader(http.StatusOK)
	send := func(data string) bool {
		if _, err := fmt.Fprintf(w, "data: %s\n\n", data); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	chunk := func(choices []any, usage any) bool {
		c := map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": req.Model, "choices": choices}
		if usage != nil {
			c["usage"] = usage
		}
		b, err := json.Marshal(c)
		if err != nil {
			panic(fmt.Sprintf("fakemodel: marshal chunk: %v", err))
		}
		return send(string(b))
	}
	choice := func(delta map[string]any, finish any) []any {
		return []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}
	}

	deltas := 0
	held := false
	// delta sends one delta chunk, as the Messages API stream does (see streamMessages).
	delta := func(d map[string]any) bool {
		wait := s.cfg.perToken
		if deltas == 0 {
			wait = s.cfg.ttft
		}
		if !s.sleep(ctx, wait) {
			return false
		}
		deltas++
		if !chunk(choice(d, nil), nil) {
			return false
		}
		if _, isText := d["content"]; held || (turn.Text != "" && !isText) {
			return true
		}
		held = true
		return s.afterFirstChat(r, turn, send)
	}

	if !chunk(choice(map[string]any{"role": "assistant", "content": ""}, nil), nil) {
		return
	}
	for _, tok := range tokens(turn.Thinking) {
		if !delta(map[string]any{"reasoning_content": tok}) {
			return
		}
	}
	for _, tok := range tokens(turn.Text) {
		if !delta(map[string]any{"content": tok}) {
			return
		}
	}
	for i, u := range turn.ToolUses {
		head := chatToolCall(u, reqID, i)
		head["index"] = i
		head["function"] = map[string]any{"name": u.Name, "arguments": ""}
		if !delta(map[string]any{"tool_calls": []any{head}}) {
			return
		}
		for _, tok := range jsonTokens(toolInput(u)) {
			if !delta(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": tok}}}}) {
				return
			}
		}
	}
	if !held && !s.afterFirstChat(r, turn, send) {
		return
	}
	if !chunk(choice(map[string]any{}, finishReason(stopReason(turn))), nil) {
		return
	}
	if req.IncludeUsage && !chunk([]any{}, usageFor(turn, req, deltas).chat()) {
		return
	}
	send("[DONE]")
}

// afterFirstChat applies Hold, StreamErr and Disconnect after the first delta; false ends the stream.
func (s *Server) afterFirstChat(r *http.Request, turn Turn, send func(string) bool) bool {
	if !s.hold(r.Context(), turn.Hold) {
		return false
	}
	if turn.StreamErr != nil {
		e := turn.StreamErr.normalize()
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": e.Message, "type": e.Type}})
		send(string(b))
		return false
	}
	if turn.Disconnect {
		panic(http.ErrAbortHandler)
	}
	return true
}
