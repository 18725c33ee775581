package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/store"
	"go.opentelemetry.io/otel/trace"
)

// The tools of a multi-agent session's threads (Corral's names: Anthropic does not publish its own), run by the
// brain itself: start_thread and send_thread_message (threads.go has the threads they reach), and
// consult_advisor when the agent has an advisor.
const (
	toolStartThread   = "start_thread"
	toolSendMessage   = "send_thread_message"
	toolConsultAdvise = "consult_advisor"
)

// isThreadTool reports whether name is one of them.
func isThreadTool(name string) bool {
	return name == toolStartThread || name == toolSendMessage || name == toolConsultAdvise
}

// agentsExec is the executor of those tools. A call's effects and its result are one append (a started thread,
// a delivered message), so a call a crash cut short left nothing behind and is run again (settle); an advisor's
// answer is asked again.
type agentsExec struct{ builtinExec }

func (agentsExec) name() string { return "agents" }

func (agentsExec) settle(t *thread, open []*toolUse) (bool, error) {
	return rerunOpen(t, open, (*thread).agentCall)
}

func (agentsExec) run(t *thread, u *toolUse) (bool, error) { return true, t.agentCall(u) }

// addThreadTools offers a multi-agent thread its tools: the coordinator start_thread, send_thread_message and,
// with an advisor, consult_advisor; a child send_thread_message (to its parent), and a refusal of start_thread
// (depth is 1).
func (t *thread) addThreadTools(ts *toolset) {
	allow := toolRoute{by: execAgents, policy: apitype.PolicyAlwaysAllow}
	if t.child() {
		ts.offer(model.ToolSpec{Name: toolSendMessage, Description: "Send a message to the coordinator that started you " +
			"(your parent thread), while you work. Your last message of each turn reaches it by itself.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"message":{"type":"string","description":"The message."}},"required":["message"]}`)}, allow)
		ts.refuse(toolStartThread, "Only the coordinator can start threads: a thread cannot start threads of its own (depth is 1).")
		return
	}
	if len(t.roster.Agents) > 0 || t.roster.Self || t.roster.Inline {
		ts.offer(model.ToolSpec{Name: toolStartThread, Description: "Start a thread: an agent that works on a task in " +
			"parallel with you, in your sandbox's filesystem (its own shell). Returns its session_thread_id at once. Its " +
			"last message of each turn comes back to you as a message: end your turn to wait for it, never poll. At most " +
			fmt.Sprint(maxRunningThreads) + " threads run at once.",
			InputSchema: t.startSchema()}, allow)
	}
	ts.offer(model.ToolSpec{Name: toolSendMessage, Description: "Send a message to one of the threads you started: more " +
		"work, an answer or a correction. An idle thread starts a turn on it.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"session_thread_id":{"type":"string","description":"The thread, as start_thread returned it."},` +
			`"message":{"type":"string","description":"The message."}},"required":["session_thread_id","message"]}`)}, allow)
	if t.roster.Advisor != "" {
		ts.offer(model.ToolSpec{Name: toolConsultAdvise, Description: "Ask the advisor, a stronger model, for advice. It " +
			"sees only what you send: give the context it needs with the question.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"question":{"type":"string"},"context":{"type":"string",` +
				`"description":"What the advisor needs to know to answer."}},"required":["question"]}`)}, allow)
	}
}

// startSchema is start_thread's input schema: agent is a roster name or "self", or with inline agents an object.
func (t *thread) startSchema() json.RawMessage {
	var names []string
	for _, a := range t.roster.Agents {
		if a.ID != t.sess.Agent.ID {
			names = append(names, a.Name)
		}
	}
	if t.roster.Self {
		names = append(names, "self")
	}
	byName, _ := json.Marshal(map[string]any{"type": "string", "enum": names, "description": "A roster agent's name, or self."})
	agent := json.RawMessage(byName)
	if t.roster.Inline {
		inline := `{"type":"object","description":"An agent defined here.","properties":{"name":{"type":"string"},` +
			`"description":{"type":"string"},"system":{"type":"string"},"model":{"type":"string"},"tools":{"type":"array","items":{"type":"object"}}},"required":["name"]}`
		if len(names) == 0 {
			agent = json.RawMessage(inline)
		} else {
			agent = json.RawMessage(`{"anyOf":[` + string(byName) + `,` + inline + `]}`)
		}
	}
	return json.RawMessage(`{"type":"object","properties":{"agent":` + string(agent) +
		`,"message":{"type":"string","description":"The task: everything the thread needs to know."}},"required":["agent","message"]}`)
}

// agentCall runs a call to one of the thread tools and appends its result (with its effects).
func (t *thread) agentCall(u *toolUse) error {
	delete(t.fresh, u.ev.ID)
	_, span := t.startToolSpan(u.data.Name, u.ev.ID, "agents")
	began := time.Now()
	var err error
	var failure string
	switch u.data.Name {
	case toolStartThread:
		failure, err = t.startThread(u)
	case toolSendMessage:
		failure, err = t.sendThreadMessage(u)
	case toolConsultAdvise:
		failure, err = t.consultAdvisor(trace.ContextWithSpan(t.ctx, span), u)
	default:
		failure = "there is no tool named " + u.data.Name
	}
	t.b.cfg.Metrics.ToolCall(u.data.Name, "agents", time.Since(began), failure != "" || err != nil)
	endToolSpan(span, nil, err, failure != "")
	if err != nil || failure == "" {
		return err
	}
	_, err = t.append("", nil, toolResult(u.ev.ID, true, failure))
	return err
}

// startThread starts a child thread on the call's task. A refusal the model can act on is returned as failure.
func (t *thread) startThread(u *toolUse) (failure string, err error) {
	var in struct {
		Agent   json.RawMessage `json:"agent"`
		Message string          `json:"message"`
	}
	if err := json.Unmarshal(u.data.Input, &in); err != nil {
		return "invalid input: " + err.Error(), nil
	}
	if t.child() {
		return "Only the coordinator can start threads: a thread cannot start threads of its own (depth is 1).", nil
	}
	if strings.TrimSpace(in.Message) == "" {
		return "invalid input: message is required: the task the thread is to work on", nil
	}
	agent, failure := t.threadAgent(in.Agent)
	if failure != "" {
		return failure, nil
	}
	now := apitype.Now()
	rec := apitype.SessionThread{Type: apitype.ObjectSessionThread, ID: apitype.NewID(apitype.PrefixThread), SessionID: t.sess.ID,
		ParentThreadID: new(t.rec.ID), Status: apitype.StatusRunning, Agent: *agent, CreatedAt: now, UpdatedAt: now}
	child := t.newThread(rec.ID, &rec, t, &rec.Agent)
	t.multi.mu.Lock()
	running := 0
	for _, th := range t.multi.threads {
		if th.rec.ArchivedAt == nil && (th.rec.Status == apitype.StatusRunning || th.rec.Status == apitype.StatusRescheduling) {
			running++
		}
	}
	if len(t.multi.threads) >= maxThreads {
		t.multi.mu.Unlock()
		return fmt.Sprintf("this session has started %d threads, the most it may: send more work to an idle thread "+
			"with send_thread_message instead.", maxThreads-1), nil
	}
	if running >= maxRunningThreads {
		t.multi.mu.Unlock()
		return fmt.Sprintf("%d threads of this session already run, the most there may be at once: wait for one to end its turn "+
			"(its last message comes back to you), then start this one.", running), nil
	}
	t.multi.threads = append(t.multi.threads, child)
	t.multi.mu.Unlock()

	content := []apitype.ContentBlock{apitype.TextBlock(in.Message)}
	result, _ := json.Marshal(map[string]string{"session_thread_id": rec.ID})
	evs := append([]apitype.NewEvent{
		toolResult(u.ev.ID, false, string(result)),
		mustEvent(apitype.EventSessionThreadCreated, apitype.ThreadCreated{SessionThreadID: rec.ID, AgentName: agent.Name}),
	}, t.messageTo(child, content)...)
	if _, err := t.appendP(&store.EventAppendParams{Events: evs, Threads: []apitype.SessionThread{rec}}); err != nil {
		return "", err
	}
	t.kick(child)
	return "", nil
}

// threadAgent resolves start_thread's agent: a roster agent's name, "self", or (inline enabled) an object.
func (t *thread) threadAgent(raw json.RawMessage) (*apitype.ThreadAgent, string) {
	var name string
	if err := json.Unmarshal(raw, &name); err == nil {
		switch {
		case name == "self" && t.roster.Self:
			return t.main.agent, ""
		case name == "self":
			return nil, "this agent may not start threads of itself (self is not in its roster)"
		}
		if a := t.roster.Find(name); a != nil && (a.ID != t.sess.Agent.ID || t.roster.Self) {
			return a, ""
		}
		return nil, fmt.Sprintf("there is no agent named %q in this agent's roster; %s", name, t.startable())
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, `invalid input: agent must be a roster agent's name, "self", or an inline agent object`
	}
	if !t.roster.Inline {
		return nil, "inline agents are disabled for this agent; " + t.startable()
	}
	var in struct {
		Name        string         `json:"name"`
		Description string         `json:"description"`
		System      string         `json:"system"`
		Model       any            `json:"model"`
		Tools       []apitype.Tool `json:"tools"`
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, "invalid inline agent: " + err.Error()
	}
	if in.Name = strings.TrimSpace(in.Name); in.Name == "" || len(in.Name) > 256 {
		return nil, "invalid inline agent: name is required (at most 256 characters)"
	}
	a := &apitype.ThreadAgent{Type: apitype.ThreadAgentInline, Name: in.Name, Description: in.Description, System: in.System,
		Model: t.main.agent.Model, Tools: in.Tools, MCPServers: []apitype.MCPServer{}, Skills: []apitype.SkillRef{}}
	switch m := in.Model.(type) {
	case nil:
	case string:
		a.Model = apitype.ModelConfig{ID: m}
	case map[string]any:
		id, _ := m["id"].(string)
		if id == "" {
			return nil, "invalid inline agent: model must be a model id or an object with an id"
		}
		a.Model = apitype.ModelConfig{ID: id}
	default:
		return nil, "invalid inline agent: model must be a model id or an object with an id"
	}
	if a.Tools == nil {
		a.Tools = []apitype.Tool{{Type: apitype.ToolTypeAgentToolset, Configs: []apitype.ToolConfig{}}}
	}
	for _, tl := range a.Tools {
		if tl.Type != apitype.ToolTypeAgentToolset && tl.Type != apitype.ToolTypeCustom {
			return nil, fmt.Sprintf("invalid inline agent: tools may hold %s and custom tools only", apitype.ToolTypeAgentToolset)
		}
	}
	return a, ""
}

// startable says which agents start_thread may start, for a refusal the model can act on.
func (t *thread) startable() string {
	var names []string
	for _, a := range t.roster.Agents {
		if a.ID != t.sess.Agent.ID {
			names = append(names, fmt.Sprintf("%q", a.Name))
		}
	}
	if t.roster.Self {
		names = append(names, `"self"`)
	}
	if len(names) == 0 {
		return "no roster agent can be started"
	}
	return "the agents you can start are " + strings.Join(names, ", ")
}

// sendThreadMessage delivers a message to a child (from the coordinator) or to the parent (from a child).
func (t *thread) sendThreadMessage(u *toolUse) (failure string, err error) {
	var in struct {
		SessionThreadID string `json:"session_thread_id"`
		Message         string `json:"message"`
	}
	if err := json.Unmarshal(u.data.Input, &in); err != nil {
		return "invalid input: " + err.Error(), nil
	}
	if strings.TrimSpace(in.Message) == "" {
		return "invalid input: message is required", nil
	}
	t.multi.mu.Lock()
	var to *thread
	switch {
	case t.child() && (in.SessionThreadID == "" || in.SessionThreadID == t.parent.rec.ID):
		to = t.parent
	case t.child():
		t.multi.mu.Unlock()
		return "a thread can only send messages to the coordinator that started it (leave session_thread_id out)", nil
	default:
		if c := t.thread(in.SessionThreadID); c != nil && c.child() {
			to = c
		}
	}
	var refusal string
	switch {
	case to == nil:
		refusal = fmt.Sprintf("there is no thread %q among the threads you started", in.SessionThreadID)
	case to.rec.ArchivedAt != nil:
		refusal = "the thread " + to.rec.ID + " is archived: it takes no more messages"
	case to.rec.Status == apitype.StatusTerminated:
		refusal = "the thread " + to.rec.ID + " is terminated: it takes no more messages"
	}
	t.multi.mu.Unlock()
	if refusal != "" {
		return refusal, nil
	}
	evs := append([]apitype.NewEvent{toolResult(u.ev.ID, false, "Message sent to thread "+to.rec.ID+".")},
		t.messageTo(to, []apitype.ContentBlock{apitype.TextBlock(in.Message)})...)
	if _, err := t.append("", nil, evs...); err != nil {
		return "", err
	}
	t.kick(to)
	return "", nil
}

// advisorSystem is the advisor's system prompt.
const advisorSystem = "You advise an AI agent that is working on a task. Answer its question directly and concisely, " +
	"from what it tells you; say what you would do and why, and what to watch out for."

// consultAdvisor asks the advisor model the call's question, and appends its answer with the request's usage,
// which the session's counts.
func (t *thread) consultAdvisor(ctx context.Context, u *toolUse) (failure string, err error) {
	var in struct {
		Question string `json:"question"`
		Context  string `json:"context"`
	}
	if err := json.Unmarshal(u.data.Input, &in); err != nil || strings.TrimSpace(in.Question) == "" {
		return "invalid input: question is required", nil
	}
	var over bool
	t.locked(func() { over = t.overBudget(t.budget) })
	if over {
		return "The session's budget is reached: the advisor was not asked.", nil
	}
	text := in.Question
	if in.Context != "" {
		text = "<context>\n" + in.Context + "\n</context>\n\n" + in.Question
	}
	req := &model.Request{Model: t.roster.Advisor, System: advisorSystem, MaxTokens: t.b.cfg.MaxTokens,
		Messages: []model.Message{{Role: "user", Content: []model.Block{{Type: model.BlockText, Text: text}}}}}
	wctx, done := t.watchInterrupts()
	callCtx, cancel := context.WithTimeout(wctx, t.b.cfg.ModelTimeout)
	began := time.Now()
	resp, err := t.b.cfg.Model.Call(trace.ContextWithSpan(callCtx, trace.SpanFromContext(ctx)), req, nil)
	cancel()
	interrupted := done()
	t.recordModel(req.Model, time.Since(began), resp, err, interrupted, false)
	switch {
	case interrupted:
		return msgInterrupted, nil
	case t.ctx.Err() != nil:
		return "", context.Cause(t.ctx)
	case err != nil:
		return "The advisor could not be reached (" + err.Error() + "); go on without its advice, or ask again later.", nil
	}
	var answer strings.Builder
	for _, b := range resp.Content {
		if b.Type == model.BlockText {
			answer.WriteString(b.Text)
		}
	}
	total, usage := t.addUsageFor(resp, req.Model)
	evs := append([]apitype.NewEvent{toolResult(u.ev.ID, false, answer.String())}, usage...)
	_, err = t.append("", total, evs...)
	return "", err
}
