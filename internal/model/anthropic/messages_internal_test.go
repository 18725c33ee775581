package anthropic

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
)

// The reference for the request params builds: the SDK's own types, built from the request as the adapter built
// them before it encoded the messages itself, and encoded by the SDK.

// sdkRequest is the request for req as the SDK encodes it (m's default max_tokens).
func sdkRequest(m *Model, req *model.Request) ([]byte, error) {
	p := anthropic.MessageNewParams{Model: anthropic.Model(req.Model), MaxTokens: int64(req.MaxTokens)}
	if p.MaxTokens <= 0 {
		p.MaxTokens = int64(m.maxTokens)
	}
	if req.ThinkingBudget > 0 {
		p.Thinking = anthropic.ThinkingConfigParamUnion{OfEnabled: &anthropic.ThinkingConfigEnabledParam{BudgetTokens: int64(req.ThinkingBudget)}}
		if p.MaxTokens <= int64(req.ThinkingBudget) {
			p.MaxTokens = int64(req.ThinkingBudget) + int64(m.maxTokens)
		}
	}
	if req.System != "" {
		p.System = []anthropic.TextBlockParam{{Text: req.System}}
	}
	for _, t := range req.Tools {
		if len(t.Server) > 0 {
			p.Tools = append(p.Tools, param.Override[anthropic.ToolUnionParam](t.Server))
		}
	}
	marks := 0
	for _, t := range req.Tools {
		if len(t.Server) > 0 {
			continue
		}
		tool, err := toolParam(t)
		if err != nil {
			return nil, err
		}
		p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfTool: tool})
	}
	if n := len(p.Tools); req.CacheBreakpoints && n > 0 && p.Tools[n-1].OfTool != nil {
		p.Tools[n-1].OfTool.CacheControl = anthropic.NewCacheControlEphemeralParam()
		marks++
	}
	for i, msg := range req.Messages {
		blocks := make([]anthropic.ContentBlockParamUnion, 0, len(msg.Content))
		for j, b := range msg.Content {
			block, err := contentBlock(b)
			if err != nil {
				return nil, fmt.Errorf("message %d block %d: %w", i, j, err)
			}
			blocks = append(blocks, block)
		}
		switch msg.Role {
		case "user":
			p.Messages = append(p.Messages, anthropic.NewUserMessage(blocks...))
		case "assistant":
			p.Messages = append(p.Messages, anthropic.NewAssistantMessage(blocks...))
		default:
			return nil, fmt.Errorf("message %d: unknown role %q", i, msg.Role)
		}
	}
	if req.CacheBreakpoints {
		markCache(&p, marks)
	}
	return p.MarshalJSON()
}

// markCache puts cache_control marks on the stable prefix after the tools' (the last tool's, which params puts
// there and counts in marks): the system prompt, the end of the conversation, and the end of the previous user
// turn (where the previous request put its last mark, so that this request reads what that one wrote even when
// many blocks were added since). The marks move with the conversation; there are never more than
// maxCacheBreakpoints.
func markCache(p *anthropic.MessageNewParams, marks int) {
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

// sentBody is the body params builds for req.
func sentBody(t testing.TB, m *Model, req *model.Request) ([]byte, error) {
	t.Helper()
	_, body, err := m.params(req)
	return body, err
}

func text(s string) model.Block { return model.Block{Type: model.BlockText, Text: s} }

func user(blocks ...model.Block) model.Message { return model.Message{Role: "user", Content: blocks} }

func assistant(blocks ...model.Block) model.Message {
	return model.Message{Role: "assistant", Content: blocks}
}

// TestMessagesAsTheSDKEncodes: the request params builds, its messages encoded by the adapter, is the request the
// SDK encodes from its own types (sdkRequest), as a JSON value: every block type and source, tool results with
// every content type and error flag, strings that need escaping, and the cache marks wherever the conversation
// puts them.
func TestMessagesAsTheSDKEncodes(t *testing.T) {
	png := &apitype.ImageSource{Type: apitype.SourceBase64, MediaType: "image/png", Data: "iVBORw0KGgo="}
	url := &apitype.ImageSource{Type: apitype.SourceURL, URL: "https://example.com/a.png?x=<1>&y=2"}
	file := &apitype.ImageSource{Type: apitype.SourceFile, FileID: "file_011CabcdefABCDEFabcdefABCD"}
	pdf := &apitype.ImageSource{Type: apitype.SourceBase64, MediaType: "application/pdf", Data: "JVBERi0xLjQK"}
	search := json.RawMessage(`{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"go"}}`)
	results := json.RawMessage(`{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[]}`)
	thinking := model.Block{Type: model.BlockThinking, Thinking: "Let me think <about> it & more.", Signature: "sig=="}
	toolUse := model.Block{Type: model.BlockToolUse, ID: "toolu_1", Name: "bash", Input: json.RawMessage("{\n  \"command\": \"ls\"\n}")}
	toolResult := model.Block{Type: model.BlockToolResult, ToolUseID: "toolu_1", Content: []model.Block{text("a\tb\n")}}
	odd := "quote \" backslash \\ nul \x00 bell \x07 del \x7f html <b>&amp;</b> line\u2028para\u2029 invalid \xff\xfe end é 日本 🐂"
	cases := []struct {
		name string
		req  model.Request
	}{
		{"one message", model.Request{Messages: []model.Message{user(text("hi"))}}},
		{"no messages", model.Request{System: "s"}},
		{"every block", model.Request{System: "You are <helpful>.", Tools: builtinTools(), ThinkingBudget: 2048, Messages: []model.Message{
			user(text(odd), model.Block{Type: model.BlockImage, Image: png}, model.Block{Type: model.BlockImage, Image: url},
				model.Block{Type: model.BlockImage, Image: file}, model.Block{Type: model.BlockDocument, Document: pdf}),
			assistant(thinking, model.Block{Type: model.BlockRedactedThinking, Data: "cmVkYWN0ZWQ="},
				model.Block{Type: model.BlockServerToolUse, Raw: search}, model.Block{Type: model.BlockWebSearchToolResult, Raw: results},
				text("Found it."), toolUse, model.Block{Type: model.BlockToolUse, ID: "toolu_2", Name: "read"}),
			user(toolResult, model.Block{Type: model.BlockToolResult, ToolUseID: "toolu_2", IsError: true},
				model.Block{Type: model.BlockToolResult, ToolUseID: "toolu_3", Content: []model.Block{
					text(odd), {Type: model.BlockImage, Image: png}, {Type: model.BlockDocument, Document: pdf}}}),
		}}},
		{"empty strings", model.Request{Messages: []model.Message{user(text("")), assistant(model.Block{Type: model.BlockToolUse, Input: json.RawMessage(`{}`)}),
			user(model.Block{Type: model.BlockToolResult})}}},
		{"an empty message", model.Request{Messages: []model.Message{user(), assistant(), user(text("x"))}}},
	}
	// The same conversations with the cache marks, and shapes that move them: a last message whose last blocks
	// cannot be marked, a previous user turn of only thinking, server tools only, the marks' limit.
	for _, c := range cases[:len(cases):len(cases)] {
		c.name += ", marked"
		c.req.CacheBreakpoints = true
		cases = append(cases, c)
	}
	cases = append(cases,
		struct {
			name string
			req  model.Request
		}{"marks skip unmarkable blocks", model.Request{CacheBreakpoints: true, System: "s", Tools: []model.ToolSpec{webSearch}, Messages: []model.Message{
			user(text("first")), assistant(text("a")), user(model.Block{Type: model.BlockDocument, Document: pdf}, text("q")),
			assistant(toolUse, thinking, model.Block{Type: model.BlockServerToolUse, Raw: search}),
		}}},
		struct {
			name string
			req  model.Request
		}{"a previous user turn with nothing to mark", model.Request{CacheBreakpoints: true, Messages: []model.Message{
			user(text("first")), user(model.Block{Type: model.BlockDocument, Document: pdf}), assistant(text("a")),
		}}},
		struct {
			name string
			req  model.Request
		}{"nothing to mark at the end", model.Request{CacheBreakpoints: true, Tools: builtinTools(), System: "s", Messages: []model.Message{
			user(text("q")), assistant(thinking),
		}}},
		struct {
			name string
			req  model.Request
		}{"tools and webSearch", model.Request{CacheBreakpoints: true, Tools: append([]model.ToolSpec{webSearch}, builtinTools()...), Messages: []model.Message{
			user(text("q")), assistant(toolUse), user(toolResult), assistant(text("done")), user(text("again")),
		}}},
	)
	m := New(Config{APIKey: "k"})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.req.Model = "claude-sonnet-4-6"
			want, err := sdkRequest(m, &c.req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := sentBody(t, m, &c.req)
			if err != nil {
				t.Fatal(err)
			}
			if !json.Valid(got) || !sameJSON(t, got, want) {
				t.Errorf("sent:\n%s\nthe SDK:\n%s", got, want)
			}
		})
	}
}

// TestMessagesRefused: a message the adapter cannot send is refused with the error the SDK's types gave, and
// nothing is sent.
func TestMessagesRefused(t *testing.T) {
	m := New(Config{APIKey: "k"})
	for _, msg := range []model.Message{
		{Role: "system", Content: []model.Block{text("x")}},
		user(model.Block{Type: "video"}),
		user(model.Block{Type: model.BlockImage}),
		user(model.Block{Type: model.BlockImage, Image: &apitype.ImageSource{Type: "ftp"}}),
		user(model.Block{Type: model.BlockDocument, Document: &apitype.ImageSource{Type: apitype.SourceBase64, MediaType: "text/plain"}}),
		user(model.Block{Type: model.BlockDocument}),
		assistant(model.Block{Type: model.BlockToolUse, ID: "toolu_1", Input: json.RawMessage(`{"a":`)}),
		assistant(model.Block{Type: model.BlockServerToolUse, Raw: json.RawMessage(`{`)}),
		user(model.Block{Type: model.BlockToolResult, ToolUseID: "toolu_1", Content: []model.Block{{Type: model.BlockToolUse}}}),
		user(model.Block{Type: model.BlockToolResult, ToolUseID: "toolu_1", Content: []model.Block{{Type: model.BlockImage}}}),
	} {
		req := &model.Request{Model: "m", Messages: []model.Message{user(text("ok")), msg}}
		_, want := sdkRequest(m, req)
		_, err := sentBody(t, m, req)
		if err == nil || want == nil || err.Error() != want.Error() {
			t.Errorf("%+v: error %v, want %v", msg, err, want)
		}
	}
}

// TestAppendString: a string is written byte for byte as encoding/json writes it.
func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "plain", "\"\\/", "\x00\x01\x1f \x7f", "\b\f\n\r\t", "<script>&</script>",
		"\u2028\u2029", "\xff", "a\xc3", "\xed\xa0\x80", "é日本🐂", "\xef\xbf\xbd"} {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendString(nil, s); string(got) != string(want) {
			t.Errorf("%q: %s, want %s", s, got, want)
		}
	}
}

// FuzzMessages: for any text, ids, inputs and shapes of a conversation, the request params builds is the one
// the SDK encodes (or both refuse it alike), and its strings are written as encoding/json writes them.
func FuzzMessages(f *testing.F) {
	f.Add("hello", "toolu_1", `{"command":"ls"}`, uint8(0), uint8(3), true)
	f.Add("<a>&\u2028\xff", "", `[1, 2]`, uint8(7), uint8(255), false)
	f.Add("", "id\x00", "", uint8(200), uint8(9), true)
	m := New(Config{APIKey: "k"})
	f.Fuzz(func(t *testing.T, s, id, input string, shape, marks uint8, isError bool) {
		if want, _ := json.Marshal(s); string(appendString(nil, s)) != string(want) {
			t.Fatalf("%q: %s, want %s", s, appendString(nil, s), want)
		}
		kinds := []func() model.Block{
			func() model.Block { return text(s) },
			func() model.Block {
				return model.Block{Type: model.BlockToolUse, ID: id, Name: s, Input: json.RawMessage(input)}
			},
			func() model.Block {
				return model.Block{Type: model.BlockToolResult, ToolUseID: id, IsError: isError, Content: []model.Block{text(s)}}
			},
			func() model.Block { return model.Block{Type: model.BlockThinking, Thinking: s, Signature: id} },
			func() model.Block {
				return model.Block{Type: model.BlockImage, Image: &apitype.ImageSource{Type: apitype.SourceURL, URL: s}}
			},
			func() model.Block {
				return model.Block{Type: model.BlockDocument, Document: &apitype.ImageSource{Type: apitype.SourceBase64, MediaType: "application/pdf", Data: s}}
			},
			func() model.Block { return model.Block{Type: model.BlockServerToolUse, Raw: json.RawMessage(input)} },
			func() model.Block { return model.Block{Type: model.BlockRedactedThinking, Data: s} },
		}
		// shape's bits pick each message's first and second block; marks' bits the roles and the options.
		req := &model.Request{Model: s, System: id, CacheBreakpoints: marks&1 != 0}
		if marks&2 != 0 {
			req.Tools = []model.ToolSpec{{Name: "bash", InputSchema: json.RawMessage(`{"type":"object"}`)}}
		}
		for i := range int(marks>>5) + 1 {
			msg := model.Message{Role: "user"}
			if (marks>>(2+i%3))&1 != 0 {
				msg.Role = "assistant"
			}
			msg.Content = append(msg.Content, kinds[(int(shape)+i)%len(kinds)]())
			if shape&(1<<(i%8)) != 0 {
				msg.Content = append(msg.Content, kinds[(int(shape>>3)+i)%len(kinds)]())
			}
			req.Messages = append(req.Messages, msg)
		}
		want, wantErr := sdkRequest(m, req)
		got, err := sentBody(t, m, req)
		if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
			t.Fatalf("error %v, the SDK's %v", err, wantErr)
		}
		if err == nil && (!json.Valid(got) || !sameJSON(t, got, want)) {
			t.Fatalf("sent:\n%s\nthe SDK:\n%s", got, want)
		}
	})
}
