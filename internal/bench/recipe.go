package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/client"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/server"
	"github.com/corralhq/corral/internal/store"
)

// RecipeGit is the recipe section's git server as the servers under test must trust it, and where it runs.
type RecipeGit struct {
	// CAPEM verifies the server (an operator's --egress-ca-file); HostPort is its internal address
	// (--egress-allow-internal).
	CAPEM    []byte
	HostPort string
	// Root is the run's temporary directory (Backends' root) and Backend the section's backend.
	Root, Backend string
}

// RecipeParts are the recipe section's server parts, built by cmd/corral (the benchmark links no placer).
type RecipeParts struct {
	// Placer places the sessions' repository resources (internal/workspace's, as corral serve wires it,
	// trusting RecipeGit). Required.
	Placer sandbox.Placer
	// Images, if set, returns the image service of a server on store st (server.Config.Images: corral serve
	// --images debian); it is called once per server of the section. The first server's service is asked to
	// collect unused layers (GC, if it has it) before the environment is created, so that the build is
	// measured on a cache holding the base alone. Nil: the sandboxes run on the host's layout.
	Images func(st store.Store) (server.Images, error)
}

// collector is an image service that removes the layers no environment of its store lists (*image.Service).
type collector interface {
	GC(ctx context.Context) (int, error)
}

// RecipeCell is one mode and concurrency of the recipe workload.
type RecipeCell struct {
	Mode        string
	Concurrency int
	TTFT        Dist
	// ToolResult is the tool sessions' time from the send to the first tool result read.
	ToolResult Dist
	Model      Dist
	Errors     int
	FirstError string
}

// RecipeResult is the recipe section.
type RecipeResult struct {
	Backend string
	// Packages is the environment's package list as the report shows it ("" for none).
	Packages string
	// Images says whether the server built images (else sandboxes ran on the host's layout and packages were
	// ignored).
	Images bool
	// RepoBytes and RepoCommits describe the repository every session clones.
	RepoBytes   int64
	RepoCommits int
	ToolCommand string
	// BaseReady is from the server's start to its base image ready (0 if not measured); Build from the
	// environment's creation to its image ready.
	BaseReady, Build time.Duration
	// BuildStatus is the image's final status ("ready", "failed: ...").
	BuildStatus string
	// ProvisionPackages and ProvisionBase are the pool's provisioning (image acquired, sandbox started) of a
	// sandbox of the environment with packages (its image built) and of one without packages.
	ProvisionPackages, ProvisionBase Dist
	Cells                            []RecipeCell
	PerSlot                          map[int]int
}

// Cell returns the cell of mode and concurrency, if measured.
func (r *RecipeResult) Cell(mode string, n int) (RecipeCell, bool) {
	for _, c := range r.Cells {
		if c.Mode == mode && c.Concurrency == n {
			return c, true
		}
	}
	return RecipeCell{}, false
}

// Levels returns the concurrencies measured in both modes, in order.
func (r *RecipeResult) Levels() []int {
	var out []int
	for _, d := range r.Cells {
		if _, ok := r.Cell(Coupled, d.Concurrency); d.Mode == Decoupled && ok {
			out = append(out, d.Concurrency)
		}
	}
	return out
}

// ToolGoal reports, for level n, whether the decoupled tool sessions' first tool result p50 is at most the
// coupled one's plus the model's own p50 time (the bound), with the margin.
func (r *RecipeResult) ToolGoal(n int) (met bool, margin time.Duration, ok bool) {
	d, ok1 := r.Cell(Decoupled, n)
	c, ok2 := r.Cell(Coupled, n)
	if !ok1 || !ok2 || d.ToolResult.N == 0 || c.ToolResult.N == 0 {
		return false, 0, false
	}
	margin = c.ToolResult.P50 + d.Model.P50 - d.ToolResult.P50
	return margin >= 0, margin, true
}

// packagesText is a package list as the report shows it.
func packagesText(p *apitype.Packages) string {
	if p == nil {
		return ""
	}
	var parts []string
	for _, m := range []struct {
		name string
		l    []string
	}{{"apt", p.Apt}, {"pip", p.Pip}, {"npm", p.Npm}, {"go", p.Go}, {"cargo", p.Cargo}, {"gem", p.Gem}} {
		if len(m.l) > 0 {
			parts = append(parts, m.name+": "+strings.Join(m.l, " "))
		}
	}
	return strings.Join(parts, "; ")
}

// recipeTool is the tool sessions' command: it uses the recipe (the first apt package's binary, when the
// package names one on PATH, and the repository's history).
func recipeTool(p *apitype.Packages) (command string, want []string) {
	command = "git -C " + RepoName + " rev-list --count HEAD"
	if p != nil && len(p.Apt) > 0 {
		name, _, _ := strings.Cut(p.Apt[0], "=")
		command = "command -v " + name + " && " + command
		want = append(want, "/"+name)
	}
	return command, want
}

// recipe runs the recipe workload on one backend.
func (b *benchRun) recipe(ctx context.Context, be *benchBackend) error {
	f := b.cfg
	if f.Recipe == nil {
		return errors.New("no recipe parts (Config.Recipe)")
	}
	b.progress("recipe: generating a repository of %d MiB of history and starting its git server", f.RecipeRepoBytes>>20)
	gitDir, err := b.mkdir("git")
	if err != nil {
		return err
	}
	git, err := StartGitServer(ctx, gitDir, f.RecipeRepoBytes)
	if err != nil {
		return err
	}
	defer git.Close()
	parts, err := f.Recipe(RecipeGit{CAPEM: git.CAPEM, HostPort: git.HostPort, Root: b.root, Backend: be.name})
	if err != nil {
		return err
	}
	if parts.Placer == nil {
		return errors.New("the recipe parts have no Placer")
	}
	pk := f.RecipePackages
	res := &RecipeResult{Backend: be.name, Packages: packagesText(pk), RepoBytes: git.PackBytes, RepoCommits: git.Commits, PerSlot: map[int]int{}}
	b.rep.Recipe = res
	cmd, want := recipeTool(pk)
	want = append(want, strconv.Itoa(git.Commits))
	res.ToolCommand = cmd
	spec := serverSpec{fake: b.fake, backend: be, idle: 5 * time.Second, packages: pk, placer: parts.Placer, images: parts.Images}

	if err := b.recipeImages(ctx, res, spec); err != nil {
		return err
	}
	resources := []client.ResourceParams{{Type: string(apitype.ResourceGitHubRepository), URL: git.URL}}
	// Level by level, both modes back to back: the machine's load drifts less between the two cells compared.
	for _, n := range f.RecipeSessions {
		for _, mode := range []string{Decoupled, Coupled} {
			perSlot := max(2, int(math.Ceil(float64(f.RecipeSamples)/float64(n))))
			res.PerSlot[n] = perSlot
			// Short: the sandboxes' proxy sockets live under the server's directory, and a socket path has
			// at most 107 bytes.
			name := fmt.Sprintf("rcp-%c%d", mode[0], n)
			spec := spec
			spec.eager = mode == Coupled
			s, err := b.startServer(ctx, name, spec)
			if err != nil {
				return err
			}
			b.progress("recipe: %s %s, %d concurrent sessions × %d each", be.name, mode, n, perSlot)
			samples, errs, err := RunTTFT(ctx, s.c, b.fake, Workload{
				AgentID: s.agentID, EnvID: s.envID, Concurrency: n, PerSlot: perSlot, Stagger: f.ModelTTFT,
				ToolShare: f.ToolShare, ToolCommand: cmd, ToolWant: want, Resources: resources, Timeout: 5 * time.Minute,
			})
			s.close()
			// Each level's clones go with its server: the workspaces of 100 sessions hold GBs.
			_ = os.RemoveAll(filepath.Join(b.root, "hands-"+name))
			b.fake.forget()
			if err != nil && len(samples) == 0 {
				return err
			}
			cell := RecipeCell{Mode: mode, Concurrency: n, TTFT: Summarize(TTFTs(samples)), ToolResult: Summarize(ToolResults(samples)),
				Model: Summarize(Models(samples)), Errors: errs}
			if err != nil {
				cell.FirstError = err.Error()
				b.progress("recipe: %d sessions failed; first error: %v", errs, err)
			}
			res.Cells = append(res.Cells, cell)
			b.progress("recipe: %s %s ×%d: TTFT p50 %s p95 %s ms; first tool result p50 %s p95 %s ms", be.name, mode, n,
				Ms(cell.TTFT.P50), Ms(cell.TTFT.P95), Ms(cell.ToolResult.P50), Ms(cell.ToolResult.P95))
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	return nil
}

// recipeImages measures, on a server of spec, the image build of the environment with packages (and the base
// before it), then the cost of a provisioning on that built image against one on the image without packages.
func (b *benchRun) recipeImages(ctx context.Context, res *RecipeResult, spec serverSpec) error {
	t0 := time.Now()
	spec.fake, spec.packages = nil, nil
	s, err := b.startServer(ctx, "rcp-img", spec)
	if err != nil {
		return err
	}
	defer s.close()
	// The base first (an environment without packages has the base's image), then the packages' layer.
	b.progress("recipe: waiting for the base image")
	img, err := s.c.WaitImage(ctx, s.envID)
	if err != nil {
		return err
	}
	res.Images = img != nil
	if !res.Images && b.cfg.RecipePackages != nil && spec.images != nil {
		return errors.New("the server builds no images (corral serve --images host, or auto where debootstrap, bwrap or root is missing), " +
			"so sessions of an environment with packages cannot run tools: fix that, or pass --recipe-packages \"\" to run on the host's layout")
	}
	if !res.Images {
		b.skip("recipe: image build", "the server builds no images: sandboxes run on the host's layout and the environment's packages are not installed")
		return nil
	}
	if img.Status != apitype.ImageReady {
		return fmt.Errorf("the base image: %s", imageMessage(img))
	}
	res.BaseReady = time.Since(t0)
	if gc, ok := s.images.(collector); ok {
		n, err := gc.GC(ctx)
		if err != nil {
			return fmt.Errorf("collecting the cache's layers: %w", err)
		}
		b.progress("recipe: %d cached layers removed, so that the build is measured cold", n)
	}
	if b.cfg.RecipePackages == nil {
		return nil
	}
	b.progress("recipe: base ready after %s; building the environment's packages (%s)", res.BaseReady.Round(time.Millisecond), res.Packages)
	t1 := time.Now()
	envID, err := s.c.CreateEnvironment(ctx, "bench-recipe", b.cfg.RecipePackages)
	if err != nil {
		return err
	}
	img, err = s.c.WaitImage(ctx, envID)
	res.Build = time.Since(t1)
	if err != nil {
		return err
	}
	if img == nil {
		return errors.New("the environment with packages has no image")
	}
	res.BuildStatus = img.Status
	if img.Status != apitype.ImageReady {
		res.BuildStatus += ": " + imageMessage(img)
		return fmt.Errorf("the environment's image failed to build: %s", imageMessage(img))
	}
	b.progress("recipe: image built in %s", res.Build.Round(time.Millisecond))
	pool := s.Pool()
	if pool == nil {
		return nil
	}
	n := 10
	if b.cfg.Quick {
		n = 3
	}
	withPk := apitype.EnvConfig{Type: apitype.EnvironmentCloud, Packages: b.cfg.RecipePackages}
	without := apitype.EnvConfig{Type: apitype.EnvironmentCloud}
	var dp, db []time.Duration
	for i := range 2 * n {
		env := without
		if i%2 == 0 {
			env = withPk
		}
		d, err := provisionOnce(ctx, pool, fmt.Sprintf("sesn_recipeprov%d", i), env)
		if err != nil {
			return err
		}
		if i%2 == 0 {
			dp = append(dp, d)
		} else {
			db = append(db, d)
		}
	}
	res.ProvisionPackages, res.ProvisionBase = Summarize(dp), Summarize(db)
	b.progress("recipe: provision p50 %s ms with the packages' image, %s ms without packages", Ms(res.ProvisionPackages.P50), Ms(res.ProvisionBase.P50))
	return nil
}

// provisionOnce has the pool provision a fresh session's sandbox of env and returns the provisioning's own
// duration (the image acquired and the sandbox started; not the readiness call after it).
func provisionOnce(ctx context.Context, pool *sandbox.Pool, sessionID string, env apitype.EnvConfig) (time.Duration, error) {
	var d time.Duration
	var perr error
	err := pool.Provision(ctx, &sandbox.Call{Recipe: sandbox.Recipe{SessionID: sessionID, Environment: env}, OnProvision: func(r sandbox.ProvisionReport) {
		if r.Done {
			d, perr = r.Duration, r.Err
		}
	}})
	return d, errors.Join(err, perr)
}

// imageMessage is why an image failed to build.
func imageMessage(i *apitype.EnvironmentImage) string {
	if i == nil || i.Error == nil {
		return ""
	}
	return strings.TrimSpace(strings.Join([]string{i.Error.Manager, i.Error.Package, i.Error.Message}, " "))
}

// WaitImage polls the environment's image until it is no longer building; nil if the server builds none.
func (c *Client) WaitImage(ctx context.Context, id string) (*apitype.EnvironmentImage, error) {
	for {
		e, err := c.EnvironmentGet(ctx, id)
		if err != nil {
			return nil, err
		}
		if e.Image == nil || e.Image.Status != apitype.ImageBuilding {
			return e.Image, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
