package agent

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Limits of glob and grep, as in the reference.
const (
	globResultLimit  = 200
	grepOutputLimit  = 100 * 1024
	grepMaxFileBytes = 8 * 1024 * 1024
	walkMaxEntries   = 50_000
)

var errStopWalk = errors.New("stop walk")

type searchInput struct {
	Pattern string `json:"pattern"`
	Path    string `json:"path"`
}

func execGlob(raw json.RawMessage, cfg *Config) result {
	var in searchInput
	if err := decodeStrict(raw, &in); err != nil {
		return errorf("invalid glob input: %v", err)
	}
	if in.Pattern == "" {
		return errorf("glob: pattern is required")
	}
	if filepath.IsAbs(in.Pattern) {
		return errorf("glob: absolute pattern not permitted; pass a relative pattern (and optionally path)")
	}
	for _, seg := range strings.Split(in.Pattern, "/") {
		if seg == ".." {
			return errorf("glob: pattern %q must not contain a %q segment", in.Pattern, "..")
		}
		if _, err := filepath.Match(seg, ""); err != nil {
			return errorf("glob: invalid pattern %q: %v", in.Pattern, err)
		}
	}
	root, err := resolvePath(cfg, cmp.Or(in.Path, "."))
	if err != nil {
		return errorf("glob: %v", err)
	}
	if info, err := os.Stat(root); err != nil {
		return errorf("glob: %s: %s", cmp.Or(in.Path, "."), fsErrorMessage(err))
	} else if !info.IsDir() {
		return errorf("glob: %s is not a directory", in.Path)
	}
	type entry struct {
		path  string
		mtime int64
	}
	var entries []entry
	visited := 0
	pat := strings.Split(in.Pattern, "/")
	// WalkDir never follows symlinks, so the walk stays under root.
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, walkErr error) error {
		if walkErr != nil || p == root {
			return nil
		}
		if visited++; visited > walkMaxEntries {
			return errStopWalk
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || !matchSegments(pat, strings.Split(filepath.ToSlash(rel), "/"), map[[2]int]bool{}) {
			return nil
		}
		var mt int64
		if info, err := d.Info(); err == nil {
			mt = info.ModTime().UnixNano()
		}
		entries = append(entries, entry{p, mt})
		return nil
	})
	if len(entries) == 0 {
		return textResult("no matches")
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].mtime > entries[j].mtime })
	entries = entries[:min(len(entries), globResultLimit)]
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.path
	}
	return textResult(strings.Join(out, "\n"))
}

// matchSegments matches pattern segments against path segments; "**" matches zero or more segments, every
// other segment matches one with filepath.Match. memo bounds the backtracking.
func matchSegments(pat, name []string, memo map[[2]int]bool) bool {
	key := [2]int{len(pat), len(name)}
	if v, ok := memo[key]; ok {
		return v
	}
	res := func() bool {
		for len(pat) > 0 {
			if pat[0] == "**" {
				for len(pat) > 0 && pat[0] == "**" {
					pat = pat[1:]
				}
				if len(pat) == 0 {
					return true
				}
				for i := 0; i <= len(name); i++ {
					if matchSegments(pat, name[i:], memo) {
						return true
					}
				}
				return false
			}
			if len(name) == 0 {
				return false
			}
			if ok, err := filepath.Match(pat[0], name[0]); err != nil || !ok {
				return false
			}
			pat, name = pat[1:], name[1:]
		}
		return len(name) == 0
	}()
	memo[key] = res
	return res
}

func execGrep(raw json.RawMessage, cfg *Config) result {
	var in searchInput
	if err := decodeStrict(raw, &in); err != nil {
		return errorf("invalid grep input: %v", err)
	}
	if in.Pattern == "" {
		return errorf("grep: pattern is required")
	}
	re, err := regexp.Compile(in.Pattern)
	if err != nil {
		return errorf("grep: invalid regex: %v", err)
	}
	root, err := resolvePath(cfg, cmp.Or(in.Path, "."))
	if err != nil {
		return errorf("grep: %v", err)
	}
	if _, err := os.Stat(root); err != nil {
		return errorf("grep: %s: %s", cmp.Or(in.Path, "."), fsErrorMessage(err))
	}
	var hits []string
	budget := grepOutputLimit
	seen := 0
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, walkErr error) error {
		if walkErr != nil {
			return nil
		}
		// Symlinks are neither read nor descended: a link to a file elsewhere must not be followed.
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		if d.IsDir() {
			if path != root && (d.Name() == ".git" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if seen++; seen > walkMaxEntries {
			return errStopWalk
		}
		info, err := d.Info()
		if err != nil || info.Size() > grepMaxFileBytes {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return nil
		}
		defer f.Close()
		r := bufio.NewReader(f)
		if sniff, _ := r.Peek(512); bytes.IndexByte(sniff, 0) >= 0 {
			return nil // binary
		}
		data, err := io.ReadAll(io.LimitReader(r, grepMaxFileBytes+1))
		if err != nil || len(data) > grepMaxFileBytes {
			return nil
		}
		for i, line := range strings.Split(string(data), "\n") {
			if !re.MatchString(line) {
				continue
			}
			hit := fmt.Sprintf("%s:%d:%s", path, i+1, line)
			if budget -= len(hit) + 1; budget < 0 {
				hits = append(hits, "[output truncated]")
				return errStopWalk
			}
			hits = append(hits, hit)
		}
		return nil
	})
	if len(hits) == 0 {
		return textResult("no matches")
	}
	return textResult(strings.Join(hits, "\n"))
}
