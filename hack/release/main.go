// Command release builds coastguard's release artifacts into one directory,
// without publishing anything (make release-snapshot):
//
//   - coastguardd_<os>_<arch>: the daemon, one static binary per target
//   - kubectl-coastguard_<os>_<arch>.tar.gz: the kubectl plugin and LICENSE
//     at the archive root, as deploy/krew/coastguard.yaml expects
//   - coastguard.krew.yaml: that krew manifest with the version and the
//     archives' sha256 filled in
//   - checksums.txt: sha256 of every file in the directory (sha256sum -c
//     format), including SBOMs the Makefile wrote there before
//
// Every binary is built with CGO_ENABLED=0, -trimpath and the version
// -ldflags the Makefile passes. Archives are reproducible: fixed mtimes and
// owners, no gzip timestamp.
package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

type options struct {
	out     string
	version string
	ldflags string
	targets []target
	krew    string
	license string
	// partial (-partial): a check build of some targets only; the krew
	// manifest, which needs every platform, is checked but not written.
	partial bool
}

type target struct{ goos, goarch string }

func (t target) suffix() string { return t.goos + "_" + t.goarch }

func main() {
	opts, err := parseFlags(os.Args[1:])
	if err == nil {
		err = run(opts)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	var o options
	var targets string
	fs.StringVar(&o.out, "out", "dist", "output directory")
	fs.StringVar(&o.version, "version", "", "release version, e.g. v0.2.0 (required)")
	fs.StringVar(&o.ldflags, "ldflags", "", "go build -ldflags (the version stamp)")
	fs.StringVar(&targets, "targets", "linux/amd64,linux/arm64,darwin/amd64,darwin/arm64", "comma-separated GOOS/GOARCH list")
	fs.StringVar(&o.krew, "krew", "deploy/krew/coastguard.yaml", "krew manifest template")
	fs.StringVar(&o.license, "license", "LICENSE", "license file put in every plugin archive")
	fs.BoolVar(&o.partial, "partial", false, "check build of -targets only: the krew manifest is checked against them but not written")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.version == "" {
		return o, errors.New("-version is required")
	}
	ts, err := parseTargets(targets)
	o.targets = ts
	return o, err
}

var targetRE = regexp.MustCompile(`^[a-z0-9]+/[a-z0-9]+$`)

func parseTargets(s string) ([]target, error) {
	var ts []target
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if !targetRE.MatchString(f) {
			return nil, fmt.Errorf("bad target %q: want GOOS/GOARCH", f)
		}
		os, arch, _ := strings.Cut(f, "/")
		ts = append(ts, target{goos: os, goarch: arch})
	}
	return ts, nil
}

func run(o options) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	sums := map[string]string{}
	for _, t := range o.targets {
		if err := buildTarget(o, t); err != nil {
			return err
		}
	}
	if err := hashDir(o.out, sums); err != nil {
		return err
	}
	if err := writeKrew(o, sums); err != nil {
		return err
	}
	// The filled manifest is an artifact too.
	if err := hashDir(o.out, sums); err != nil {
		return err
	}
	return writeChecksums(filepath.Join(o.out, "checksums.txt"), sums)
}

func buildTarget(o options, t target) error {
	daemon := filepath.Join(o.out, "coastguardd_"+t.suffix())
	if err := goBuild(o, t, "./cmd/coastguardd", daemon); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "coastguard-release-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	plugin := filepath.Join(tmp, "kubectl-coastguard")
	if err := goBuild(o, t, "./cmd/kubectl-coastguard", plugin); err != nil {
		return err
	}
	archive := filepath.Join(o.out, "kubectl-coastguard_"+t.suffix()+".tar.gz")
	return writeTarGz(archive, []archiveFile{
		{name: "kubectl-coastguard", path: plugin, mode: 0o755},
		{name: "LICENSE", path: o.license, mode: 0o644},
	})
}

func goBuild(o options, t target, pkg, out string) error {
	absOut, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w "+o.ldflags, "-o", absOut, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+t.goos, "GOARCH="+t.goarch)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	fmt.Fprintf(os.Stderr, "release: build %s for %s/%s\n", pkg, t.goos, t.goarch)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build %s for %s/%s: %w", pkg, t.goos, t.goarch, err)
	}
	return nil
}

type archiveFile struct {
	name, path string
	mode       int64
}

// epoch is every archive member's mtime, so archives depend on content only.
var epoch = time.Unix(0, 0).UTC()

func writeTarGz(path string, files []archiveFile) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	for _, af := range files {
		if err := addFile(tw, af); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

func addFile(tw *tar.Writer, af archiveFile) error {
	data, err := os.ReadFile(af.path)
	if err != nil {
		return err
	}
	hdr := &tar.Header{Name: af.name, Mode: af.mode, Size: int64(len(data)), ModTime: epoch, Format: tar.FormatUSTAR}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err = tw.Write(data)
	return err
}

func hashDir(dir string, sums map[string]string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() || e.Name() == "checksums.txt" {
			continue
		}
		sum, err := sha256File(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		sums[e.Name()] = sum
	}
	return nil
}

func sha256File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func writeChecksums(path string, sums map[string]string) error {
	names := make([]string, 0, len(sums))
	for n := range sums {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%s  %s\n", sums[n], n)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

var placeholderRE = regexp.MustCompile(`\$\{[A-Z0-9_]+\}`)

// fillKrew replaces ${VERSION} (without the leading v) and
// ${SHA256_<OS>_<ARCH>} in the krew template. A placeholder left unfilled
// (a platform the manifest names that this release did not build) is an
// error, never a manifest with a bad checksum.
func fillKrew(tmpl, version string, sums map[string]string) (string, error) {
	vars := map[string]string{"VERSION": strings.TrimPrefix(version, "v")}
	for name, sum := range sums {
		rest, ok := strings.CutPrefix(name, "kubectl-coastguard_")
		if ok {
			if plat, ok := strings.CutSuffix(rest, ".tar.gz"); ok {
				vars["SHA256_"+strings.ToUpper(plat)] = sum
			}
		}
	}
	var missing []string
	out := placeholderRE.ReplaceAllStringFunc(tmpl, func(p string) string {
		key := p[2 : len(p)-1]
		v, ok := vars[key]
		if !ok {
			missing = append(missing, key)
			return p
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("krew manifest: no value for %s (build those targets)", strings.Join(missing, ", "))
	}
	return out, nil
}

func writeKrew(o options, sums map[string]string) error {
	tmpl, err := os.ReadFile(o.krew)
	if err != nil {
		return err
	}
	if o.partial {
		return checkKrewTemplate(string(tmpl), o.targets)
	}
	filled, err := fillKrew(string(tmpl), o.version, sums)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(o.out, "coastguard.krew.yaml"), []byte(filled), 0o644)
}

// checkKrewTemplate checks that the krew template has a checksum
// placeholder for every built target (a partial build fills none).
func checkKrewTemplate(tmpl string, targets []target) error {
	for _, t := range targets {
		if p := "${SHA256_" + strings.ToUpper(t.suffix()) + "}"; !strings.Contains(tmpl, p) {
			return fmt.Errorf("krew manifest: no %s for target %s/%s", p, t.goos, t.goarch)
		}
	}
	fmt.Fprintln(os.Stderr, "release: partial build: krew manifest checked, not written")
	return nil
}
