package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/price"
	"github.com/corralhq/corral/internal/store"
)

const maxTitleLen = 512

var sessionStatuses = []string{apitype.StatusRescheduling, apitype.StatusRunning, apitype.StatusIdle,
	apitype.StatusTerminated}

// sessionCreateRequest is the body of POST /v1/sessions.
type sessionCreateRequest struct {
	Agent         json.RawMessage   `json:"agent"`
	EnvironmentID string            `json:"environment_id"`
	Title         *string           `json:"title"`
	InitialEvents []json.RawMessage `json:"initial_events"`
	Resources     []json.RawMessage `json:"resources"`
	VaultIDs      []string          `json:"vault_ids"`
	Budget        json.RawMessage   `json:"budget"`
	Metadata      map[string]string `json:"metadata"`
}

// agentRef is the parsed "agent" of a session create: a reference and optional overrides.
type agentRef struct {
	ID         string
	Version    int
	System     nullable[string]
	Model      json.RawMessage
	Tools      nullable[[]json.RawMessage]
	MCPServers nullable[[]json.RawMessage]
	Skills     nullable[[]json.RawMessage]
}

func parseAgentRef(p string, raw json.RawMessage) (agentRef, error) {
	if isNull(raw) {
		return agentRef{}, invalid(p, "required")
	}
	var ref agentRef
	if raw = bytes.TrimSpace(raw); raw[0] == '"' {
		if err := json.Unmarshal(raw, &ref.ID); err != nil {
			return ref, invalid(p, "expected an agent id or an object")
		}
	} else {
		typ, err := typeOf(p, raw)
		if err != nil {
			return ref, err
		}
		switch typ {
		case "agent":
			var in struct {
				Type    string `json:"type"`
				ID      string `json:"id"`
				Version *int   `json:"version"`
			}
			if err := strictUnmarshal(p, raw, &in); err != nil {
				return ref, err
			}
			ref.ID = in.ID
			if in.Version != nil {
				if *in.Version < 1 {
					return ref, invalid(path(p, "version"), "must be >= 1")
				}
				ref.Version = *in.Version
			}
		case "agent_with_overrides":
			var in struct {
				Type       string                      `json:"type"`
				ID         string                      `json:"id"`
				Version    *int                        `json:"version"`
				System     nullable[string]            `json:"system"`
				Model      json.RawMessage             `json:"model"`
				Tools      nullable[[]json.RawMessage] `json:"tools"`
				MCPServers nullable[[]json.RawMessage] `json:"mcp_servers"`
				Skills     nullable[[]json.RawMessage] `json:"skills"`
			}
			if err := strictUnmarshal(p, raw, &in); err != nil {
				return ref, err
			}
			ref = agentRef{ID: in.ID, System: in.System, Model: in.Model, Tools: in.Tools, MCPServers: in.MCPServers,
				Skills: in.Skills}
			if in.Version != nil {
				if *in.Version < 1 {
					return ref, invalid(path(p, "version"), "must be >= 1")
				}
				ref.Version = *in.Version
			}
		case "":
			return ref, invalid(path(p, "type"), "required")
		default:
			return ref, invalid(path(p, "type"), `must be "agent" or "agent_with_overrides"`)
		}
	}
	return ref, checkString(path(p, "id"), ref.ID, true, 256)
}

// snapshot builds the session's agent from the stored agent and the overrides.
func (ref *agentRef) snapshot(p string, a *apitype.Agent) (apitype.SessionAgent, error) {
	normalizeAgent(a)
	sa := apitype.SessionAgent{Type: apitype.ObjectAgent, ID: a.ID, Version: a.Version, Name: a.Name,
		Description: a.Description, System: a.System, Model: a.Model, Tools: a.Tools, MCPServers: a.MCPServers,
		Skills: a.Skills, ExecutionIdentity: a.ExecutionIdentity, Multiagent: a.Multiagent}
	var err error
	if ref.System.Set {
		if err := checkString(path(p, "system"), ref.System.Value, false, maxSystemLen); err != nil {
			return sa, err
		}
		sa.System = ref.System.Value
	}
	if !isNull(ref.Model) {
		if sa.Model, err = parseModel(path(p, "model"), ref.Model, &a.Model); err != nil {
			return sa, err
		}
	}
	if ref.MCPServers.Set {
		if sa.MCPServers, err = resolveMCPServers(path(p, "mcp_servers"), ref.MCPServers.Value); err != nil {
			return sa, err
		}
	}
	if ref.Tools.Set {
		if sa.Tools, err = resolveTools(path(p, "tools"), ref.Tools.Value, sa.MCPServers); err != nil {
			return sa, err
		}
	} else if ref.MCPServers.Set {
		if err := checkToolServers(sa.Tools, sa.MCPServers); err != nil {
			return sa, err
		}
	}
	if ref.Skills.Set {
		if sa.Skills, err = resolveSkills(path(p, "skills"), ref.Skills.Value); err != nil {
			return sa, err
		}
	}
	return sa, nil
}

var amountRE = regexp.MustCompile(`^(0|[1-9][0-9]{0,17})$`)

// resolveBudget validates «BudgetIn» and returns it compacted.
func resolveBudget(p string, raw json.RawMessage) (json.RawMessage, error) {
	var in struct {
		Type        string `json:"type"`
		MaxListCost *struct {
			Amount   string `json:"amount"`
			Currency string `json:"currency"`
		} `json:"max_list_cost"`
	}
	if err := strictUnmarshal(p, raw, &in); err != nil {
		return nil, err
	}
	if in.Type != "limit" {
		return nil, invalid(path(p, "type"), `must be "limit"`)
	}
	if in.MaxListCost == nil {
		return nil, invalid(path(p, "max_list_cost"), "required")
	}
	if !amountRE.MatchString(in.MaxListCost.Amount) {
		return nil, invalid(path(p, "max_list_cost.amount"), "must be an integer amount in minor units, as a string")
	}
	if n, err := strconv.ParseInt(in.MaxListCost.Amount, 10, 64); err != nil || n > price.MaxBudgetCents {
		return nil, invalid(path(p, "max_list_cost.amount"), "must be at most %d (US cents: $%d)", price.MaxBudgetCents,
			price.MaxBudgetCents/100)
	}
	if in.MaxListCost.Currency != "USD" {
		return nil, invalid(path(p, "max_list_cost.currency"), `must be "USD"`)
	}
	out, _ := json.Marshal(in)
	return out, nil
}

// checkBudgetable refuses a budget for a session whose model has no list price: its cost could not be known,
// and it is never priced at zero.
func (s *Server) checkBudgetable(a *apitype.SessionAgent) error {
	if !s.prices.Priced(a.Model.ID) {
		return invalidCode("model_not_budgetable", "budget: model %q has no list price (the operator's --prices file can add one)",
			a.Model.ID)
	}
	return nil
}

// checkRaised refuses a new budget at or below the list cost the session has already spent.
func checkRaised(raw json.RawMessage, u *apitype.SessionUsage) error {
	b, err := apitype.ParseBudget(raw)
	if err != nil || b == nil {
		return err
	}
	cents, _ := b.Cents() // resolveBudget checked it
	if spent := price.Pico(u.ListCostPicodollars); price.FromCents(cents) <= spent {
		return invalidCode("budget_not_raised", "budget: max_list_cost must be above the list cost already spent (%d cents)",
			spent.Cents())
	}
	return nil
}

// normalizeSession fills the response-only parts of a session: empty collections, the live duration, the usage's
// active time and, before the first model request of a priced model, a list cost of zero.
func (s *Server) normalizeSession(sess *apitype.Session, now time.Time) {
	u := &sess.Usage
	u.ActiveSeconds = sess.Stats.ActiveSeconds
	if u.ListCost == nil && !u.Unpriced && u.InputTokens == 0 && u.OutputTokens == 0 && s.prices.Priced(sess.Agent.Model.ID) {
		u.ListCost = &apitype.Money{Amount: "0", Currency: "USD"}
	}
	sess.Type = "session"
	if sess.Resources == nil {
		sess.Resources = []apitype.Resource{}
	}
	if sess.VaultIDs == nil {
		sess.VaultIDs = []string{}
	}
	if sess.Metadata == nil {
		sess.Metadata = map[string]string{}
	}
	if sess.OutcomeEvaluations == nil {
		sess.OutcomeEvaluations = []json.RawMessage{}
	}
	a := &sess.Agent
	if a.Tools == nil {
		a.Tools = []apitype.Tool{}
	}
	if a.MCPServers == nil {
		a.MCPServers = []apitype.MCPServer{}
	}
	if a.Skills == nil {
		a.Skills = []apitype.SkillRef{}
	}
	if len(a.Multiagent) == 0 {
		a.Multiagent = nil
	}
	if len(sess.Budget) == 0 {
		sess.Budget = nil
	}
	if sess.Status != apitype.StatusTerminated {
		sess.Stats.DurationSeconds = max(0, now.Sub(sess.CreatedAt).Seconds())
	}
}

func (s *Server) sessionCreate(w http.ResponseWriter, r *http.Request) error {
	var req sessionCreateRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	if len(req.InitialEvents) > maxInitialEvents {
		return invalid("initial_events", "at most %d events", maxInitialEvents)
	}
	initial := make([]apitype.NewEvent, 0, len(req.InitialEvents))
	types := make([]apitype.EventType, 0, len(req.InitialEvents))
	for i, raw := range req.InitialEvents {
		ce, err := parseClientEvent(index("initial_events", i), raw,
			[]apitype.EventType{apitype.EventUserMessage, apitype.EventUserDefineOutcome})
		if err != nil {
			return err
		}
		if err := s.resolveRubric(r.Context(), ce.path, &ce.ev); err != nil {
			return err
		}
		initial = append(initial, traced(r.Context(), ce.ev))
		types = append(types, ce.ev.Type)
	}
	if err := s.admitTurn(r.Context(), w, "", types); err != nil {
		return err
	}
	created, err := s.createSession(r.Context(), &req, initial, nil)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, created)
}

// sessionOrigin is what a session a deployment run creates has beyond its request: the deployment, and the
// deployment's sealed repository tokens by resource index, which are sealed anew for the session's resources.
// The session's id is derived from the run's, so that a run retried after a crash finds the session it made.
type sessionOrigin struct {
	DeploymentID, RunID string
	Tokens              map[int]*store.SealedSecret
}

// createSession creates the session req describes, with the initial events given (parsed), and returns it as
// GET shows it. Its errors are the API's: a 400 names the field. A deployment run creates its sessions here
// too, with origin set.
func (s *Server) createSession(ctx context.Context, req *sessionCreateRequest, initial []apitype.NewEvent,
	origin *sessionOrigin) (*apitype.Session, error) {
	ref, err := parseAgentRef("agent", req.Agent)
	if err != nil {
		return nil, err
	}
	if err := checkString("environment_id", req.EnvironmentID, true, 256); err != nil {
		return nil, err
	}
	now := s.now()
	sess := &apitype.Session{Type: apitype.ObjectSession, ID: apitype.NewID(apitype.PrefixSession),
		EnvironmentID: req.EnvironmentID, Status: apitype.StatusIdle, Metadata: req.Metadata,
		VaultIDs: req.VaultIDs, CreatedAt: now, UpdatedAt: now}
	if origin != nil {
		sess.ID, sess.DeploymentID = derivedID(apitype.PrefixSession, origin.RunID), &origin.DeploymentID
	}
	if req.Title != nil {
		if err := checkString("title", *req.Title, false, maxTitleLen); err != nil {
			return nil, err
		}
		sess.Title = req.Title
	}
	if err := validateMetadata("metadata", req.Metadata); err != nil {
		return nil, err
	}
	if !isNull(req.Budget) {
		if sess.Budget, err = resolveBudget("budget", req.Budget); err != nil {
			return nil, err
		}
	}
	var tokens []store.SealedSecret
	for i, raw := range req.Resources {
		res, token, err := parseResource(index("resources", i), raw, now, true)
		if err != nil {
			return nil, err
		}
		if err := s.checkFile(ctx, index("resources", i), &res); err != nil {
			return nil, err
		}
		if err := s.checkMemoryStore(ctx, index("resources", i), &res, sess.Resources); err != nil {
			return nil, err
		}
		var sealed *store.SealedSecret
		switch {
		case token != "":
			sealed, err = s.sealToken(res.ID, token)
		case origin != nil && origin.Tokens[i] != nil:
			sealed, err = s.resealToken(origin.Tokens[i], res.ID)
		}
		if err != nil {
			return nil, err
		}
		if sealed != nil {
			tokens = append(tokens, *sealed)
		}
		if err := checkMountPath(index("resources", i), sess.Resources, res.MountPath); err != nil {
			return nil, err
		}
		sess.Resources = append(sess.Resources, res)
	}
	if len(initial) > 0 {
		// Initial events start the first turn at once: the session is running from its creation.
		sess.Status = apitype.StatusRunning
	}

	a, err := s.store.AgentGet(ctx, &store.AgentGetParams{ID: ref.ID, Version: ref.Version})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			if ref.Version > 0 {
				return nil, invalid("agent.version", "agent %s has no version %d", ref.ID, ref.Version)
			}
			return nil, notFound("agent", ref.ID)
		}
		return nil, err
	}
	if a.ArchivedAt != nil {
		return nil, invalid("agent", "agent %s is archived", ref.ID)
	}
	if sess.Agent, err = ref.snapshot("agent", a); err != nil {
		return nil, err
	}
	if err := s.resolveSkillVersions(ctx, "agent.skills", sess.Agent.Skills); err != nil {
		return nil, err
	}
	// A multi-agent session snapshots its roster (full agents) and starts with its primary thread.
	var threads []apitype.SessionThread
	if sess.Agent.Multiagent, err = s.snapshotMultiagent(ctx, "agent.multiagent", &sess.Agent); err != nil {
		return nil, err
	}
	if sess.Agent.Multiagent != nil {
		threads = []apitype.SessionThread{{Type: apitype.ObjectSessionThread, ID: apitype.NewID(apitype.PrefixThread),
			SessionID: sess.ID, Status: sess.Status, Agent: sessionThreadAgent(&sess.Agent), CreatedAt: now,
			UpdatedAt: now}}
	}
	if sess.Budget != nil {
		if err := s.checkBudgetable(&sess.Agent); err != nil {
			return nil, err
		}
	}
	env, err := s.store.EnvironmentGet(ctx, req.EnvironmentID)
	if err != nil {
		return nil, lookup(err, "environment", req.EnvironmentID)
	}
	if env.ArchivedAt != nil {
		return nil, invalidCode("environment_archived", "environment_id: environment %s is archived", env.ID)
	}
	if err := s.checkSessionVaults(ctx, req.VaultIDs); err != nil {
		return nil, err
	}
	if err := s.own(ctx, sess.ID); err != nil {
		return nil, err
	}
	// The repositories' sealed tokens go in with the session: a brain that claims it at once finds them.
	created, events, err := s.store.SessionCreate(ctx, &store.SessionCreateParams{Session: sess, InitialEvents: initial,
		ResourceSecrets: tokens, Threads: threads})
	if err != nil {
		return nil, err
	}
	// The new session's log is its initial events: its evaluations are theirs, without reading the log back.
	var ev evaluations
	if err := ev.read(events); err != nil {
		return nil, err
	}
	if created.OutcomeEvaluations, err = ev.encode(); err != nil {
		return nil, err
	}
	s.normalizeSession(created, s.now())
	return created, nil
}

func (s *Server) sessionGet(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("session_id")
	sess, err := s.store.SessionGet(r.Context(), id)
	if err != nil {
		return lookup(err, "session", id)
	}
	if sess.OutcomeEvaluations, err = s.outcomeEvaluations(r.Context(), id); err != nil {
		return err
	}
	now := s.now()
	if err := s.addRunningStretch(r.Context(), sess, now); err != nil {
		return err
	}
	s.normalizeSession(sess, now)
	return writeJSON(w, http.StatusOK, sess)
}

// addRunningStretch adds to a working session's active time the stretch it is in, so that a running session's
// active_seconds (stats and usage) grow while it works: the stored figure counts the finished stretches only (a
// brain adds each as the session idles). The stretch starts at the first session.status_running after the
// session's last session.status_idle (a rescheduling within it counts, as the brain counts it): two reads of
// the session's log, each one event long, and none for a session that is not working. A brain that takes over
// a crashed one's turn counts that turn from the takeover, so the figure at the next idle can be lower than the
// estimate by the time the crashed brain lost.
func (s *Server) addRunningStretch(ctx context.Context, sess *apitype.Session, now time.Time) error {
	if sess.Status != apitype.StatusRunning && sess.Status != apitype.StatusRescheduling {
		return nil
	}
	idle, err := s.store.EventList(ctx, &store.EventListParams{SessionID: sess.ID, Desc: true, Limit: 1,
		Types: []apitype.EventType{apitype.EventSessionStatusIdle}})
	if err != nil {
		return err
	}
	after := int64(0)
	if len(idle) > 0 {
		after = idle[0].Seq
	}
	running, err := s.store.EventList(ctx, &store.EventListParams{SessionID: sess.ID, AfterSeq: after, Limit: 1,
		Types: []apitype.EventType{apitype.EventSessionStatusRunning}})
	if err != nil || len(running) == 0 {
		return err
	}
	sess.Stats.ActiveSeconds += max(0, now.Sub(running[0].CreatedAt).Seconds())
	return nil
}

// sessionUpdateRequest is the body of POST /v1/sessions/{id}.
type sessionUpdateRequest struct {
	Title    nullable[string]          `json:"title"`
	Metadata map[string]*string        `json:"metadata"`
	Agent    nullable[json.RawMessage] `json:"agent"`
	Budget   nullable[json.RawMessage] `json:"budget"`
	VaultIDs nullable[[]string]        `json:"vault_ids"`
}

func (s *Server) sessionUpdate(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("session_id")
	var req sessionUpdateRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	if req.VaultIDs.Set {
		return invalid("vault_ids", "cannot be changed after the session is created")
	}
	var agentUpd struct {
		Tools      nullable[[]json.RawMessage] `json:"tools"`
		MCPServers nullable[[]json.RawMessage] `json:"mcp_servers"`
	}
	if req.Agent.Set {
		if req.Agent.Null {
			return invalid("agent", "cannot be cleared")
		}
		if err := strictUnmarshal("agent", req.Agent.Value, &agentUpd); err != nil {
			return err
		}
	}
	var budget json.RawMessage
	if req.Budget.Set && !req.Budget.Null {
		var err error
		if budget, err = resolveBudget("budget", req.Budget.Value); err != nil {
			return err
		}
	}
	now := s.now()
	var changed sessionChanges
	sess, err := s.store.SessionUpdate(r.Context(), id, func(sess *apitype.Session) error {
		changed = sessionChanges{}
		before := *sess
		defer func() { changed.diff(&before, sess) }()
		if req.Title.Set {
			if req.Title.Null {
				sess.Title = nil
			} else {
				if err := checkString("title", req.Title.Value, false, maxTitleLen); err != nil {
					return err
				}
				t := req.Title.Value
				sess.Title = &t
			}
		}
		if req.Metadata != nil {
			md, err := patchMetadata("metadata", sess.Metadata, req.Metadata)
			if err != nil {
				return err
			}
			sess.Metadata = md
		}
		if req.Agent.Set && (agentUpd.Tools.Set || agentUpd.MCPServers.Set) {
			if sess.Status == apitype.StatusRunning {
				return invalid("agent", "cannot change the agent's tools while the session is running")
			}
			servers := sess.Agent.MCPServers
			var err error
			if agentUpd.MCPServers.Set {
				if servers, err = resolveMCPServers("agent.mcp_servers", agentUpd.MCPServers.Value); err != nil {
					return err
				}
			}
			tools := sess.Agent.Tools
			if agentUpd.Tools.Set {
				if tools, err = resolveTools("agent.tools", agentUpd.Tools.Value, servers); err != nil {
					return err
				}
			} else if err := checkToolServers(tools, servers); err != nil {
				return err
			}
			sess.Agent.Tools, sess.Agent.MCPServers = tools, servers
		}
		if req.Budget.Set {
			if sess.Status == apitype.StatusTerminated {
				return invalid("budget", "session is terminated")
			}
			if len(sess.Budget) == 0 || string(sess.Budget) == "null" {
				if !req.Budget.Null {
					return invalidCode("budget_create_only", "budget: can only be set when the session is created")
				}
			} else {
				if budget != nil {
					if err := s.checkBudgetable(&sess.Agent); err != nil {
						return err
					}
					if err := checkRaised(budget, &sess.Usage); err != nil {
						return err
					}
				}
				sess.Budget = budget
			}
		}
		sess.UpdatedAt = now
		return nil
	})
	if err != nil {
		return lookup(err, "session", id)
	}
	if err := s.addRunningStretch(r.Context(), sess, now); err != nil {
		return err
	}
	s.normalizeSession(sess, now)
	if ev, ok := changed.event(sess); ok {
		// A changed budget wakes the session: a brain re-checks it, and work paused at the old one resumes.
		if _, err := s.store.EventAppend(r.Context(), &store.EventAppendParams{SessionID: id,
			Events: []apitype.NewEvent{ev}, Wake: changed.budget}); err != nil {
			return lookup(err, "session", id)
		}
	}
	return writeJSON(w, http.StatusOK, sess)
}

// sessionChanges records which fields a session update changed, for its session.updated event.
type sessionChanges struct {
	title, metadata, agent, budget bool
}

// diff compares the session before and after an update.
func (c *sessionChanges) diff(before, after *apitype.Session) {
	enc := func(v any) string { b, _ := json.Marshal(v); return string(b) } // sessions always encode
	c.title = enc(before.Title) != enc(after.Title)
	c.metadata = !maps.Equal(before.Metadata, after.Metadata)
	c.agent = enc(before.Agent.Tools) != enc(after.Agent.Tools) || enc(before.Agent.MCPServers) != enc(after.Agent.MCPServers)
	c.budget = !bytes.Equal(before.Budget, after.Budget)
}

// event is the session.updated event of the changes, carrying only what changed (the full metadata bag when it
// is not empty, the full agent snapshot), or false when the update changed nothing.
func (c *sessionChanges) event(sess *apitype.Session) (apitype.NewEvent, bool) {
	fields := map[string]any{}
	if c.title {
		fields["title"] = sess.Title
	}
	if c.metadata && len(sess.Metadata) > 0 {
		fields["metadata"] = sess.Metadata
	}
	if c.agent {
		fields["agent"] = sess.Agent
	}
	if c.budget {
		fields["budget"] = sess.Budget
	}
	if len(fields) == 0 && !c.metadata {
		return apitype.NewEvent{}, false
	}
	ev, err := apitype.MakeEvent(apitype.EventSessionUpdated, fields)
	return ev, err == nil // a map of encodable fields always encodes
}

func (s *Server) sessionList(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r.URL)
	lp, limit, c, err := listParams(q, defaultLimit, maxLimit)
	if err != nil {
		return err
	}
	if lp.Desc, err = q.desc(true); err != nil {
		return err
	}
	p := store.SessionListParams{ListParams: lp, AgentID: q.str("agent_id"), Statuses: q.list("statuses"),
		DeploymentID: q.str("deployment_id")}
	if p.AgentVersion, err = q.intParam("agent_version"); err != nil {
		return err
	}
	if p.AgentVersion > 0 && p.AgentID == "" {
		return invalid("agent_version", "requires agent_id")
	}
	for i, st := range p.Statuses {
		if !slices.Contains(sessionStatuses, st) {
			return invalid(index("statuses", i), "unknown status %q", st)
		}
	}
	memoryStoreID := q.str("memory_store_id")
	data, next, prev, err := listByCreated(p.ListParams, limit, c, true,
		func(lp *store.ListParams) ([]apitype.Session, error) {
			sp := p
			sp.ListParams = *inWorkspace(r, lp)
			if memoryStoreID != "" {
				return s.sessionsWithMemoryStore(r.Context(), &sp, memoryStoreID)
			}
			return s.store.SessionList(r.Context(), &sp)
		},
		func(sess *apitype.Session) (time.Time, string) { return sess.CreatedAt, sess.ID })
	if err != nil {
		return err
	}
	now := s.now()
	for i := range data {
		if err := s.addRunningStretch(r.Context(), &data[i], now); err != nil {
			return err
		}
		s.normalizeSession(&data[i], now)
	}
	return writeJSON(w, http.StatusOK, biPage[apitype.Session]{Data: data, NextPage: next, PrevPage: prev})
}

// sessionsWithMemoryStore lists the sessions of p that have memory store storeID as a resource, at most p.Limit
// of them. The store cannot select sessions by the resources in their documents, so this reads p's list on, in
// batches, past the sessions without it: a filter that matches few sessions reads many.
func (s *Server) sessionsWithMemoryStore(ctx context.Context, p *store.SessionListParams, storeID string) ([]apitype.Session, error) {
	batch := *p
	batch.Limit = max(p.Limit, maxLimit)
	var out []apitype.Session
	for {
		page, err := s.store.SessionList(ctx, &batch)
		if err != nil {
			return nil, err
		}
		for _, sess := range page {
			if slices.ContainsFunc(sess.Resources, func(res apitype.Resource) bool {
				return res.Type == apitype.ResourceMemoryStore && res.MemoryStoreID == storeID
			}) {
				if out = append(out, sess); len(out) == p.Limit {
					return out, nil
				}
			}
		}
		if len(page) < batch.Limit {
			return out, nil
		}
		last := page[len(page)-1]
		batch.After = &store.Cursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
}

// sessionArchive serves POST /v1/sessions/{id}/archive. Archiving is final: the session accepts no more
// events, and one not yet terminated terminates (session.status_terminated, status terminated, its duration
// frozen), which also tells a brain working on it to stop.
func (s *Server) sessionArchive(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("session_id")
	now := s.now()
	sess, err := s.store.SessionUpdate(r.Context(), id, func(sess *apitype.Session) error {
		if sess.ArchivedAt == nil {
			sess.ArchivedAt = &now
			sess.UpdatedAt = now
			if sess.Status != apitype.StatusTerminated {
				sess.Stats.DurationSeconds = max(0, now.Sub(sess.CreatedAt).Seconds())
			}
		}
		return nil
	})
	if err != nil {
		return lookup(err, "session", id)
	}
	// A retried archive whose first attempt failed between the two writes terminates the session here too.
	if sess.Status != apitype.StatusTerminated {
		ev, err := apitype.MakeEvent(apitype.EventSessionStatusTerminated, nil)
		if err != nil {
			return err
		}
		p := &store.EventAppendParams{SessionID: id, Events: []apitype.NewEvent{ev}, Status: apitype.StatusTerminated}
		if err := s.terminateThreads(r.Context(), p, now); err != nil {
			return err
		}
		if _, err := s.store.EventAppend(r.Context(), p); err != nil {
			return lookup(err, "session", id)
		}
		sess.Status = apitype.StatusTerminated
	}
	s.normalizeSession(sess, s.now())
	s.emitWebhook(r.Context(), "session.archived", id)
	return writeJSON(w, http.StatusOK, sess)
}

// terminateThreads adds to the append that terminates a multi-agent session the termination of each of its threads
// that is not terminated yet: its session.thread_status_terminated (a child's cross-posted) and its record.
func (s *Server) terminateThreads(ctx context.Context, p *store.EventAppendParams, now time.Time) error {
	lp := &store.ThreadListParams{SessionID: p.SessionID, Limit: 1000}
	for {
		page, err := s.store.ThreadList(ctx, lp)
		if err != nil {
			return err
		}
		for _, th := range page {
			if th.Status == apitype.StatusTerminated {
				continue
			}
			ev, err := apitype.MakeEvent(apitype.EventSessionThreadStatusTerminated,
				apitype.ThreadStatus{SessionThreadID: th.ID, AgentName: th.Agent.Name})
			if err != nil {
				return err
			}
			if !th.Primary() {
				ev.Thread, ev.CrossPost = th.ID, true
			}
			th.Status, th.UpdatedAt = apitype.StatusTerminated, now
			p.Events = append(p.Events, ev)
			p.Threads = append(p.Threads, th)
		}
		if len(page) < lp.Limit {
			return nil
		}
		last := page[len(page)-1]
		lp.After = &store.Cursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
}

func (s *Server) sessionDelete(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("session_id")
	if err := s.store.SessionDelete(r.Context(), id); err != nil {
		return lookup(err, "session", id)
	}
	s.emitWebhook(r.Context(), "session.deleted", id)
	return writeJSON(w, http.StatusOK, map[string]string{"id": id, "type": "session_deleted"})
}
