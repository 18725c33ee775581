package fakemodel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Request is one request the server received, decoded for assertions. Messages API requests fill the
// Anthropic fields; chat completions requests fill ChatMessages instead of Messages.
type Request struct {
	Path   string      // /v1/messages or /v1/chat/completions
	Header http.Header // as received, including x-api-key and authorization
	Body   []byte      // the raw JSON body

	Model     string
	Stream    bool
	MaxTokens int
	// System is the system prompt: the text of every system block (or system message), joined.
	System       string
	SystemBlocks []Block // Messages API system blocks, with their cache_control marks
	Messages     []Message
	Tools        []Tool
	Thinking     *Thinking

	ChatMessages []ChatMessage // chat completions messages
	IncludeUsage bool          // chat completions stream_options.include_usage
}

// Message is one Messages API message; string content is decoded as one text block.
type Message struct {
	Role    string  `json:"role"`
	Content []Block `json:"-"`
}

// Block is one Messages API content block, any type.
type Block struct {
	Type         string          `json:"type"`
	Text         string          `json:"text,omitempty"`
	Source       json.RawMessage `json:"source,omitempty"`
	Thinking     string          `json:"thinking,omitempty"`
	Signature    string          `json:"signature,omitempty"`
	Data         string          `json:"data,omitempty"`
	ID           string          `json:"id,omitempty"`
	Name         string          `json:"name,omitempty"`
	Input        json.RawMessage `json:"input,omitempty"`
	ToolUseID    string          `json:"tool_use_id,omitempty"`
	IsError      bool            `json:"is_error,omitempty"`
	Content      []Block         `json:"-"` // tool_result; string content is decoded as one text block
	CacheControl *CacheControl   `json:"cache_control,omitempty"`
	// Raw is the block as received (server_tool_use and web_search_tool_result are checked by it).
	Raw json.RawMessage `json:"-"`
}

// Tool is a tool definition: a Messages API tool, or a chat completions function tool (its parameters in
// InputSchema).
type Tool struct {
	// Type is a server tool's type ("web_search_20250305"); "" for a client tool.
	Type         string          `json:"type,omitempty"`
	Name         string          `json:"name"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"input_schema,omitempty"`
	CacheControl *CacheControl   `json:"cache_control,omitempty"`
}

// Thinking is the Messages API thinking parameter.
type Thinking struct {
	Type         string `json:"type"`
	BudgetTokens int    `json:"budget_tokens,omitempty"`
}

// CacheControl is a prompt-caching mark.
type CacheControl struct {
	Type string `json:"type"`
	TTL  string `json:"ttl,omitempty"`
}

// ChatMessage is one chat completions message. Content holds the text (parts joined); Parts keeps array
// content as sent.
type ChatMessage struct {
	Role       string            `json:"role"`
	Content    string            `json:"-"`
	Parts      []json.RawMessage `json:"-"`
	ToolCalls  []ChatToolCall    `json:"tool_calls,omitempty"`
	ToolCallID string            `json:"tool_call_id,omitempty"`
	Name       string            `json:"name,omitempty"`
}

// ChatToolCall is a tool call of an assistant chat message.
type ChatToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// CacheMarks counts the cache_control marks in the request: on tools, system blocks and message blocks.
func (r *Request) CacheMarks() int {
	n := 0
	for _, t := range r.Tools {
		if t.CacheControl != nil {
			n++
		}
	}
	for _, b := range r.SystemBlocks {
		if b.CacheControl != nil {
			n++
		}
	}
	for _, m := range r.Messages {
		for _, b := range m.Content {
			if b.CacheControl != nil {
				n++
			}
		}
	}
	return n
}

// LastUserText returns the text of the last user message (Messages API or chat completions), for Match.
func (r *Request) LastUserText() string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role != "user" {
			continue
		}
		var sb strings.Builder
		for _, b := range r.Messages[i].Content {
			sb.WriteString(b.Text)
		}
		return sb.String()
	}
	for i := len(r.ChatMessages) - 1; i >= 0; i-- {
		if r.ChatMessages[i].Role == "user" {
			return r.ChatMessages[i].Content
		}
	}
	return ""
}

// UnmarshalJSON accepts string or array content.
func (m *Message) UnmarshalJSON(data []byte) error {
	var raw struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	m.Role = raw.Role
	content, err := decodeBlocks(raw.Content)
	if err != nil {
		return fmt.Errorf("message content: %w", err)
	}
	m.Content = content
	return nil
}

// UnmarshalJSON decodes a block, accepting string or array tool_result content.
func (b *Block) UnmarshalJSON(data []byte) error {
	type plain Block
	var raw struct {
		plain
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	*b = Block(raw.plain)
	b.Raw = append(json.RawMessage(nil), data...)
	if b.Type == "web_search_tool_result" {
		return nil // its content is search results or an error object, kept in Raw
	}
	content, err := decodeBlocks(raw.Content)
	if err != nil {
		return fmt.Errorf("%s block content: %w", b.Type, err)
	}
	b.Content = content
	return nil
}

// decodeBlocks decodes content that is either a string (one text block) or an array of blocks.
func decodeBlocks(data json.RawMessage) ([]Block, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || bytes.Equal(data, []byte("null")) {
		return nil, nil
	}
	if data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return nil, err
		}
		return []Block{{Type: "text", Text: s}}, nil
	}
	var blocks []Block
	if err := json.Unmarshal(data, &blocks); err != nil {
		return nil, err
	}
	return blocks, nil
}

// UnmarshalJSON accepts string or array content.
func (m *ChatMessage) UnmarshalJSON(data []byte) error {
	type plain ChatMessage
	var raw struct {
		plain
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	*m = ChatMessage(raw.plain)
	content := bytes.TrimSpace(raw.Content)
	switch {
	case len(content) == 0 || bytes.Equal(content, []byte("null")):
	case content[0] == '"':
		return json.Unmarshal(content, &m.Content)
	default:
		if err := json.Unmarshal(content, &m.Parts); err != nil {
			return fmt.Errorf("chat message content: %w", err)
		}
		var sb strings.Builder
		for _, p := range m.Parts {
			var part struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}
			if json.Unmarshal(p, &part) == nil && part.Type == "text" {
				sb.WriteString(part.Text)
			}
		}
		m.Content = sb.String()
	}
	return nil
}

// decodeMessagesRequest decodes a Messages API request body.
func decodeMessagesRequest(body []byte, r *Request) error {
	var raw struct {
		Model     string          `json:"model"`
		Stream    bool            `json:"stream"`
		MaxTokens int             `json:"max_tokens"`
		System    json.RawMessage `json:"system"`
		Messages  []Message       `json:"messages"`
		Tools     []Tool          `json:"tools"`
		Thinking  *Thinking       `json:"thinking"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return err
	}
	system, err := decodeBlocks(raw.System)
	if err != nil {
		return fmt.Errorf("system: %w", err)
	}
	var sb strings.Builder
	for _, b := range system {
		sb.WriteString(b.Text)
	}
	r.Model, r.Stream, r.MaxTokens = raw.Model, raw.Stream, raw.MaxTokens
	r.System, r.SystemBlocks = sb.String(), system
	r.Messages, r.Tools, r.Thinking = raw.Messages, raw.Tools, raw.Thinking
	return nil
}

// decodeChatRequest decodes a chat completions request body.
func decodeChatRequest(body []byte, r *Request) error {
	var raw struct {
		Model               string        `json:"model"`
		Stream              bool          `json:"stream"`
		MaxTokens           int           `json:"max_tokens"`
		MaxCompletionTokens int           `json:"max_completion_tokens"`
		Messages            []ChatMessage `json:"messages"`
		Tools               []struct {
			Function struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return err
	}
	r.Model, r.Stream = raw.Model, raw.Stream
	r.MaxTokens = max(raw.MaxTokens, raw.MaxCompletionTokens)
	r.ChatMessages, r.IncludeUsage = raw.Messages, raw.StreamOptions.IncludeUsage
	var system []string
	for _, m := range raw.Messages {
		if m.Role == "system" || m.Role == "developer" {
			system = append(system, m.Content)
		}
	}
	r.System = strings.Join(system, "\n")
	for _, t := range raw.Tools {
		r.Tools = append(r.Tools, Tool{Name: t.Function.Name, Description: t.Function.Description, InputSchema: t.Function.Parameters})
	}
	return nil
}
