package harness

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// netnsDir is where `ip netns add` keeps its namespace handles.
const netnsDir = "/run/netns"

// dpPrefix starts the name of every network namespace and root-namespace
// link the dataplane creates, so stale ones are recognised and swept.
const dpPrefix = "cgdp"

// ipCmd runs iproute2's `ip` with args and returns a clear error.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// inNetns runs a command inside a named network namespace.
func inNetns(ns string, args ...string) ([]byte, error) {
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("in netns %s: %s: %v: %s", ns, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

// sysctlIn sets a sysctl inside a network namespace.
func sysctlIn(ns, key, value string) error {
	_, err := inNetns(ns, "sysctl", "-qw", key+"="+value)
	return err
}

// CheckDataplaneSupport tells whether the packet-level dataplane can run
// here: root, iproute2, iptables, ipset and network namespaces. The error
// names exactly what is missing.
func CheckDataplaneSupport() error {
	if os.Geteuid() != 0 {
		return errors.New("harness dataplane: needs root (network namespaces, veth pairs, iptables)")
	}
	var missing []string
	for _, tool := range []string{"ip", "iptables", "iptables-save", "iptables-restore", "ipset", "sysctl"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("harness dataplane: missing %s (apt-get install -y iproute2 iptables ipset procps; make testbins does this as root)", strings.Join(missing, ", "))
	}
	probe := fmt.Sprintf("%s-check-%d", dpPrefix, os.Getpid())
	if err := ipCmd("netns", "add", probe); err != nil {
		return fmt.Errorf("harness dataplane: network namespaces do not work here: %w", err)
	}
	defer func() { _ = ipCmd("netns", "del", probe) }()
	if out, err := inNetns(probe, "ipset", "create", "cgprobe", "hash:ip"); err != nil {
		return fmt.Errorf("harness dataplane: ipset does not work in a network namespace: %w (%s)", err, bytes.TrimSpace(out))
	}
	if out, err := inNetns(probe, "iptables", "-w", "-A", "FORWARD", "-m", "set", "--match-set", "cgprobe", "src", "-j", "ACCEPT"); err != nil {
		return fmt.Errorf("harness dataplane: iptables -m set does not work: %w (%s)", err, bytes.TrimSpace(out))
	}
	return nil
}

// ownerPid parses the pid out of a dataplane name "cgdp<pid>x<seq>...".
func ownerPid(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, dpPrefix)
	if !ok {
		return 0, false
	}
	digits, _, ok := strings.Cut(rest, "x")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(digits)
	return pid, err == nil
}

// sweepStaleDataplanes deletes network namespaces and bridges of dataplanes
// whose owning process is gone (a test binary killed by its timeout, say).
// Detached dataplanes (make demo) record their owner as the demo's etcd, so
// they stay while the demo runs.
func sweepStaleDataplanes() {
	entries, _ := os.ReadDir(netnsDir)
	for _, e := range entries {
		if pid, ok := ownerPid(e.Name()); ok && !pidAlive(pid) {
			_ = ipCmd("netns", "del", e.Name())
		}
	}
	out, err := exec.Command("ip", "-o", "link", "show", "type", "bridge").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name := strings.TrimSuffix(f[1], ":")
		if !strings.HasPrefix(name, "cgbr") {
			continue
		}
		alias := linkAlias(name)
		if pid, ok := ownerPid(alias); ok && !pidAlive(pid) {
			_ = ipCmd("link", "del", name)
		}
	}
}

func linkAlias(name string) string {
	b, err := os.ReadFile("/sys/class/net/" + name + "/ifalias")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// linkExists reports whether a link of that name exists in the root namespace.
func linkExists(name string) bool {
	_, err := os.Stat("/sys/class/net/" + name)
	return err == nil
}

// removeDataplane kills every process left in the dataplane's namespaces,
// deletes the namespaces and the underlay bridge (make demo-down, Close).
func removeDataplane(prefix, bridge string) error {
	var errs []error
	entries, _ := os.ReadDir(netnsDir)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), prefix+"-") {
			continue
		}
		if out, err := exec.Command("ip", "netns", "pids", e.Name()).Output(); err == nil {
			for _, f := range strings.Fields(string(out)) {
				if pid, err := strconv.Atoi(f); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if err := ipCmd("netns", "del", e.Name()); err != nil {
			errs = append(errs, err)
		}
	}
	if bridge != "" && linkExists(bridge) {
		if err := ipCmd("link", "del", bridge); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
