package harness

import (
	"strings"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
)

// newRequest is a model request with the session's agent settings.
func (t *thread) newRequest(msgs []model.Message) *model.Request {
	return &model.Request{
		Model:            t.agent.Model.ID,
		System:           t.system(),
		Messages:         msgs,
		Tools:            t.tools.specs,
		MaxTokens:        t.b.cfg.MaxTokens,
		ThinkingBudget:   t.b.cfg.ThinkingBudget,
		CacheBreakpoints: true,
	}
}

// request builds the next model request from the tail. When its estimated size passes CompactAt of the
// context window, or force is set (the model said the prompt is too long), the older part of the conversation
// is compacted first.
func (t *thread) request(force bool) (*model.Request, error) {
	turns, err := transcript(t.tail)
	if err != nil {
		return nil, err
	}
	req := t.newRequest(messages(turns))
	if !force && estimateTokens(req) <= t.compactLimit() {
		return req, nil
	}
	keep := t.compactLimit() / 3
	if force {
		keep = 0 // the estimate was wrong: keep as little as possible verbatim
	}
	compacted, err := t.compact(turns, keep)
	if err != nil || !compacted {
		return req, err
	}
	if turns, err = transcript(t.tail); err != nil {
		return nil, err
	}
	return t.newRequest(messages(turns)), nil
}

func (r *run) compactLimit() int { return int(float64(r.b.cfg.ContextTokens) * r.b.cfg.CompactAt) }

// Compaction prompts.
const (
	summarySystem = "You compact the history of a long-running agent session. Another instance of the agent will " +
		"continue the work with only your summary and the most recent turns, so leave out nothing it needs."
	summaryInstruction = "Summarise the conversation above for the agent that continues it: the user's goals and " +
		"instructions, decisions taken, facts and tool results that still matter (file paths, commands, errors), " +
		"and what remains to be done. Answer with the summary only."
)

// compact summarises the older part of the conversation with the model and appends
// agent.thread_context_compacted with the summary and the last sequence number it covers. The most recent turns
// stay verbatim; a tool call is never separated from its result. The log itself is not rewritten. It reports
// false when there is nothing to compact. The kept turns fit in keepTokens where a valid cut allows it.
func (t *thread) compact(turns []transcriptTurn, keepTokens int) (bool, error) {
	split := compactionSplit(turns, keepTokens)
	if split <= 0 {
		return false, nil
	}
	prefix := messages(turns[:split])
	instruction := model.Block{Type: model.BlockText, Text: summaryInstruction}
	if last := &prefix[len(prefix)-1]; last.Role == "user" {
		last.Content = append(append([]model.Block(nil), last.Content...), instruction)
	} else {
		prefix = append(prefix, model.Message{Role: "user", Content: []model.Block{instruction}})
	}
	req := t.newRequest(prefix)
	req.System, req.ThinkingBudget = summarySystem, 0
	a, err := t.call(req, false, nil)
	if err != nil {
		return false, err
	}
	resp, startID := a.resp, a.startID
	var summary strings.Builder
	for _, b := range resp.Content {
		if b.Type == model.BlockText {
			summary.WriteString(b.Text)
		}
	}
	if strings.TrimSpace(summary.String()) == "" {
		// An empty summary would drop the history: keep the conversation as it is.
		total, usage := t.addUsage(resp)
		_, err := t.append("", total, append([]apitype.NewEvent{spanEnd(startID, false, resp.Usage)}, usage...)...)
		return false, err
	}
	upTo := int64(0)
	for _, turn := range turns[:split] {
		upTo = max(upTo, turn.maxSeq)
	}
	total, usage := t.addUsage(resp)
	evs := append([]apitype.NewEvent{spanEnd(startID, false, resp.Usage)}, usage...)
	_, err = t.append("", total, append(evs,
		mustEvent(apitype.EventAgentContextCompacted, apitype.ContextCompacted{Summary: summary.String(), UpToSeq: upTo}))...)
	if err != nil {
		return false, err
	}
	t.tail.compactTo(summary.String(), upTo)
	return true, nil
}

// compactionSplit picks where to cut the conversation: turns[:i] are summarised, turns[i:] kept verbatim. It
// keeps as much as fits in keepTokens, and at least the last turn. A cut is valid only where no tool_use before
// it has its result after it, and where every event before it precedes every event after it in the log. 0
// means no valid cut.
func compactionSplit(turns []transcriptTurn, keepTokens int) int {
	valid := func(i int) bool {
		if t := turns[i].msg; t.Role == "user" {
			for _, b := range t.Content {
				if b.Type == model.BlockToolResult {
					return false
				}
			}
		}
		var before int64
		for _, t := range turns[:i] {
			before = max(before, t.maxSeq)
		}
		for _, t := range turns[i:] {
			if t.minSeq <= before {
				return false
			}
		}
		return true
	}
	latest := 0
	for i := 1; i < len(turns); i++ {
		if !valid(i) {
			continue
		}
		kept := 0
		for _, t := range turns[i:] {
			kept += blocksChars(t.msg.Content) / 4
		}
		if kept <= keepTokens {
			return i
		}
		latest = i
	}
	return latest
}
