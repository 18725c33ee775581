package harness

import (
	"errors"
	"strings"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/mcp"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/store"
)

// Failure attribution: every session.error, every error result Corral (not the tool) caused, every failed
// provisioning span and every failed trace span carries an apitype.FailureSource saying which part failed (the
// model, the hands and which backend, the proxy, the store, the brain), and why.

// source builds a FailureSource.
func source(c apitype.FailureComponent, backend string, reason apitype.FailureReason) *apitype.FailureSource {
	return &apitype.FailureSource{Component: c, Backend: backend, Reason: reason}
}

// modelProvider names the provider that answers a model id: its route prefix ("openai" for "openai/gpt-4o"),
// or anthropic, the default route.
func modelProvider(modelID string) string {
	if prefix, _, ok := strings.Cut(modelID, "/"); ok && prefix != "" {
		return prefix
	}
	return "anthropic"
}

// modelSource attributes a failed model request.
func modelSource(modelID string, err error, timedOut bool) *apitype.FailureSource {
	p := modelProvider(modelID)
	if timedOut {
		return source(apitype.ComponentModel, p, apitype.ReasonTimeout)
	}
	var me *model.Error
	if !errors.As(err, &me) {
		return source(apitype.ComponentModel, p, apitype.ReasonServerError)
	}
	reason := apitype.ReasonServerError
	switch me.Kind {
	case model.ErrOverloaded:
		reason = apitype.ReasonOverloaded
	case model.ErrRateLimited:
		reason = apitype.ReasonRateLimited
	case model.ErrInvalid:
		reason = apitype.ReasonBadRequest
	case model.ErrAuth:
		reason = apitype.ReasonAuth
	case model.ErrContextTooLong:
		reason = apitype.ReasonContextTooLong
	case model.ErrBilling:
		reason = apitype.ReasonBilling
	}
	return source(apitype.ComponentModel, p, reason)
}

// handsSource attributes a built-in tool call that failed in the hands of backend (the sandbox port's rule,
// which the self-hosted worker follows too).
func handsSource(backend string, res sandbox.Result, err error) *apitype.FailureSource {
	return sandbox.HandsFailure(backend, res, err)
}

// mcpSource attributes an MCP failure to the proxy that reaches the server.
func mcpSource(e *mcp.Error, timedOut bool) *apitype.FailureSource {
	reason := apitype.ReasonConnectionFailed
	switch {
	case timedOut:
		reason = apitype.ReasonTimeout
	case e != nil && e.Kind == mcp.KindAuthentication:
		reason = apitype.ReasonAuth
	}
	server := ""
	if e != nil {
		server = e.Server
	}
	return source(apitype.ComponentProxy, server, reason)
}

// appendSource attributes a failed append: a lost lease is the brain's (another took the session over), any
// other failure the store's.
func appendSource(err error) *apitype.FailureSource {
	if errors.Is(err, store.ErrLeaseLost) {
		return source(apitype.ComponentBrain, "", apitype.ReasonLeaseLost)
	}
	return source(apitype.ComponentStore, "", apitype.ReasonAppendFailed)
}
