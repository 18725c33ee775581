package anthropic

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
)

// maxCacheBreakpoints is the API's limit of cache_control marks per request.
const maxCacheBreakpoints = 4

// params maps a model.Request to the SDK's request parameters.
func (m *Model) params(req *model.Request) (anthropic.MessageNewParams, error) {
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
	if req.System != "" {
		p.System = []anthropic.TextBlockParam{{Text: req.System}}
	}
	// Server tools go first: the last tool, a client tool, carries the tools' cache mark (markCache).
	for _, t := range req.Tools {
		if len(t.Server) > 0 {
			if !json.Valid(t.Server) {
				return p, fmt.Errorf("server tool %s: invalid definition", t.Name)
			}
			p.Tools = append(p.Tools, param.Override[anthropic.ToolUnionParam](t.Server))
		}
	}
	for _, t := range req.Tools {
		if len(t.Server) > 0 {
			continue
		}
		tool, err := toolParam(t)
		if err != nil {
			return p, err
		}
		p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfTool: tool})
	}
	for i, msg := range req.Messages {
		blocks := make([]anthropic.ContentBlockParamUnion, 0, len(msg.Content))
		for j, b := range msg.Content {
			block, err := contentBlock(b)
			if err != nil {
				return p, fmt.Errorf("message %d block %d: %w", i, j, err)
			}
			blocks = append(blocks, block)
		}
		switch msg.Role {
		case "user":
			p.Messages = append(p.Messages, anthropic.NewUserMessage(blocks...))
		case "assistant":
			p.Messages = append(p.Messages, anthropic.NewAssistantMessage(blocks...))
		default:
			return p, fmt.Errorf("message %d: unknown role %q", i, msg.Role)
		}
	}
	if req.CacheBreakpoints {
		markCache(&p)
	}
	return p, nil
}

// markCache puts cache_control marks on the stable prefix: the last tool, the system prompt, the end of the
// conversation, and the end of the previous user turn (where the previous request put its last mark, so that
// this request reads what that one wrote even when many blocks were added since). The marks move with the
// conversation; there are never more than maxCacheBreakpoints.
func markCache(p *anthropic.MessageNewParams) {
	marks := 0
	if n := len(p.Tools); n > 0 && p.Tools[n-1].OfTool != nil {
		p.Tools[n-1].OfTool.CacheControl = anthropic.NewCacheControlEphemeralParam()
		marks++
	}
	if n := len(p.System); n > 0 {
		p.System[n-1].CacheControl = anthropic.NewCacheControlEphemeralParam()
		marks++
	}
	n := len(p.Messages)
	if n == 0 {
		return
	}
	if markLast(messageBlocks(p.Messages[n-1])) {
		marks++
	}
	for i := n - 2; i >= 0 && marks < maxCacheBreakpoints; i-- {
		if p.Messages[i].OfUser != nil {
			markLast(p.Messages[i].OfUser.Content)
			break
		}
	}
}

// messageBlocks returns the content of a user or assistant message.
func messageBlocks(m anthropic.MessageParam) []anthropic.ContentBlockParamUnion {
	switch {
	case m.OfUser != nil:
		return m.OfUser.Content
	case m.OfAssistant != nil:
		return m.OfAssistant.Content
	}
	return nil
}

// markLast marks the last block of blocks that can carry cache_control (thinking blocks cannot).
func markLast(blocks []anthropic.ContentBlockParamUnion) bool {
	for i := len(blocks) - 1; i >= 0; i-- {
		cc := anthropic.NewCacheControlEphemeralParam()
		b := &blocks[i]
		switch {
		case b.OfText != nil:
			b.OfText.CacheControl = cc
		case b.OfImage != nil:
			b.OfImage.CacheControl = cc
		case b.OfToolUse != nil:
			b.OfToolUse.CacheControl = cc
		case b.OfToolResult != nil:
			b.OfToolResult.CacheControl = cc
		default:
			continue
		}
		return true
	}
	return false
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

// contentBlock maps one block, passing it through unchanged.
func contentBlock(b model.Block) (anthropic.ContentBlockParamUnion, error) {
	switch b.Type {
	case model.BlockText:
		return anthropic.NewTextBlock(b.Text), nil
	case model.BlockImage:
		img, err := imageBlock(b)
		if err != nil {
			return anthropic.ContentBlockParamUnion{}, err
		}
		return anthropic.ContentBlockParamUnion{OfImage: img}, nil
	case model.BlockDocument:
		doc, err := documentBlock(b)
		if err != nil {
			return anthropic.ContentBlockParamUnion{}, err
		}
		return anthropic.ContentBlockParamUnion{OfDocument: doc}, nil
	case model.BlockThinking:
		return anthropic.NewThinkingBlock(b.Signature, b.Thinking), nil
	case model.BlockRedactedThinking:
		return anthropic.NewRedactedThinkingBlock(b.Data), nil
	case model.BlockToolUse:
		input := b.Input
		if len(input) == 0 {
			input = json.RawMessage("{}")
		}
		if !json.Valid(input) {
			return anthropic.ContentBlockParamUnion{}, fmt.Errorf("tool_use %s: invalid input JSON", b.ID)
		}
		return anthropic.NewToolUseBlock(b.ID, input, b.Name), nil
	case model.BlockServerToolUse, model.BlockWebSearchToolResult:
		if !json.Valid(b.Raw) {
			return anthropic.ContentBlockParamUnion{}, fmt.Errorf("%s block: invalid JSON", b.Type)
		}
		return param.Override[anthropic.ContentBlockParamUnion](b.Raw), nil
	case model.BlockToolResult:
		res := &anthropic.ToolResultBlockParam{ToolUseID: b.ToolUseID}
		if b.IsError {
			res.IsError = anthropic.Bool(true)
		}
		for _, c := range b.Content {
			switch c.Type {
			case model.BlockText:
				res.Content = append(res.Content, anthropic.ToolResultBlockParamContentUnion{OfText: &anthropic.TextBlockParam{Text: c.Text}})
			case model.BlockImage:
				img, err := imageBlock(c)
				if err != nil {
					return anthropic.ContentBlockParamUnion{}, fmt.Errorf("tool_result %s: %w", b.ToolUseID, err)
				}
				res.Content = append(res.Content, anthropic.ToolResultBlockParamContentUnion{OfImage: img})
			case model.BlockDocument:
				doc, err := documentBlock(c)
				if err != nil {
					return anthropic.ContentBlockParamUnion{}, fmt.Errorf("tool_result %s: %w", b.ToolUseID, err)
				}
				res.Content = append(res.Content, anthropic.ToolResultBlockParamContentUnion{OfDocument: doc})
			default:
				return anthropic.ContentBlockParamUnion{}, fmt.Errorf("tool_result %s: unsupported content block %q", b.ToolUseID, c.Type)
			}
		}
		return anthropic.ContentBlockParamUnion{OfToolResult: res}, nil
	default:
		return anthropic.ContentBlockParamUnion{}, fmt.Errorf("unsupported block type %q", b.Type)
	}
}

// documentBlock maps a document block: a base64 PDF.
func documentBlock(b model.Block) (*anthropic.DocumentBlockParam, error) {
	src := b.Document
	if src == nil || src.Type != apitype.SourceBase64 || src.MediaType != "application/pdf" {
		return nil, errors.New("document block without a base64 PDF source")
	}
	return &anthropic.DocumentBlockParam{Source: anthropic.DocumentBlockParamSourceUnion{
		OfBase64: &anthropic.Base64PDFSourceParam{Data: src.Data}}}, nil
}

// imageBlock maps an image block's source.
func imageBlock(b model.Block) (*anthropic.ImageBlockParam, error) {
	src := b.Image
	if src == nil {
		return nil, errors.New("image block without a source")
	}
	img := &anthropic.ImageBlockParam{}
	switch src.Type {
	case apitype.SourceBase64:
		img.Source.OfBase64 = &anthropic.Base64ImageSourceParam{Data: src.Data, MediaType: anthropic.Base64ImageSourceMediaType(src.MediaType)}
	case apitype.SourceURL:
		img.Source.OfURL = &anthropic.URLImageSourceParam{URL: src.URL}
	case apitype.SourceFile:
		img.Source.OfFile = &anthropic.FileImageSourceParam{FileID: src.FileID}
	default:
		return nil, fmt.Errorf("unsupported image source %q", src.Type)
	}
	return img, nil
}
