package arch

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// maxTrackedFile bounds every file in the repository. Binaries, bench dumps
// and archives are made again by scripts (make build, make bench, make dist)
// and never committed; the largest legitimate files are generated CRDs.
const maxTrackedFile = 512 << 10

// TestNoLargeTrackedFiles fails when a build output or data dump is added to
// git: a submission has a size limit, and a repository is no artifact store.
func TestNoLargeTrackedFiles(t *testing.T) {
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var big []string
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		fi, err := os.Stat("../../" + f)
		if err != nil {
			continue // deleted in the work tree
		}
		if fi.Size() > maxTrackedFile {
			big = append(big, f)
		}
	}
	if len(big) > 0 {
		t.Errorf("tracked files larger than %d KiB (build outputs or data belong in .gitignore): %v", maxTrackedFile>>10, big)
	}
}
