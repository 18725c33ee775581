package harness

import (
	"slices"

	"github.com/corralhq/corral/internal/apitype"
)

// step takes the next step the log calls for. It reports whether it did anything.
func (r *run) step() (bool, error) {
	if err := r.refresh(); err != nil {
		return false, err
	}
	st, err := derive(r.tail)
	if err != nil {
		return false, err
	}
	r.seenSeq = r.tail.lastSeq
	r.follow(st.unprocessed)

	// 0. A terminated or archived session runs nothing more, whatever events reached it (one sent just before
	// the archive, say): they stay unprocessed.
	if st.terminated() || r.sess.ArchivedAt != nil {
		return false, nil
	}

	// 1. An interrupt jumps the queue.
	if ints := st.unprocessedOf(apitype.EventUserInterrupt); len(ints) > 0 {
		return true, r.interrupt(st, ints)
	}

	// 2. Crash recovery: close a model call that never ended, and give every tool call that may have run
	// without reporting (rule 8), or was refused, its error result.
	if st.openSpan != nil {
		_, err := r.append("", nil, spanEnd(st.openSpan.ID, true, apitype.SpanUsage{}))
		return true, err
	}
	var results []apitype.NewEvent
	for _, u := range st.open() {
		switch {
		case u.refused():
			results = append(results, toolResult(u.ev.ID, true, r.tools.route(u.data.Name).reason))
		case u.approved() && !r.fresh[u.ev.ID] && (!r.selfHosted() || u.mcp != nil):
			results = append(results, closeFailed(u, true, source(apitype.ComponentBrain, "", apitype.ReasonCrashRecovered), msgOutcomeUnknown))
		}
	}
	if len(results) > 0 {
		_, err := r.append("", nil, results...)
		return true, err
	}

	// 2b. Self-hosted hands: a work item for the open built-in calls, and the calls of a vanished worker settled.
	if acted, err := r.handOff(st); acted || err != nil {
		return acted, err
	}

	// 3. The client's answers: confirmations and tool results.
	if acted, err := r.answers(st); acted || err != nil {
		return acted, err
	}

	// 4. Run the approved built-in and MCP tools, one at a time, in order (in a self-hosted environment the
	// client runs the built-in ones; MCP calls always go through the brain's MCP proxy).
	for _, u := range st.open() {
		switch {
		case !u.approved() || !r.fresh[u.ev.ID]:
		case u.mcp != nil:
			return true, r.executeMCP(u)
		case !r.selfHosted():
			return true, r.execute(u)
		}
	}

	// 5. Calls only the client can resolve: idle with requires_action until it does.
	if open := st.open(); len(open) > 0 {
		ids := make([]string, len(open))
		for i, u := range open {
			ids[i] = u.ev.ID
		}
		if st.idle != nil && st.idle.StopReason.Type == apitype.StopRequiresAction && slices.Equal(st.idle.StopReason.EventIDs, ids) {
			return false, nil // already said so; queued messages wait for the answers
		}
		_, err := r.append(apitype.StatusIdle, nil, idleEvent(apitype.StopReason{Type: apitype.StopRequiresAction, EventIDs: ids}))
		return true, err
	}

	// 6. The model's turn: new client messages, or tool results it has not seen.
	msgs := st.unprocessedOf(apitype.EventUserMessage, apitype.EventSystemMessage)
	if len(msgs) > 0 || (st.running() && st.lastSide == "user") {
		return true, r.modelTurn(st, msgs)
	}

	// 7. A turn whose last answer is in the log but whose end is not.
	if st.running() {
		_, err := r.append(apitype.StatusIdle, nil, idleEvent(apitype.StopReason{Type: apitype.StopEndTurn}))
		return true, err
	}

	// 8. Client events nothing acts on (an outcome definition, an answer to a call already resolved).
	if len(st.unprocessed) > 0 {
		return true, r.markProcessed(st.unprocessed)
	}
	return false, nil
}

// answers acts on the client's confirmations and tool results. A confirmation is marked processed before its
// tool runs, so a crash in between leaves a call the next brain reports as of unknown outcome, never one it runs
// twice.
func (r *run) answers(st *state) (bool, error) {
	confs := st.unprocessedOf(apitype.EventUserToolConfirmation)
	results := st.unprocessedOf(apitype.EventUserCustomToolResult, apitype.EventUserToolResult)
	if len(confs) == 0 && len(results) == 0 {
		return false, nil
	}
	if st.idle != nil && st.idle.StopReason.Type == apitype.StopRequiresAction {
		if _, err := r.append(apitype.StatusRunning, nil, mustEvent(apitype.EventSessionStatusRunning, nil)); err != nil {
			return true, err
		}
	}
	var denials []apitype.NewEvent
	var allowed []string
	for _, c := range confs {
		var conf apitype.UserToolConfirmation
		if err := c.DecodeData(&conf); err != nil {
			return true, err
		}
		u := st.byID[conf.ToolUseID]
		if u == nil || u.resolved || u.custom || u.confirmed != "" || u.data.EvaluatedPermission != apitype.PermissionAsk {
			continue // nothing to confirm: marked processed below
		}
		if conf.Result == apitype.ConfirmAllow {
			allowed = append(allowed, u.ev.ID)
			continue
		}
		msg := "The user denied this tool call."
		if conf.DenyMessage != "" {
			msg += " Their message: " + conf.DenyMessage
		}
		denials = append(denials, closeResult(u, true, msg))
	}
	if len(denials) > 0 {
		if _, err := r.append("", nil, denials...); err != nil {
			return true, err
		}
	}
	if err := r.markProcessed(append(confs, results...)); err != nil {
		return true, err
	}
	r.clientToolSpans(st, results)
	for _, id := range allowed {
		r.fresh[id] = true
	}
	return true, nil
}
