package harness

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
)

// transcriptTurn is one message of the rebuilt conversation, with the sequence numbers of the events it came from.
type transcriptTurn struct {
	msg            model.Message
	minSeq, maxSeq int64
}

// transcript rebuilds the conversation from the tail: the compaction summary as the first user turn, then the
// events as content blocks, consecutive same-role turns merged and tool results first in their user turn. Each
// event type has its reading in transcribers.
//
// A client message is placed where a model call picked it up: after everything the log holds before the first
// model request that started once it was processed. A message sent while a tool ran thus follows the tool's
// result, as the model saw it. Unprocessed messages go last: the call being built picks them up. A turn the user
// interrupted ends with an assistant note (interruptedNote).
func transcript(t *tail) ([]transcriptTurn, error) {
	// A turn the user interrupted ends with an assistant note saying so, after whatever the model said before
	// it: the model learns that its answer was cut short, and the user's next message does not merge with the
	// interrupted one.
	c := &transcriber{
		useIDs: map[string]string{}, answers: map[string]bool{}, serverUses: map[string]bool{},
		turnRunning: t.priorStatus == apitype.EventSessionStatusRunning || t.priorStatus == apitype.EventSessionStatusRescheduled,
	}
	if t.summary != "" {
		c.add("user", t.upToSeq, model.Block{Type: model.BlockText, Text: summaryPreamble + t.summary})
	}
	for _, e := range t.events {
		if tr := transcribers[t.statusType(e.Type)]; tr != nil {
			if err := tr(c, e); err != nil {
				return nil, err
			}
		}
	}
	if err := c.flush(true); err != nil {
		return nil, err
	}
	for i := range c.turns {
		if c.turns[i].msg.Role == "user" {
			// The Messages API wants a user turn's tool results before anything else in it.
			slices.SortStableFunc(c.turns[i].msg.Content, func(a, b model.Block) int {
				return boolRank(a.Type != model.BlockToolResult) - boolRank(b.Type != model.BlockToolResult)
			})
		}
	}
	return c.turns, nil
}

// transcriber is a transcript being built.
type transcriber struct {
	turns   []transcriptTurn
	pending []apitype.Event   // processed client messages waiting for the model request that picked them up
	useIDs  map[string]string // tool use event id -> the id the model knows the call by
	answers map[string]bool   // tool use event ids whose result is in
	// serverUses are the tool use event ids of calls the model provider ran (server tools).
	serverUses map[string]bool
	// turnRunning: a turn is in progress; interrupted: the user interrupted it.
	turnRunning, interrupted bool
}

// transcribers read each event type that shows in the conversation (or shapes it) into the transcript.
var transcribers = map[apitype.EventType]func(*transcriber, apitype.Event) error{
	apitype.EventSessionStatusRunning:       (*transcriber).turnStart,
	apitype.EventSessionStatusRescheduled:   (*transcriber).turnStart,
	apitype.EventSessionStatusIdle:          (*transcriber).turnEnd,
	apitype.EventSessionStatusTerminated:    (*transcriber).turnEnd,
	apitype.EventUserInterrupt:              (*transcriber).interrupt,
	apitype.EventUserMessage:                (*transcriber).message,
	apitype.EventSystemMessage:              (*transcriber).message,
	apitype.EventUserDefineOutcome:          (*transcriber).message,
	apitype.EventAgentThreadMessageReceived: (*transcriber).message,
	apitype.EventSpanOutcomeEvaluationEnd:   (*transcriber).revision,
	apitype.EventSpanModelRequestStart:      func(c *transcriber, _ apitype.Event) error { return c.flush(false) },
	apitype.EventAgentThinking:              (*transcriber).thinking,
	apitype.EventAgentMessage:               (*transcriber).agentMessage,
	apitype.EventAgentToolUse:               (*transcriber).use,
	apitype.EventAgentCustomToolUse:         (*transcriber).use,
	apitype.EventAgentMCPToolUse:            (*transcriber).use,
	apitype.EventAgentToolResult:            (*transcriber).result,
	apitype.EventAgentMCPToolResult:         (*transcriber).result,
	apitype.EventUserCustomToolResult:       (*transcriber).result,
	apitype.EventUserToolResult:             (*transcriber).result,
}

// add appends blocks to the conversation, merged into the last turn when it has the same role.
func (c *transcriber) add(role string, seq int64, blocks ...model.Block) {
	if len(blocks) == 0 {
		return
	}
	if n := len(c.turns); n > 0 && c.turns[n-1].msg.Role == role {
		last := &c.turns[n-1]
		last.msg.Content = append(last.msg.Content, blocks...)
		last.minSeq, last.maxSeq = min(last.minSeq, seq), max(last.maxSeq, seq)
		return
	}
	c.turns = append(c.turns, transcriptTurn{msg: model.Message{Role: role, Content: blocks}, minSeq: seq, maxSeq: seq})
}

// flush adds the pending client messages that were processed (all: every one).
func (c *transcriber) flush(all bool) error {
	keep := c.pending[:0]
	for _, e := range c.pending {
		if !all && e.ProcessedAt == nil {
			keep = append(keep, e)
			continue
		}
		if e.Type == apitype.EventUserDefineOutcome {
			var d apitype.DefineOutcome
			if err := e.DecodeData(&d); err != nil {
				return err
			}
			c.add("user", e.Seq, model.Block{Type: model.BlockText, Text: outcomeTask(d)})
			continue
		}
		if e.Type == apitype.EventAgentThreadMessageReceived {
			var m apitype.ThreadMessageReceived
			if err := e.DecodeData(&m); err != nil {
				return err
			}
			c.add("user", e.Seq, receivedBlocks(m)...)
			continue
		}
		var m apitype.UserMessage
		if err := e.DecodeData(&m); err != nil {
			return err
		}
		blocks := messageBlocks(m.Content)
		if e.Type == apitype.EventSystemMessage {
			blocks = systemBlocks(blocks)
		}
		c.add("user", e.Seq, blocks...)
	}
	c.pending = keep
	return nil
}

func (c *transcriber) turnStart(apitype.Event) error {
	c.turnRunning = true
	return nil
}

func (c *transcriber) turnEnd(e apitype.Event) error {
	if c.interrupted {
		c.add("assistant", e.Seq, model.Block{Type: model.BlockText, Text: interruptedNote})
	}
	c.turnRunning, c.interrupted = false, false
	return nil
}

func (c *transcriber) interrupt(apitype.Event) error {
	c.interrupted = c.interrupted || c.turnRunning
	return nil
}

func (c *transcriber) message(e apitype.Event) error {
	c.pending = append(c.pending, e)
	return nil
}

// revision: a needs_revision verdict goes back to the agent as a user turn.
func (c *transcriber) revision(e apitype.Event) error {
	var end apitype.OutcomeEvaluationEnd
	if err := e.DecodeData(&end); err != nil {
		return err
	}
	if end.Result == apitype.OutcomeNeedsRevision {
		c.add("user", e.Seq, model.Block{Type: model.BlockText, Text: revisionNote(end)})
	}
	return nil
}

func (c *transcriber) thinking(e apitype.Event) error {
	var th apitype.AgentThinking
	if err := e.DecodeData(&th); err != nil {
		return err
	}
	switch {
	case th.Redacted != "":
		c.add("assistant", e.Seq, model.Block{Type: model.BlockRedactedThinking, Data: th.Redacted})
	case th.Thinking != "" || th.Signature != "":
		c.add("assistant", e.Seq, model.Block{Type: model.BlockThinking, Thinking: th.Thinking, Signature: th.Signature})
	}
	return nil
}

func (c *transcriber) agentMessage(e apitype.Event) error {
	var m apitype.AgentMessage
	if err := e.DecodeData(&m); err != nil {
		return err
	}
	c.add("assistant", e.Seq, textBlocks(m.Content)...)
	return nil
}

// use adds a tool call under the id the model gave it (or its event's id) and the name the model called.
func (c *transcriber) use(e apitype.Event) error {
	u, err := useEvents[e.Type].read(e)
	if err != nil {
		return err
	}
	id := cmp.Or(u.data.ModelToolUseID, e.ID)
	c.useIDs[e.ID] = id
	if len(u.data.ServerBlock) > 0 {
		c.serverUses[e.ID] = true
		c.add("assistant", e.Seq, model.Block{Type: model.BlockServerToolUse, Raw: u.data.ServerBlock})
		return nil
	}
	input := u.data.Input
	if len(input) == 0 || string(input) == "null" {
		input = json.RawMessage("{}")
	}
	c.add("assistant", e.Seq, model.Block{Type: model.BlockToolUse, ID: id, Name: u.modelName, Input: input})
	return nil
}

// result adds a tool result, once, for a call the transcript holds.
func (c *transcriber) result(e apitype.Event) error {
	r, err := resultEvents[e.Type](e)
	if err != nil {
		return err
	}
	id, ok := c.useIDs[r.useID]
	if !ok || c.answers[r.useID] {
		return nil // a result for a call the transcript does not hold, or a second one: the model must not see it
	}
	c.answers[r.useID] = true
	if c.serverUses[r.useID] {
		// A server call's result is the provider's block, in the assistant's turn; any other (a call the
		// provider left unfinished, closed by the brain) has no place in the conversation.
		if raw := serverResult(e); len(raw) > 0 {
			c.add("assistant", e.Seq, model.Block{Type: model.BlockWebSearchToolResult, Raw: raw})
		}
		return nil
	}
	c.add("user", e.Seq, model.Block{Type: model.BlockToolResult, ToolUseID: id, IsError: r.isErr, Content: resultBlocks(r.content)})
	return nil
}

// interruptedNote ends, in the model's context, a turn the user interrupted.
const interruptedNote = "[The user interrupted this turn here.]"

// summaryPreamble introduces the compaction summary in the first user turn.
const summaryPreamble = "The earlier part of this conversation was compacted. Summary of it:\n\n"

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// messages returns the model messages of the turns.
func messages(turns []transcriptTurn) []model.Message {
	out := make([]model.Message, len(turns))
	for i, t := range turns {
		out[i] = t.msg
	}
	return out
}

// messageBlocks converts a client message's content. Empty text blocks (which the Messages API rejects) and
// redacted placeholders are dropped; plain-text documents become text and base64 PDFs document blocks; other
// documents are described, not sent, because the model port carries text, images and PDFs only.
func messageBlocks(content []apitype.ContentBlock) []model.Block {
	var out []model.Block
	for _, c := range content {
		switch c.Type {
		case apitype.ContentText:
			if c.Text != "" {
				out = append(out, model.Block{Type: model.BlockText, Text: c.Text})
			}
		case apitype.ContentImage:
			var src apitype.ImageSource
			if err := json.Unmarshal(c.Source, &src); err != nil || src.Type == "" {
				out = append(out, model.Block{Type: model.BlockText, Text: "[an image that could not be read]"})
				continue
			}
			out = append(out, model.Block{Type: model.BlockImage, Image: &src})
		case apitype.ContentDocument:
			var src struct {
				Type apitype.SourceType `json:"type"`
				Data string             `json:"data"`
			}
			_ = json.Unmarshal(c.Source, &src) // an unreadable source is described below
			if pdf := pdfSource(c.Source); pdf != nil {
				out = append(out, model.Block{Type: model.BlockDocument, Document: pdf})
				continue
			}
			title := ""
			if c.Title != nil {
				title = *c.Title
			}
			if src.Type == apitype.SourceText && src.Data != "" {
				out = append(out, model.Block{Type: model.BlockText, Text: fmt.Sprintf("<document title=%q>\n%s\n</document>", title, src.Data)})
				continue
			}
			out = append(out, model.Block{Type: model.BlockText, Text: fmt.Sprintf("[document %q: this server passes only text and base64 PDF documents to the model]", title)})
		case apitype.ContentSearchResult:
			var parts []apitype.ContentBlock
			_ = json.Unmarshal(c.Content, &parts) // a malformed search result contributes no text
			out = append(out, textBlocks(parts)...)
		}
	}
	return out
}

// systemBlocks marks a system.message's text as coming from the operator, not the user: the model port has no
// system turns inside the conversation.
func systemBlocks(blocks []model.Block) []model.Block {
	for i := range blocks {
		if blocks[i].Type == model.BlockText {
			blocks[i].Text = "<system>\n" + blocks[i].Text + "\n</system>"
		}
	}
	return blocks
}

// textBlocks keeps the non-empty text blocks.
func textBlocks(content []apitype.ContentBlock) []model.Block {
	var out []model.Block
	for _, c := range content {
		if c.Type == apitype.ContentText && c.Text != "" {
			out = append(out, model.Block{Type: model.BlockText, Text: c.Text})
		}
	}
	return out
}

// pdfSource is a document's source when it is a base64 PDF, else nil.
func pdfSource(raw json.RawMessage) *apitype.ImageSource {
	var src apitype.ImageSource
	if err := json.Unmarshal(raw, &src); err != nil || src.Type != apitype.SourceBase64 || src.MediaType != "application/pdf" || src.Data == "" {
		return nil
	}
	return &src
}

// resultBlocks converts a tool result's content to the text and image blocks a tool_result may hold.
func resultBlocks(content []apitype.ContentBlock) []model.Block {
	var out []model.Block
	for _, b := range messageBlocks(content) {
		if b.Type == model.BlockText || b.Type == model.BlockImage || b.Type == model.BlockDocument {
			out = append(out, b)
		}
	}
	return out
}

// estimateTokens guesses a request's size in tokens: a character count over four.
func estimateTokens(req *model.Request) int {
	n := len(req.System)
	for _, t := range req.Tools {
		n += len(t.Name) + len(t.Description) + len(t.InputSchema)
	}
	for _, m := range req.Messages {
		n += blocksChars(m.Content)
	}
	return n / 4
}

func blocksChars(blocks []model.Block) int {
	n := 0
	for _, b := range blocks {
		n += 8 + len(b.Text) + len(b.Thinking) + len(b.Signature) + len(b.Data) + len(b.Name) + len(b.Input)
		if b.Image != nil {
			n += 1600 * 4 // roughly what a typical image costs
		}
		n += blocksChars(b.Content)
	}
	return n
}
