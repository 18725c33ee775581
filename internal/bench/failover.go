package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/corralhq/corral/internal/apitype"
)

// pgSchemas creates fresh schemas in a PostgreSQL database and drops them at the end.
type pgSchemas struct {
	base    string
	mu      sync.Mutex
	created []string
}

// fresh creates a new schema and returns the base URL with search_path set to it.
func (p *pgSchemas) fresh(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.base)
	if err != nil {
		return "", fmt.Errorf("postgres %s: %w", redact(p.base), err)
	}
	defer conn.Close(context.Background())
	name := "corral_bench_" + strings.ToLower(apitype.NewID("")[4:16])
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create schema: %w", err)
	}
	p.mu.Lock()
	p.created = append(p.created, name)
	p.mu.Unlock()
	u, err := url.Parse(p.base)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func (p *pgSchemas) dropAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.created) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.base)
	if err != nil {
		return
	}
	defer conn.Close(context.Background())
	for _, name := range p.created {
		_, _ = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
	}
	p.created = nil
}

// failoverDB picks the PostgreSQL database of the failover section, or says why there is none.
func (b *benchRun) failoverDB(ctx context.Context) (string, error) {
	switch {
	case b.cfg.FailoverDB != "":
		return b.cfg.FailoverDB, nil
	case strings.HasPrefix(b.cfg.DB, "postgres"):
		return b.cfg.DB, nil
	}
	dsn := b.cfg.FailoverFallback
	if dsn == "" {
		return "", errors.New("it needs PostgreSQL shared by two brain processes; pass --failover-db URL")
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, dsn)
	if err != nil {
		return "", fmt.Errorf("it needs PostgreSQL shared by two brain processes; none at %s (%v); pass --failover-db URL", redact(dsn), err)
	}
	conn.Close(context.Background())
	return dsn, nil
}

// brainProc is a running `corral harness`.
type brainProc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	log    *lockedLog
}

type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() < 1<<20 {
		l.b.Write(p)
	}
	return len(p), nil
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startBrain starts `corral harness` on the store and waits until its brains run.
func (b *benchRun) startBrain(ctx context.Context, exe, dbURL, name string) (*brainProc, error) {
	data, err := b.mkdir("harness-" + name)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "harness", "--db", dbURL, "--data", data, "--sandbox", "none", "--brains", "4",
		"--lease-ttl", b.cfg.FailoverLeaseTTL.String(), "--poll", "200ms", "--model-retries", "1")
	cmd.Env = append(slices.Clone(b.cfg.Environ), "ANTHROPIC_BASE_URL="+b.fake.url(), "ANTHROPIC_API_KEY=bench", "CORRAL_API_KEY=")
	pr, pw := io.Pipe()
	p := &brainProc{cmd: cmd, exited: make(chan struct{}), log: &lockedLog{}}
	cmd.Stderr = io.MultiWriter(pw, p.log)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		_ = cmd.Wait()
		pw.Close()
		close(p.exited)
	}()
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		once := sync.Once{}
		for sc.Scan() {
			if strings.Contains(sc.Text(), "harness running") {
				once.Do(func() { close(ready) })
			}
		}
	}()
	select {
	case <-ready:
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("corral harness exited: %s", lastLines(p.log.String(), 5))
	case <-time.After(30 * time.Second):
		p.kill()
		return nil, errors.New("corral harness did not start in 30 s")
	case <-ctx.Done():
		p.kill()
		return nil, ctx.Err()
	}
}

func (p *brainProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// failover measures SIGKILL of the brain process holding a session to the session resuming in another one.
func (b *benchRun) failover(ctx context.Context) error {
	exe := b.cfg.Executable
	if exe == "" {
		return errors.New("it runs `corral harness` processes, and no corral binary was given")
	}
	if strings.HasSuffix(filepath.Base(exe), ".test") {
		return errors.New("it runs `corral harness` processes, and this is a test binary")
	}
	base, err := b.failoverDB(ctx)
	if err != nil {
		return err
	}
	schemas := &pgSchemas{base: base}
	defer schemas.dropAll()
	dbURL, err := schemas.fresh(ctx)
	if err != nil {
		return err
	}
	st, err := b.cfg.OpenStore(ctx, dbURL)
	if err != nil {
		return err
	}
	// The API alone: the brains are the corral harness processes.
	s, err := b.serve(ctx, "failover", st, serverSpec{})
	if err != nil {
		return err
	}
	defer s.close()
	res := &FailoverResult{LeaseTTL: b.cfg.FailoverLeaseTTL}
	for run := range b.cfg.FailoverRuns {
		resume, complete, err := b.failoverOnce(ctx, exe, dbURL, s, run)
		if err != nil {
			if len(res.Resume) == 0 {
				return err
			}
			b.progress("failover: run %d failed: %v", run+1, err)
			continue
		}
		b.progress("failover: run %d: resumed %.2f s after SIGKILL, turn over after %.2f s", run+1, resume.Seconds(), complete.Seconds())
		res.Resume = append(res.Resume, resume)
		res.Complete = append(res.Complete, complete)
	}
	b.rep.Failover = res
	return nil
}

func (b *benchRun) failoverOnce(ctx context.Context, exe, dbURL string, s *benchServer, run int) (resume, complete time.Duration, err error) {
	c := s.c
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	b.progress("failover: run %d: two corral harness processes, --lease-ttl %s", run+1, b.cfg.FailoverLeaseTTL)
	first, err := b.startBrain(ctx, exe, dbURL, fmt.Sprintf("%d-a", run))
	if err != nil {
		return 0, 0, err
	}
	defer first.kill()
	id, err := c.CreateSession(ctx, s.agentID, s.envID)
	if err != nil {
		return 0, 0, err
	}
	stream, err := c.Open(ctx, id)
	if err != nil {
		return 0, 0, err
	}
	defer stream.Close()
	stop := context.AfterFunc(ctx, stream.Close)
	defer stop()
	hold := make(chan struct{})
	defer close(hold)
	marker := fmt.Sprintf("failover %d %s", run, id)
	b.fake.scriptHeld(marker, hold)
	if err := c.Say(ctx, id, marker); err != nil {
		return 0, 0, err
	}
	// The first brain (the only one running) claims the session and calls the model, which holds the answer.
	if err := b.fake.waitRequest(ctx, marker); err != nil {
		return 0, 0, fmt.Errorf("%w; harness log: %s", err, lastLines(first.log.String(), 5))
	}
	second, err := b.startBrain(ctx, exe, dbURL, fmt.Sprintf("%d-b", run))
	if err != nil {
		return 0, 0, err
	}
	defer second.kill()
	// Let the events the first brain appended reach the stream, then kill it.
	events := make(chan *Event, 64)
	go func() {
		defer close(events)
		for {
			ev, err := stream.Next()
			if err != nil {
				return
			}
			events <- ev
		}
	}()
	drain := time.After(300 * time.Millisecond)
drained:
	for {
		select {
		case <-events:
		case <-drain:
			break drained
		}
	}
	killed := time.Now()
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return 0, 0, err
	}
	for ev := range events {
		if resume == 0 {
			resume = ev.At.Sub(killed)
		}
		if ev.TurnOver() {
			return resume, ev.At.Sub(killed), nil
		}
	}
	return 0, 0, fmt.Errorf("the session did not finish after the kill (%v); second harness: %s", ctx.Err(), lastLines(second.log.String(), 5))
}
