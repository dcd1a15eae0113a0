package kube

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// ErrNotLeader is returned by a fenced writer when this daemon does not hold
// the cluster's Lease.
var ErrNotLeader = errors.New("kube: not the leader of this cluster")

// LeaseName is the name of the cluster's coordination.k8s.io Lease.
func LeaseName(clusterID string) (string, error) {
	name := "coastguard-" + clusterID
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 || clusterID == "" {
		return "", fmt.Errorf("cluster ID %q does not make a valid Lease name %q: %v", clusterID, name, msgs)
	}
	return name, nil
}

// NewIdentity returns a leader-election identity unique to this process:
// the node (pod) name plus a random suffix. A restarted daemon therefore
// counts as a new holder, and the Lease's leaseTransitions, which feeds the
// writer epoch, increases on every change of process.
func NewIdentity(node string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return node + "_" + hex.EncodeToString(b[:])
}

// LeaderConfig configures an Elector.
type LeaderConfig struct {
	Client    kubernetes.Interface
	Namespace string // namespace of the Lease
	ClusterID string
	Identity  string // unique per process; see NewIdentity

	// Durations default to 15s / 10s / 2s. Tests use about 2s / 1s / 200ms.
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration

	// OnStartedLeading runs (on its own goroutine) once the Lease is held
	// and read back; ctx is cancelled the moment leadership is lost. The
	// writer epoch must be max(epochHint, state.MinEpoch()). The next term
	// does not start before this function has returned. Returning while
	// the Lease is still held releases it (the term could not start).
	OnStartedLeading func(ctx context.Context, epochHint uint32)
	// OnStoppedLeading runs when a term ends (after IsLeader turned false).
	OnStoppedLeading func()
	// OnNewLeader reports every observed holder identity (optional).
	OnNewLeader func(identity string)

	Logger *slog.Logger
}

// Elector campaigns for the cluster's Lease for as long as it runs; after
// losing it, it becomes a standby and campaigns again.
type Elector struct {
	cfg  LeaderConfig
	name string
	log  *slog.Logger

	mu      sync.Mutex
	cond    *sync.Cond
	leading bool
	termCtx context.Context // context of the term being led
	term    uint64
	active  int // OnStartedLeading callbacks still running
	// cancelTerm ends the current campaign's context (releasing a held
	// Lease); set by Run for each term.
	cancelTerm context.CancelFunc
}

// NewElector validates cfg and returns an elector.
func NewElector(cfg LeaderConfig) (*Elector, error) {
	name, err := LeaseName(cfg.ClusterID)
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.Client == nil:
		return nil, errors.New("leader election: client is required")
	case cfg.Namespace == "":
		return nil, errors.New("leader election: namespace is required")
	case cfg.Identity == "":
		return nil, errors.New("leader election: identity is required")
	case cfg.OnStartedLeading == nil:
		return nil, errors.New("leader election: OnStartedLeading is required")
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = 15 * time.Second
	}
	if cfg.RenewDeadline == 0 {
		cfg.RenewDeadline = 10 * time.Second
	}
	if cfg.RetryPeriod == 0 {
		cfg.RetryPeriod = 2 * time.Second
	}
	if cfg.LeaseDuration <= cfg.RenewDeadline {
		return nil, fmt.Errorf("leader election: lease duration %v must exceed renew deadline %v", cfg.LeaseDuration, cfg.RenewDeadline)
	}
	if float64(cfg.RenewDeadline) <= leaderelection.JitterFactor*float64(cfg.RetryPeriod) {
		return nil, fmt.Errorf("leader election: renew deadline %v must exceed %v x retry period %v", cfg.RenewDeadline, leaderelection.JitterFactor, cfg.RetryPeriod)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	e := &Elector{cfg: cfg, name: name, log: cfg.Logger.With("component", "leader", "lease", cfg.Namespace+"/"+name, "identity", cfg.Identity)}
	e.cond = sync.NewCond(&e.mu)
	return e, nil
}

// LeaseName returns the Lease this elector campaigns for.
func (e *Elector) LeaseName() string { return e.name }

// IsLeader reports whether this process currently holds the Lease and has
// read its epoch hint. It turns false the moment the term's context is
// cancelled, before OnStoppedLeading runs.
func (e *Elector) IsLeader() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leading && e.termCtx != nil && e.termCtx.Err() == nil
}

// Fenced wraps w so that every write first checks IsLeader and fails with
// ErrNotLeader otherwise.
func (e *Elector) Fenced(w Writer) Writer {
	return fencedWriter{e: e, w: w}
}

type fencedWriter struct {
	e *Elector
	w Writer
}

func (f fencedWriter) Write(kind crdt.Kind, name string, value []byte, deleted bool) error {
	if !f.e.IsLeader() {
		return ErrNotLeader
	}
	return f.w.Write(kind, name, value, deleted)
}

// WriteBatch forwards to the wrapped writer's WriteBatch when it has one
// (else writes one by one), after the same leadership check.
func (f fencedWriter) WriteBatch(ws []Write) []error {
	errs := make([]error, len(ws))
	if !f.e.IsLeader() {
		for i := range errs {
			errs[i] = ErrNotLeader
		}
		return errs
	}
	if bw, ok := f.w.(BatchWriter); ok {
		return bw.WriteBatch(ws)
	}
	for i, w := range ws {
		errs[i] = f.w.Write(w.Kind, w.Name, w.Value, w.Deleted)
	}
	return errs
}

// EpochHint maps the Lease's leaseTransitions to a writer epoch hint: one
// more than the transitions (so the first term is epoch 1), capped at
// crdt.MaxEpoch.
func EpochHint(leaseTransitions int32) uint32 {
	if leaseTransitions < 0 {
		leaseTransitions = 0
	}
	h := uint64(leaseTransitions) + 1
	if h > uint64(crdt.MaxEpoch) || h > math.MaxUint32 {
		return crdt.MaxEpoch
	}
	return uint32(h)
}

// Run campaigns until ctx is done. On cancellation a held Lease is
// released so a standby takes over without waiting for expiry.
func (e *Elector) Run(ctx context.Context) error {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: e.cfg.Namespace, Name: e.name},
		Client:     e.cfg.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.cfg.Identity},
	}
	for ctx.Err() == nil {
		termCtx, cancelTerm := context.WithCancel(ctx)
		e.mu.Lock()
		e.term++
		term := e.term
		e.cancelTerm = cancelTerm
		e.mu.Unlock()
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   e.cfg.LeaseDuration,
			RenewDeadline:   e.cfg.RenewDeadline,
			RetryPeriod:     e.cfg.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            e.name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(tctx context.Context) { e.started(tctx, term) },
				OnStoppedLeading: func() { e.stopped(term) },
				OnNewLeader: func(id string) {
					e.log.Info("observed leader", "leader", id)
					if e.cfg.OnNewLeader != nil {
						e.cfg.OnNewLeader(id)
					}
				},
			},
		})
		if err != nil {
			cancelTerm()
			return fmt.Errorf("leader election: %w", err)
		}
		le.Run(termCtx)
		cancelTerm()
		// Never let two terms of this process write at once: le.Run has
		// cancelled the term context; wait for its callback to return.
		e.mu.Lock()
		for e.active > 0 {
			e.cond.Wait()
		}
		e.mu.Unlock()
		if ctx.Err() == nil {
			e.log.Info("lost leadership; campaigning again as standby")
			select {
			case <-ctx.Done():
			case <-time.After(e.cfg.RetryPeriod):
			}
		}
	}
	return nil
}

func (e *Elector) started(ctx context.Context, term uint64) {
	var transitions int32
	// Read the Lease back: the record client-go wrote holds the
	// transitions count that fences this term's epoch.
	err := wait.PollUntilContextCancel(ctx, e.cfg.RetryPeriod/2, true, func(ctx context.Context) (bool, error) {
		// A fresh GET through the client (the LeaseLock object is owned by
		// the elector's renew loop and is not safe to share).
		l, err := e.cfg.Client.CoordinationV1().Leases(e.cfg.Namespace).Get(ctx, e.name, metav1.GetOptions{})
		if err != nil {
			e.log.Warn("reading the Lease back failed; retrying", "err", err)
			return false, nil
		}
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		if holder != e.cfg.Identity {
			return false, fmt.Errorf("lease is held by %q, not by us", holder)
		}
		transitions = ptr.Deref(l.Spec.LeaseTransitions, 0)
		return true, nil
	})
	if err != nil {
		e.log.Warn("not starting the leader term", "err", err)
		return
	}
	e.mu.Lock()
	if ctx.Err() != nil || e.term != term {
		e.mu.Unlock()
		return
	}
	e.leading = true
	e.termCtx = ctx
	e.active++
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.active--
		e.cond.Broadcast()
		e.mu.Unlock()
	}()
	hint := EpochHint(transitions)
	e.log.Info("started leading", "leaseTransitions", transitions, "epochHint", hint)
	e.cfg.OnStartedLeading(ctx, hint)
	if ctx.Err() != nil {
		return
	}
	// The term ended while the Lease is still ours (the daemon could not
	// start enforcing, say, because its store cannot persist the epoch).
	// Holding the Lease would leave the cluster without an enforcer:
	// release it so a standby takes over, and campaign again later.
	e.log.Warn("the leader term ended early; releasing the Lease for a standby")
	e.mu.Lock()
	if e.term == term && e.cancelTerm != nil {
		e.cancelTerm()
	}
	e.mu.Unlock()
}

func (e *Elector) stopped(term uint64) {
	e.mu.Lock()
	was := e.leading && e.term == term
	e.leading = false
	e.termCtx = nil
	e.mu.Unlock()
	if was {
		e.log.Info("stopped leading")
	}
	if e.cfg.OnStoppedLeading != nil {
		e.cfg.OnStoppedLeading()
	}
}
