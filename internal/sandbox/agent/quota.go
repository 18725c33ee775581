package agent

import (
	"fmt"
	"strings"
	"syscall"
)

// quotaNote says which of the sandbox's writable filesystems (the workspace and /tmp, each with its own size
// and inode quota) are full or nearly so, for the end of a tool result; "" when none is. A command that fails
// with "No space left on device" then says why.
func (s *Server) quotaNote() string {
	var notes []string
	for _, dir := range []string{s.cfg.Workspace, "/tmp"} {
		if n := fsNote(dir); n != "" {
			notes = append(notes, n)
		}
	}
	if len(notes) == 0 {
		return ""
	}
	return "\n[" + strings.Join(notes, "; ") + `. Writes there fail with "No space left on device" until files are deleted.]`
}

// fsNote describes the filesystem of dir when less than 1% (at least 1 MiB or 8 inodes) of its space or of its
// inodes is left.
func fsNote(dir string) string {
	var st syscall.Statfs_t
	if dir == "" || syscall.Statfs(dir, &st) != nil || st.Blocks == 0 {
		return ""
	}
	size := int64(st.Blocks) * st.Bsize
	free := int64(st.Bavail) * st.Bsize
	lowSpace := free < max(1<<20, size/100)
	lowInodes := st.Files > 0 && int64(st.Ffree) < max(8, int64(st.Files)/100)
	if !lowSpace && !lowInodes {
		return ""
	}
	what := "its disk quota"
	if lowInodes && !lowSpace {
		what = "its file (inode) quota"
	} else if lowInodes {
		what = "its disk and file (inode) quotas"
	}
	state := "nearly full"
	if (lowSpace && free < 1<<20) || (lowInodes && st.Ffree == 0) {
		state = "full"
	}
	return fmt.Sprintf("quota: %s is %s (%s): %s of %s free, %d of %d files free", dir, state, what,
		mib(free), mib(size), st.Ffree, st.Files)
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
