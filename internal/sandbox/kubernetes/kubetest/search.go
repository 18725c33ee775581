package kubetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Searched is what Search read, and where it found a forbidden string.
type Searched struct {
	Found []string // "<where> holds <label>"
	Pods  int      // pods among the objects read
	Files int      // files of the state read
}

// Search looks for the forbidden strings (by label) in every object of the cluster a credential could end up in
// (pods, config maps, secrets, events and network policies, in every namespace, as the API server lists them)
// and in every file of its state (etcd's data, the kubelet's and containerd's directories, up to 256 MiB each;
// the images' unpacked files aside, which hold nothing of a session's).
func (c *Cluster) Search(ctx context.Context, forbidden map[string]string) (Searched, error) {
	var s Searched
	all := metav1.ListOptions{}
	lists := map[string]func() (any, error){
		"pods": func() (any, error) {
			l, err := c.Client.CoreV1().Pods("").List(ctx, all)
			if err == nil {
				s.Pods = len(l.Items)
			}
			return l, err
		},
		"config maps":      func() (any, error) { return c.Client.CoreV1().ConfigMaps("").List(ctx, all) },
		"secrets":          func() (any, error) { return c.Client.CoreV1().Secrets("").List(ctx, all) },
		"events":           func() (any, error) { return c.Client.CoreV1().Events("").List(ctx, all) },
		"network policies": func() (any, error) { return c.Client.NetworkingV1().NetworkPolicies("").List(ctx, all) },
	}
	for kind, list := range lists {
		o, err := list()
		if err != nil {
			return s, fmt.Errorf("list %s: %w", kind, err)
		}
		b, err := json.Marshal(o)
		if err != nil {
			return s, err
		}
		s.Found = append(s.Found, holds("the cluster's "+kind, b, forbidden)...)
	}
	err := filepath.WalkDir(c.Dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // a file that went while the walk ran
		}
		if d.IsDir() {
			if d.Name() == "snapshots" && strings.Contains(path, "overlayfs") {
				return filepath.SkipDir
			}
			return nil
		}
		if fi, err := d.Info(); err != nil || !fi.Mode().IsRegular() || fi.Size() > 256<<20 {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		s.Files++
		s.Found = append(s.Found, holds(path, b, forbidden)...)
		return nil
	})
	if err == nil && s.Files == 0 {
		err = fmt.Errorf("no file of the cluster's state under %s was read", c.Dir)
	}
	return s, err
}

func holds(where string, b []byte, forbidden map[string]string) []string {
	var found []string
	for label, v := range forbidden {
		if v != "" && bytes.Contains(b, []byte(v)) {
			found = append(found, where+" holds "+label)
		}
	}
	return found
}

// StartForTest starts a cluster for one test and stops it when the test ends; it skips the test (or fails it, with
// RequireEnv) when the cluster cannot run here. For a test whose package shares no cluster (Main).
func StartForTest(t *testing.T, ctx context.Context) *Cluster {
	t.Helper()
	c, err := Start(ctx, t.Logf)
	Require(t, err)
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	return c
}
