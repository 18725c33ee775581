package sandbox

import (
	"errors"
	"io"
	"net/http"
	"slices"
)

// The headers of git's smart-HTTP requests a git endpoint (internal/proxy's, and corral worker's, which
// forwards to the server's relay) passes upstream, and of the answers it passes back: nothing else, so that no
// credential or cookie crosses it either way.
var (
	GitRequestHeaders  = []string{"Accept", "Accept-Encoding", "Content-Encoding", "Content-Type", "Git-Protocol", "User-Agent"}
	GitResponseHeaders = []string{"Cache-Control", "Content-Encoding", "Content-Type", "Expires", "Last-Modified", "Pragma"}
)

// CopyGitHeaders copies the headers of list from src to dst.
func CopyGitHeaders(dst, src http.Header, list []string) {
	for _, k := range list {
		if v := src.Values(k); len(v) > 0 {
			dst[k] = slices.Clone(v)
		}
	}
}

// ForwardGitResponse passes an upstream answer of a git endpoint back to git: its GitResponseHeaders, its status
// and its body, flushed as it comes (a fetch's progress, a long pack). It returns the error that cut the body
// short, if any (not one of writing to git, which has gone away).
func ForwardGitResponse(w http.ResponseWriter, resp *http.Response) error {
	CopyGitHeaders(w.Header(), resp.Header, GitResponseHeaders)
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return nil
			}
			_ = rc.Flush()
		}
		if errors.Is(rerr, io.EOF) {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}
