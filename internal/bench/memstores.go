package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/client"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/store"
)

// The memory section (issue 24) measures what mounting a memory store costs a session, through the real server
// (sessions created through the HTTP API with a memory_store resource, read_write) on each backend: a store of
// MemoryCount memories of about 1 KiB in a tree of directories, filled through the store.
//
//   - provisioning: the first tool call of a session with the store against one without, alternating the two
//     kinds, from the agent.tool_use's append to the agent.tool_result's (processed_at), and the placer's own
//     time (its Place call, timed around the workspace placer);
//   - the turn-end collection: the collector's own time (its Collect call as the brain makes it when the turn
//     ends), when nothing changed, when 10 files changed and when every file changed; and, end to end, from the
//     turn's last agent.message to its session.status_idle;
//   - the re-provisioning of a sandbox for the same session (the sandbox closed between two turns): the
//     placement then only syncs what changed (nothing here), against the first placement of a new session,
//     which writes the whole store into an empty directory.

// MemoryPlacer is the workspace placer and collector of a server with memory stores (internal/workspace's,
// over the server's store as corral serve wires it).
type MemoryPlacer interface {
	sandbox.Placer
	sandbox.Collector
}

// MemStoreResult is the memory section on one backend.
type MemStoreResult struct {
	Backend string
	// Memories is the store's memories, Bytes their content, Dirs the directories they lie in; Fill the time
	// taken to write them through the store (one transaction each).
	Memories, Dirs int
	Bytes          int64
	Fill           time.Duration
	// Pairs is the sessions of each kind (with the store, without), alternating.
	Pairs int
	// ProvisionWith and ProvisionWithout are the first tool call's agent.tool_use → agent.tool_result (the
	// sandbox provisioned, the placement in it); PlaceWith and PlaceWithout the placer's own time.
	ProvisionWith, ProvisionWithout, PlaceWith, PlaceWithout Dist
	// Reprovision and ReplaceSync are the same for the second tool call of a session with the store, in a new
	// sandbox after the first was closed: the placement only checks what it already placed.
	Reprovision, ReplaceSync Dist
	// CollectNone, Collect10 and CollectAll are the collector's time at the end of a turn that changed no file,
	// 10 files, every file; IdleNone, Idle10 and IdleAll the turn's last agent.message → session.status_idle.
	CollectNone, Collect10, CollectAll Dist
	IdleNone, Idle10, IdleAll          Dist
	// AllChanged is the sessions whose second turn changed every file.
	AllChanged int
	Errors     int
	FirstError string
}

// timedPlacer times a MemoryPlacer's Place and Collect calls, by session.
type timedPlacer struct {
	MemoryPlacer
	mu               sync.Mutex
	places, collects map[string][]time.Duration
}

func newTimedPlacer(p MemoryPlacer) *timedPlacer {
	return &timedPlacer{MemoryPlacer: p, places: map[string][]time.Duration{}, collects: map[string][]time.Duration{}}
}

func (t *timedPlacer) Place(ctx context.Context, r *sandbox.Recipe, host sandbox.HostDirs) []*sandbox.ResourceError {
	t0 := time.Now()
	errs := t.MemoryPlacer.Place(ctx, r, host)
	t.record(t.places, r.SessionID, time.Since(t0))
	return errs
}

func (t *timedPlacer) Collect(ctx context.Context, r *sandbox.Recipe, host sandbox.HostDirs) error {
	t0 := time.Now()
	err := t.MemoryPlacer.Collect(ctx, r, host)
	t.record(t.collects, r.SessionID, time.Since(t0))
	return err
}

// TakeNotices forwards the placer's notices (the pool puts them in front of the next tool result).
func (t *timedPlacer) TakeNotices(sessionID string) []string {
	if n, ok := t.MemoryPlacer.(sandbox.Noticer); ok {
		return n.TakeNotices(sessionID)
	}
	return nil
}

func (t *timedPlacer) record(m map[string][]time.Duration, id string, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m[id] = append(m[id], d)
}

// last returns how many calls of the session were timed so far, and the last one's time.
func (t *timedPlacer) last(m map[string][]time.Duration, id string) (int, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ds := m[id]
	if len(ds) == 0 {
		return 0, 0
	}
	return len(ds), ds[len(ds)-1]
}

// memStoreName is the section's store's name: its mount path is apitype.MemoryMountPath of it.
const memStoreName = "bench notes"

// memTree returns the store's memories: n paths in a tree of directories (areas, topics, and a few at the top),
// each about 1 KiB of text.
func memTree(n int) (paths, contents []string, dirs int, bytes int64) {
	seen := map[string]bool{}
	for i := range n {
		var p string
		switch {
		case i%50 == 0:
			p = fmt.Sprintf("/note-%04d.md", i)
		case i%5 == 0:
			p = fmt.Sprintf("/area-%02d/summary-%04d.md", i%10, i)
		default:
			p = fmt.Sprintf("/area-%02d/topic-%02d/note-%04d.md", i%10, (i/10)%10, i)
		}
		if d := p[:strings.LastIndex(p, "/")]; d != "" && !seen[d] {
			seen[d] = true
			if strings.Count(d, "/") == 2 && !seen[d[:strings.LastIndex(d, "/")]] {
				seen[d[:strings.LastIndex(d, "/")]] = true
			}
		}
		size := 512 + (i*389)%1024 // 512 B to 1.5 KiB, 1 KiB on average
		var sb strings.Builder
		fmt.Fprintf(&sb, "# Note %d\n\n", i)
		for sb.Len() < size {
			fmt.Fprintf(&sb, "Fact %d about %s: the benchmark remembers this line. ", sb.Len(), p)
		}
		c := sb.String()[:size] + "\n"
		paths, contents = append(paths, p), append(contents, c)
		bytes += int64(len(c))
	}
	return paths, contents, len(seen), bytes
}

// memTimeout bounds one turn of the section (a turn that rewrites every memory included).
const memTimeout = 5 * time.Minute

// memstores runs the section on one backend.
func (b *benchRun) memstores(ctx context.Context, be *benchBackend) error {
	n, pairs, all := b.cfg.MemoryCount, b.cfg.MemorySessions, b.cfg.MemoryAllChanged
	if n <= 0 || pairs <= 0 || all < 0 || all > pairs {
		return fmt.Errorf("memories (%d) and sessions (%d) must be positive, all-changed (%d) at most the sessions", n, pairs, all)
	}
	st, err := b.openStore(ctx, "memory-"+be.name)
	if err != nil {
		return err
	}
	ms, ok := st.(store.MemoryStore)
	if !ok {
		_ = st.Close()
		return fmt.Errorf("the store has no memory stores")
	}
	pl, err := b.cfg.MemoryPlacer(ms)
	if err != nil {
		_ = st.Close()
		return err
	}
	timed := newTimedPlacer(pl)
	fake, err := b.startFake(5 * time.Millisecond)
	if err != nil {
		_ = st.Close()
		return err
	}
	defer fake.close()
	// A long idle timeout: no sandbox is reaped (and collected) while the section measures.
	s, err := b.serve(ctx, "memory-"+be.name, st, serverSpec{fake: fake, backend: be, idle: 10 * time.Minute, placer: timed, outputs: timed})
	if err != nil {
		return err
	}
	defer s.close()

	res := &MemStoreResult{Backend: be.name, Memories: n, Pairs: pairs, AllChanged: all}
	paths, contents, dirs, bytes := memTree(n)
	res.Dirs, res.Bytes = dirs, bytes
	storeID := apitype.NewID(apitype.PrefixMemoryStore)
	now := time.Now().UTC()
	if err := ms.MemoryStoreCreate(ctx, &apitype.MemoryStore{Type: apitype.ObjectMemoryStore, ID: storeID, Name: memStoreName,
		Metadata: map[string]string{}, CreatedAt: now, UpdatedAt: now}); err != nil {
		return err
	}
	b.progress("memory: %s, filling a store with %d memories (%d KiB in %d directories)", be.name, n, bytes>>10, dirs)
	t0 := time.Now()
	for i := range paths {
		_, err := ms.MemoryWrite(ctx, &store.MemoryWriteParams{StoreID: storeID, Op: store.MemoryOpCreate, Path: &paths[i], Content: &contents[i],
			Actor: apitype.Actor{Type: apitype.ActorAPI}, At: time.Now().UTC(),
			NewMemoryID: apitype.NewID(apitype.PrefixMemory), NewVersionID: apitype.NewID(apitype.PrefixMemVersion)})
		if err != nil {
			return fmt.Errorf("fill the store: %w", err)
		}
	}
	res.Fill = time.Since(t0)
	w := &memWork{c: s.c, fake: fake, timed: timed, pool: s.Pool(), agent: s.agentID, env: s.envID, store: storeID,
		mount: apitype.MemoryMountPath(memStoreName, storeID)}
	b.progress("memory: %s, filled in %s; %d sessions with the store alternating with %d without", be.name, res.Fill.Round(time.Millisecond), pairs, pairs)
	var provW, provWo, placeW, placeWo, reprov, resync, colNone, col10, colAll, idleNone, idle10, idleAll []time.Duration
	fail := func(err error) {
		res.Errors++
		if res.FirstError == "" {
			res.FirstError = err.Error()
			b.progress("memory: %s: %v", be.name, err)
		}
	}
	for i := range pairs {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Alternate which kind goes first, so that a drift of the machine hits both.
		for k := range 2 {
			with := (i+k)%2 == 0
			if !with {
				prov, place, err := w.without(ctx, i)
				if err != nil {
					fail(err)
					continue
				}
				provWo, placeWo = append(provWo, prov), append(placeWo, place)
				continue
			}
			change := 10
			if i >= pairs-all {
				change = n
			}
			m, err := w.with(ctx, i, change)
			if err != nil {
				fail(err)
				continue
			}
			provW, placeW, reprov, resync = append(provW, m.prov), append(placeW, m.place), append(reprov, m.reprov), append(resync, m.resync)
			colNone, idleNone = append(colNone, m.collect[0]), append(idleNone, m.idle[0])
			if change == n {
				colAll, idleAll = append(colAll, m.collect[1]), append(idleAll, m.idle[1])
			} else {
				col10, idle10 = append(col10, m.collect[1]), append(idle10, m.idle[1])
			}
		}
	}
	res.ProvisionWith, res.ProvisionWithout, res.PlaceWith, res.PlaceWithout = Summarize(provW), Summarize(provWo), Summarize(placeW), Summarize(placeWo)
	res.Reprovision, res.ReplaceSync = Summarize(reprov), Summarize(resync)
	res.CollectNone, res.Collect10, res.CollectAll = Summarize(colNone), Summarize(col10), Summarize(colAll)
	res.IdleNone, res.Idle10, res.IdleAll = Summarize(idleNone), Summarize(idle10), Summarize(idleAll)
	b.progress("memory: %s: first tool call p50 %s ms with the store, %s ms without (placement p50 %s ms); collection p50 %s ms unchanged, %s ms 10 changed, %s ms all changed",
		be.name, Ms(res.ProvisionWith.P50), Ms(res.ProvisionWithout.P50), Ms(res.PlaceWith.P50), Ms(res.CollectNone.P50), Ms(res.Collect10.P50), Ms(res.CollectAll.P50))
	b.rep.MemStores = append(b.rep.MemStores, res)
	if len(provW) == 0 {
		return fmt.Errorf("every session with the store failed; first error: %s", res.FirstError)
	}
	return nil
}

// memWork is the section's server, as its workload uses it.
type memWork struct {
	c                        *Client
	fake                     *fakeModel
	timed                    *timedPlacer
	pool                     *sandbox.Pool
	agent, env, store, mount string
}

// memTurn is what one turn of a session showed: its tool call's agent.tool_use → agent.tool_result, and from the
// fake model's end of the turn's last answer to session.status_idle (the brain collects before it appends the
// answer and the idle status, in one write).
type memTurn struct{ tool, idle time.Duration }

// turn sends text to the session (whose stream st is) and reads its events until the turn is over; the fake
// model's script makes the turn one tool call, then text.
func (w *memWork) turn(ctx context.Context, id string, st *Stream, text, marker string, last int) (memTurn, error) {
	ctx, cancel := context.WithTimeout(ctx, memTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, st.Close)
	defer stop()
	if err := w.c.Say(ctx, id, text); err != nil {
		return memTurn{}, err
	}
	var use, result, msg time.Time
	results := 0
	for {
		ev, err := st.Next()
		if err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("session %s: turn not over after %v: %w", id, memTimeout, ctx.Err())
			}
			return memTurn{}, err
		}
		switch ev.Type {
		case apitype.EventAgentToolUse, apitype.EventAgentToolResult, apitype.EventAgentMessage:
			at, err := processedAt(ev)
			if err != nil {
				return memTurn{}, err
			}
			switch ev.Type {
			case apitype.EventAgentToolUse:
				use = at
			case apitype.EventAgentToolResult:
				result, results = at, results+1
				var body struct {
					IsError bool `json:"is_error"`
				}
				if err := ev.Decode(&body); err == nil && body.IsError {
					return memTurn{}, fmt.Errorf("session %s: the tool call failed: %s", id, ev.Content)
				}
			default:
				msg = at
			}
		}
		if ev.TurnOver() {
			if results != 1 || msg.IsZero() {
				return memTurn{}, fmt.Errorf("session %s: %d tool results and no closing message in the turn", id, results)
			}
			at, err := processedAt(ev)
			if err != nil {
				return memTurn{}, err
			}
			tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			calls, err := w.fake.takeCalls(tctx, func(cs []modelCall) bool {
				_, ok := callOf(cs, marker, last)
				return ok
			})
			if err != nil {
				return memTurn{}, err
			}
			c, _ := callOf(calls, marker, last)
			return memTurn{tool: result.Sub(use), idle: at.Sub(c.Done)}, nil
		}
	}
}

// open creates a session (with the store's resource if with) and opens its stream.
func (w *memWork) open(ctx context.Context, with bool) (string, *Stream, error) {
	var res []client.ResourceParams
	if with {
		res = append(res, client.ResourceParams{Type: string(apitype.ResourceMemoryStore), MemoryStoreID: w.store, Access: string(apitype.AccessReadWrite)})
	}
	id, err := w.c.CreateSession(ctx, w.agent, w.env, res...)
	if err != nil {
		return "", nil, err
	}
	st, err := w.c.Open(ctx, id)
	if err != nil {
		return id, nil, err
	}
	return id, st, nil
}

// finish closes the session's stream and sandbox (its collection on close is not measured).
func (w *memWork) finish(id string, st *Stream) {
	if st != nil {
		st.Close()
	}
	if w.pool != nil {
		_ = w.pool.Close(id)
	}
}

// without runs a session without the store: one turn of one `bash true` call; it returns the call's provision
// (tool_use → tool_result) and its placement.
func (w *memWork) without(ctx context.Context, i int) (prov, place time.Duration, err error) {
	marker := fmt.Sprintf("<ma mem without %d>", i)
	w.fake.scriptCalls(marker, 1, bashTrue)
	id, st, err := w.open(ctx, false)
	if err != nil {
		return 0, 0, err
	}
	defer w.finish(id, st)
	t, err := w.turn(ctx, id, st, marker, marker, 3)
	if err != nil {
		return 0, 0, err
	}
	n, place := w.timed.last(w.timed.places, id)
	if n != 1 {
		return 0, 0, fmt.Errorf("session %s: %d placements, want 1", id, n)
	}
	return t.tool, place, nil
}

// memWith is what a session with the store showed.
type memWith struct {
	prov, place, reprov, resync time.Duration
	collect, idle               [2]time.Duration // the first turn's (nothing changed), the second's
}

// with runs a session with the store: a first turn of one `bash true` call (a new sandbox: the whole store
// placed; nothing changed at its end), then, its sandbox closed, a second turn whose call changes change files
// of the store's directory (a new sandbox: the placement syncs).
func (w *memWork) with(ctx context.Context, i, change int) (memWith, error) {
	var m memWith
	marker := fmt.Sprintf("<ma mem with %d>", i)
	dir := shellQuote(w.mount)
	// Appending one line to each of the first change files (read, a builtin echo: no process per file).
	cmd := fmt.Sprintf("cd %s && n=0 && find . -type f -name '*.md' | sort | head -n %d | while read -r f; do echo 'changed by the session' >> \"$f\"; n=$((n+1)); done; test $(find . -type f | wc -l) -gt 0", dir, change)
	input := fmt.Sprintf(`{"command":%q}`, cmd)
	w.fake.scriptCalls(marker, 1, bashTrue)
	w.fake.scriptCalls(marker, 5, toolCall{name: "bash", input: input})
	id, st, err := w.open(ctx, true)
	if err != nil {
		return m, err
	}
	defer w.finish(id, st)
	t1, err := w.turn(ctx, id, st, marker, marker, 3)
	if err != nil {
		return m, err
	}
	np, place := w.timed.last(w.timed.places, id)
	nc, col := w.timed.last(w.timed.collects, id)
	if np != 1 || nc != 1 {
		return m, fmt.Errorf("session %s: after the first turn %d placements and %d collections, want 1 and 1", id, np, nc)
	}
	m.prov, m.place, m.collect[0], m.idle[0] = t1.tool, place, col, t1.idle
	// A new sandbox for the same session: the pool closes this one (collecting it, unmeasured).
	if err := w.pool.Close(id); err != nil {
		return m, err
	}
	nc0, _ := w.timed.last(w.timed.collects, id)
	t2, err := w.turn(ctx, id, st, "and now change the notes", marker, 7)
	if err != nil {
		return m, err
	}
	np, resync := w.timed.last(w.timed.places, id)
	nc, col = w.timed.last(w.timed.collects, id)
	if np != 2 || nc != nc0+1 {
		return m, fmt.Errorf("session %s: after the second turn %d placements and %d collections, want 2 and %d", id, np, nc, nc0+1)
	}
	m.reprov, m.resync, m.collect[1], m.idle[1] = t2.tool, resync, col, t2.idle
	return m, nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func (m *MemStoreResult) writeSummary(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "memory store (%d memories), %s\tp50/p95 ms\tsamples\n", m.Memories, m.Backend)
	fmt.Fprintf(tw, "first tool call, with the store\t%s\t%d\n", dist2(m.ProvisionWith), m.ProvisionWith.N)
	fmt.Fprintf(tw, "first tool call, without\t%s\t%d\n", dist2(m.ProvisionWithout), m.ProvisionWithout.N)
	fmt.Fprintf(tw, "placement, first sandbox\t%s\t%d\n", dist2(m.PlaceWith), m.PlaceWith.N)
	fmt.Fprintf(tw, "placement, new sandbox of the session (sync)\t%s\t%d\n", dist2(m.ReplaceSync), m.ReplaceSync.N)
	fmt.Fprintf(tw, "turn-end collection, nothing changed\t%s\t%d\n", dist2(m.CollectNone), m.CollectNone.N)
	fmt.Fprintf(tw, "turn-end collection, 10 changed\t%s\t%d\n", dist2(m.Collect10), m.Collect10.N)
	fmt.Fprintf(tw, "turn-end collection, all changed\t%s\t%d\n", dist2(m.CollectAll), m.CollectAll.N)
	tw.Flush()
}

// Markdown renders the section's results.
func memStoresMarkdown(rs []*MemStoreResult) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("### Memory stores\n\n")
	r0 := rs[0]
	p("One server per backend, on a store filled (through the store, one transaction per memory) with %d memories ", r0.Memories)
	p("(%d KiB, %d directories); sessions created through the API with the store as a read_write `memory_store` resource. ", r0.Bytes>>10, r0.Dirs)
	p("%d sessions with the store alternate with %d without. A session with the store has two turns of one tool call each: ", r0.Pairs, r0.Pairs)
	p("`bash true` (its first sandbox: the whole store written into an empty directory), then, its sandbox closed, a call that ")
	p("appends a line to 10 of its files (every file in the last %d sessions) in a new sandbox, whose placement only ", r0.AllChanged)
	p("checks what the session already has. \"Placement\" and \"collection\" are the workspace placer's own calls, timed around ")
	p("it (its Place before each provisioning, its Collect at the end of each turn); \"tool call\" is agent.tool_use → ")
	p("agent.tool_result (`processed_at`), \"to idle\" from the fake model's end of the turn's last answer (its last byte sent) to ")
	p("session.status_idle's `processed_at` (the brain collects before it appends the answer and the idle status).\n\n")
	p("| backend | what | n | p50 / p95 ms |\n|---|---|---|---|\n")
	for _, r := range rs {
		row := func(what string, d Dist) { p("| %s | %s | %d | %s |\n", r.Backend, what, d.N, dist2(d)) }
		row("first tool call, with the store", r.ProvisionWith)
		row("first tool call, without", r.ProvisionWithout)
		row("placement, with the store (first sandbox)", r.PlaceWith)
		row("placement, without", r.PlaceWithout)
		row("tool call in a new sandbox of the same session", r.Reprovision)
		row("placement in it (sync, nothing changed)", r.ReplaceSync)
		row("collection, nothing changed", r.CollectNone)
		row("collection, 10 files changed", r.Collect10)
		row(fmt.Sprintf("collection, all %d changed", r.Memories), r.CollectAll)
		row("to idle, nothing changed", r.IdleNone)
		row("to idle, 10 changed", r.Idle10)
		row("to idle, all changed", r.IdleAll)
		if r.Errors > 0 {
			p("| %s | %d sessions failed; first error: `%s` | | |\n", r.Backend, r.Errors, strings.ReplaceAll(r.FirstError, "`", "'"))
		}
	}
	p("\nFilling the store took ")
	for i, r := range rs {
		if i > 0 {
			p(", ")
		}
		p("%s on %s", r.Fill.Round(time.Millisecond), r.Backend)
	}
	p(".\n\n")
	return b.String()
}
