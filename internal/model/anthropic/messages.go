package anthropic

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
)

// The request's messages, encoded here rather than by the SDK. The SDK encodes a message by reflection, each
// nested level into a buffer of its own that the level above copies and compacts again: for a session's history
// that was about 21 µs of CPU and 22 KB allocated per turn, on every model call, growing with the session
// (BenchmarkParamsHistory: a 50-turn history took 1.3 ms and 1.1 MB through the SDK, 0.15 ms and one buffer of the
// body's size here; docs/benchmarks.md, stop 54). The bytes written here are the JSON the SDK would send for the
// same blocks, built as the SDK's own types were (FuzzMessages and TestMessagesAsTheSDKEncodes compare the two as
// JSON values).

// cacheMarks are the positions of the messages' cache_control marks: the index of the block to mark in the last
// message, and the indexes of the previous user message and of its block to mark (-1: none).
type cacheMarks struct {
	last, prevUser, prevUserBlock int
}

// noMarks marks no message.
var noMarks = cacheMarks{last: -1, prevUser: -1, prevUserBlock: -1}

// messageMarks places the messages' cache marks after the marks already given (the tools' and the system
// prompt's): the end of the conversation, and the end of the previous user turn (where the previous request put
// its last mark, so that this request reads what that one wrote even when many blocks were added since), never
// more than maxCacheBreakpoints in all.
func messageMarks(msgs []model.Message, marks int) cacheMarks {
	c := noMarks
	n := len(msgs)
	if n == 0 {
		return c
	}
	if c.last = lastMarkable(msgs[n-1].Content); c.last >= 0 {
		marks++
	}
	for i := n - 2; i >= 0 && marks < maxCacheBreakpoints; i-- {
		if msgs[i].Role == "user" {
			if b := lastMarkable(msgs[i].Content); b >= 0 {
				c.prevUser, c.prevUserBlock = i, b
			}
			break
		}
	}
	return c
}

// lastMarkable is the index of the last block that can carry cache_control (thinking, document and server
// blocks cannot), or -1.
func lastMarkable(blocks []model.Block) int {
	for i := len(blocks) - 1; i >= 0; i-- {
		switch blocks[i].Type {
		case model.BlockText, model.BlockImage, model.BlockToolUse, model.BlockToolResult:
			return i
		}
	}
	return -1
}

// marked reports whether block j of message i carries a cache mark.
func (c cacheMarks) marked(i, j, n int) bool {
	return (i == n-1 && j == c.last) || (i == c.prevUser && j == c.prevUserBlock)
}

// appendMessages appends msgs as the request's messages array, with c's cache marks.
func appendMessages(dst []byte, msgs []model.Message, c cacheMarks) ([]byte, error) {
	dst = append(dst, '[')
	for i, msg := range msgs {
		if msg.Role != "user" && msg.Role != "assistant" {
			return dst, fmt.Errorf("message %d: unknown role %q", i, msg.Role)
		}
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"content":[`...)
		for j, b := range msg.Content {
			if j > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendBlock(dst, b, c.marked(i, j, len(msgs))); err != nil {
				return dst, fmt.Errorf("message %d block %d: %w", i, j, err)
			}
		}
		dst = append(dst, `],"role":`...)
		dst = appendString(dst, msg.Role)
		dst = append(dst, '}')
	}
	return append(dst, ']'), nil
}

// messagesSize estimates the size of msgs encoded, so that their buffer is allocated once: their blocks' bytes,
// and room for each block's keys.
func messagesSize(msgs []model.Message) int {
	n := 2
	for _, m := range msgs {
		n += 32 + blocksSize(m.Content)
	}
	return n
}

func blocksSize(blocks []model.Block) int {
	n := 0
	for _, b := range blocks {
		n += 96 + len(b.Text) + len(b.Thinking) + len(b.Signature) + len(b.Data) + len(b.ID) + len(b.Name) +
			len(b.Input) + len(b.ToolUseID) + len(b.Raw) + blocksSize(b.Content) + sourceSize(b.Image) + sourceSize(b.Document)
	}
	return n
}

func sourceSize(src *apitype.ImageSource) int {
	if src == nil {
		return 0
	}
	return len(src.Data) + len(src.URL) + len(src.FileID) + len(src.MediaType)
}

// cacheControl is the cache mark, as the SDK writes NewCacheControlEphemeralParam.
const cacheControl = `"cache_control":{"type":"ephemeral"},`

// appendBlock appends one block, passing it through unchanged, with the cache mark if mark is set.
func appendBlock(dst []byte, b model.Block, mark bool) ([]byte, error) {
	if b.Type == model.BlockServerToolUse || b.Type == model.BlockWebSearchToolResult {
		if !json.Valid(b.Raw) {
			return dst, fmt.Errorf("%s block: invalid JSON", b.Type)
		}
		return append(dst, b.Raw...), nil // as the provider sent it; never marked (lastMarkable)
	}
	dst = append(dst, '{')
	var err error
	if mark {
		dst = append(dst, cacheControl...)
	}
	switch b.Type {
	case model.BlockText:
		dst = appendField(dst, "text", b.Text)
	case model.BlockImage:
		if dst, err = appendImage(dst, b.Image); err != nil {
			return dst, err
		}
	case model.BlockDocument:
		if dst, err = appendDocument(dst, b.Document); err != nil {
			return dst, err
		}
	case model.BlockThinking:
		dst = appendField(dst, "signature", b.Signature)
		dst = appendField(dst, "thinking", b.Thinking)
	case model.BlockRedactedThinking:
		dst = appendField(dst, "data", b.Data)
	case model.BlockToolUse:
		input := b.Input
		if len(input) == 0 {
			input = json.RawMessage("{}")
		}
		if !json.Valid(input) {
			return dst, fmt.Errorf("tool_use %s: invalid input JSON", b.ID)
		}
		dst = appendField(dst, "id", b.ID)
		dst = append(dst, `"input":`...)
		dst = append(dst, input...)
		dst = append(dst, ',')
		dst = appendField(dst, "name", b.Name)
	case model.BlockToolResult:
		if dst, err = appendToolResult(dst, b); err != nil {
			return dst, err
		}
	default:
		return dst, fmt.Errorf("unsupported block type %q", b.Type)
	}
	dst = append(dst, `"type":`...)
	dst = appendString(dst, b.Type)
	return append(dst, '}'), nil
}

// appendToolResult appends a tool_result's fields but its type.
func appendToolResult(dst []byte, b model.Block) ([]byte, error) {
	if len(b.Content) > 0 {
		dst = append(dst, `"content":[`...)
		for k, c := range b.Content {
			if k > 0 {
				dst = append(dst, ',')
			}
			switch c.Type {
			case model.BlockText, model.BlockImage, model.BlockDocument:
			default:
				return dst, fmt.Errorf("tool_result %s: unsupported content block %q", b.ToolUseID, c.Type)
			}
			var err error
			if dst, err = appendBlock(dst, c, false); err != nil {
				return dst, fmt.Errorf("tool_result %s: %w", b.ToolUseID, err)
			}
		}
		dst = append(dst, "],"...)
	}
	if b.IsError {
		dst = append(dst, `"is_error":true,`...)
	}
	return appendField(dst, "tool_use_id", b.ToolUseID), nil
}

// appendImage appends an image block's source.
func appendImage(dst []byte, src *apitype.ImageSource) ([]byte, error) {
	if src == nil {
		return dst, errors.New("image block without a source")
	}
	dst = append(dst, `"source":{`...)
	switch src.Type {
	case apitype.SourceBase64:
		dst = appendField(dst, "data", src.Data)
		dst = appendField(dst, "media_type", src.MediaType)
	case apitype.SourceURL:
		dst = appendField(dst, "url", src.URL)
	case apitype.SourceFile:
		dst = appendField(dst, "file_id", src.FileID)
	default:
		return dst, fmt.Errorf("unsupported image source %q", src.Type)
	}
	dst = append(dst, `"type":`...)
	dst = appendString(dst, string(src.Type))
	return append(dst, "},"...), nil
}

// appendDocument appends a document block's source: a base64 PDF.
func appendDocument(dst []byte, src *apitype.ImageSource) ([]byte, error) {
	if src == nil || src.Type != apitype.SourceBase64 || src.MediaType != "application/pdf" {
		return dst, errors.New("document block without a base64 PDF source")
	}
	dst = append(dst, `"source":{`...)
	dst = appendField(dst, "data", src.Data)
	return append(dst, `"media_type":"application/pdf","type":"base64"},`...), nil
}

// appendField appends "name":value, with the comma that follows.
func appendField(dst []byte, name, value string) []byte {
	dst = append(append(append(dst, '"'), name...), `":`...)
	return append(appendString(dst, value), ',')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string, byte for byte as encoding/json writes it: control characters, '<',
// '>' and '&' escaped, invalid UTF-8 as U+FFFD, U+2028 and U+2029 escaped.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= ' ' && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
