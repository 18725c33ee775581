package openai

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
)

// params maps a model.Request to chat completion parameters (see the package doc).
func (m *Model) params(req *model.Request) (openai.ChatCompletionNewParams, error) {
	p := openai.ChatCompletionNewParams{
		Model:         shared.ChatModel(req.Model),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	if req.MaxTokens > 0 {
		if m.legacy {
			p.MaxTokens = openai.Int(int64(req.MaxTokens))
		} else {
			p.MaxCompletionTokens = openai.Int(int64(req.MaxTokens))
		}
	}
	if req.System != "" {
		p.Messages = append(p.Messages, openai.SystemMessage(req.System))
	}
	for i, msg := range req.Messages {
		var (
			msgs []openai.ChatCompletionMessageParamUnion
			err  error
		)
		switch msg.Role {
		case "user":
			msgs, err = userMessages(msg.Content)
		case "assistant":
			msgs, err = assistantMessage(msg.Content)
		default:
			err = fmt.Errorf("unknown role %q", msg.Role)
		}
		if err != nil {
			return p, fmt.Errorf("message %d: %w", i, err)
		}
		p.Messages = append(p.Messages, msgs...)
	}
	for _, t := range req.Tools {
		if len(t.Server) > 0 {
			continue // a provider's own server tool: chat completions have none
		}
		params := shared.FunctionParameters{"type": "object", "properties": map[string]any{}}
		if len(t.InputSchema) > 0 {
			params = nil
			if err := json.Unmarshal(t.InputSchema, &params); err != nil {
				return p, fmt.Errorf("tool %s: input schema: %w", t.Name, err)
			}
		}
		fn := shared.FunctionDefinitionParam{Name: t.Name, Parameters: params}
		if t.Description != "" {
			fn.Description = openai.String(t.Description)
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(fn))
	}
	return p, nil
}

// userMessages maps a user turn: a tool message per tool_result, then a user message with the other blocks.
func userMessages(blocks []model.Block) ([]openai.ChatCompletionMessageParamUnion, error) {
	var (
		msgs  []openai.ChatCompletionMessageParamUnion
		parts []openai.ChatCompletionContentPartUnionParam
	)
	for _, b := range blocks {
		switch b.Type {
		case model.BlockText:
			parts = append(parts, openai.TextContentPart(b.Text))
		case model.BlockImage:
			parts = append(parts, imagePart(b))
		case model.BlockDocument:
			parts = append(parts, openai.TextContentPart(documentOmitted))
		case model.BlockToolResult:
			msgs = append(msgs, openai.ToolMessage(toolResultText(b), b.ToolUseID))
		case model.BlockThinking, model.BlockRedactedThinking:
		default:
			return nil, fmt.Errorf("unsupported user block type %q", b.Type)
		}
	}
	if len(parts) > 0 {
		msgs = append(msgs, openai.UserMessage(parts))
	}
	return msgs, nil
}

// documentOmitted stands for a PDF document: chat completions take none.
const documentOmitted = "[PDF document omitted: this model API takes no PDF documents]"

// imagePart maps an image block to an image_url part, or to a text note when the image has no URL form.
func imagePart(b model.Block) openai.ChatCompletionContentPartUnionParam {
	src := b.Image
	switch {
	case src != nil && src.Type == apitype.SourceBase64:
		return openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{
			URL: "data:" + src.MediaType + ";base64," + src.Data,
		})
	case src != nil && src.Type == apitype.SourceURL:
		return openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: src.URL})
	default:
		return openai.TextContentPart("[image omitted]")
	}
}

// toolResultText joins a tool result's text blocks, noting images.
func toolResultText(b model.Block) string {
	var lines []string
	for _, c := range b.Content {
		switch c.Type {
		case model.BlockText:
			lines = append(lines, c.Text)
		case model.BlockImage:
			lines = append(lines, "[image omitted]")
		case model.BlockDocument:
			lines = append(lines, documentOmitted)
		}
	}
	text := strings.Join(lines, "\n")
	if b.IsError {
		text = "Error: " + text
	}
	return text
}

// assistantMessage maps an assistant turn to one message with text content and tool calls.
func assistantMessage(blocks []model.Block) ([]openai.ChatCompletionMessageParamUnion, error) {
	var (
		text  []string
		calls []openai.ChatCompletionMessageToolCallUnionParam
	)
	for _, b := range blocks {
		switch b.Type {
		case model.BlockText:
			text = append(text, b.Text)
		case model.BlockToolUse:
			args := string(b.Input)
			if strings.TrimSpace(args) == "" {
				args = "{}"
			}
			calls = append(calls, openai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID:       b.ID,
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: b.Name, Arguments: args},
				},
			})
		case model.BlockThinking, model.BlockRedactedThinking, model.BlockServerToolUse, model.BlockWebSearchToolResult:
			// Another provider's: chat completions have no place for them.
		default:
			return nil, fmt.Errorf("unsupported assistant block type %q", b.Type)
		}
	}
	if len(text) == 0 && len(calls) == 0 {
		return nil, nil
	}
	msg := openai.ChatCompletionAssistantMessageParam{ToolCalls: calls}
	if len(text) > 0 {
		msg.Content.OfString = openai.String(strings.Join(text, ""))
	}
	return []openai.ChatCompletionMessageParamUnion{{OfAssistant: &msg}}, nil
}
