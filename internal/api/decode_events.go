package api

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/corralhq/corral/internal/apitype"
)

// This file decodes and validates the events a client sends (POST /v1/sessions/{id}/events, and a session
// create's initial_events): one decoder per client event type, and the content blocks they carry.

// Event limits.
const (
	maxEventsPerSend  = 100
	maxInitialEvents  = 50
	maxContentBlocks  = 1000
	maxTextLen        = 1 << 20
	maxRubricLen      = 262_144
	maxOutcomeIters   = 20
	defaultOutcomeMax = 3
	prefixOutcome     = "outc_"
)

// Block types allowed per field.
var (
	messageBlocks = []apitype.ContentBlockType{apitype.ContentText, apitype.ContentImage, apitype.ContentDocument,
		apitype.ContentRedacted}
	toolResultBlocks = []apitype.ContentBlockType{apitype.ContentText, apitype.ContentImage, apitype.ContentDocument,
		apitype.ContentSearchResult}
	systemBlocks = []apitype.ContentBlockType{apitype.ContentText}
)

// sendRequest is the body of POST /v1/sessions/{id}/events.
type sendRequest struct {
	Events []json.RawMessage `json:"events"`
}

// parseSend validates a send request, including the placement of system.message.
func parseSend(body []byte) ([]clientEvent, error) {
	var req sendRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	if len(req.Events) == 0 {
		return nil, invalid("events", "required: at least one event")
	}
	if len(req.Events) > maxEventsPerSend {
		return nil, invalid("events", "at most %d events per request", maxEventsPerSend)
	}
	out := make([]clientEvent, 0, len(req.Events))
	for i, raw := range req.Events {
		ce, err := parseClientEvent(index("events", i), raw, nil)
		if err != nil {
			return nil, err
		}
		if ce.ev.Type == apitype.EventSystemMessage {
			if i != len(req.Events)-1 {
				return nil, invalid(index("events", i), "system.message must be the last event of the request")
			}
			if i == 0 || !slices.Contains([]apitype.EventType{apitype.EventUserMessage, apitype.EventUserToolResult,
				apitype.EventUserCustomToolResult}, out[i-1].ev.Type) {
				return nil, invalid(index("events", i),
					"system.message must follow the user.message, user.tool_result or user.custom_tool_result it accompanies")
			}
		}
		out = append(out, ce)
	}
	return out, nil
}

// clientEvent is a validated client event, ready to append, and the event of the session it answers.
type clientEvent struct {
	path string
	ev   apitype.NewEvent
	ref  eventRef
}

// eventRef is the event of the session that a client event answers (an agent.tool_use, agent.mcp_tool_use or
// agent.custom_tool_use), checked against the log by checkRefs.
type eventRef struct {
	id    string              // "" if the client event answers none
	path  string              // the field of the client event that names it
	kinds []apitype.EventType // acceptable types of the referenced event
}

// A clientDecoder decodes and validates the fields of one client event type: the payload to store and the event
// it answers. p is the event's path in the request body; errors name fields under it.
type clientDecoder func(p string, raw json.RawMessage) (payload any, ref eventRef, err error)

// clientEventType is a type of event a client sends, and its decoder.
type clientEventType struct {
	name   apitype.EventType
	decode clientDecoder
}

// clientEventTypes are the client event types, in the order error messages list them: exactly the types that
// apitype.IsUserEvent accepts.
var clientEventTypes = []clientEventType{
	{apitype.EventUserMessage, decodeMessage(messageBlocks)},
	{apitype.EventUserInterrupt, decodeInterrupt},
	{apitype.EventUserToolConfirmation, decodeToolConfirmation},
	{apitype.EventUserCustomToolResult, decodeCustomToolResult},
	{apitype.EventUserToolResult, decodeToolResult},
	{apitype.EventUserDefineOutcome, decodeDefineOutcome},
	{apitype.EventSystemMessage, decodeMessage(systemBlocks)},
}

// clientEventNames lists the names of clientEventTypes.
func clientEventNames() []apitype.EventType {
	names := make([]apitype.EventType, len(clientEventTypes))
	for i, t := range clientEventTypes {
		names[i] = t.name
	}
	return names
}

// parseClientEvent validates one client event. allowed restricts the event types (nil = every client type).
func parseClientEvent(p string, raw json.RawMessage, allowed []apitype.EventType) (clientEvent, error) {
	s, err := typeOf(p, raw)
	typ := apitype.EventType(s)
	if err != nil {
		return clientEvent{}, err
	}
	if typ == "" {
		return clientEvent{}, invalid(path(p, "type"), "required")
	}
	i := slices.IndexFunc(clientEventTypes, func(t clientEventType) bool { return t.name == typ })
	if i < 0 || (allowed != nil && !slices.Contains(allowed, typ)) {
		want := allowed
		if want == nil {
			want = clientEventNames()
		}
		return clientEvent{}, invalid(path(p, "type"), "unknown event type %q (want one of %s)", typ,
			join(want, ", "))
	}
	payload, ref, err := clientEventTypes[i].decode(p, raw)
	if err != nil {
		return clientEvent{}, err
	}
	ev, err := apitype.MakeEvent(typ, payload)
	if err != nil {
		return clientEvent{}, fmt.Errorf("%s: %w", p, err)
	}
	return clientEvent{path: p, ev: ev, ref: ref}, nil
}

// decodeMessage decodes user.message and system.message, whose content may hold blocks of the given types.
func decodeMessage(blocks []apitype.ContentBlockType) clientDecoder {
	return func(p string, raw json.RawMessage) (any, eventRef, error) {
		var in struct {
			Type    string            `json:"type"`
			Content []json.RawMessage `json:"content"`
		}
		if err := strictUnmarshal(p, raw, &in); err != nil {
			return nil, eventRef{}, err
		}
		if len(in.Content) == 0 {
			return nil, eventRef{}, invalid(path(p, "content"), "required: at least one content block")
		}
		content, err := parseBlocks(path(p, "content"), in.Content, blocks)
		if err != nil {
			return nil, eventRef{}, err
		}
		return apitype.UserMessage{Content: content}, eventRef{}, nil
	}
}

func decodeInterrupt(p string, raw json.RawMessage) (any, eventRef, error) {
	var in struct {
		Type            string `json:"type"`
		SessionThreadID string `json:"session_thread_id"`
	}
	if err := strictUnmarshal(p, raw, &in); err != nil {
		return nil, eventRef{}, err
	}
	return apitype.UserInterrupt{SessionThreadID: in.SessionThreadID}, eventRef{}, nil
}

func decodeToolConfirmation(p string, raw json.RawMessage) (any, eventRef, error) {
	var in struct {
		Type        string                     `json:"type"`
		ToolUseID   string                     `json:"tool_use_id"`
		Result      apitype.ConfirmationResult `json:"result"`
		DenyMessage *string                    `json:"deny_message"`
	}
	if err := strictUnmarshal(p, raw, &in); err != nil {
		return nil, eventRef{}, err
	}
	if in.ToolUseID == "" {
		return nil, eventRef{}, invalid(path(p, "tool_use_id"), "required")
	}
	if !in.Result.Valid() {
		return nil, eventRef{}, invalid(path(p, "result"), `must be "allow" or "deny"`)
	}
	out := apitype.UserToolConfirmation{ToolUseID: in.ToolUseID, Result: in.Result}
	if in.DenyMessage != nil {
		if in.Result != apitype.ConfirmDeny {
			return nil, eventRef{}, invalid(path(p, "deny_message"), `only allowed with result "deny"`)
		}
		if err := checkText(path(p, "deny_message"), *in.DenyMessage, false, 10_000); err != nil {
			return nil, eventRef{}, err
		}
		out.DenyMessage = *in.DenyMessage
	}
	return out, eventRef{id: in.ToolUseID, path: path(p, "tool_use_id"),
		kinds: []apitype.EventType{apitype.EventAgentToolUse, apitype.EventAgentMCPToolUse}}, nil
}

// toolResultIn is the body of user.custom_tool_result and user.tool_result. Each answers one of the two ids; the
// other is decoded too, so that the error can say which id the event takes.
type toolResultIn struct {
	Type            string            `json:"type"`
	ToolUseID       string            `json:"tool_use_id"`
	CustomToolUseID string            `json:"custom_tool_use_id"`
	Content         []json.RawMessage `json:"content"`
	IsError         *bool             `json:"is_error"`
	// Source is Corral's own field of a user.tool_result: a self-hosted worker (corral worker) says its hands
	// failed (the sandbox died, a limit, a timeout).
	Source *apitype.FailureSource `json:"source"`
}

// decodeToolResultIn decodes a tool result and its content.
func decodeToolResultIn(p string, raw json.RawMessage) (toolResultIn, []apitype.ContentBlock, error) {
	var in toolResultIn
	if err := strictUnmarshal(p, raw, &in); err != nil {
		return in, nil, err
	}
	content, err := parseBlocks(path(p, "content"), in.Content, toolResultBlocks)
	return in, content, err
}

func decodeCustomToolResult(p string, raw json.RawMessage) (any, eventRef, error) {
	in, content, err := decodeToolResultIn(p, raw)
	if err != nil {
		return nil, eventRef{}, err
	}
	if in.ToolUseID != "" {
		return nil, eventRef{}, invalid(path(p, "tool_use_id"), "unknown field (user.custom_tool_result answers custom_tool_use_id)")
	}
	if in.Source != nil {
		return nil, eventRef{}, invalid(path(p, "source"), "unknown field (only a user.tool_result says its hands failed)")
	}
	if in.CustomToolUseID == "" {
		return nil, eventRef{}, invalid(path(p, "custom_tool_use_id"), "required")
	}
	out := apitype.UserCustomToolResult{CustomToolUseID: in.CustomToolUseID, Content: content,
		IsError: in.IsError != nil && *in.IsError}
	return out, eventRef{id: in.CustomToolUseID, path: path(p, "custom_tool_use_id"),
		kinds: []apitype.EventType{apitype.EventAgentCustomToolUse}}, nil
}

func decodeToolResult(p string, raw json.RawMessage) (any, eventRef, error) {
	in, content, err := decodeToolResultIn(p, raw)
	if err != nil {
		return nil, eventRef{}, err
	}
	if in.CustomToolUseID != "" {
		return nil, eventRef{}, invalid(path(p, "custom_tool_use_id"), "unknown field (user.tool_result answers tool_use_id)")
	}
	if in.ToolUseID == "" {
		return nil, eventRef{}, invalid(path(p, "tool_use_id"), "required")
	}
	out := apitype.UserToolResult{ToolUseID: in.ToolUseID, Content: content, IsError: in.IsError != nil && *in.IsError}
	if in.Source != nil {
		if err := checkHandsSource(path(p, "source"), in.Source, out.IsError); err != nil {
			return nil, eventRef{}, err
		}
		out.Source = in.Source
	}
	return out, eventRef{id: in.ToolUseID, path: path(p, "tool_use_id"), kinds: []apitype.EventType{apitype.EventAgentToolUse}}, nil
}

// workerReasons are the reasons a self-hosted worker may give for its hands' failure.
var workerReasons = []apitype.FailureReason{apitype.ReasonSandboxDied, apitype.ReasonLimitHit, apitype.ReasonTimeout,
	apitype.ReasonProvisionFailed, apitype.ReasonUnavailable, apitype.ReasonInternal}

// checkHandsSource validates the source a worker gives a failed user.tool_result: its hands, a backend name
// (letters, digits, _ and -, at most 64) and one of workerReasons.
func checkHandsSource(p string, src *apitype.FailureSource, isError bool) error {
	switch {
	case !isError:
		return invalid(p, "only an error result (is_error true) has a source")
	case src.Component != apitype.ComponentHands:
		return invalid(path(p, "component"), "must be %q: a worker reports its own hands' failures", apitype.ComponentHands)
	case !slices.Contains(workerReasons, src.Reason):
		return invalid(path(p, "reason"), "unknown reason %q", src.Reason)
	case len(src.Backend) > 64 || strings.ContainsFunc(src.Backend, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-')
	}):
		return invalid(path(p, "backend"), "at most 64 letters, digits, _ or -")
	}
	return nil
}

func decodeDefineOutcome(p string, raw json.RawMessage) (any, eventRef, error) {
	var in struct {
		Type          string          `json:"type"`
		Description   string          `json:"description"`
		Rubric        json.RawMessage `json:"rubric"`
		MaxIterations *int            `json:"max_iterations"`
	}
	if err := strictUnmarshal(p, raw, &in); err != nil {
		return nil, eventRef{}, err
	}
	if err := checkString(path(p, "description"), in.Description, true, 10_000); err != nil {
		return nil, eventRef{}, err
	}
	out := apitype.DefineOutcome{OutcomeID: apitype.NewID(prefixOutcome), Description: in.Description,
		MaxIterations: defaultOutcomeMax}
	if in.MaxIterations != nil {
		if *in.MaxIterations < 1 || *in.MaxIterations > maxOutcomeIters {
			return nil, eventRef{}, invalid(path(p, "max_iterations"), "must be between 1 and %d", maxOutcomeIters)
		}
		out.MaxIterations = *in.MaxIterations
	}
	rp := path(p, "rubric")
	if isNull(in.Rubric) {
		return nil, eventRef{}, invalid(rp, "required")
	}
	var rubric struct {
		Type    string `json:"type"`
		Content string `json:"content,omitempty"`
		FileID  string `json:"file_id,omitempty"`
	}
	if err := strictUnmarshal(rp, in.Rubric, &rubric); err != nil {
		return nil, eventRef{}, err
	}
	switch rubric.Type {
	case "text":
		if rubric.FileID != "" {
			return nil, eventRef{}, invalid(path(rp, "file_id"), "not allowed with a text rubric")
		}
		if err := checkText(path(rp, "content"), rubric.Content, true, maxRubricLen); err != nil {
			return nil, eventRef{}, err
		}
	case "file":
		if rubric.Content != "" {
			return nil, eventRef{}, invalid(path(rp, "content"), "not allowed with a file rubric")
		}
		if err := checkString(path(rp, "file_id"), rubric.FileID, true, 256); err != nil {
			return nil, eventRef{}, err
		}
	default:
		return nil, eventRef{}, invalid(path(rp, "type"), `must be "text" or "file"`)
	}
	out.Rubric, _ = json.Marshal(rubric)
	return out, eventRef{}, nil
}

// parseBlocks validates content blocks of the given allowed types.
func parseBlocks(p string, raws []json.RawMessage, allowed []apitype.ContentBlockType) ([]apitype.ContentBlock, error) {
	if len(raws) > maxContentBlocks {
		return nil, invalid(p, "at most %d content blocks", maxContentBlocks)
	}
	out := make([]apitype.ContentBlock, 0, len(raws))
	for i, raw := range raws {
		b, err := parseBlock(index(p, i), raw, allowed)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

func parseBlock(p string, raw json.RawMessage, allowed []apitype.ContentBlockType) (apitype.ContentBlock, error) {
	s, err := typeOf(p, raw)
	typ := apitype.ContentBlockType(s)
	if err != nil {
		return apitype.ContentBlock{}, err
	}
	if typ == "" {
		return apitype.ContentBlock{}, invalid(path(p, "type"), "required")
	}
	if !slices.Contains(allowed, typ) {
		return apitype.ContentBlock{}, invalid(path(p, "type"), "unknown block type %q (want one of %s)", typ,
			join(allowed, ", "))
	}
	b := apitype.ContentBlock{Type: typ}
	switch typ {
	case apitype.ContentText:
		var in struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := strictUnmarshal(p, raw, &in); err != nil {
			return b, err
		}
		if err := checkText(path(p, "text"), in.Text, true, maxTextLen); err != nil {
			return b, err
		}
		b.Text = in.Text
	case apitype.ContentRedacted:
		var in struct {
			Type string `json:"type"`
		}
		if err := strictUnmarshal(p, raw, &in); err != nil {
			return b, err
		}
	case apitype.ContentImage, apitype.ContentDocument:
		var in struct {
			Type    string          `json:"type"`
			Source  json.RawMessage `json:"source"`
			Title   *string         `json:"title"`
			Context *string         `json:"context"`
		}
		if err := strictUnmarshal(p, raw, &in); err != nil {
			return b, err
		}
		if typ == apitype.ContentImage && (in.Title != nil || in.Context != nil) {
			return b, invalid(p, "title and context apply only to document blocks")
		}
		src, err := parseSource(path(p, "source"), in.Source, typ == apitype.ContentDocument)
		if err != nil {
			return b, err
		}
		b.Source, b.Title, b.Context = src, in.Title, in.Context
	case apitype.ContentSearchResult:
		var in struct {
			Type      string            `json:"type"`
			Source    string            `json:"source"`
			Title     string            `json:"title"`
			Content   []json.RawMessage `json:"content"`
			Citations *struct {
				Enabled *bool `json:"enabled"`
			} `json:"citations"`
		}
		if err := strictUnmarshal(p, raw, &in); err != nil {
			return b, err
		}
		if err := checkString(path(p, "source"), in.Source, true, 4096); err != nil {
			return b, err
		}
		if err := checkString(path(p, "title"), in.Title, true, 4096); err != nil {
			return b, err
		}
		if len(in.Content) == 0 {
			return b, invalid(path(p, "content"), "required")
		}
		content, err := parseBlocks(path(p, "content"), in.Content, []apitype.ContentBlockType{apitype.ContentText})
		if err != nil {
			return b, err
		}
		if in.Citations == nil || in.Citations.Enabled == nil {
			return b, invalid(path(p, "citations.enabled"), "required")
		}
		b.Content, _ = json.Marshal(content)
		b.Citations, _ = json.Marshal(map[string]bool{"enabled": *in.Citations.Enabled})
		src, _ := json.Marshal(in.Source)
		b.Source, b.Title = src, &in.Title
	}
	return b, nil
}

var imageMediaTypes = []string{"image/png", "image/jpeg", "image/gif", "image/webp"}

// parseSource validates an image or document source and returns it re-encoded.
func parseSource(p string, raw json.RawMessage, document bool) (json.RawMessage, error) {
	if isNull(raw) {
		return nil, invalid(p, "required")
	}
	var in apitype.ImageSource
	if err := strictUnmarshal(p, raw, &in); err != nil {
		return nil, err
	}
	switch in.Type {
	case apitype.SourceBase64:
		if in.URL != "" || in.FileID != "" {
			return nil, invalid(p, "a base64 source takes only media_type and data")
		}
		if in.MediaType == "" {
			return nil, invalid(path(p, "media_type"), "required")
		}
		if !document && !slices.Contains(imageMediaTypes, in.MediaType) {
			return nil, invalid(path(p, "media_type"), "unsupported image type %q", in.MediaType)
		}
		if in.Data == "" {
			return nil, invalid(path(p, "data"), "required")
		}
		if _, err := base64.StdEncoding.DecodeString(in.Data); err != nil {
			return nil, invalid(path(p, "data"), "not valid base64")
		}
	case apitype.SourceText:
		if !document {
			return nil, invalid(path(p, "type"), "text sources apply only to documents")
		}
		if in.MediaType == "" {
			in.MediaType = "text/plain"
		}
		if in.MediaType != "text/plain" {
			return nil, invalid(path(p, "media_type"), `must be "text/plain"`)
		}
		if in.Data == "" {
			return nil, invalid(path(p, "data"), "required")
		}
	case apitype.SourceURL:
		if err := checkURL(path(p, "url"), in.URL); err != nil {
			return nil, err
		}
		if in.Data != "" || in.MediaType != "" || in.FileID != "" {
			return nil, invalid(p, "a url source takes only url")
		}
	case apitype.SourceFile:
		if in.FileID == "" {
			return nil, invalid(path(p, "file_id"), "required")
		}
		if in.Data != "" || in.MediaType != "" || in.URL != "" {
			return nil, invalid(p, "a file source takes only file_id")
		}
	case "":
		return nil, invalid(path(p, "type"), "required")
	default:
		return nil, invalid(path(p, "type"), "unknown source type %q", in.Type)
	}
	out, _ := json.Marshal(in)
	return out, nil
}
