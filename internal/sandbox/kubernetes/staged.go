package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/agent"
)

// A pod's session files (sandbox.Capabilities.StagedWorkspace): the Pool keeps a staging copy of each session's
// directories on this host, where the Placer places its resources; Provision copies them into the new pod over
// the agent's stream (agent.ArchivePutTool), and Sync copies the outputs and read_write memory stores back
// (agent.ArchiveGetTool) before the Pool collects them. The pod holds them in the "session" emptyDir at
// sessionRoot: uploads, skills and read_only memory stores without write permission, the outputs and
// read_write stores writable.
const (
	sessionRoot = "/mnt"
	// sessionBytes bounds the session emptyDir (uploads, skills, memory stores, outputs).
	sessionBytes = 2 << 30
	// What one copy back takes at most: past it, the copy fails and the staging copy stays as it was. Above the
	// collectors' own bounds (1 GiB and 1,000 files of outputs; 64 MiB and 5,000 entries of a memory store),
	// so that what is over theirs is still copied for them to say so.
	maxOutputsBytes   = sessionBytes
	maxOutputsEntries = 20_000
	maxMemoryBytes    = 256 << 20
	maxMemoryEntries  = 20_000
	// syncTimeout bounds one Sync.
	syncTimeout = 2 * time.Minute
)

// seed copies the session's staging copy into the pod: the workspace (a resource already in a claim's workspace
// is left as the agent left it), uploads, skills, outputs and memory stores.
func (sb *Sandbox) seed(ctx context.Context, r *sandbox.Recipe, host sandbox.HostDirs) error {
	if host.Workspace == "" {
		return nil
	}
	type copyIn struct {
		src string
		in  agent.ArchiveInput
	}
	copies := []copyIn{
		{host.Workspace, agent.ArchiveInput{Dir: agent.Workspace, Keep: workspacePaths(r)}},
		{host.Uploads(), agent.ArchiveInput{Dir: sandbox.UploadsMount, ReadOnly: true}},
		{host.Skills(), agent.ArchiveInput{Dir: sandbox.SkillsMount, ReadOnly: true}},
		{host.Outputs(), agent.ArchiveInput{Dir: sandbox.OutputsMount}},
	}
	dirs, _ := r.MemoryDirs() // those left out were said by the Placer
	for _, d := range dirs {
		copies = append(copies, copyIn{filepath.Join(host.Memory(), d.Name), agent.ArchiveInput{Dir: d.Target, ReadOnly: d.ReadOnly}})
	}
	for _, c := range copies {
		if _, err := os.Stat(c.src); errors.Is(err, fs.ErrNotExist) {
			continue // a memory store not placed
		}
		if err := sb.client.PutDir(ctx, c.src, c.in); err != nil {
			return fmt.Errorf("copy of the session's files into %s: %w", c.in.Dir, err)
		}
	}
	return nil
}

var _ sandbox.Syncer = (*Sandbox)(nil)

// Sync copies the pod's outputs and read_write memory stores back into the staging copy, each replacing the one
// there whole (what the agent deleted goes too) or, past its bound, leaving it as it was.
func (sb *Sandbox) Sync(ctx context.Context, r *sandbox.Recipe, host sandbox.HostDirs) error {
	if host.Session == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, syncTimeout) // whatever the caller's: a pod may stream slowly
	defer cancel()
	errs := []error{sb.client.GetDir(ctx, agent.ArchiveInput{Dir: sandbox.OutputsMount}, host.Outputs(),
		agent.ExtractOptions{MaxBytes: maxOutputsBytes, MaxEntries: maxOutputsEntries})}
	dirs, _ := r.MemoryDirs()
	for _, d := range dirs {
		local := filepath.Join(host.Memory(), d.Name)
		if _, err := os.Stat(local); d.ReadOnly || err != nil {
			continue // never written back, or never placed
		}
		errs = append(errs, sb.client.GetDir(ctx, agent.ArchiveInput{Dir: d.Target}, local,
			agent.ExtractOptions{MaxBytes: maxMemoryBytes, MaxEntries: maxMemoryEntries}))
	}
	return errors.Join(errs...)
}

// workspacePaths are the paths, relative to the workspace, of the recipe's repositories and files placed in it.
func workspacePaths(r *sandbox.Recipe) []string {
	var out []string
	for i := range r.Resources {
		res := &r.Resources[i]
		if res.Type != apitype.ResourceGitHubRepository && res.Type != apitype.ResourceFile {
			continue
		}
		if rel, ok := strings.CutPrefix(path.Clean(res.Path()), agent.Workspace+"/"); ok {
			out = append(out, rel)
		}
	}
	return out
}
