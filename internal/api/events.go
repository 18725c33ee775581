package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

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
	messageBlocks    = []string{"text", "image", "document", "redacted"}
	toolResultBlocks = []string{"text", "image", "document", "search_result"}
	systemBlocks     = []string{"text"}
)

// clientEvent is a validated client event, ready to append. ref is an event id of the session it must answer
// (an agent.tool_use, agent.mcp_tool_use or agent.custom_tool_use), checked against the log by checkRefs.
type clientEvent struct {
	path    string
	ev      apitype.NewEvent
	ref     string
	refKind []string // acceptable types of the referenced event
	refPath string
}

// parseClientEvent validates one client event. allowed restricts the event types (nil = every client type).
func parseClientEvent(p string, raw json.RawMessage, allowed []string) (clientEvent, error) {
	typ, err := typeOf(p, raw)
	if err != nil {
		return clientEvent{}, err
	}
	if typ == "" {
		return clientEvent{}, invalid(path(p, "type"), "required")
	}
	if !apitype.IsUserEvent(typ) || (allowed != nil && !slices.Contains(allowed, typ)) {
		want := allowed
		if want == nil {
			want = []string{apitype.EventUserMessage, apitype.EventUserInterrupt, apitype.EventUserToolConfirmation,
				apitype.EventUserCustomToolResult, apitype.EventUserToolResult, apitype.EventUserDefineOutcome,
				apitype.EventSystemMessage}
		}
		return clientEvent{}, invalid(path(p, "type"), "unknown event type %q (want one of %s)", typ,
			strings.Join(want, ", "))
	}
	ce := clientEvent{path: p}
	var payload any
	switch typ {
	case apitype.EventUserMessage, apitype.EventSystemMessage:
		var in struct {
			Type    string            `json:"type"`
			Content []json.RawMessage `json:"content"`
		}
		if err := strictUnmarshal(p, raw, &in); err != nil {
			return ce, err
		}
		blocks := messageBlocks
		if typ == apitype.EventSystemMessage {
			blocks = systemBlocks
		}
		if len(in.Content) == 0 {
			return ce, invalid(path(p, "content"), "required: at least one content block")
		}
		content, err := parseBlocks(path(p, "content"), in.Content, blocks)
		if err != nil {
			return ce, err
		}
		payload = apitype.UserMessage{Content: content}
	case apitype.EventUserInterrupt:
		var in struct {
			Type            string `json:"type"`
			SessionThreadID string `json:"session_thread_id"`
		}
		if err := strictUnmarshal(p, raw, &in); err != nil {
			return ce, err
		}
		payload = apitype.UserInterrupt{SessionThreadID: in.SessionThreadID}
	case apitype.EventUserToolConfirmation:
		var in struct {
			Type        string                     `json:"type"`
			ToolUseID   string                     `json:"tool_use_id"`
			Result      apitype.ConfirmationResult `json:"result"`
			DenyMessage *string                    `json:"deny_message"`
		}
		if err := strictUnmarshal(p, raw, &in); err != nil {
			return ce, err
		}
		if in.ToolUseID == "" {
			return ce, invalid(path(p, "tool_use_id"), "required")
		}
		if !in.Result.Valid() {
			return ce, invalid(path(p, "result"), `must be "allow" or "deny"`)
		}
		out := apitype.UserToolConfirmation{ToolUseID: in.ToolUseID, Result: in.Result}
		if in.DenyMessage != nil {
			if in.Result != apitype.ConfirmDeny {
				return ce, invalid(path(p, "deny_message"), `only allowed with result "deny"`)
			}
			if err := checkString(path(p, "deny_message"), *in.DenyMessage, false, 10_000); err != nil {
				return ce, err
			}
			out.DenyMessage = *in.DenyMessage
		}
		payload = out
		ce.ref, ce.refPath = in.ToolUseID, path(p, "tool_use_id")
		ce.refKind = []string{apitype.EventAgentToolUse, apitype.EventAgentMCPToolUse}
	case apitype.EventUserCustomToolResult, apitype.EventUserToolResult:
		var in struct {
			Type            string            `json:"type"`
			ToolUseID       string            `json:"tool_use_id"`
			CustomToolUseID string            `json:"custom_tool_use_id"`
			Content         []json.RawMessage `json:"content"`
			IsError         *bool             `json:"is_error"`
		}
		if err := strictUnmarshal(p, raw, &in); err != nil {
			return ce, err
		}
		content, err := parseBlocks(path(p, "content"), in.Content, toolResultBlocks)
		if err != nil {
			return ce, err
		}
		isErr := in.IsError != nil && *in.IsError
		if typ == apitype.EventUserCustomToolResult {
			if in.ToolUseID != "" {
				return ce, invalid(path(p, "tool_use_id"), "unknown field (user.custom_tool_result answers custom_tool_use_id)")
			}
			if in.CustomToolUseID == "" {
				return ce, invalid(path(p, "custom_tool_use_id"), "required")
			}
			payload = apitype.UserCustomToolResult{CustomToolUseID: in.CustomToolUseID, Content: content, IsError: isErr}
			ce.ref, ce.refPath = in.CustomToolUseID, path(p, "custom_tool_use_id")
			ce.refKind = []string{apitype.EventAgentCustomToolUse}
		} else {
			if in.CustomToolUseID != "" {
				return ce, invalid(path(p, "custom_tool_use_id"), "unknown field (user.tool_result answers tool_use_id)")
			}
			if in.ToolUseID == "" {
				return ce, invalid(path(p, "tool_use_id"), "required")
			}
			payload = apitype.UserToolResult{ToolUseID: in.ToolUseID, Content: content, IsError: isErr}
			ce.ref, ce.refPath = in.ToolUseID, path(p, "tool_use_id")
			ce.refKind = []string{apitype.EventAgentToolUse}
		}
	case apitype.EventUserDefineOutcome:
		out, err := parseDefineOutcome(p, raw)
		if err != nil {
			return ce, err
		}
		payload = out
	}
	ev, err := apitype.MakeEvent(typ, payload)
	if err != nil {
		return ce, fmt.Errorf("%s: %w", p, err)
	}
	ce.ev = ev
	return ce, nil
}

// defineOutcome is the stored payload of user.define_outcome; the server assigns outcome_id.
type defineOutcome struct {
	OutcomeID     string          `json:"outcome_id"`
	Description   string          `json:"description"`
	Rubric        json.RawMessage `json:"rubric"`
	MaxIterations int             `json:"max_iterations"`
}

func parseDefineOutcome(p string, raw json.RawMessage) (defineOutcome, error) {
	var in struct {
		Type          string          `json:"type"`
		Description   string          `json:"description"`
		Rubric        json.RawMessage `json:"rubric"`
		MaxIterations *int            `json:"max_iterations"`
	}
	if err := strictUnmarshal(p, raw, &in); err != nil {
		return defineOutcome{}, err
	}
	if err := checkString(path(p, "description"), in.Description, true, 10_000); err != nil {
		return defineOutcome{}, err
	}
	out := defineOutcome{OutcomeID: apitype.NewID(prefixOutcome), Description: in.Description,
		MaxIterations: defaultOutcomeMax}
	if in.MaxIterations != nil {
		if *in.MaxIterations < 1 || *in.MaxIterations > maxOutcomeIters {
			return defineOutcome{}, invalid(path(p, "max_iterations"), "must be between 1 and %d", maxOutcomeIters)
		}
		out.MaxIterations = *in.MaxIterations
	}
	rp := path(p, "rubric")
	if isNull(in.Rubric) {
		return defineOutcome{}, invalid(rp, "required")
	}
	var rubric struct {
		Type    string `json:"type"`
		Content string `json:"content,omitempty"`
		FileID  string `json:"file_id,omitempty"`
	}
	if err := strictUnmarshal(rp, in.Rubric, &rubric); err != nil {
		return defineOutcome{}, err
	}
	switch rubric.Type {
	case "text":
		if rubric.FileID != "" {
			return defineOutcome{}, invalid(path(rp, "file_id"), "not allowed with a text rubric")
		}
		if err := checkString(path(rp, "content"), rubric.Content, true, maxRubricLen); err != nil {
			return defineOutcome{}, err
		}
	case "file":
		if rubric.Content != "" {
			return defineOutcome{}, invalid(path(rp, "content"), "not allowed with a file rubric")
		}
		if err := checkString(path(rp, "file_id"), rubric.FileID, true, 256); err != nil {
			return defineOutcome{}, err
		}
	default:
		return defineOutcome{}, invalid(path(rp, "type"), `must be "text" or "file"`)
	}
	out.Rubric, _ = json.Marshal(rubric)
	return out, nil
}

// parseBlocks validates content blocks of the given allowed types.
func parseBlocks(p string, raws []json.RawMessage, allowed []string) ([]apitype.ContentBlock, error) {
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

func parseBlock(p string, raw json.RawMessage, allowed []string) (apitype.ContentBlock, error) {
	typ, err := typeOf(p, raw)
	if err != nil {
		return apitype.ContentBlock{}, err
	}
	if typ == "" {
		return apitype.ContentBlock{}, invalid(path(p, "type"), "required")
	}
	if !slices.Contains(allowed, typ) {
		return apitype.ContentBlock{}, invalid(path(p, "type"), "unknown block type %q (want one of %s)", typ,
			strings.Join(allowed, ", "))
	}
	b := apitype.ContentBlock{Type: typ}
	switch typ {
	case "text":
		var in struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := strictUnmarshal(p, raw, &in); err != nil {
			return b, err
		}
		if err := checkString(path(p, "text"), in.Text, true, maxTextLen); err != nil {
			return b, err
		}
		b.Text = in.Text
	case "redacted":
		var in struct {
			Type string `json:"type"`
		}
		if err := strictUnmarshal(p, raw, &in); err != nil {
			return b, err
		}
	case "image", "document":
		var in struct {
			Type    string          `json:"type"`
			Source  json.RawMessage `json:"source"`
			Title   *string         `json:"title"`
			Context *string         `json:"context"`
		}
		if err := strictUnmarshal(p, raw, &in); err != nil {
			return b, err
		}
		if typ == "image" && (in.Title != nil || in.Context != nil) {
			return b, invalid(p, "title and context apply only to document blocks")
		}
		src, err := parseSource(path(p, "source"), in.Source, typ == "document")
		if err != nil {
			return b, err
		}
		b.Source, b.Title, b.Context = src, in.Title, in.Context
	case "search_result":
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
		content, err := parseBlocks(path(p, "content"), in.Content, []string{"text"})
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
	case "base64":
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
	case "text":
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
	case "url":
		if err := checkURL(path(p, "url"), in.URL); err != nil {
			return nil, err
		}
		if in.Data != "" || in.MediaType != "" || in.FileID != "" {
			return nil, invalid(p, "a url source takes only url")
		}
	case "file":
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

// sendRequest is the body of POST /v1/sessions/{id}/events.
type sendRequest struct {
	Events []json.RawMessage `json:"events"`
}

// sendResponse echoes the stored events, with their ids.
type sendResponse struct {
	Type string          `json:"type"`
	Data []apitype.Event `json:"data"`
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
			if i == 0 || !slices.Contains([]string{apitype.EventUserMessage, apitype.EventUserToolResult,
				apitype.EventUserCustomToolResult}, out[i-1].ev.Type) {
				return nil, invalid(index("events", i),
					"system.message must follow the user.message, user.tool_result or user.custom_tool_result it accompanies")
			}
		}
		out = append(out, ce)
	}
	return out, nil
}

// checkRefs checks the events' references against the session's log and environment.
func (s *Server) checkRefs(r *http.Request, sess *apitype.Session, events []clientEvent) error {
	var env *apitype.Environment
	for _, ce := range events {
		if ce.ev.Type == apitype.EventUserToolResult {
			if env == nil {
				e, err := s.store.EnvironmentGet(r.Context(), sess.EnvironmentID)
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					return fmt.Errorf("environment %s: %w", sess.EnvironmentID, err)
				}
				if e == nil {
					e = &apitype.Environment{}
				}
				env = e
			}
			if env.Config.Type != apitype.EnvironmentSelfHosted {
				return invalid(path(ce.path, "type"), "user.tool_result is only accepted in self_hosted environments")
			}
		}
		if ce.ref == "" {
			continue
		}
		ev, err := s.store.EventGet(r.Context(), sess.ID, ce.ref)
		if errors.Is(err, store.ErrNotFound) {
			return invalid(ce.refPath, "no event %q in this session", ce.ref)
		}
		if err != nil {
			return fmt.Errorf("event %s: %w", ce.ref, err)
		}
		if !slices.Contains(ce.refKind, ev.Type) {
			return invalid(ce.refPath, "event %q is a %s, not %s", ce.ref, ev.Type, strings.Join(ce.refKind, " or "))
		}
	}
	return nil
}

func (s *Server) eventSend(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("session_id")
	body, err := readBody(r)
	if err != nil {
		return err
	}
	events, err := parseSend(body)
	if err != nil {
		return err
	}
	sess, err := s.store.SessionGet(r.Context(), id)
	if err != nil {
		return lookup(err, "session", id)
	}
	if sess.Status == apitype.StatusTerminated {
		return invalid("", "session %s is terminated and accepts no more events", id)
	}
	if err := s.checkRefs(r, sess, events); err != nil {
		return err
	}
	news := make([]apitype.NewEvent, len(events))
	for i, ce := range events {
		news[i] = ce.ev
	}
	stored, err := s.store.EventAppend(r.Context(), &store.EventAppendParams{SessionID: id, Events: news, Wake: true})
	if err != nil {
		return lookup(err, "session", id)
	}
	return writeJSON(w, http.StatusOK, sendResponse{Type: "send_session_events", Data: stored})
}

// eventList serves GET /v1/sessions/{id}/events: a slice of the log, paged by sequence number.
func (s *Server) eventList(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("session_id")
	q := newQuery(r.URL)
	limit, err := q.limit(defaultEventLimit, maxEventLimit)
	if err != nil {
		return err
	}
	desc, err := q.desc(false)
	if err != nil {
		return err
	}
	c, err := q.page()
	if err != nil {
		return err
	}
	p := &store.EventListParams{SessionID: id, Types: q.list("types"), Desc: desc, Limit: limit + 1}
	for i, t := range p.Types {
		if !validEventType(t) {
			return invalid(index("types", i), "invalid event type %q", t)
		}
	}
	var lp store.ListParams
	if err := q.createdFilters(&lp); err != nil {
		return err
	}
	p.CreatedAfter, p.CreatedFrom, p.CreatedBefore, p.CreatedTo = lp.CreatedAfter, lp.CreatedFrom, lp.CreatedBefore, lp.CreatedTo
	if c != nil {
		if c.Seq < 1 || c.ID != "" {
			return invalid("page", "invalid page token")
		}
		if desc {
			p.BeforeSeq = c.Seq
		} else {
			p.AfterSeq = c.Seq
		}
	}
	if _, err := s.store.SessionGet(r.Context(), id); err != nil {
		return lookup(err, "session", id)
	}
	events, err := s.store.EventList(r.Context(), p)
	if err != nil {
		return lookup(err, "session", id)
	}
	events, more := trim(events, limit)
	if events == nil {
		events = []apitype.Event{}
	}
	var next *string
	if more {
		next = seqCursor(events[len(events)-1].Seq)
	}
	return writeJSON(w, http.StatusOK, listPage[apitype.Event]{Data: events, NextPage: next})
}

// validEventType accepts dotted lowercase type names: the filter matches stored types, including types newer
// than this server knows.
func validEventType(t string) bool {
	if len(t) > 128 || !strings.Contains(t, ".") {
		return false
	}
	return !bytes.ContainsFunc([]byte(t), func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '.' && r != '_'
	})
}
