package harness

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// FreePort returns a port on ip that is currently free for TCP and, when
// udpToo is set, for UDP as well (memberlist binds both on one port).
//
// Ports come from below the kernel's ephemeral range (portLow..portHigh,
// under Linux's default 32768), each handed out at most once per process.
// A port picked with ":0" lies inside the ephemeral range, and between the
// probe and the daemon's own bind an outgoing connection (a client of an
// apiserver, say) may take it as its source port: the daemon then fails
// with "address already in use". Below the range only a listener can take
// it, and the probe skips ports that are taken.
func FreePort(ip string, udpToo bool) (int, error) {
	var lastErr error
	for range portHigh - portLow {
		port := nextPort()
		l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
		if err != nil {
			lastErr = err
			continue
		}
		// The listeners only probed that the port is free.
		if !udpToo {
			closeQuietly(l)
			return port, nil
		}
		u, err := net.ListenPacket("udp", net.JoinHostPort(ip, strconv.Itoa(port)))
		closeQuietly(l)
		if err != nil {
			lastErr = err
			continue
		}
		closeQuietly(u)
		return port, nil
	}
	return 0, fmt.Errorf("harness: no free port on %s in %d-%d: %v", ip, portLow, portHigh, lastErr)
}

const portLow, portHigh = 20000, 32000

var portCursor atomic.Int64

func init() {
	// Test processes that run at the same time start at different places.
	portCursor.Store(int64(os.Getpid()*7919) % (portHigh - portLow))
}

// nextPort walks portLow..portHigh-1 round-robin from a per-process start.
func nextPort() int {
	return portLow + int((portCursor.Add(1)-1)%(portHigh-portLow))
}

// LoopbackAlias returns 127.0.0.(base+i). Every address in 127.0.0.0/8 is
// routed to lo on Linux without any setup, so each simulated cluster binds its
// gossip to its own address.
func LoopbackAlias(base, i int) (string, error) {
	if base+i < 2 || base+i > 254 {
		return "", fmt.Errorf("harness: loopback alias 127.0.0.%d out of range", base+i)
	}
	return "127.0.0." + strconv.Itoa(base+i), nil
}

// partitioner installs iptables DROP rules between the gossip traffic of
// simulated clusters.
//
// Identity of the sender: every daemon of cluster i runs with primary group
// gid(i), and rules match the sending socket's group with the owner match in
// the OUTPUT chain, plus the receiving cluster's loopback alias as
// destination. Matching on the source address alone would not work: a TCP
// connection dialled without an explicit local address (memberlist's default
// transport) leaves from 127.0.0.1, whoever dials it. Loopback traffic
// traverses OUTPUT, so one rule per direction cuts TCP and UDP.
type partitioner struct {
	chain string

	mu      sync.Mutex
	created bool
	rules   map[string][]string // key -> rule spec (without -A chain)
}

var partitionSeq atomic.Uint32

const chainPrefix = "CG-E2E-"

func newPartitioner() *partitioner {
	return &partitioner{
		chain: fmt.Sprintf("%s%d-%d", chainPrefix, os.Getpid(), partitionSeq.Add(1)),
		rules: map[string][]string{},
	}
}

// CheckPartitionSupport tells whether iptables partitions can work here. The
// error names the missing prerequisite and its remedy.
func CheckPartitionSupport() error {
	if os.Geteuid() != 0 {
		return errors.New("harness: network partitions need root (iptables rules and per-daemon groups); run the e2e suite as root")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		return errors.New("harness: network partitions need iptables, which is not installed; " +
			"install it with `apt-get install -y iptables` (make testbins does this when run as root)")
	}
	if out, err := exec.Command("iptables", "-w", "-S", "OUTPUT").CombinedOutput(); err != nil {
		return fmt.Errorf("harness: iptables does not work here (%v): %s", err, bytes.TrimSpace(out))
	}
	return nil
}

func iptables(args ...string) error {
	out, err := exec.Command("iptables", append([]string{"-w"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func (p *partitioner) ensureChain() error {
	if p.created {
		return nil
	}
	if err := CheckPartitionSupport(); err != nil {
		return err
	}
	removeStaleChains()
	if err := iptables("-N", p.chain); err != nil {
		return fmt.Errorf("harness: creating chain: %w", err)
	}
	if err := iptables("-I", "OUTPUT", "1", "-j", p.chain); err != nil {
		_ = iptables("-X", p.chain)
		return fmt.Errorf("harness: hooking chain into OUTPUT: %w", err)
	}
	p.created = true
	return nil
}

// removeStaleChains deletes chains left by harness processes that died
// without cleaning up (for example killed by the test timeout).
func removeStaleChains() {
	out, err := exec.Command("iptables", "-w", "-S").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, ok := strings.CutPrefix(line, "-N "+chainPrefix)
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(name, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pidAlive(pid) {
			continue
		}
		// Best effort: a chain that survives is retried by the next sweep.
		_ = deleteChain(chainPrefix + name)
	}
}

func deleteChain(chain string) error {
	var errs []error
	// Remove every jump to the chain (there is normally exactly one).
	for range 10 {
		if err := iptables("-D", "OUTPUT", "-j", chain); err != nil {
			break
		}
	}
	if err := iptables("-F", chain); err != nil {
		errs = append(errs, err)
	}
	if err := iptables("-X", chain); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func dropRule(fromGID uint32, toIP string) []string {
	return []string{"-m", "owner", "--gid-owner", strconv.FormatUint(uint64(fromGID), 10), "-d", toIP + "/32", "-j", "DROP"}
}

// lossRule drops a random share of the traffic from a group to an address
// (netem is not available here; the statistic match is).
func lossRule(fromGID uint32, toIP string, probability float64) []string {
	return []string{"-m", "owner", "--gid-owner", strconv.FormatUint(uint64(fromGID), 10), "-d", toIP + "/32",
		"-m", "statistic", "--mode", "random", "--probability", strconv.FormatFloat(probability, 'f', 3, 64), "-j", "DROP"}
}

// cut drops traffic in both directions between two endpoints (gid, ip).
func (p *partitioner) cut(gidA uint32, ipA string, gidB uint32, ipB string) error {
	return p.add(dropRule(gidA, ipB), dropRule(gidB, ipA))
}

// add installs rules (each once) in the chain.
func (p *partitioner) add(rules ...[]string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.ensureChain(); err != nil {
		return err
	}
	for _, r := range rules {
		key := strings.Join(r, " ")
		if _, ok := p.rules[key]; ok {
			continue
		}
		if err := iptables(append([]string{"-A", p.chain}, r...)...); err != nil {
			return fmt.Errorf("harness: partition: %w", err)
		}
		p.rules[key] = r
	}
	return nil
}

// heal removes the rules between two endpoints.
func (p *partitioner) heal(gidA uint32, ipA string, gidB uint32, ipB string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, r := range [][]string{dropRule(gidA, ipB), dropRule(gidB, ipA)} {
		key := strings.Join(r, " ")
		if _, ok := p.rules[key]; !ok {
			continue
		}
		if err := iptables(append([]string{"-D", p.chain}, r...)...); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(p.rules, key)
	}
	return errors.Join(errs...)
}

// healAll removes every rule but keeps the (empty) chain.
func (p *partitioner) healAll() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.created {
		return nil
	}
	if err := iptables("-F", p.chain); err != nil {
		return fmt.Errorf("harness: heal: %w", err)
	}
	p.rules = map[string][]string{}
	return nil
}

// active returns the number of installed DROP rules.
func (p *partitioner) active() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.rules)
}

// close removes the rules and the chain.
func (p *partitioner) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.created {
		return nil
	}
	p.created = false
	p.rules = map[string][]string{}
	return deleteChain(p.chain)
}

// chainExists reports whether an iptables chain exists.
func chainExists(chain string) bool {
	return exec.Command("iptables", "-w", "-S", chain).Run() == nil
}
