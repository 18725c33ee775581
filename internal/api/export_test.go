package api

import (
	"context"
	"time"
)

// RouteAccess is a route of the table as the external tests see it: its pattern and the kinds of credential its
// access accepts.
type RouteAccess struct {
	Pattern               string
	Public                bool
	APIKey, EnvKey, Token bool
}

// RouteAccesses lists the route table of s.
func (s *Server) RouteAccesses() []RouteAccess {
	var out []RouteAccess
	for _, rt := range s.routeTable() {
		a := rt.access
		out = append(out, RouteAccess{Pattern: rt.pattern, Public: a.public,
			APIKey: a.accept&kindAPIKey != 0, EnvKey: a.accept&kindEnvKey != 0, Token: a.accept&kindToken != 0})
	}
	return out
}

// RenderTranscript renders session id's transcript as a dream's session gets it, at most limit bytes.
func (s *Server) RenderTranscript(ctx context.Context, id string, limit int) ([]byte, error) {
	sess, err := s.store.SessionGet(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.renderTranscript(ctx, sess, limit)
}

// SetClock replaces the server's clock (the deployment runner's tests move time by hand).
func (s *Server) SetClock(now func() time.Time) { s.now = now }

// OnePEMBlock is onePEMBlock, for FuzzTunnel.
var OnePEMBlock = onePEMBlock
