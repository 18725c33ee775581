package anthropic

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/model"
)

// maxCacheBreakpoints is the API's limit of cache_control marks per request.
const maxCacheBreakpoints = 4

// params maps a model.Request to the request's body, and to the parameters the SDK reads besides the body (the
// model, for its warnings and its spans' attributes). The body is written here, as the JSON the SDK would encode
// from its own types (messages.go): the client tools from m.tools, encoded by the SDK once; the server tools and
// the blocks the provider sent as they were given.
func (m *Model) params(req *model.Request) (anthropic.MessageNewParams, []byte, error) {
	p := anthropic.MessageNewParams{
		Model:     anthropic.Model(req.Model),
		MaxTokens: int64(req.MaxTokens),
	}
	if p.MaxTokens <= 0 {
		p.MaxTokens = int64(m.maxTokens)
	}
	if req.ThinkingBudget > 0 {
		p.Thinking = anthropic.ThinkingConfigParamUnion{OfEnabled: &anthropic.ThinkingConfigEnabledParam{
			BudgetTokens: int64(req.ThinkingBudget),
		}}
		// The API requires max_tokens > budget_tokens: the budget comes out of max_tokens.
		if p.MaxTokens <= int64(req.ThinkingBudget) {
			p.MaxTokens = int64(req.ThinkingBudget) + int64(m.maxTokens)
		}
	}
	body := make([]byte, 0, 512+len(req.System)+messagesSize(req.Messages))
	body = strconv.AppendInt(append(body, `{"max_tokens":`...), p.MaxTokens, 10)
	if req.Model != "" { // the SDK leaves an empty model out
		body = appendString(append(body, `,"model":`...), req.Model)
	}
	if req.ThinkingBudget > 0 {
		body = strconv.AppendInt(append(body, `,"thinking":{"budget_tokens":`...), int64(req.ThinkingBudget), 10)
		body = append(body, `,"type":"enabled"}`...)
	}
	marks := 0
	if req.System != "" {
		body = append(body, `,"system":[{`...)
		if req.CacheBreakpoints {
			body = append(body, cacheControl...)
			marks++
		}
		body = append(appendField(body, "text", req.System), `"type":"text"}]`...)
	}
	if len(req.Tools) > 0 {
		var err error
		var marked bool
		body = append(body, `,"tools":`...)
		if body, marked, err = m.appendTools(body, req.Tools, req.CacheBreakpoints); err != nil {
			return p, nil, err
		}
		if marked {
			marks++
		}
	}
	if len(req.Messages) > 0 {
		c := noMarks
		if req.CacheBreakpoints {
			c = messageMarks(req.Messages, marks)
		}
		var err error
		body = append(body, `,"messages":`...)
		if body, err = appendMessages(body, req.Messages, c); err != nil {
			return p, nil, err
		}
	}
	return p, append(body, '}'), nil
}

func isClientTool(t model.ToolSpec) bool { return len(t.Server) == 0 }

// appendTools appends the request's tools: the server tools first, as given, then the client tools as the SDK
// encodes them (m.tools), the last one with the tools' cache mark when mark is set; marked says whether a tool
// carries it.
func (m *Model) appendTools(dst []byte, tools []model.ToolSpec, mark bool) (_ []byte, marked bool, err error) {
	dst = append(dst, '[')
	first := true
	for _, t := range tools {
		if isClientTool(t) {
			continue
		}
		if !json.Valid(t.Server) {
			return dst, false, fmt.Errorf("server tool %s: invalid definition", t.Name)
		}
		if !first {
			dst = append(dst, ',')
		}
		dst, first = append(dst, t.Server...), false
	}
	lastClient := -1
	for i, t := range tools {
		if isClientTool(t) {
			lastClient = i
		}
	}
	var key []byte
	for i, t := range tools {
		if !isClientTool(t) {
			continue
		}
		key = appendToolKey(key[:0], t)
		enc, err := m.tools.get(key, t)
		if err != nil {
			return dst, false, err
		}
		raw := enc.plain
		if mark && i == lastClient {
			raw, marked = enc.marked, true
		}
		if !first {
			dst = append(dst, ',')
		}
		dst, first = append(dst, raw...), false
	}
	return append(dst, ']'), marked, nil
}

// toolParam maps a tool spec; the input schema is sent as given.
func toolParam(t model.ToolSpec) (*anthropic.ToolParam, error) {
	schema := anthropic.ToolInputSchemaParam{}
	if len(t.InputSchema) > 0 {
		var fields map[string]any
		if err := json.Unmarshal(t.InputSchema, &fields); err != nil {
			return nil, fmt.Errorf("tool %s: input schema: %w", t.Name, err)
		}
		schema.Properties = fields["properties"]
		delete(fields, "properties")
		if req, ok := fields["required"].([]any); ok {
			for _, r := range req {
				if s, ok := r.(string); ok {
					schema.Required = append(schema.Required, s)
				}
			}
			delete(fields, "required")
		}
		delete(fields, "type")
		if len(fields) > 0 {
			schema.ExtraFields = fields
		}
	}
	tool := &anthropic.ToolParam{Name: t.Name, InputSchema: schema}
	if t.Description != "" {
		tool.Description = anthropic.String(t.Description)
	}
	return tool, nil
}
