package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strings"

	"github.com/corralhq/corral/internal/apitype"
)

// The Files API (/v1/files) and the content of skill versions, as the self-hosted worker uses them. A work
// item's sessions token reads only its session's file resources and the files scoped to its session, and a file
// it uploads is always scoped to its session (an output); it reads the versions of its session agent's skills.

// FileUpload uploads content as a file named filename, streamed as a multipart body. An empty mimeType sends
// the part without a Content-Type: the server then infers the type from the name.
func (c *Client) FileUpload(ctx context.Context, filename, mimeType string, content io.Reader) (*apitype.File, error) {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename="%s"`, quoteEscaper.Replace(filename)))
		if mimeType != "" {
			h.Set("Content-Type", mimeType)
		}
		part, err := mw.CreatePart(h)
		if err == nil {
			_, err = io.Copy(part, content)
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	header := http.Header{"Content-Type": {mw.FormDataContentType()}}
	resp, err := c.request(ctx, "POST", "/v1/files", nil, pr, header)
	// The body is done with (sent, or abandoned): the writer stops at its next write.
	pr.CloseWithError(io.ErrClosedPipe)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var f apitype.File
	if err := json.NewDecoder(resp.Body).Decode(&f); err != nil {
		return nil, fmt.Errorf("decode POST /v1/files: %w", err)
	}
	return &f, nil
}

var quoteEscaper = strings.NewReplacer("\\", "\\\\", `"`, "\\\"", "\r", "", "\n", "")

// FileGet returns a file's metadata.
func (c *Client) FileGet(ctx context.Context, id string) (*apitype.File, error) {
	return call[apitype.File](ctx, c, "GET", pathOf("/v1/files/", id), nil, nil)
}

// FileContent returns a file's content; the caller closes it.
func (c *Client) FileContent(ctx context.Context, id string) (io.ReadCloser, error) {
	resp, err := c.request(ctx, "GET", pathOf("/v1/files/", id, "/content"), nil, nil, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// SkillVersionGet returns a skill version (its name and description).
func (c *Client) SkillVersionGet(ctx context.Context, skillID, version string) (*apitype.SkillVersion, error) {
	return call[apitype.SkillVersion](ctx, c, "GET", pathOf("/v1/skills/", skillID, "/versions/", version), nil, nil)
}

// SkillVersionContent returns a skill version's zip; the caller closes it.
func (c *Client) SkillVersionContent(ctx context.Context, skillID, version string) (io.ReadCloser, error) {
	resp, err := c.request(ctx, "GET", pathOf("/v1/skills/", skillID, "/versions/", version, "/content"), nil, nil, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}
