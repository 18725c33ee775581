package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// The dream runner: a fleet job (on the maintain leader, so once per fleet) that drives every dream that has not
// ended. A dream runs as a session of the server's own, through the same mounts as any session: its input
// memory store read-only and its output store read-write under /mnt/memory/, each input session's transcript a
// file under /mnt/session/uploads/transcripts/. Every step is idempotent and keeps its state in the store (the
// ids of the dream's session, output store and files derive from the dream's id), so a runner that crashes
// anywhere is resumed by the next one, on this process or another.

// Dream runner defaults.
const (
	// DefaultDreamTimeout is how long a dream may run (from its creation) before it fails with a timeout
	// error and its session is interrupted (Config.DreamTimeout).
	DefaultDreamTimeout = time.Hour
	// DreamPollInterval is how often the runner looks at the dreams that have not ended.
	DreamPollInterval = 2 * time.Second
	// maxTranscriptBytes bounds one session's transcript, maxTranscriptsBytes all of a dream's: a longer log
	// is cut (its end kept) and the cut said in the file.
	maxTranscriptBytes  = 256 << 10
	maxTranscriptsBytes = 8 << 20
	// maxTranscriptField bounds one tool input or result in a transcript.
	maxTranscriptField = 2000
	// transcriptsDir is where the dream's session finds the transcripts.
	transcriptsDir = fileUploadsRoot + "transcripts/"
	// dreamAgentName names the agent snapshot a dream's session runs (an agent with no row of its own).
	dreamAgentName = "corral-dream"
)

// RunDreams advances every dream that has not ended by one step: it starts a pending dream's session, and
// follows a running one's to its end. Errors of one dream do not stop the others; the first is returned.
func (s *Server) RunDreams(ctx context.Context) error {
	ds, err := s.store.DreamListActive(ctx, 0)
	if err != nil {
		return fmt.Errorf("dreams: list: %w", err)
	}
	var first error
	for i := range ds {
		d := &ds[i]
		var err error
		if d.Status == apitype.DreamPending {
			err = s.startDream(ctx, d)
		} else {
			err = s.followDream(ctx, d)
		}
		if err != nil {
			s.log.Warn("dream step failed", "dream", d.ID, "err", err)
			first = firstErr(first, err)
		}
	}
	return first
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// derivedID is the id of a resource a dream or a deployment run makes: the maker's id (after its prefix) under
// another prefix, so that a step redone after a crash finds what it made before instead of making another.
func derivedID(prefix, id string) string {
	_, rest, _ := strings.Cut(id, "_")
	return prefix + rest
}

// failDream ends a dream with a typed error (unless it ended first).
func (s *Server) failDream(ctx context.Context, id string, typ apitype.DreamErrorType, format string, args ...any) error {
	now := s.now()
	_, err := s.store.DreamUpdate(ctx, id, func(d *apitype.Dream) error {
		d.Status, d.EndedAt = apitype.DreamFailed, &now
		d.Error = &apitype.DreamError{Type: typ, Message: fmt.Sprintf(format, args...)}
		return nil
	})
	return err
}

// startDream makes a pending dream's output store, transcripts and session, then marks it running. Nothing is
// written before the inputs are checked: a dream over a deleted store or session fails with nothing changed.
func (s *Server) startDream(ctx context.Context, d *apitype.Dream) error {
	ws, err := s.ownerOf(ctx, d.ID)
	if err != nil {
		return err
	}
	ctx = withWorkspace(ctx, ws) // what the dream reads and writes is its workspace's
	sessID := derivedID(apitype.PrefixSession, d.ID)
	mss := s.store
	in, err := mss.MemoryStoreGet(ctx, d.MemoryStoreInput())
	if errors.Is(err, store.ErrNotFound) {
		return s.failDream(ctx, d.ID, apitype.DreamErrInputNotFound,
			"the input memory store %s was deleted before the dream started; nothing was written", d.MemoryStoreInput())
	}
	if err != nil {
		return err
	}
	outID := in.ID
	if d.OutputBehavior.Type == apitype.DreamCreateNew {
		outID = derivedID(apitype.PrefixMemoryStore, d.ID)
	}
	// A crash after the session's creation: only the dream's record is left to write.
	if _, err := s.store.SessionGet(ctx, sessID); err == nil {
		return s.markDreamRunning(ctx, d.ID, sessID, outID)
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if in.ArchivedAt != nil && d.OutputBehavior.Type == apitype.DreamUpdateExisting {
		return s.failDream(ctx, d.ID, apitype.DreamErrInputArchived,
			"the memory store %s was archived before the dream started; nothing was written", in.ID)
	}
	transcripts, missing, err := s.renderTranscripts(ctx, d.SessionInputs())
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return s.failDream(ctx, d.ID, apitype.DreamErrSessionsMissing,
			"sessions %s were deleted before the dream read them; nothing was written", strings.Join(missing, ", "))
	}
	if s.files == nil {
		return s.failDream(ctx, d.ID, apitype.DreamErrInternal, "this server stores no files: the transcripts cannot be placed")
	}
	out := in
	if d.OutputBehavior.Type == apitype.DreamCreateNew {
		if out, err = s.makeDreamOutput(ctx, mss, d, in, outID); err != nil {
			return err
		}
	}
	now := s.now()
	res := []apitype.Resource{}
	if out.ID != in.ID {
		res = append(res, apitype.Resource{ID: apitype.NewID(apitype.PrefixResource), Type: apitype.ResourceMemoryStore,
			MemoryStoreID: in.ID, MountPath: apitype.MemoryMountPath(in.Name, in.ID), Access: apitype.AccessReadOnly,
			Name: in.Name, Description: in.Description,
			Instructions: "The dream's input: read it, never change it.", CreatedAt: now, UpdatedAt: now})
	}
	res = append(res, apitype.Resource{ID: apitype.NewID(apitype.PrefixResource), Type: apitype.ResourceMemoryStore,
		MemoryStoreID: out.ID, MountPath: apitype.MemoryMountPath(out.Name, out.ID), Access: apitype.AccessReadWrite,
		Name: out.Name, Description: out.Description,
		Instructions: "The dream's output: what this store holds when the session ends is the dream's result.",
		CreatedAt:    now, UpdatedAt: now})
	// The session is the dream's workspace's, and so are the transcripts scoped to it (files.Service.Record).
	if err := s.own(ctx, sessID); err != nil {
		return fmt.Errorf("dream %s: own session: %w", d.ID, err)
	}
	scope := &apitype.FileScope{Type: apitype.FileScopeSession, ID: sessID}
	for _, t := range transcripts {
		f, err := s.files.Create(ctx, t.sessionID+".md", "text/markdown", scope, bytes.NewReader(t.text))
		if err != nil {
			return fmt.Errorf("dream %s: transcript of %s: %w", d.ID, t.sessionID, err)
		}
		res = append(res, apitype.Resource{ID: apitype.NewID(apitype.PrefixResource), Type: apitype.ResourceFile,
			FileID: f.ID, MountPath: transcriptsDir + t.sessionID + ".md", CreatedAt: now, UpdatedAt: now})
	}
	sess, start, err := s.dreamSession(d, sessID, in, out, res, now)
	if err != nil {
		return s.failDream(ctx, d.ID, apitype.DreamErrInternal, "%v", err)
	}
	_, _, err = s.store.SessionCreate(ctx, &store.SessionCreateParams{Session: sess, InitialEvents: []apitype.NewEvent{start}})
	if err != nil && !errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("dream %s: create session: %w", d.ID, err)
	}
	return s.markDreamRunning(ctx, d.ID, sessID, outID)
}

// makeDreamOutput creates a create_new dream's output store as a copy of the input's memories, so that a dream
// that changes nothing loses nothing, and the dream's work is the same whether it writes a new store or its
// input: edit the store in place. Redone after a crash, the copy puts the same contents again.
func (s *Server) makeDreamOutput(ctx context.Context, mss store.MemoryStore, d *apitype.Dream, in *apitype.MemoryStore,
	outID string) (*apitype.MemoryStore, error) {
	now := s.now()
	out := &apitype.MemoryStore{Type: apitype.ObjectMemoryStore, ID: outID,
		Name:        fmt.Sprintf("%s (dreamed %s)", in.Name, d.CreatedAt.UTC().Format("2006-01-02")),
		Description: fmt.Sprintf("Written by dream %s from memory store %s.", d.ID, in.ID),
		Metadata:    map[string]string{"dream_id": d.ID, "source_memory_store_id": in.ID}, CreatedAt: now, UpdatedAt: now}
	if err := s.own(ctx, out.ID); err != nil {
		return nil, fmt.Errorf("dream %s: own output store: %w", d.ID, err)
	}
	if err := mss.MemoryStoreCreate(ctx, out); err != nil && !errors.Is(err, store.ErrConflict) {
		return nil, fmt.Errorf("dream %s: create output store: %w", d.ID, err)
	}
	p := &store.MemoryListParams{StoreID: in.ID, Limit: 100, Content: true}
	for {
		page, err := mss.MemoryList(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("dream %s: read input store: %w", d.ID, err)
		}
		for _, it := range page {
			m := it.Memory
			if m == nil || m.Content == nil {
				continue
			}
			_, err := mss.MemoryWrite(ctx, &store.MemoryWriteParams{StoreID: outID, Op: store.MemoryOpPut, Path: &m.Path,
				Content: m.Content, Actor: apitype.Actor{Type: apitype.ActorSession, SessionID: derivedID(apitype.PrefixSession, d.ID)},
				At: s.now(), NewMemoryID: apitype.NewID(apitype.PrefixMemory), NewVersionID: apitype.NewID(apitype.PrefixMemVersion)})
			if err != nil {
				return nil, fmt.Errorf("dream %s: copy %s: %w", d.ID, m.Path, err)
			}
		}
		if len(page) < p.Limit {
			return out, nil
		}
		last := page[len(page)-1]
		p.After = last.Prefix
		if last.Memory != nil {
			p.After = last.Memory.Path
		}
	}
}

// markDreamRunning records the dream's session and output; a dream canceled meanwhile keeps its status and has
// its session interrupted.
func (s *Server) markDreamRunning(ctx context.Context, id, sessID, outID string) error {
	d, err := s.store.DreamUpdate(ctx, id, func(d *apitype.Dream) error {
		d.SessionID = &sessID
		d.Outputs = []apitype.DreamOutput{{Type: apitype.ObjectMemoryStore, MemoryStoreID: outID}}
		if d.Status == apitype.DreamPending {
			d.Status = apitype.DreamRunning
		}
		return nil
	})
	if err != nil {
		return err
	}
	if d.Status == apitype.DreamCanceled {
		return s.stopSession(ctx, sessID)
	}
	return nil
}

// followDream brings a running dream up to date with its session: usage, and its end.
func (s *Server) followDream(ctx context.Context, d *apitype.Dream) error {
	if d.SessionID == nil {
		return s.failDream(ctx, d.ID, apitype.DreamErrInternal, "the dream is running without a session")
	}
	sessID := *d.SessionID
	sess, err := s.store.SessionGet(ctx, sessID)
	if errors.Is(err, store.ErrNotFound) {
		return s.failDream(ctx, d.ID, apitype.DreamErrInternal, "the dream's session %s was deleted", sessID)
	}
	if err != nil {
		return err
	}
	usage := dreamUsage(&sess.Usage)
	status, errType, msg := apitype.DreamRunning, apitype.DreamErrorType(""), ""
	switch {
	case sess.Status == apitype.StatusTerminated:
		status, errType, msg = apitype.DreamFailed, apitype.DreamErrSessionFailed, "the dream's session was terminated"
	case sess.Status == apitype.StatusIdle:
		reason, err := s.lastStopReason(ctx, sessID)
		if err != nil {
			return err
		}
		switch reason {
		case "":
			// Idle before its first turn ended: the start's message is not taken yet.
		case apitype.StopEndTurn:
			status = apitype.DreamCompleted
		default:
			status, errType, msg = apitype.DreamFailed, apitype.DreamErrSessionFailed,
				fmt.Sprintf("the dream's session stopped: %s", reason)
			if reason == apitype.StopRetriesExhausted {
				errType, msg = apitype.DreamErrInternal, "the model could not be reached: retries exhausted"
			}
		}
	}
	timeout := s.dreamTimeout
	if status == apitype.DreamRunning && s.now().Sub(d.CreatedAt) > timeout {
		if err := s.stopSession(ctx, sessID); err != nil {
			return err
		}
		status, errType, msg = apitype.DreamFailed, apitype.DreamErrTimeout, fmt.Sprintf("the dream ran longer than %s", timeout)
	}
	now := s.now()
	_, err = s.store.DreamUpdate(ctx, d.ID, func(d *apitype.Dream) error {
		d.Usage = usage
		if d.Status == apitype.DreamRunning && status != apitype.DreamRunning {
			d.Status, d.EndedAt = status, &now
			if errType != "" {
				d.Error = &apitype.DreamError{Type: errType, Message: msg}
			}
		}
		return nil
	})
	return err
}

// lastStopReason is the stop reason of the session's last session.status_idle, or "" if it has none.
func (s *Server) lastStopReason(ctx context.Context, sessID string) (apitype.StopReasonType, error) {
	evs, err := s.store.EventList(ctx, &store.EventListParams{SessionID: sessID, Scope: store.ScopeSession,
		Types: []apitype.EventType{apitype.EventSessionStatusIdle}, Desc: true, Limit: 1})
	if err != nil || len(evs) == 0 {
		return "", err
	}
	var idle apitype.SessionIdle
	if err := json.Unmarshal(evs[0].Data, &idle); err != nil {
		return "", fmt.Errorf("session %s: idle event: %w", sessID, err)
	}
	return idle.StopReason.Type, nil
}

func dreamUsage(u *apitype.SessionUsage) apitype.DreamUsage {
	out := apitype.DreamUsage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CacheReadInputTokens: u.CacheReadInputTokens}
	if u.CacheCreation != nil {
		out.CacheCreationInputTokens = u.CacheCreation.Ephemeral5mInputTokens + u.CacheCreation.Ephemeral1hInputTokens
	}
	return out
}

// transcript is one input session's log as text.
type transcript struct {
	sessionID string
	text      []byte
}

// renderTranscripts renders each session's events as readable text, within the per-session and total bounds;
// missing are the sessions that no longer exist.
func (s *Server) renderTranscripts(ctx context.Context, ids []string) (out []transcript, missing []string, err error) {
	per := min(maxTranscriptBytes, maxTranscriptsBytes/max(len(ids), 1))
	for _, id := range ids {
		sess, err := s.store.SessionGet(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			missing = append(missing, id)
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		text, err := s.renderTranscript(ctx, sess, per)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, transcript{sessionID: id, text: text})
	}
	return out, missing, nil
}

// renderTranscript renders a session's log: its messages, tool calls and results, at most limit bytes (the
// log's end is kept: the latest state of a session is what a memory should know). It holds at most about limit
// bytes of lines at a time, whatever the log's length, and cuts only at a line's start (or, for one line longer
// than the limit, at a character's start).
func (s *Server) renderTranscript(ctx context.Context, sess *apitype.Session, limit int) ([]byte, error) {
	const cutNote = "[... the transcript's beginning was cut to fit ...]\n"
	title := ""
	if sess.Title != nil {
		title = *sess.Title
	}
	head := fmt.Sprintf("# Session %s\n\nTitle: %s\nAgent: %s\nCreated: %s\n\n", sess.ID, title, sess.Agent.Name,
		sess.CreatedAt.UTC().Format(time.RFC3339))
	budget := max(limit-len(head)-len(cutNote)-1, 0) // each line costs its length and a newline
	var lines []string
	size, cut := 0, false
	p := &store.EventListParams{SessionID: sess.ID, Scope: store.ScopeSession, Limit: 500}
	for {
		evs, err := s.store.EventList(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("transcript of %s: %w", sess.ID, err)
		}
		for i := range evs {
			line := renderEvent(&evs[i])
			if line == "" {
				continue
			}
			if len(line)+1 > budget {
				line, cut = tailRunes(line, budget-1), true
			}
			lines, size = append(lines, line), size+len(line)+1
			for size > budget {
				size -= len(lines[0]) + 1
				lines[0] = "" // not kept alive by the slice's array
				lines, cut = lines[1:], true
			}
		}
		if len(evs) < p.Limit {
			break
		}
		p.AfterSeq = evs[len(evs)-1].Seq
	}
	var b strings.Builder
	b.Grow(len(head) + len(cutNote) + size + 1)
	b.WriteString(head)
	if cut {
		b.WriteString(cutNote)
	}
	b.WriteString(strings.Join(lines, "\n"))
	b.WriteString("\n")
	return []byte(b.String()), nil
}

// tailRunes is the end of s of at most n bytes, starting at a character.
func tailRunes(s string, n int) string {
	if n <= 0 {
		return ""
	}
	i := max(len(s)-n, 0)
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

// renderEvent renders one event as text, or "" for the events a transcript leaves out (statuses, spans).
func renderEvent(ev *apitype.Event) string {
	at := ev.CreatedAt.UTC().Format(time.RFC3339)
	switch ev.Type {
	case apitype.EventUserMessage, apitype.EventAgentMessage:
		var m apitype.UserMessage
		if json.Unmarshal(ev.Data, &m) != nil {
			return ""
		}
		var parts []string
		for _, b := range m.Content {
			if b.Text != "" {
				parts = append(parts, b.Text)
			}
		}
		who := "User"
		if ev.Type == apitype.EventAgentMessage {
			who = "Agent"
		}
		return fmt.Sprintf("## %s (%s)\n\n%s\n", who, at, strings.Join(parts, "\n"))
	case apitype.EventAgentToolUse:
		var u apitype.AgentToolUse
		if json.Unmarshal(ev.Data, &u) != nil {
			return ""
		}
		return fmt.Sprintf("### Tool call: %s (%s)\n\n%s\n", u.Name, at, clip(string(u.Input)))
	case apitype.EventAgentToolResult:
		return fmt.Sprintf("### Tool result (%s)\n\n%s\n", at, clip(string(ev.Data)))
	case apitype.EventSessionError:
		return fmt.Sprintf("### Session error (%s)\n\n%s\n", at, clip(string(ev.Data)))
	}
	return ""
}

func clip(s string) string {
	if len(s) <= maxTranscriptField {
		return s
	}
	return s[:maxTranscriptField] + " [... cut]"
}

// dreamSession builds the session that runs a dream: an agent snapshot made for it (no agent row: it is the
// server's, not the user's), no environment (the brain's default configuration), the memory stores and the
// transcripts as resources, and the user.message that starts it.
func (s *Server) dreamSession(d *apitype.Dream, sessID string, in, out *apitype.MemoryStore, res []apitype.Resource,
	now time.Time) (*apitype.Session, apitype.NewEvent, error) {
	model, err := parseModel("model", mustJSON(map[string]string{"id": d.Model.ID}), nil)
	if err != nil {
		return nil, apitype.NewEvent{}, err
	}
	model.Speed = d.Model.Speed
	tools, err := resolveToolset("tools[0]", json.RawMessage(`{"type":"agent_toolset_20260401",`+
		`"configs":[{"name":"web_fetch","enabled":false},{"name":"web_search","enabled":false}]}`))
	if err != nil {
		return nil, apitype.NewEvent{}, err
	}
	title := "Dream " + d.ID
	sess := &apitype.Session{Type: apitype.ObjectSession, ID: sessID, Title: &title, Status: apitype.StatusRunning,
		Agent: apitype.SessionAgent{Type: apitype.ObjectAgent, ID: derivedID(apitype.PrefixAgent, d.ID), Version: 1,
			Name: dreamAgentName, Description: "Consolidates a memory store from session transcripts.",
			System: dreamSystemPrompt(d, in, out), Model: model, Tools: []apitype.Tool{tools},
			MCPServers: []apitype.MCPServer{}, Skills: []apitype.SkillRef{}},
		Resources: res, VaultIDs: []string{}, Metadata: map[string]string{"dream_id": d.ID}, CreatedAt: now, UpdatedAt: now}
	text := "Start the dream: read the transcripts and the memories, then write the consolidated memory store."
	if d.Instructions != nil {
		text += "\n\nInstructions for this dream:\n" + *d.Instructions
	}
	start, err := apitype.MakeEvent(apitype.EventUserMessage, apitype.UserMessage{Content: []apitype.ContentBlock{
		apitype.TextBlock(text)}})
	return sess, start, err
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v) // maps of strings always encode
	return b
}

// dreamSystemPrompt explains the task and where everything is.
func dreamSystemPrompt(d *apitype.Dream, in, out *apitype.MemoryStore) string {
	var b strings.Builder
	b.WriteString("You are dreaming: you consolidate an agent's memory store from what happened in its recent sessions.\n\n")
	b.WriteString("Where everything is:\n")
	fmt.Fprintf(&b, "- The transcripts of the %d sessions to read are Markdown files in %s, one per session (<session id>.md).\n",
		len(d.SessionInputs()), transcriptsDir)
	if in.ID != out.ID {
		fmt.Fprintf(&b, "- The input memory store %q is mounted read-only at %s: read it, never change it.\n", in.Name,
			apitype.MemoryMountPath(in.Name, in.ID))
		fmt.Fprintf(&b, "- The output memory store %q is mounted read-write at %s. It starts as a copy of the input's memories.\n",
			out.Name, apitype.MemoryMountPath(out.Name, out.ID))
	} else {
		fmt.Fprintf(&b, "- The memory store %q is mounted read-write at %s: you update it in place.\n", out.Name,
			apitype.MemoryMountPath(out.Name, out.ID))
	}
	b.WriteString("Each memory is a text file; its path in the directory is the memory's path.\n\n")
	b.WriteString("Your task, on the output store's files:\n")
	b.WriteString("1. Merge duplicate or overlapping memories into one.\n")
	b.WriteString("2. Drop memories the transcripts show to be stale or wrong; update those that changed.\n")
	b.WriteString("3. Record what recurs across sessions (patterns, preferences, pitfalls) as memories of their own.\n")
	b.WriteString("Keep memories short, factual and organized by topic in directories. Use the built-in tools (bash, read, write, edit, glob, grep).\n")
	b.WriteString("When the output store holds the result, end your turn: what the output store holds then is the dream's result.\n")
	return b.String()
}
