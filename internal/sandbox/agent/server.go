package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/apitype"
)

// Config configures the agent.
type Config struct {
	// Workspace is the directory relative paths resolve against and the shell starts in.
	Workspace string
	// Env is the complete environment of the commands the bash tool runs.
	Env []string
	// Confine limits the file tools to Workspace (symlinks resolved), as the reference toolset does. Isolating
	// backends leave it off: the sandbox is the boundary and bash can read the same files anyway.
	Confine bool
	// ShellNamespace starts each shell in new user and pid namespaces of its own, as the sandbox's uid with no
	// capabilities (runLauncher), so that nothing it runs can name the agent to signal or trace it. For
	// sandboxes whose kernel lets a pid namespace's members kill or stop its init, the agent (gVisor's).
	ShellNamespace bool
}

// Server runs tool calls. It is safe for concurrent use; bash calls are serialised per shell (Request.Shell),
// and calls to different shells run concurrently.
type Server struct {
	cfg  Config
	bash *bashTool
	xfer transfers // the archive transfer under way (archive.go)
}

// NewServer returns a Server for cfg.
func NewServer(cfg Config) *Server {
	return &Server{cfg: cfg, bash: newBashTool(cfg)}
}

// Close kills the shells and everything they started.
func (s *Server) Close() { s.bash.close() }

// Handle runs one request and returns its response. It never fails: problems become error results.
func (s *Server) Handle(ctx context.Context, req Request) Response {
	if req.Tool == ArchivePutTool || req.Tool == ArchiveGetTool {
		return s.archive(req)
	}
	timeout := time.Duration(req.TimeoutMS) * time.Millisecond
	if timeout <= 0 {
		timeout = DefaultTimeoutMS * time.Millisecond
	}
	outCap := req.OutputCap
	if outCap <= 0 {
		outCap = DefaultOutputCap
	}
	var res result
	switch b := byName[req.Tool]; {
	case b != nil:
		if err := validShellName(req.Shell); err != nil {
			res = errorf("%v", err)
			break
		}
		res = b.run(s, ctx, req.Shell, req.Input, timeout, outCap)
		if writes[req.Tool] {
			res.text += s.quotaNote()
		}
	case req.Tool == PingTool:
		res = textResult("pong")
	case req.Tool == LimitEventsTool:
		b, _ := json.Marshal(limitEvents(cgroupRoot))
		res = textResult(string(b))
	default:
		res = errorf("unknown tool %q: the sandbox runs %s", req.Tool, toolNames())
	}
	resp := Response{ID: req.ID, Content: res.blocks(outCap), IsError: res.isErr, Failure: res.failure}
	if req.Limits {
		le := limitEvents(cgroupRoot)
		resp.Limits = &le
	}
	return resp
}

// cgroupRoot is where a container runtime mounts the agent's own cgroups.
const cgroupRoot = "/sys/fs/cgroup"

// limitEvents reads the event files of the cgroups the agent is in, as the container runtime mounts them at root:
// one directory per controller (v1), or the group itself (v2).
func limitEvents(root string) LimitEvents {
	first := func(names ...string) string {
		for _, n := range names {
			if b, err := os.ReadFile(filepath.Join(root, n)); err == nil {
				return string(b)
			}
		}
		return ""
	}
	return LimitEvents{
		Memory: first("memory/memory.oom_control", "memory.events"),
		Pids:   first("pids/pids.events", "pids.events"),
	}
}

// writes are the tools that write files: their results end with a note when a quota is (nearly) used up.
var writes = map[string]bool{"bash": true, "write": true, "edit": true}

// result is a tool's output before it is framed.
type result struct {
	text    string
	images  []apitype.ContentBlock
	isErr   bool
	capped  bool   // text is already capped (bash keeps the tail of its output)
	failure string // FailureTimeout when a limit, not the input, made it fail
}

func textResult(s string) result { return result{text: s} }

func errorf(format string, a ...any) result {
	return result{text: fmt.Sprintf(format, a...), isErr: true}
}

// blocks frames a result, capping its text at outCap bytes with a note saying so.
func (r result) blocks(outCap int) []apitype.ContentBlock {
	if len(r.images) > 0 && r.text == "" {
		return r.images
	}
	text := r.text
	if !r.capped {
		text = capText(text, outCap)
	}
	return append([]apitype.ContentBlock{apitype.TextBlock(text)}, r.images...)
}

// capText keeps the first outCap bytes of s (on a UTF-8 boundary) and says how much was cut.
func capText(s string, outCap int) string {
	if len(s) <= outCap {
		return s
	}
	cut := outCap
	for cut > 0 && cut < len(s) && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + fmt.Sprintf("\n[output truncated: %d of %d bytes shown]", cut, len(s))
}

// Serve reads requests from r and writes responses to w until r ends, then cancels the calls in flight and waits
// for them.
// Requests run concurrently; responses are written whole, one per line.
func (s *Server) Serve(ctx context.Context, r io.Reader, w io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wmu sync.Mutex
		wg  sync.WaitGroup
	)
	go s.bash.warm()
	enc := json.NewEncoder(w)
	write := func(resp Response) {
		wmu.Lock()
		defer wmu.Unlock()
		_ = enc.Encode(resp) // a broken stdout means the host is gone; the read loop ends too
	}
	var (
		cmu     sync.Mutex
		cancels = map[uint64]context.CancelFunc{}
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 64*1024*1024)
	for sc.Scan() {
		var req Request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			write(Response{ID: req.ID, Content: []apitype.ContentBlock{apitype.TextBlock("invalid request: " + err.Error())}, IsError: true})
			continue
		}
		if req.Cancel != 0 {
			cmu.Lock()
			if cancel := cancels[req.Cancel]; cancel != nil {
				cancel()
			}
			cmu.Unlock()
			continue
		}
		reqCtx, cancel := context.WithCancel(ctx)
		cmu.Lock()
		cancels[req.ID] = cancel
		cmu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := s.Handle(reqCtx, req)
			cmu.Lock()
			delete(cancels, req.ID)
			cmu.Unlock()
			cancel()
			write(resp)
		}()
	}
	// Input ended: the host is gone (it closed the pipe, or it died). Nobody will read the results of the calls
	// in flight, so stop them now rather than at their timeouts: an agent that is its sandbox's pid 1 takes the
	// whole sandbox with it when it returns, and a sandbox must not outlive its server.
	cancel()
	wg.Wait()
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read requests: %w", err)
	}
	return nil
}
