// Package version holds the build's version, stamped with -ldflags by the
// Makefile and the Dockerfile:
//
//	-X github.com/coastguard-mcnp/coastguard/internal/version.Version=v0.2.0
//	-X github.com/coastguard-mcnp/coastguard/internal/version.Revision=<git sha>
//
// An unstamped build (go run, go test) reports the module version from the
// build info, or "dev".
package version

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Stamped by -ldflags.
var (
	Version  = ""
	Revision = ""
)

// Get returns the version, never empty.
func Get() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// GetRevision returns the VCS revision, or "unknown".
func GetRevision() string {
	if Revision != "" {
		return Revision
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				return s.Value
			}
		}
	}
	return "unknown"
}

// BuildInfo is the coastguard_build_info gauge: always 1, labelled with the
// version, revision and Go version of this binary.
func BuildInfo() prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "coastguard_build_info",
		Help: "Always 1; labels carry the coastguardd version, VCS revision and Go version.",
	}, []string{"version", "revision", "goversion"})
	g.WithLabelValues(Get(), GetRevision(), runtime.Version()).Set(1)
	return g
}
