// This file maps an MCP tool result to session event content.

package proxy

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/internal/apitype"
)

// content converts a tool result to session event content, with the token scrubbed from its text.
func (c *mcpConn) content(res *sdk.CallToolResult) []apitype.ContentBlock {
	var out []apitype.ContentBlock
	for _, item := range res.Content {
		switch v := item.(type) {
		case *sdk.TextContent:
			out = append(out, apitype.TextBlock(c.scrub(v.Text)))
		case *sdk.ImageContent:
			src, _ := json.Marshal(apitype.ImageSource{Type: apitype.SourceBase64, MediaType: v.MIMEType, Data: base64.StdEncoding.EncodeToString(v.Data)})
			out = append(out, apitype.ContentBlock{Type: apitype.ContentImage, Source: src})
		case *sdk.ResourceLink:
			out = append(out, apitype.TextBlock(fmt.Sprintf("[resource link %s: %s]", v.Name, v.URI)))
		case *sdk.EmbeddedResource:
			if v.Resource != nil && v.Resource.Text != "" {
				out = append(out, apitype.TextBlock(c.scrub(v.Resource.Text)))
			} else if v.Resource != nil {
				out = append(out, apitype.TextBlock(fmt.Sprintf("[embedded resource %s (%s)]", v.Resource.URI, v.Resource.MIMEType)))
			}
		case *sdk.AudioContent:
			out = append(out, apitype.TextBlock(fmt.Sprintf("[audio content (%s): not passed to the model]", v.MIMEType)))
		}
	}
	if len(out) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			out = append(out, apitype.TextBlock(c.scrub(string(b))))
		}
	}
	return out
}
