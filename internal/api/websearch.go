package api

import (
	"net/http"

	"github.com/corralhq/corral/internal/apitype"
)

// warnWebSearchText is the Warning of an agent create or update that enables web_search on a server without a
// search provider. The hosted API has no field for it; an HTTP Warning header (RFC 7234, code 199) keeps the
// body wire-compatible while saying why the tool will not be offered.
const warnWebSearchText = `199 corral "web_search is enabled but this server has no search provider ` +
	`(corral serve --web-search searxng=URL): the brain leaves web_search out of the model's tools"`

// warnWebSearch adds the Warning header when tools enable web_search and the server has no search provider.
func (s *Server) warnWebSearch(w http.ResponseWriter, tools []apitype.Tool) {
	if s.webSearch == "" && webSearchEnabled(tools) {
		w.Header().Add("Warning", warnWebSearchText)
	}
}

// webSearchEnabled reports whether an agent's (resolved) tools enable web_search: its toolset's default, then
// its own config.
func webSearchEnabled(tools []apitype.Tool) bool {
	for _, t := range tools {
		if t.Type != apitype.ToolTypeAgentToolset {
			continue
		}
		on := t.DefaultConfig == nil || t.DefaultConfig.Enabled
		for _, c := range t.Configs {
			if c.Name == "web_search" || string(c.Type) == "web_search" {
				on = c.Enabled
			}
		}
		return on
	}
	return false
}
