package model

import (
	"context"
	"fmt"
	"strings"
)

// MuxConfig configures a Mux.
type MuxConfig struct {
	// Default answers model ids without a routed prefix (the Anthropic adapter); nil rejects them.
	Default Model
	// Routes maps a prefix to the model that answers ids "<prefix>/<model>", e.g. "openai" for "openai/gpt-4o";
	// the model sees the id with the prefix stripped.
	Routes map[string]Model
}

func (c MuxConfig) validate() error {
	for prefix, m := range c.Routes {
		if prefix == "" || strings.Contains(prefix, "/") {
			return fmt.Errorf("model mux: invalid route prefix %q", prefix)
		}
		if m == nil {
			return fmt.Errorf("model mux: route %q has no model", prefix)
		}
	}
	return nil
}

// Mux is a Model that routes each call by the prefix of its model id.
type Mux struct {
	cfg MuxConfig
}

var _ Model = (*Mux)(nil)

// NewMux returns a Mux, or an error when a route is invalid.
func NewMux(cfg MuxConfig) (*Mux, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Mux{cfg: cfg}, nil
}

// Route returns the model that answers the model id, and the id that model sees.
func (m *Mux) Route(modelID string) (Model, string, bool) {
	if prefix, rest, ok := strings.Cut(modelID, "/"); ok {
		if routed, ok := m.cfg.Routes[prefix]; ok {
			return routed, rest, true
		}
	}
	return m.cfg.Default, modelID, m.cfg.Default != nil
}

// Call routes the request to its model. An id no model answers fails with ErrInvalid.
func (m *Mux) Call(ctx context.Context, req *Request, onDelta func(Delta)) (*Response, error) {
	target, id, ok := m.Route(req.Model)
	if !ok {
		return nil, &Error{Kind: ErrInvalid, Err: fmt.Errorf("no model configured for %q", req.Model)}
	}
	if id != req.Model {
		routed := *req
		routed.Model = id
		req = &routed
	}
	return target.Call(ctx, req, onDelta)
}
