package harness

import (
	"errors"
	"maps"
	"slices"

	"github.com/corralhq/corral/internal/apitype"
)

// step takes the next step the log calls for. It reports whether it did anything.
//
// The steps are tried in the order of steps, the first that acts (or fails) ending this one. A terminated or
// archived session runs nothing more, whatever events reached it (one sent just before the archive, say): they
// stay unprocessed.
func (t *thread) step() (bool, error) {
	if err := t.refresh(); err != nil {
		return false, err
	}
	st, err := t.derive()
	if err != nil {
		return false, err
	}
	t.seenSeq = t.tail.lastSeq
	t.outcome = st.outcome
	if !t.child() {
		// The session's budget is the primary thread's to follow.
		b := t.budgetNow(st)
		t.locked(func() { t.budget = b })
	}
	if t.rec == nil {
		// A turn's trace follows the client's events. A multi-agent run's threads share one span, the one the
		// run started with: its threads' spans read it concurrently.
		t.follow(st.unprocessed)
	}
	if st.terminated() || t.sess.ArchivedAt != nil || t.multi.ended.Load() {
		return false, nil
	}
	for _, next := range steps {
		acted, err := next(t, st)
		if errors.Is(err, errWaiting) {
			return false, nil
		}
		if acted || err != nil {
			return acted, err
		}
	}
	return false, nil
}

// errWaiting ends a step that has nothing to do until the client acts: no later step may act either.
var errWaiting = errors.New("harness: waiting for the client")

// steps are the steps a thread may take, in order of precedence (set by init: a step may start a thread, whose
// goroutine takes steps).
var steps []func(*thread, *state) (bool, error)

func init() {
	steps = []func(*thread, *state) (bool, error){
		(*thread).interrupted, // 1. an interrupt jumps the queue
		(*thread).closeSpan,   // 2. crash recovery: a model call that never ended,
		(*thread).recover,     //    and the tool calls that may have run without reporting (rule 8), or were refused
		(*thread).settle,      // 2b. the executors' own settling of their open calls (the work queue's item)
		(*thread).answers,     // 3. the client's answers: confirmations and tool results
		(*thread).runTools,    // 4. the approved calls the brain runs
		(*thread).waitClient,  // 5. calls only the client can resolve
		(*thread).grade,       // 5b. an outcome evaluation started and not ended (outcome.go)
		(*thread).modelStep,   // 6. the model's turn
		(*thread).endTurn,     // 7. a turn whose last answer is in the log but whose end is not
		(*thread).leftOver,    // 8. client events nothing acts on
	}
}

// interrupted ends the turn when a user.interrupt is waiting.
func (t *thread) interrupted(st *state) (bool, error) {
	ints := st.unprocessedOf(apitype.EventUserInterrupt)
	if len(ints) == 0 {
		return false, nil
	}
	return true, t.interrupt(st, ints)
}

// closeSpan closes a model call that never ended (a crash mid-call).
func (t *thread) closeSpan(st *state) (bool, error) {
	if st.openSpan == nil {
		return false, nil
	}
	_, err := t.append("", nil, spanEnd(st.openSpan.ID, true, apitype.SpanUsage{}))
	return true, err
}

// recover gives every open call that was refused its route's reason, and every approved one this thread did not
// start, of a kind whose executor recovers its calls, an error result saying its outcome is unknown: one append.
func (t *thread) recover(st *state) (bool, error) {
	var results []apitype.NewEvent
	for _, u := range st.open() {
		switch {
		case u.refused():
			results = append(results, toolResult(u.ev.ID, true, t.tools.route(u.data.Name).reason))
		case u.approved() && !t.fresh[u.ev.ID] && u.exec().recover():
			results = append(results, u.closeFailed(source(apitype.ComponentBrain, "", apitype.ReasonCrashRecovered), msgOutcomeUnknown))
		}
	}
	if len(results) == 0 {
		return false, nil
	}
	_, err := t.append("", nil, results...)
	return true, err
}

// settle hands each executor its open calls (refused ones aside), kind by kind.
func (t *thread) settle(st *state) (bool, error) {
	byKind := map[execKind][]*toolUse{}
	for _, u := range st.open() {
		if !u.refused() {
			byKind[u.kind] = append(byKind[u.kind], u)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(byKind)) {
		if acted, err := exec(k).settle(t, byKind[k]); acted || err != nil {
			return acted, err
		}
	}
	return false, nil
}

// runTools runs the first approved call this thread made or saw confirmed whose executor runs it: one at a time,
// in order (a client's calls and, in a self_hosted environment, the built-in ones are run outside).
func (t *thread) runTools(st *state) (bool, error) {
	for _, u := range st.open() {
		if !u.approved() || !t.fresh[u.ev.ID] {
			continue
		}
		if ran, err := u.exec().run(t, u); ran || err != nil {
			return true, err
		}
	}
	return false, nil
}

// waitClient idles the session with requires_action while calls only the client can resolve are open (answers,
// confirmations, a worker's results), unless it already said so; queued messages wait for the answers.
func (t *thread) waitClient(st *state) (bool, error) {
	open := st.open()
	if len(open) == 0 {
		return false, nil
	}
	ids := make([]string, len(open))
	for i, u := range open {
		ids[i] = u.ev.ID
	}
	if st.idle != nil && st.idle.StopReason.Type == apitype.StopRequiresAction && slices.Equal(st.idle.StopReason.EventIDs, ids) {
		return false, errWaiting
	}
	_, err := t.append(apitype.StatusIdle, nil, idleEvent(apitype.StopReason{Type: apitype.StopRequiresAction, EventIDs: ids}))
	return true, err
}

// modelStep calls the model for new client messages, or for tool results it has not seen, unless the session's
// list cost has reached its budget: then the session idles with budget_reached (once), its client messages
// waiting, until a raised or removed budget wakes it and the paused turn resumes here (budget.go).
func (t *thread) modelStep(st *state) (bool, error) {
	types := []apitype.EventType{apitype.EventUserMessage, apitype.EventSystemMessage, apitype.EventAgentThreadMessageReceived}
	if st.outcome == nil {
		// One outcome at a time: a later definition waits for the active one to end.
		types = append(types, apitype.EventUserDefineOutcome)
	}
	msgs := st.unprocessedOf(types...)
	if len(msgs) == 0 && (!(st.running() || st.paused()) || st.lastSide != "user") {
		return false, nil
	}
	if handled, err := t.holdForBudget(st); handled || err != nil {
		return handled, err
	}
	return true, t.modelTurn(st, msgs)
}

// endTurn idles a running turn that has nothing left to do, or, with an outcome active, starts its evaluation.
func (t *thread) endTurn(st *state) (bool, error) {
	if !st.running() {
		return false, nil
	}
	if o := st.outcome; o != nil && o.evaluating == nil {
		_, err := t.append("", nil, o.evaluationStart())
		return true, err
	}
	_, err := t.append(apitype.StatusIdle, nil, idleEvent(apitype.StopReason{Type: apitype.StopEndTurn}))
	return true, err
}

// leftOver marks processed the client events nothing acts on (an outcome definition, an answer to a call already
// resolved).
func (t *thread) leftOver(st *state) (bool, error) {
	left := st.unprocessed
	if st.outcome != nil {
		// A definition while an outcome is active waits for it to end (modelStep).
		left = slices.DeleteFunc(slices.Clone(left), func(e apitype.Event) bool { return e.Type == apitype.EventUserDefineOutcome })
	}
	if len(left) == 0 {
		return false, nil
	}
	return true, t.markProcessed(left)
}

// answers acts on the client's confirmations and tool results. A confirmation is marked processed before its
// tool runs, so a crash in between leaves a call the next brain reports as of unknown outcome, never one it runs
// twice.
func (t *thread) answers(st *state) (bool, error) {
	confs := st.unprocessedOf(apitype.EventUserToolConfirmation)
	results := st.unprocessedOf(apitype.EventUserCustomToolResult, apitype.EventUserToolResult)
	if len(confs) == 0 && len(results) == 0 {
		return false, nil
	}
	if st.idle != nil && st.idle.StopReason.Type == apitype.StopRequiresAction {
		if _, err := t.append(apitype.StatusRunning, nil, mustEvent(apitype.EventSessionStatusRunning, nil)); err != nil {
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
		if u == nil || u.resolved || !u.exec().gated() || u.confirmed != "" || u.data.EvaluatedPermission != apitype.PermissionAsk {
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
		denials = append(denials, u.closeResult(true, msg))
	}
	if len(denials) > 0 {
		if _, err := t.append("", nil, denials...); err != nil {
			return true, err
		}
	}
	if err := t.markProcessed(append(confs, results...)); err != nil {
		return true, err
	}
	t.clientToolSpans(st, results)
	for _, id := range allowed {
		t.fresh[id] = true
	}
	return true, nil
}
