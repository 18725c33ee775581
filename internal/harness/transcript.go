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
// events as content blocks, consecutive same-role turns merged and tool results first in their user turn.
//
// A client message is placed where a model call picked it up: after everything the log holds before the first
// model request that started once it was processed. A message sent while a tool ran thus follows the tool's
// result, as the model saw it. Unprocessed messages go last: the call being built picks them up. A turn the user
// interrupted ends with an assistant note (interruptedNote).
func transcript(t *tail) ([]transcriptTurn, error) {
	var (
		turns   []transcriptTurn
		pending []apitype.Event // processed client messages waiting for the model request that picked them up
		useIDs  = map[string]string{}
		answers = map[string]bool{}
	)
	add := func(role string, seq int64, blocks ...model.Block) {
		if len(blocks) == 0 {
			return
		}
		if n := len(turns); n > 0 && turns[n-1].msg.Role == role {
			last := &turns[n-1]
			last.msg.Content = append(last.msg.Content, blocks...)
			last.minSeq, last.maxSeq = min(last.minSeq, seq), max(last.maxSeq, seq)
			return
		}
		turns = append(turns, transcriptTurn{msg: model.Message{Role: role, Content: blocks}, minSeq: seq, maxSeq: seq})
	}
	// use adds a tool call under the id the model gave it (or its event's id) and the name the model called.
	use := func(e apitype.Event, modelID, name string, input json.RawMessage) {
		id := cmp.Or(modelID, e.ID)
		useIDs[e.ID] = id
		if len(input) == 0 || string(input) == "null" {
			input = json.RawMessage("{}")
		}
		add("assistant", e.Seq, model.Block{Type: model.BlockToolUse, ID: id, Name: name, Input: input})
	}
	result := func(seq int64, useID string, content []apitype.ContentBlock, isErr bool) {
		id, ok := useIDs[useID]
		if !ok || answers[useID] {
			return // a result for a call the transcript does not hold, or a second one: the model must not see it
		}
		answers[useID] = true
		add("user", seq, model.Block{Type: model.BlockToolResult, ToolUseID: id, IsError: isErr, Content: resultBlocks(content)})
	}
	flush := func(all bool) error {
		keep := pending[:0]
		for _, e := range pending {
			if !all && e.ProcessedAt == nil {
				keep = append(keep, e)
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
			add("user", e.Seq, blocks...)
		}
		pending = keep
		return nil
	}
	if t.summary != "" {
		add("user", t.upToSeq, model.Block{Type: model.BlockText, Text: summaryPreamble + t.summary})
	}
	// A turn the user interrupted ends with an assistant note saying so, after whatever the model said before
	// it: the model learns that its answer was cut short, and the user's next message does not merge with the
	// interrupted one.
	turnRunning := t.priorStatus == apitype.EventSessionStatusRunning || t.priorStatus == apitype.EventSessionStatusRescheduled
	interrupted := false
	for _, e := range t.events {
		switch e.Type {
		case apitype.EventSessionStatusRunning, apitype.EventSessionStatusRescheduled:
			turnRunning = true
		case apitype.EventSessionStatusIdle, apitype.EventSessionStatusTerminated:
			if interrupted {
				add("assistant", e.Seq, model.Block{Type: model.BlockText, Text: interruptedNote})
			}
			turnRunning, interrupted = false, false
		case apitype.EventUserInterrupt:
			interrupted = interrupted || turnRunning
		case apitype.EventUserMessage, apitype.EventSystemMessage:
			pending = append(pending, e)
		case apitype.EventSpanModelRequestStart:
			if err := flush(false); err != nil {
				return nil, err
			}
		case apitype.EventAgentThinking:
			var th apitype.AgentThinking
			if err := e.DecodeData(&th); err != nil {
				return nil, err
			}
			switch {
			case th.Redacted != "":
				add("assistant", e.Seq, model.Block{Type: model.BlockRedactedThinking, Data: th.Redacted})
			case th.Thinking != "" || th.Signature != "":
				add("assistant", e.Seq, model.Block{Type: model.BlockThinking, Thinking: th.Thinking, Signature: th.Signature})
			}
		case apitype.EventAgentMessage:
			var m apitype.AgentMessage
			if err := e.DecodeData(&m); err != nil {
				return nil, err
			}
			add("assistant", e.Seq, textBlocks(m.Content)...)
		case apitype.EventAgentToolUse, apitype.EventAgentCustomToolUse:
			var u apitype.AgentToolUse
			if err := e.DecodeData(&u); err != nil {
				return nil, err
			}
			use(e, u.ModelToolUseID, u.Name, u.Input)
		case apitype.EventAgentMCPToolUse:
			var u apitype.AgentMCPToolUse
			if err := e.DecodeData(&u); err != nil {
				return nil, err
			}
			use(e, u.ModelToolUseID, cmp.Or(u.ModelToolName, u.Name), u.Input)
		case apitype.EventAgentMCPToolResult:
			var r apitype.AgentMCPToolResult
			if err := e.DecodeData(&r); err != nil {
				return nil, err
			}
			result(e.Seq, r.MCPToolUseID, r.Content, r.IsError)
		case apitype.EventAgentToolResult:
			var r apitype.AgentToolResult
			if err := e.DecodeData(&r); err != nil {
				return nil, err
			}
			result(e.Seq, r.ToolUseID, r.Content, r.IsError)
		case apitype.EventUserCustomToolResult:
			var r apitype.UserCustomToolResult
			if err := e.DecodeData(&r); err != nil {
				return nil, err
			}
			result(e.Seq, r.CustomToolUseID, r.Content, r.IsError)
		case apitype.EventUserToolResult:
			var r apitype.UserToolResult
			if err := e.DecodeData(&r); err != nil {
				return nil, err
			}
			result(e.Seq, r.ToolUseID, r.Content, r.IsError)
		}
	}
	if err := flush(true); err != nil {
		return nil, err
	}
	for i := range turns {
		if turns[i].msg.Role == "user" {
			// The Messages API wants a user turn's tool results before anything else in it.
			slices.SortStableFunc(turns[i].msg.Content, func(a, b model.Block) int {
				return boolRank(a.Type != model.BlockToolResult) - boolRank(b.Type != model.BlockToolResult)
			})
		}
	}
	return turns, nil
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
		case "text":
			if c.Text != "" {
				out = append(out, model.Block{Type: model.BlockText, Text: c.Text})
			}
		case "image":
			var src apitype.ImageSource
			if err := json.Unmarshal(c.Source, &src); err != nil || src.Type == "" {
				out = append(out, model.Block{Type: model.BlockText, Text: "[an image that could not be read]"})
				continue
			}
			out = append(out, model.Block{Type: model.BlockImage, Image: &src})
		case "document":
			var src struct {
				Type string `json:"type"`
				Data string `json:"data"`
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
			if src.Type == "text" && src.Data != "" {
				out = append(out, model.Block{Type: model.BlockText, Text: fmt.Sprintf("<document title=%q>\n%s\n</document>", title, src.Data)})
				continue
			}
			out = append(out, model.Block{Type: model.BlockText, Text: fmt.Sprintf("[document %q: this server passes only text and base64 PDF documents to the model]", title)})
		case "search_result":
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
		if c.Type == "text" && c.Text != "" {
			out = append(out, model.Block{Type: model.BlockText, Text: c.Text})
		}
	}
	return out
}

// pdfSource is a document's source when it is a base64 PDF, else nil.
func pdfSource(raw json.RawMessage) *apitype.ImageSource {
	var src apitype.ImageSource
	if err := json.Unmarshal(raw, &src); err != nil || src.Type != "base64" || src.MediaType != "application/pdf" || src.Data == "" {
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
