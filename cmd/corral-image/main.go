// Command corral-image builds Corral's container image from this module's Go binaries, without a Dockerfile, a
// daemon or a base image from a registry: the image is one layer holding `corral` and `corral-sandbox-agent`
// (static, CGO_ENABLED=0, -trimpath), a CA bundle, /etc/passwd and /etc/group with the user corral (65532) and
// the directories the processes write. Every timestamp is SOURCE_DATE_EPOCH (default: the last commit's time, else
// 0), so the same source, Go toolchain and CA bundle give the same image digest on any machine.
//
//	go run ./cmd/corral-image --out corral.oci                         # an OCI image layout (a directory)
//	go run ./cmd/corral-image --tar corral.tar --tag corral:dev        # a tarball for docker load / ctr import
//	go run ./cmd/corral-image --push registry.example.com/corral:v1    # the operator's registry (docker login)
//
// See docs/kubernetes.md.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "corral-image:", err)
		}
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("corral-image", flag.ContinueOnError)
	flags.SetOutput(stderr)
	out := flags.String("out", "", "write the image (an index of its platforms) as an OCI image layout to `directory`")
	tarPath := flags.String("tar", "", "write the image as a tarball to `file` (docker load, ctr images import, podman load); one platform only")
	tag := flags.String("tag", "corral:latest", "the `reference` the tarball names")
	push := flags.String("push", "", "push the image (an index of its platforms) to `reference`, with the credentials of docker login (~/.docker/config.json)")
	platforms := flags.String("platforms", "linux/"+runtime.GOARCH, "comma-separated `os/arch` list to build for")
	binDir := flags.String("bin-dir", "", "take corral and corral-sandbox-agent from `directory` (one platform, the first of --platforms) instead of building them")
	caBundle := flags.String("ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "PEM `file` of the CA certificates the processes trust for TLS (the model API, git, MCP servers)")
	epoch := flags.String("source-date-epoch", os.Getenv("SOURCE_DATE_EPOCH"), "Unix `seconds` of every timestamp in the image (env SOURCE_DATE_EPOCH; default: the last commit's time, else 0)")
	version := flags.String("version", "", "the org.opencontainers.image.version label (default: git describe, else dev)")
	flags.Usage = func() {
		fmt.Fprintf(flags.Output(), "Usage: corral-image [flags]\n\nBuilds Corral's container image from this module's binaries (run it inside the module). At least one of\n--out, --tar and --push; --out replaces an OCI image layout there, and refuses any other directory. The image runs `corral serve` as user 65532 by default; the Helm chart under\ndeploy/helm/corral runs its other commands.\n\nFlags:\n")
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		return err
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", flags.Arg(0))
	}
	if *out == "" && *tarPath == "" && *push == "" {
		return errors.New("nothing to do: give --out, --tar or --push")
	}
	plats, err := parsePlatforms(*platforms)
	if err != nil {
		return err
	}
	if *tarPath != "" && len(plats) > 1 {
		return errors.New("--tar takes one platform (a tarball holds images, not an index): use --out or --push for several")
	}
	if *binDir != "" && len(plats) > 1 {
		return errors.New("--bin-dir takes one platform")
	}
	// Every destination is checked before minutes of building.
	if *out != "" {
		if err := clearLayout(*out, false); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	tagRef, err := name.NewTag(*tag)
	if err != nil {
		return fmt.Errorf("--tag: %w", err)
	}
	var pushRef name.Reference
	if *push != "" {
		if pushRef, err = name.ParseReference(*push); err != nil {
			return fmt.Errorf("--push: %w", err)
		}
	}
	when, err := sourceDate(*epoch)
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(*caBundle)
	if err != nil {
		return fmt.Errorf("--ca-bundle: %w", err)
	}
	meta := imageMeta{Created: when, Version: *version, Revision: gitOutput("rev-parse", "HEAD")}
	if meta.Version == "" {
		meta.Version = cmp.Or(gitOutput("describe", "--tags", "--always", "--dirty"), "dev")
	}

	var images []platformImage
	for _, p := range plats {
		dir := *binDir
		if dir == "" {
			tmp, err := os.MkdirTemp("", "corral-image-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			fmt.Fprintf(stderr, "building corral and corral-sandbox-agent for %s\n", p)
			if err := buildBinaries(ctx, tmp, p, stderr); err != nil {
				return err
			}
			dir = tmp
		}
		img, err := buildImage(imageInputs{
			Platform: p,
			Corral:   filepath.Join(dir, "corral"),
			Agent:    filepath.Join(dir, "corral-sandbox-agent"),
			CABundle: ca,
			Meta:     meta,
		})
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		images = append(images, platformImage{p, img})
	}
	idx := imageIndex(images, meta)
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	if *out != "" {
		if err := clearLayout(*out, true); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		if _, err := layout.Write(*out, idx); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		fmt.Fprintf(stderr, "wrote the OCI image layout %s\n", *out)
	}
	if *tarPath != "" {
		if err := tarball.WriteToFile(*tarPath, tagRef, images[0].image); err != nil {
			return fmt.Errorf("--tar: %w", err)
		}
		fmt.Fprintf(stderr, "wrote %s (%s)\n", *tarPath, tagRef)
	}
	if pushRef != nil {
		if err := remote.WriteIndex(pushRef, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return fmt.Errorf("--push: %w", err)
		}
		fmt.Fprintf(stderr, "pushed %s@%s\n", pushRef.Context(), digest)
	}
	fmt.Fprintln(stdout, digest)
	return nil
}

// clearLayout makes way for an image layout at dir: nothing there, an empty directory, or an earlier OCI image
// layout (which it removes when remove is set); anything else is refused, so that a mistyped --out never deletes
// a user's files.
func clearLayout(dir string, remove bool) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && len(entries) == 0) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		return fmt.Errorf("%s holds files and is not an OCI image layout: give a new or empty directory", dir)
	}
	if !remove {
		return nil
	}
	return os.RemoveAll(dir)
}

// parsePlatforms reads --platforms: linux only, since the binaries are Linux's.
func parsePlatforms(s string) ([]v1.Platform, error) {
	var out []v1.Platform
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := v1.ParsePlatform(f)
		if err != nil {
			return nil, fmt.Errorf("--platforms %q: %w", f, err)
		}
		if p.OS != "linux" || p.Architecture == "" {
			return nil, fmt.Errorf("--platforms %q: want linux/<arch>", f)
		}
		out = append(out, *p)
	}
	if len(out) == 0 {
		return nil, errors.New("--platforms: none given")
	}
	return out, nil
}

// sourceDate is SOURCE_DATE_EPOCH's time; without one, the last commit's, or the Unix epoch outside a checkout.
func sourceDate(s string) (time.Time, error) {
	if s == "" {
		s = gitOutput("log", "-1", "--format=%ct")
	}
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("source date epoch %q: want Unix seconds", s)
	}
	return time.Unix(n, 0).UTC(), nil
}

// gitOutput is a git command's trimmed output, or "" when git or the checkout is missing.
func gitOutput(args ...string) string {
	out, err := exec.Command("git", args...).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// buildBinaries builds the two binaries for p into dir: static, without paths of the build machine or a build id
// that would differ between machines. It runs at the root of the module the working directory is in.
func buildBinaries(ctx context.Context, dir string, p v1.Platform, stderr io.Writer) error {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(gomod)), "go.mod") {
		return fmt.Errorf("run corral-image inside Corral's module (go env GOMOD: %q, %v)", strings.TrimSpace(string(gomod)), err)
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", dir+string(filepath.Separator),
		"./cmd/corral", "./cmd/corral-sandbox-agent")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	if p.Variant != "" && p.Architecture == "arm" {
		cmd.Env = append(cmd.Env, "GOARM="+strings.TrimPrefix(p.Variant, "v"))
	}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for %s: %w", p, err)
	}
	return nil
}
