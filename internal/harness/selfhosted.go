package harness

import (
	"errors"
	"fmt"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

const msgWorkerLost = "The self-hosted worker running this tool call stopped (it stopped heartbeating, or its work item was stopped) before it reported a result, so its outcome is unknown: it may have run partly, fully or not at all. It was not run again. Check its effects before running it again."

// workExec is the work queue's executor: in a self_hosted environment the built-in tools run on the user's
// worker. A call is an agent.tool_use like the hands' (gated by the same policies), answered with a
// user.tool_result; the brain runs none, and settles them through the session's work item (handOff).
type workExec struct{ builtinExec }

func (workExec) name() string { return "worker" }

func (workExec) settle(t *thread, open []*toolUse) (bool, error) { return t.handOff(open) }

// handOff is the self-hosted path of the hands: in a self_hosted environment the built-in tools run on the
// user's worker, which claims the session's work item from the queue and answers each call with a
// user.tool_result. For the session's open built-in calls it makes sure an item is queued, and settles the calls
// a vanished worker may have run: a user.tool_result with an error saying the outcome is unknown (the SDK's
// worker treats a call with a user.tool_result as answered, so no worker runs it again), before the item is
// delivered to another worker. It reports whether it appended anything.
func (t *thread) handOff(open []*toolUse) (bool, error) {
	if len(open) == 0 {
		return false, nil
	}
	wk, err := t.b.cfg.Store.WorkBySession(t.ctx, t.sess.ID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return false, fmt.Errorf("work of %s: %w", t.sess.ID, err)
	}
	if wk != nil && (wk.Held || wk.State == apitype.WorkStopped) {
		var results []apitype.NewEvent
		for _, u := range open {
			if u.ev.Seq <= wk.LostSeq {
				results = append(results, mustEvent(apitype.EventUserToolResult, apitype.UserToolResult{
					ToolUseID: u.ev.ID, IsError: true, Content: []apitype.ContentBlock{apitype.TextBlock(msgWorkerLost)},
					Source: source(apitype.ComponentHands, "self_hosted", apitype.ReasonWorkerLost)}))
			}
		}
		if len(results) > 0 {
			if _, err := t.append("", nil, results...); err != nil {
				return true, err
			}
		}
		if wk.Held {
			// Delivered again only now that its calls are settled.
			if err := t.b.cfg.Store.WorkResume(t.ctx, wk.EnvironmentID, wk.ID); err != nil {
				return true, fmt.Errorf("resume work %s: %w", wk.ID, err)
			}
		}
		if len(results) > 0 {
			return true, nil
		}
	}
	if wk == nil || wk.State == apitype.WorkStopped {
		if _, _, err := t.b.cfg.Store.WorkEnsure(t.ctx, &store.WorkEnsureParams{ID: apitype.NewID(apitype.PrefixWork),
			EnvironmentID: t.sess.EnvironmentID, SessionID: t.sess.ID, At: apitype.Now()}); err != nil {
			return false, fmt.Errorf("queue work of %s: %w", t.sess.ID, err)
		}
	}
	return false, nil
}
